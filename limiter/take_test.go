package limiter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func newProbe(c *clock.Manual) *probeStore {
	return &probeStore{Store: newStore(c), clock: c}
}

func TestTakeLeasesThenHitsLocally(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")

	d := a.Take(context.Background(), 5, 0)
	if !d.Allowed || d.LocalHit || d.Limit != 1000 {
		t.Fatalf("first take = %+v, want admitted through a lease", d)
	}
	if ps.leases.Load() != 1 {
		t.Fatalf("leases = %d, want 1", ps.leases.Load())
	}
	// The first lease is one refill horizon at the guaranteed rate: 100/s × 0.3 s.
	if got, _ := a.Tokens(); got != 30-5 {
		t.Fatalf("local tokens = %d, want 25", got)
	}
	d = a.Take(context.Background(), 7, 0)
	if !d.Allowed || !d.LocalHit {
		t.Fatalf("second take = %+v, want a local hit", d)
	}
	if got, _ := a.Tokens(); got != 18 || ps.leases.Load() != 1 {
		t.Fatalf("tokens %d leases %d, want 18 and 1", got, ps.leases.Load())
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("conservation: %d != %d", lhs, rhs)
	}
}

func TestRefusedAppCostsNoStoreCalls(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps["small"] = pol(10, 10, 0)
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "small")

	admitted := int64(0)
	var last Decision
	for range 100 {
		if last = a.Take(context.Background(), 1, 0); last.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d of a burst of 10", admitted)
	}
	if last.Reason != store.ReasonAppExhausted || last.RetryAfter <= 0 {
		t.Fatalf("rejection = %+v", last)
	}
	calls := ps.leases.Load()
	for range 1000 {
		if d := a.Take(context.Background(), 1, 0); d.Allowed || d.Reason != store.ReasonAppExhausted {
			t.Fatalf("take during retry-after = %+v", d)
		}
	}
	if ps.leases.Load() != calls {
		t.Fatalf("refused app made %d Store calls during retry-after", ps.leases.Load()-calls)
	}
	c.Advance(last.RetryAfter)
	if d := a.Take(context.Background(), 1, 0); !d.Allowed {
		t.Fatalf("after retry-after: %+v", d)
	}
	if ps.leases.Load() != calls+1 {
		t.Fatalf("leases after retry-after = %d, want %d", ps.leases.Load(), calls+1)
	}
}

func TestSingleFlightLease(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	ps.block = make(chan struct{})
	ps.entered = make(chan struct{}, 1)
	cfg := baseConfig()
	cfg.Apps["a"] = pol(1000, 1000, 0)
	cfg.Reserve = 300              // first lease: 300 tokens, enough for every waiter
	cfg.StoreTimeout = time.Minute // the test releases the Store itself
	l := testLimiter(t, cfg, ps, c, true)
	a := mustApp(t, l, "a")

	const n = 50
	var started, done sync.WaitGroup
	results := make(chan Decision, n)
	started.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			started.Done()
			results <- a.Take(context.Background(), 1, 0)
		}()
	}
	started.Wait()
	// Wait until the one lease is in the Store, then let it answer.
	<-ps.entered
	close(ps.block)
	done.Wait()
	close(results)
	for d := range results {
		if !d.Allowed {
			t.Fatalf("waiter rejected: %+v", d)
		}
	}
	if got := ps.leases.Load(); got != 1 {
		t.Fatalf("%d concurrent waiters made %d leases, want 1", n, got)
	}
	if got, _ := a.Tokens(); got != 300-n {
		t.Fatalf("tokens = %d, want %d", got, 300-n)
	}
}

func TestRefundAndCharge(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	a.Take(context.Background(), 10, 0) // lease 30, 20 left
	a.Refund(4)
	if got, _ := a.Tokens(); got != 24 {
		t.Fatalf("after refund tokens = %d, want 24", got)
	}
	a.Charge(30)
	if tok, debt := a.Tokens(); tok != 0 || debt != 6 {
		t.Fatalf("after charge: tokens %d debt %d, want 0 and 6", tok, debt)
	}
	// The next lease pays the debt first, then covers the request.
	d := a.Take(context.Background(), 5, 0)
	if !d.Allowed {
		t.Fatalf("take after debt = %+v", d)
	}
	if tok, debt := a.Tokens(); debt != 0 || tok < 0 {
		t.Fatalf("debt not paid: tokens %d debt %d", tok, debt)
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("conservation: %d != %d", lhs, rhs)
	}
}

func TestLeaseTarget(t *testing.T) {
	c := clock.NewManual()
	cfg := baseConfig()
	cfg.Apps["big"] = pol(100000, 100000, 0)
	cfg.Apps["tiny"] = pol(10, 40, 0)
	l := testLimiter(t, cfg, newProbe(c), c, false)
	s := l.snap()
	for _, tc := range []struct {
		app        string
		live       int
		rateTgt    int64
		need, debt int64
		want       int64
	}{
		{"big", 1, 30000, 0, 0, 30000}, // Reserve is no ceiling
		{"big", 1, 90000, 0, 0, 50000}, // the fairness cap is: 100000 / (2 × 1)
		{"big", 1, 200, 0, 0, 200},     // the rate × horizon
		{"big", 1, 200, 500, 0, 500},   // at least the need
		{"big", 1, 200, 0, 7, 207},     // plus the debt
		{"tiny", 4, 3, 0, 0, 3},        // 40 / (2 × 4) = 5 caps nothing here
		{"tiny", 4, 30, 0, 0, 5},       // ... but caps this
		{"tiny", 40, 30, 0, 0, 1},      // never below 1
		{"tiny", 40, 30, 9, 0, 9},      // nor below the need
		{"a", 1, 0, 0, 0, 1},           // an idle app asks for one token
	} {
		a := mustApp(t, l, tc.app)
		a.rateTgt.Store(tc.rateTgt)
		a.balance.Store(0)
		st := &store.ClusterState{Factors: [4]float64{1, 1, 1, 1}, LiveInstances: tc.live}
		if got := a.want(tc.need, tc.debt, a.pol.Load(), st, s); got != tc.want {
			t.Errorf("%+v: want() = %d", tc, got)
		}
	}
	// A refill that starts with tokens left tops the balance up to the cap, no further: the
	// overshoot went back at the next tick, one more Store call per lease of a hot app.
	a := mustApp(t, l, "big")
	a.rateTgt.Store(90000)
	a.balance.Store(9900)
	st := &store.ClusterState{Factors: [4]float64{1, 1, 1, 1}, LiveInstances: 1}
	if got := a.want(0, 0, a.pol.Load(), st, s); got != 50000-9900 {
		t.Errorf("with 9900 tokens left: want() = %d, want %d", got, 50000-9900)
	}
}
