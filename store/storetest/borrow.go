package storetest

import (
	"context"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Borrowing (store.LeaseRequest.Unallocated): policy guaranteed 10/s and, set by borrowSetup,
// burst 10, so that a second of refill fills the bucket and what comes after it pays debt; each
// case sets the cluster's capacity, the pool's rate and max_borrow. Amounts are exact in binary.

func borrowCases() []testCase {
	return []testCase{
		{"BorrowWithinMaxBorrow", borrowWithinMaxBorrow},
		{"BorrowLimitExceeded", borrowLimitExceeded},
		{"BorrowPoolEmpty", borrowPoolEmpty},
		{"BorrowNeedsCapacity", borrowNeedsCapacity},
		{"BorrowRepaidFromUnusedRefill", borrowRepaidFromUnusedRefill},
		{"BorrowKeepsGuarantee", borrowKeepsGuarantee},
		{"BorrowRecordFollowsApp", borrowRecordFollowsApp},
		{"BorrowNotInEmergency", borrowNotInEmergency},
		{"BorrowFiguresInLease", borrowFiguresInLease},
	}
}

// borrowStater is implemented by both stores (memstore.Store, redislua.Store).
type borrowStater interface {
	BorrowState(ctx context.Context, cluster, app string) (store.BorrowState, error)
}

func (e *env) wantBorrow(want store.BorrowState) {
	e.t.Helper()
	bs, ok := e.s.(borrowStater)
	if !ok {
		e.t.Fatalf("%T does not implement BorrowState: the borrow cases need it", e.s)
	}
	got, err := bs.BorrowState(context.Background(), e.cluster.ID, e.app)
	if err != nil {
		e.t.Fatalf("BorrowState: %v", err)
	}
	if got != want {
		e.t.Fatalf("borrow state = %+v; want %+v", got, want)
	}
}

func (e *env) borrowSetup(maxBorrow, unallocated float64) {
	e.cluster.Capacity = 1000
	e.policy.Burst = 10
	e.policy.MaxBorrow = maxBorrow
	e.unallocated = unallocated
}

func borrowWithinMaxBorrow(e *env) {
	e.borrowSetup(20, 50)
	e.drain(1)
	// Empty: the shortfall 5 is borrowed and granted; debt ceil(5 × 1.2) = 6.
	e.wantLease(e.lease(50, 5), store.Lease{Granted: 5, Debt: 6, Borrowed: 5})
	e.wantBorrow(store.BorrowState{Debt: 6, Borrowed: 5, Recorded: 5})
	// Only the shortfall is borrowed: 2.5 tokens after 250 ms, 3 borrowed; ceil(3.6) = 4.
	e.app = "app-b"
	e.drain(1)
	e.advance(250 * time.Millisecond)
	e.wantLease(e.lease(50, 5), store.Lease{Granted: 5, Debt: 4, Borrowed: 3})
	e.wantBorrow(store.BorrowState{Debt: 4, Borrowed: 3, Recorded: 3})
	e.wantContent(1, 0) // 0.5 left
	// app-a's 2.5 tokens of refill fit its bucket: its debt stays, and it borrows 1 more (owing 2).
	e.app = "app-a"
	e.wantLease(e.lease(3, 3), store.Lease{Granted: 3, Debt: 8, Borrowed: 6})
	e.wantBorrow(store.BorrowState{Debt: 8, Borrowed: 6, Recorded: 6})
}

func borrowLimitExceeded(e *env) {
	e.borrowSetup(10, 50)
	e.drain(1)
	e.wantLease(e.lease(8, 8), store.Lease{Granted: 8, Debt: 10, Borrowed: 8})
	e.wantBorrow(store.BorrowState{Debt: 10, Borrowed: 8, Recorded: 8})
	// max_borrow - borrowed = 2 < 3: refused, with the plain lease's retry (3 tokens at 10/s).
	e.wantLease(e.lease(3, 3), store.Lease{Reason: store.ReasonBorrowLimitExceeded, RetryAfter: 300 * time.Millisecond, Debt: 10, Borrowed: 8})
	e.wantLease(e.lease(2, 2), store.Lease{Granted: 2, Debt: 13, Borrowed: 10})
	e.wantBorrow(store.BorrowState{Debt: 13, Borrowed: 10, Recorded: 10})
	e.wantLease(e.lease(1, 1), store.Lease{Reason: store.ReasonBorrowLimitExceeded, RetryAfter: 100 * time.Millisecond, Debt: 13, Borrowed: 10})
	// A shortfall above max_borrow is refused even with a full pool.
	e.app = "app-b"
	e.policy.MaxBorrow = 5
	e.drain(1)
	e.wantLease(e.lease(6, 6), store.Lease{Reason: store.ReasonBorrowLimitExceeded, RetryAfter: 600 * time.Millisecond})
	e.wantBorrow(store.BorrowState{})
}

func borrowPoolEmpty(e *env) {
	e.borrowSetup(100, 10) // the pool holds at most 10
	e.drain(1)
	e.wantLease(e.lease(8, 8), store.Lease{Granted: 8, Debt: 10, Borrowed: 8}) // pool 2
	e.wantLease(e.lease(5, 5), store.Lease{Reason: store.ReasonClusterExhausted, RetryAfter: 500 * time.Millisecond, Debt: 10, Borrowed: 8})
	e.wantBorrow(store.BorrowState{Debt: 10, Borrowed: 8, Recorded: 8})
	// 500 ms: the app's own 5 tokens cover the lease (its debt stays); the pool refills 2 → 7.
	e.advance(500 * time.Millisecond)
	e.wantLease(e.lease(5, 5), store.Lease{Granted: 5, Debt: 10, Borrowed: 8})
	// Another app borrows 3 of the 7, then finds the 4 left short of 5.
	e.app = "app-b"
	e.drain(1)
	e.wantLease(e.lease(3, 3), store.Lease{Granted: 3, Debt: 4, Borrowed: 3})
	e.wantLease(e.lease(5, 5), store.Lease{Reason: store.ReasonClusterExhausted, RetryAfter: 500 * time.Millisecond, Debt: 4, Borrowed: 3})
}

func borrowNeedsCapacity(e *env) {
	e.borrowSetup(100, 50)
	e.cluster.Capacity = 0 // no L1: no borrowing
	e.drain(1)
	e.wantLease(e.lease(5, 5), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: 500 * time.Millisecond})
	e.wantBorrow(store.BorrowState{})
	// max_borrow 0: never borrows.
	e.cluster.Capacity = 1000
	e.policy.MaxBorrow = 0
	e.wantLease(e.lease(5, 5), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: 500 * time.Millisecond})
	e.wantBorrow(store.BorrowState{})
}

