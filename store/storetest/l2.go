package storetest

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Policy of every L2 case unless it says otherwise: guaranteed 10/s, burst 100, no L1.
// Elapsed times are chosen so that every expected amount is exact in binary floating point,
// and no bucket is left idle for 60 s (a store may drop idle state).

func l2Cases() []testCase {
	return []testCase{
		{"NewBucketStartsFull", newBucketStartsFull},
		{"LeaseGrantsWant", leaseGrantsWant},
		{"LeaseGrantsPartial", leaseGrantsPartial},
		{"LeaseRejectsBelowNeed", leaseRejectsBelowNeed},
		{"RetryAfterUsesFactor", retryAfterUsesFactor},
		{"LeaseNeedZeroNeverRejects", leaseNeedZeroNeverRejects},
		{"WantBelowNeed", wantBelowNeed},
		{"NeedClampedToBurst", needClampedToBurst},
		{"RefillAtGuaranteedTimesFactor", refillAtGuaranteedTimesFactor},
		{"RefillCappedAtBurst", refillCappedAtBurst},
		{"FactorZeroNeverRefills", factorZeroNeverRefills},
		{"FractionalTokensCarry", fractionalTokensCarry},
		{"ReturnAddsBackCappedAtBurst", returnAddsBackCappedAtBurst},
		{"ReturnNonPositiveIsNoop", returnNonPositiveIsNoop},
		{"ReturnDoesNotRefill", returnDoesNotRefill},
		{"BurstShrinkClampsTokens", burstShrinkClampsTokens},
		{"AppsAreIndependent", appsAreIndependent},
		{"ReportNeverChangesTokens", reportNeverChangesTokens},
		{"ReportBeforeLeaseLeavesBucketFull", reportBeforeLeaseLeavesBucketFull},
		{"TokensStayWithinBounds", tokensStayWithinBounds},
		{"CancelledContext", cancelledContext},
	}
}

func newBucketStartsFull(e *env) {
	e.wantContent(1, 100)
	e.app = "app-b"
	e.wantLease(e.lease(30, 1), store.Lease{Granted: 30, Remaining: 70})
}

func leaseGrantsWant(e *env) {
	e.wantLease(e.lease(40, 1), store.Lease{Granted: 40, Remaining: 60})
	e.wantLease(e.lease(60, 60), store.Lease{Granted: 60, Remaining: 0})
}

func leaseGrantsPartial(e *env) {
	e.wantLease(e.lease(90, 1), store.Lease{Granted: 90, Remaining: 10})
	// 10 < want 50 but >= need 5: everything there is, and no rejection.
	e.wantLease(e.lease(50, 5), store.Lease{Granted: 10, Remaining: 0})
}

func leaseRejectsBelowNeed(e *env) {
	e.drain(1)
	// Empty: 5 tokens take 5 / 10 s.
	e.wantLease(e.lease(50, 5), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: 500 * time.Millisecond})
	e.advance(250 * time.Millisecond) // 2.5 tokens: the missing 2.5 take 250 ms
	e.wantLease(e.lease(50, 5), store.Lease{Remaining: 2, Reason: store.ReasonAppExhausted, RetryAfter: 250 * time.Millisecond})
	e.advance(250 * time.Millisecond) // a rejection took nothing: 5 tokens now
	e.wantLease(e.lease(50, 5), store.Lease{Granted: 5, Remaining: 0})
}

func retryAfterUsesFactor(e *env) {
	e.drain(1)
	// rate = guaranteed × factor = 5/s: 4 tokens take 800 ms.
	e.wantLease(e.leaseF(10, 4, 0.5), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: 800 * time.Millisecond})
	// factor 0: no refill expected; the store answers 1 s.
	e.wantLease(e.leaseF(10, 4, 0), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: time.Second})

	// Rounded up to the microsecond: 1 token at 3/s takes 333333.3 µs.
	e.app, e.policy = "app-b", store.AppPolicy{Guaranteed: 3, Burst: 3}
	e.drain(1)
	e.wantLease(e.lease(1, 1), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: 333334 * time.Microsecond})
}

