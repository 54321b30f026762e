package storetest

import (
	"context"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Borrowing (store.LeaseRequest.Unallocated): policy guaranteed 10/s, burst 100; each case
// sets the cluster's capacity, the pool's rate and max_borrow. Amounts are exact in binary.

func borrowCases() []testCase {
	return []testCase{
		{"BorrowWithinMaxBorrow", borrowWithinMaxBorrow},
		{"BorrowLimitExceeded", borrowLimitExceeded},
		{"BorrowPoolEmpty", borrowPoolEmpty},
		{"BorrowNeedsCapacity", borrowNeedsCapacity},
		{"BorrowRepaidFromRefill", borrowRepaidFromRefill},
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
	e.policy.MaxBorrow = maxBorrow
	e.unallocated = unallocated
}

func borrowWithinMaxBorrow(e *env) {
	e.borrowSetup(20, 50)
	e.drain(1)
	// Empty: the shortfall 5 is borrowed and granted; debt ceil(5 × 1.2) = 6.
	e.wantLease(e.lease(50, 5), store.Lease{Granted: 5, Debt: 6, Borrowed: 5})
	e.wantBorrow(store.BorrowState{Debt: 6, Borrowed: 5, Recorded: 5})
	// Only the shortfall: 2.5 tokens after 250 ms would pay debt first, so use a fresh app.
	e.app = "app-b"
	e.drain(1)
	e.advance(250 * time.Millisecond) // app-b: 2.5 tokens; app-a: 2.5 pays debt 6 → 3.5
	e.wantLease(e.lease(50, 5), store.Lease{Granted: 5, Debt: 4, Borrowed: 3})
	e.wantBorrow(store.BorrowState{Debt: 4, Borrowed: 3, Recorded: 3}) // shortfall 5 - 2; ceil(3.6)
	e.wantContent(1, 0)                                                // 0.5 left
	e.app = "app-a"
	e.wantBorrow(store.BorrowState{Debt: 6, Borrowed: 5, Recorded: 5})                                  // as stored: no refill yet
	e.wantLease(e.lease(3, 3), store.Lease{Granted: 3, Debt: 3.5 + 4, Borrowed: shrink(5, 3.5, 6) + 3}) // refill pays 2.5: debt 3.5, borrowed 5 × 3.5/6
	e.wantBorrow(store.BorrowState{Debt: 3.5 + 4, Borrowed: shrink(5, 3.5, 6) + 3, Recorded: shrink(5, 3.5, 6) + 3})
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
	e.drain(1)
	e.wantLease(e.lease(11, 11), store.Lease{Reason: store.ReasonBorrowLimitExceeded, RetryAfter: 1100 * time.Millisecond})
	e.wantBorrow(store.BorrowState{})
}

func borrowPoolEmpty(e *env) {
	e.borrowSetup(100, 10) // the pool holds at most 10
	e.drain(1)
	e.wantLease(e.lease(8, 8), store.Lease{Granted: 8, Debt: 10, Borrowed: 8}) // pool 2
	e.wantLease(e.lease(5, 5), store.Lease{Reason: store.ReasonClusterExhausted, RetryAfter: 500 * time.Millisecond, Debt: 10, Borrowed: 8})
	e.wantBorrow(store.BorrowState{Debt: 10, Borrowed: 8, Recorded: 8})
	// 500 ms: the app's 5 tokens pay debt (10 → 5, borrowed 8 → 4); the pool refills 2 → 7.
	e.advance(500 * time.Millisecond)
	e.wantLease(e.lease(5, 5), store.Lease{Granted: 5, Debt: 11, Borrowed: 9})
	e.wantBorrow(store.BorrowState{Debt: 11, Borrowed: 9, Recorded: 9})
	// Pool 2 again; another app finds it short too.
	e.app = "app-b"
	e.drain(1)
	e.wantLease(e.lease(3, 3), store.Lease{Reason: store.ReasonClusterExhausted, RetryAfter: 300 * time.Millisecond})
	e.wantLease(e.lease(2, 2), store.Lease{Granted: 2, Debt: 3, Borrowed: 2})
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

func borrowRepaidFromRefill(e *env) {
	e.borrowSetup(50, 50)
	e.drain(1)
	e.wantLease(e.lease(10, 10), store.Lease{Granted: 10, Debt: 12, Borrowed: 10})
	e.wantBorrow(store.BorrowState{Debt: 12, Borrowed: 10, Recorded: 10})
	// 1 s: the refill of 10 goes to the debt; nothing reaches the bucket.
	e.advance(time.Second)
	e.wantContent(1, 0)
	e.wantBorrow(store.BorrowState{Debt: 2, Borrowed: shrink(10, 2, 12), Recorded: 10})
	// 500 ms: 5 pays the last 2 of debt, borrowed drops to 0, 3 reach the bucket.
	e.advance(500 * time.Millisecond)
	e.wantContent(1, 3)
	e.wantBorrow(store.BorrowState{Recorded: 10})
	// L1's record follows at the next borrow.
	e.drain(1)
	e.wantLease(e.lease(4, 4), store.Lease{Granted: 4, Debt: 5, Borrowed: 4})
	e.wantBorrow(store.BorrowState{Debt: 5, Borrowed: 4, Recorded: 4})
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
	e.advance(500 * time.Millisecond) // app-b pays 5: debt 0
	e.app = "app-a"
	e.wantLease(e.lease(3, 3), store.Lease{Granted: 3, Debt: 4 + 4, Borrowed: shrink(7, 4, 9) + 3}) // pays 5 of 9, borrows 3 more
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
	// 1 s: the refill of 10 pays debt 12 → 2; nothing reaches the bucket.
	e.advance(time.Second)
	e.wantLease(e.lease(huge, 0), store.Lease{Debt: 2, Borrowed: shrink(10, 2, 12)})
	// 500 ms: 5 pays the last 2, 3 reach the bucket; the figures are back to 0.
	e.advance(500 * time.Millisecond)
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 3})
	// A refused borrow (6 > max_borrow 4) leaves them at 0; one within it sets them.
	e.policy.MaxBorrow = 4
	e.wantLease(e.lease(6, 6), store.Lease{Reason: store.ReasonBorrowLimitExceeded, RetryAfter: 600 * time.Millisecond})
	e.wantLease(e.lease(4, 4), store.Lease{Granted: 4, Debt: 5, Borrowed: 4})
}

// shrink is borrowed × (newdebt / debt) as a store computes it in doubles (Go would compute a
// constant expression exactly).
func shrink(borrowed, newDebt, debt float64) float64 { return borrowed * (newDebt / debt) }