// borrowRepaidFromUnusedRefill: debt is paid by the refill that does not fit the full bucket,
// not by the refill the app spends.
func borrowRepaidFromUnusedRefill(e *env) {
	e.borrowSetup(50, 50)
	e.drain(1)
	e.wantLease(e.lease(10, 10), store.Lease{Granted: 10, Debt: 12, Borrowed: 10})
	e.wantBorrow(store.BorrowState{Debt: 12, Borrowed: 10, Recorded: 10})
	// 1 s: the refill of 10 fills the bucket; the debt is untouched.
	e.advance(time.Second)
	e.wantContent(1, 10)
	e.wantBorrow(store.BorrowState{Debt: 12, Borrowed: 10, Recorded: 10})
	// 1 s more: the 10 that do not fit pay debt 12 → 2.
	e.advance(time.Second)
	e.wantContent(1, 10)
	e.wantBorrow(store.BorrowState{Debt: 2, Borrowed: shrink(10, 2, 12), Recorded: 10})
	// 500 ms: 5 more; 2 pay the rest, borrowed drops to 0.
	e.advance(500 * time.Millisecond)
	e.wantContent(1, 10)
	e.wantBorrow(store.BorrowState{Recorded: 10})
	// L1's record follows at the next borrow.
	e.drain(1)
	e.wantLease(e.lease(4, 4), store.Lease{Granted: 4, Debt: 5, Borrowed: 4})
	e.wantBorrow(store.BorrowState{Debt: 5, Borrowed: 4, Recorded: 4})
}