func leaseNeedZeroNeverRejects(e *env) {
	e.drain(1)
	e.wantLease(e.lease(10, 0), store.Lease{})
	e.advance(300 * time.Millisecond) // 3 tokens
	e.wantLease(e.lease(10, 0), store.Lease{Granted: 3})
}

func wantBelowNeed(e *env) {
	// want = max(Want, need)
	e.wantLease(e.lease(2, 5), store.Lease{Granted: 5, Remaining: 95})
}

func needClampedToBurst(e *env) {
	// need = min(150, floor(100)) = 100: a full bucket grants it although want is 150.
	e.wantLease(e.lease(150, 150), store.Lease{Granted: 100, Remaining: 0})
	// Empty: the retry is for the clamped need, 100 / 10 s.
	e.wantLease(e.lease(150, 150), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: 10 * time.Second})

	e.app = "app-b"
	e.policy = store.AppPolicy{Guaranteed: 1, Burst: 2.5} // floor(burst) = 2
	e.wantLease(e.lease(3, 3), store.Lease{Granted: 2, Remaining: 0})
}

func refillAtGuaranteedTimesFactor(e *env) {
	e.drain(1)
	e.advance(2 * time.Second)
	e.wantContent(1, 20)

	e.drain(1)
	e.advance(2 * time.Second)
	e.wantContent(0.5, 10)

	e.drain(1)
	e.advance(4 * time.Second)
	e.wantContent(0.25, 10)
}

func refillCappedAtBurst(e *env) {
	e.wantLease(e.lease(30, 1), store.Lease{Granted: 30, Remaining: 70})
	e.advance(5 * time.Second) // 70 + 50 capped
	e.wantContent(1, 100)
	e.drain(1)
	e.advance(30 * time.Second)
	e.wantContent(1, 100)
}

func factorZeroNeverRefills(e *env) {
	e.drain(1)
	e.advance(50 * time.Second) // below the 60 s idle expiry
	e.wantLease(e.leaseF(10, 5, 0), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: time.Second})
	e.wantContent(0, 0)
	// The factor-0 refill moved the bucket's time: only the last second counts now.
	e.advance(time.Second)
	e.wantContent(1, 10)
}

func fractionalTokensCarry(e *env) {
	e.drain(1)
	e.advance(250 * time.Millisecond) // 2.5 tokens
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 2})
	e.advance(250 * time.Millisecond) // 0.5 + 2.5
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 3})
}

func returnAddsBackCappedAtBurst(e *env) {
	e.wantLease(e.lease(50, 1), store.Lease{Granted: 50, Remaining: 50})
	e.give(20)
	e.wantContent(1, 70)
	e.give(200)
	e.wantContent(1, 100)

	e.app = "app-b" // a return to an absent (full) bucket
	e.give(10)
	e.wantContent(1, 100)
}

func returnNonPositiveIsNoop(e *env) {
	e.drain(0)
	e.advance(time.Second)
	e.give(0)
	e.give(-5)
	// Neither return adds anything: the bucket is still empty.
	e.wantContent(0, 0)
}

// returnDoesNotRefill: a Return adds exactly its tokens. The time before it is refilled by the
// next lease at that lease's factor, never at a factor of its own (a throttled app must not
// earn tokens at the full rate through returns).
func returnDoesNotRefill(e *env) {
	e.drain(0)
	e.advance(time.Second)
	e.give(5) // a refill at factor 1 would add 10 more
	e.wantContent(0, 5)

	e.drain(0)
	e.advance(time.Second)
	e.give(5)
	e.wantContent(0.5, 10) // 5 + 1 s × 10 × 0.5
}

func burstShrinkClampsTokens(e *env) {
	e.policy.Burst = 40
	e.wantContent(1, 40)
	e.policy.Burst = 100 // growing the burst adds nothing by itself
	e.wantContent(1, 40)
	e.advance(time.Second)
	e.wantContent(1, 50)
}

