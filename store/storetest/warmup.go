package storetest

import (
	"context"
	"math"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Warm-up cases (AppPolicy.Warmup). Policy: guaranteed 30/s, burst 300, warm-up 10 s, so the
// ramp's allowance is a·t + (a/W)·t² = 10t + t² tokens after t seconds (exact in binary at
// quarter seconds), 200 over the whole warm-up.

func warmupCases() []testCase {
	return []testCase{
		{"WarmupColdAppRamps", warmupColdAppRamps},
		{"WarmupRefusalRetryAfter", warmupRefusalRetryAfter},
		{"WarmupWarmAppNotRamped", warmupWarmAppNotRamped},
		{"WarmupNeedAboveAllowance", warmupNeedAboveAllowance},
		{"WarmupReturnGivesNoAllowance", warmupReturnGivesNoAllowance},
		{"WarmupZeroUnchanged", warmupZeroUnchanged},
		{"WarmupNegativeRefused", warmupNegativeRefused},
	}
}

func (e *env) warmPolicy() {
	e.policy = store.AppPolicy{Guaranteed: 30, Burst: 300, Warmup: 10 * time.Second}
}

// warmupColdAppRamps: a new app's grants add up to floor(allowance(t)) (at least 1 at t = 0)
// although the bucket is full; once the warm-up is over, the bucket gives everything.
func warmupColdAppRamps(e *env) {
	e.warmPolicy()
	var total int64
	for i := range 40 {
		t := float64(i) / 4
		want := int64(math.Floor(math.Max(10*t+t*t, 1)))
		l := e.lease(300, 1)
		total += l.Granted
		if total != want || l.Remaining != 0 || l.Reason != store.ReasonNone {
			e.t.Fatalf("t = %vs: lease = %+v, %d granted in all; want %d in all, Remaining 0 (the ramp's cap)", t, l, total, want)
		}
		e.advance(250 * time.Millisecond)
	}
	// t = 10 s: the warm-up is over; the refill kept the bucket full (grants were <= 7 per 250 ms).
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 300})
}

// warmupRefusalRetryAfter: a lease the ramp cannot cover is refused with the time at which the
// allowance covers it (at most the end of the warm-up), although the bucket holds the need.
func warmupRefusalRetryAfter(e *env) {
	e.warmPolicy()
	e.wantLease(e.lease(1, 1), store.Lease{Granted: 1})
	e.advance(2 * time.Second) // allowance 24
	e.wantLease(e.lease(23, 23), store.Lease{Granted: 23})
	// 24 + 15 = 39 = 10t + t² at t = 3 s.
	e.wantLease(e.lease(15, 15), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: time.Second})
	e.advance(time.Second)
	e.wantLease(e.lease(15, 15), store.Lease{Granted: 15})
	// 39 + 250 is more than the whole warm-up allows: wait for its end (t = 10 s). Remaining is
	// what the ramp would still give (max(39, 250) - 39 = 211), the bucket holds 285.
	e.wantLease(e.lease(250, 250), store.Lease{Remaining: 211, Reason: store.ReasonAppExhausted, RetryAfter: 7 * time.Second})
	e.advance(7 * time.Second) // the last grant was 7 s ago: still warm
	e.wantLease(e.lease(250, 250), store.Lease{Granted: 250, Remaining: 50})
}

// warmupWarmAppNotRamped: an app with a grant less than the warm-up ago is warm; one idle for
// the warm-up is cold again.
func warmupWarmAppNotRamped(e *env) {
	e.warmPolicy()
	e.wantLease(e.lease(300, 1), store.Lease{Granted: 1})
	e.advance(5 * time.Second) // allowance 75
	e.wantLease(e.lease(300, 1), store.Lease{Granted: 74})
	e.advance(5 * time.Second) // warm-up over, last grant 5 s ago
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 300})
	e.advance(9 * time.Second) // 9 s idle: warm
	e.wantLease(e.lease(100, 1), store.Lease{Granted: 100, Remaining: 170})
	e.advance(10 * time.Second) // 10 s idle: cold again, although the bucket is full
	e.wantLease(e.lease(300, 1), store.Lease{Granted: 1})
	e.advance(time.Second)
	e.wantLease(e.lease(300, 1), store.Lease{Granted: 10})
}

// warmupNeedAboveAllowance: the allowance is never below the lease's own need, so a cold app
// whose request costs more than the ramp allows still starts; after a warm-up without a grant
// it is cold again and starts again.
func warmupNeedAboveAllowance(e *env) {
	e.warmPolicy()
	e.wantLease(e.lease(250, 250), store.Lease{Granted: 250})
	e.advance(time.Second) // allowance max(11, 5) < 250 + 5: wait for the warm-up's end
	e.wantLease(e.lease(5, 5), store.Lease{Reason: store.ReasonAppExhausted, RetryAfter: 9 * time.Second})
	e.advance(9 * time.Second)
	e.wantLease(e.lease(250, 250), store.Lease{Granted: 250})
}

// warmupReturnGivesNoAllowance: returned tokens go back to the bucket, not to the ramp.
func warmupReturnGivesNoAllowance(e *env) {
	e.warmPolicy()
	e.wantLease(e.lease(1, 1), store.Lease{Granted: 1})
	e.give(1)
	l := e.lease(1, 1)
	// 10t + t² = 2 at t = 0.19615… s.
	if l.Granted != 0 || l.Reason != store.ReasonAppExhausted || l.RetryAfter <= 196*time.Millisecond || l.RetryAfter > 197*time.Millisecond {
		e.t.Fatalf("lease after a return = %+v; want refused for about 196.2 ms", l)
	}
	e.advance(l.RetryAfter)
	e.wantLease(e.lease(1, 1), store.Lease{Granted: 1})
}

// warmupZeroUnchanged: without a warm-up a new app gets its full bucket, and turning the
// warm-up off (a reload) ends one in progress.
func warmupZeroUnchanged(e *env) {
	e.policy = store.AppPolicy{Guaranteed: 30, Burst: 300}
	e.wantLease(e.lease(300, 1), store.Lease{Granted: 300})
	e.app = "app-b"
	e.warmPolicy()
	e.wantLease(e.lease(300, 1), store.Lease{Granted: 1})
	e.policy.Warmup = 0
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 299})
	e.policy.Warmup = 10 * time.Second // the last grant was just now: warm
	e.wantLease(e.lease(huge, 0), store.Lease{})
	e.advance(time.Second)
	e.wantLease(e.lease(huge, 0), store.Lease{Granted: 30})
}

// warmupNegativeRefused: a negative warm-up is a malformed call, refused without a write.
func warmupNegativeRefused(e *env) {
	bad := store.AppPolicy{Guaranteed: 30, Burst: 300, Warmup: -time.Microsecond}
	if _, err := e.s.Lease(context.Background(), store.LeaseRequest{
		Cluster: e.cluster, App: e.app, Policy: bad,
		Factor: 1, Want: 10, Need: 1, Instance: "i1",
	}); err == nil {
		e.t.Fatal("Lease with warmup < 0: no error")
	}
	if err := e.s.Return(context.Background(), store.Return{
		Cluster: e.cluster, App: e.app, Policy: bad,
		Tokens: 5, Instance: "i1",
	}); err == nil {
		e.t.Fatal("Return with warmup < 0: no error")
	}
	// Nothing was written: the app is new, hence cold.
	e.warmPolicy()
	e.wantLease(e.lease(300, 1), store.Lease{Granted: 1})
}