// borrowKeepsGuarantee: an app whose demand stays above its guaranteed rate keeps that rate
// after borrowing up to max_borrow. If every refill repaid the debt, its refill would go to the
// debt, its borrowed would shrink, and it would borrow again: each token borrowed would cost it
// 1.2 (here 2) of its own.
func borrowKeepsGuarantee(e *env) {
	e.borrowSetup(10, 50)
	e.drain(1)
	e.wantLease(e.lease(1, 1), store.Lease{Granted: 1, Debt: 2, Borrowed: 1})
	for range 20 { // a token of refill every 100 ms, spent at once
		e.advance(100 * time.Millisecond)
		e.wantLease(e.lease(1, 1), store.Lease{Granted: 1, Debt: 2, Borrowed: 1})
	}
	e.wantBorrow(store.BorrowState{Debt: 2, Borrowed: 1, Recorded: 1})
}

func borrowRecordFollowsApp(e *env) {
	e.borrowSetup(30, 100)
	for _, app := range []string{"app-a", "app-b"} {
		e.app = app
		e.drain(1)
	}
	e.app = "app-a"
	e.wantLease(e.lease(7, 7), store.Lease{Granted: 7, Debt: 9, Borrowed: 7})
	e.app = "app-b"
	e.wantLease(e.lease(4, 4), store.Lease{Granted: 4, Debt: 5, Borrowed: 4})
	e.wantBorrow(store.BorrowState{Debt: 5, Borrowed: 4, Recorded: 4})
	// 1.5 s: app-a's bucket fills with 10, the 5 beyond pay 5 of its 9; it spends the 10 and
	// borrows 3 more.
	e.advance(1500 * time.Millisecond)
	e.app = "app-a"
	e.drain(1)
	e.wantLease(e.lease(3, 3), store.Lease{Granted: 3, Debt: 4 + 4, Borrowed: shrink(7, 4, 9) + 3})
	e.wantBorrow(store.BorrowState{Debt: 4 + 4, Borrowed: shrink(7, 4, 9) + 3, Recorded: shrink(7, 4, 9) + 3})
	e.app = "app-b"
	e.wantBorrow(store.BorrowState{Debt: 5, Borrowed: 4, Recorded: 4}) // as stored
}

func borrowNotInEmergency(e *env) {
	e.borrowSetup(100, 50)
	e.noBorrow = true
	e.drain(1)
	e.wantLease(e.lease(5, 5), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: 500 * time.Millisecond})
	e.wantBorrow(store.BorrowState{})
	e.noBorrow = false
	e.wantLease(e.lease(5, 5), store.Lease{Granted: 5, Debt: 6, Borrowed: 5})
	e.wantBorrow(store.BorrowState{Debt: 6, Borrowed: 5, Recorded: 5})
}

// borrowFiguresInLease: every lease carries the app's debt and borrowed after its refill, a
// lease that borrows nothing included.
func borrowFiguresInLease(e *env) {
	e.borrowSetup(50, 50)
	e.drain(1)
	e.wantLease(e.lease(10, 10), store.Lease{Granted: 10, Debt: 12, Borrowed: 10})
	// 2 s: the bucket fills and the 10 beyond pay debt 12 → 2.
	e.advance(2 * time.Second)
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 10, Debt: 2, Borrowed: shrink(10, 2, 12)})
	// 1 s: the 10 tokens of refill go into the spent bucket: the debt stays.
	e.advance(time.Second)
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 10, Debt: 2, Borrowed: shrink(10, 2, 12)})
	// 1.5 s: 5 beyond the full bucket pay the last 2; the figures are back to 0.
	e.advance(1500 * time.Millisecond)
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 10})
	// A refused borrow (6 > max_borrow 4) leaves them at 0; one within it sets them.
	e.policy.MaxBorrow = 4
	e.wantLease(e.lease(6, 6), store.Lease{Reason: store.ReasonBorrowLimitExceeded, RetryAfter: 600 * time.Millisecond})
	e.wantLease(e.lease(4, 4), store.Lease{Granted: 4, Debt: 5, Borrowed: 4})
}

// shrink is borrowed × (newdebt / debt) as a store computes it in doubles (Go would compute a
// constant expression exactly).
func shrink(borrowed, newDebt, debt float64) float64 { return borrowed * (newDebt / debt) }