func appsAreIndependent(e *env) {
	e.drain(1)
	e.app = "app-b"
	e.wantContent(1, 100)
	e.app = "app-a"
	e.cluster.ID += "-other" // same app id in another cluster
	e.wantContent(1, 100)
}

func reportNeverChangesTokens(e *env) {
	e.wantLease(e.lease(30, 1), store.Lease{Granted: 30, Remaining: 70})
	e.report("i1", 3, store.AppReport{App: e.app, Requests: 50, Cost: 1000, InFlight: 3})
	e.cluster.Capacity = 1000 // with L1, and in an emergency, too
	st := e.report("i1", 3, store.AppReport{App: e.app, Requests: 50, Cost: 5000, InFlight: 3})
	if !st.Emergency {
		e.t.Fatalf("report of cost 5000 at capacity 1000: %+v; want an emergency", st)
	}
	e.wantContent(1, 70)
}

// reportBeforeLeaseLeavesBucketFull: statistics for an app that has no bucket yet create no
// tokens state; the first lease finds a full bucket.
func reportBeforeLeaseLeavesBucketFull(e *env) {
	e.report("i1", 0, store.AppReport{App: e.app, Requests: 9, Cost: 90})
	e.advance(time.Second)
	e.wantLease(e.lease(0, 0), store.Lease{Remaining: 100})
	e.wantContent(1, 100)
}

// tokensStayWithinBounds runs a random (seeded, so repeatable) sequence of leases, returns,
// time steps and policy changes and checks every answer against the bucket's bounds.
func tokensStayWithinBounds(e *env) {
	r := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // a seeded, repeatable test sequence, not a secret
	bursts := []float64{5, 40, 100, 250.5}
	factors := []float64{0, 0.25, 0.5, 1}
	for i := range 400 {
		switch r.IntN(4) {
		case 0:
			want := r.Int64N(300)
			need := r.Int64N(want + 1)
			l := e.leaseF(want, need, factors[r.IntN(len(factors))])
			burst := int64(math.Floor(e.policy.Burst))
			if l.Granted < 0 || l.Remaining < 0 || l.Granted+l.Remaining > burst ||
				l.Granted > max(want, min(need, burst)) {
				e.t.Fatalf("step %d: lease(%d, %d) with burst %v = %+v: out of bounds", i, want, need, e.policy.Burst, l)
			}
			if (l.Granted < min(need, burst)) != (l.Reason == store.ReasonAppExhausted) || (l.Reason == 0) != (l.RetryAfter == 0) {
				e.t.Fatalf("step %d: lease(%d, %d) = %+v: reason and retry-after must be set exactly when granted < need", i, want, need, l)
			}
			e.content(0) // checks 0 <= content <= burst
		case 1:
			e.give(r.Int64N(150) - 10)
			e.content(0)
		case 2:
			e.advance(time.Duration(r.Int64N(3000)) * time.Millisecond)
		case 3:
			e.policy.Burst = bursts[r.IntN(len(bursts))]
			e.policy.Guaranteed = float64(1 + r.IntN(int(e.policy.Burst))) // burst >= guaranteed
			e.content(0)
		}
	}
}

func cancelledContext(e *env) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.s.Lease(ctx, store.LeaseRequest{Cluster: e.cluster, App: e.app, Policy: e.policy, Factor: 1, Want: 10, Need: 1, Instance: "i1"})
	if !errors.Is(err, context.Canceled) {
		e.t.Errorf("Lease with a cancelled context: error %v; want context.Canceled", err)
	}
	err = e.s.Return(ctx, store.Return{Cluster: e.cluster, App: e.app, Policy: e.policy, Tokens: 5, Instance: "i1"})
	if !errors.Is(err, context.Canceled) {
		e.t.Errorf("Return with a cancelled context: error %v; want context.Canceled", err)
	}
	_, err = e.s.Report(ctx, store.Report{Cluster: e.cluster, Instance: "i1"})
	if !errors.Is(err, context.Canceled) {
		e.t.Errorf("Report with a cancelled context: error %v; want context.Canceled", err)
	}
	e.wantContent(1, 100) // the failed lease took nothing
}
