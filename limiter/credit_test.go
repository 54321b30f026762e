package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// gateStore holds every Lease until the test releases it with an outcome: nil forwards the
// lease to the wrapped Store, an error fails it. It ignores the call's context, so that only
// the test decides when and how the lease ends.
type gateStore struct {
	store.Store
	entered chan struct{} // signalled when a Lease has arrived
	release chan error
}

func newGate(c *clock.Manual) *gateStore {
	return &gateStore{Store: newStore(c), entered: make(chan struct{}, 1), release: make(chan error)}
}

func (g *gateStore) Lease(ctx context.Context, r store.LeaseRequest) (store.Lease, error) {
	g.entered <- struct{}{}
	if err := <-g.release; err != nil {
		return store.Lease{}, err
	}
	return g.Store.Lease(ctx, r)
}

// inFlight returns the lease call the app is waiting for (the Store holds it).
func inFlight(t *testing.T, a *App) *leaseCall {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.call == nil {
		t.Fatal("no lease in flight")
	}
	return a.call
}

// creditLimiter is a Limiter with background leases whose requests stop waiting for the
// Store at once (StoreTimeout 1 ns: the context deadline has passed when the waiter looks).
func creditLimiter(t *testing.T, c *clock.Manual, g *gateStore) (*Limiter, *App) {
	cfg := baseConfig()
	cfg.StoreTimeout = time.Nanosecond
	l := testLimiter(t, cfg, g, c, true)
	return l, mustApp(t, l, "a") // guaranteed 100, burst 1000: rescue burst 1000, 100/s
}

// A request that stops waiting for a lease still in flight is admitted on credit: the level
// stays normal, nothing is minted, and the grant that arrives later pays the debt.
func TestCreditWhileLeaseInFlight(t *testing.T) {
	c := clock.NewManual()
	g := newGate(c)
	l, a := creditLimiter(t, c, g)

	d := a.Take(context.Background(), 5, 0)
	<-g.entered
	if !d.Allowed || d.LocalHit {
		t.Fatalf("waiter that gave up: %+v, want admitted on credit", d)
	}
	if tok, debt := a.Tokens(); tok != 0 || debt != 5 {
		t.Fatalf("after the credit: tokens %d debt %d, want 0 and 5", tok, debt)
	}
	if l.Level() != LevelNormal || a.minted.Load() != 0 {
		t.Fatalf("level %v, minted %d: a slow lease is not a failure", l.Level(), a.minted.Load())
	}

	// The rescue bucket bounds the credit: 1000 − 5 left, so 995 more pass, then no more.
	if d := a.Take(context.Background(), 995, 0); !d.Allowed {
		t.Fatalf("credit within the rescue bucket: %+v", d)
	}
	d = a.Take(context.Background(), 1, 0)
	if d.Allowed || d.Reason != store.ReasonAppExhausted || d.RetryAfter <= 0 {
		t.Fatalf("credit beyond the rescue bucket: %+v, want app_exhausted with a retry-after", d)
	}

	call := inFlight(t, a)
	g.release <- nil
	<-call.done
	if call.err != nil {
		t.Fatal(call.err)
	}
	granted := call.res.Granted
	if granted == 0 || a.leased.Load() != granted {
		t.Fatalf("grant %d, leased %d", granted, a.leased.Load())
	}
	if got := a.balance.Load(); got != granted-1000 {
		t.Fatalf("balance %d after a grant of %d, want grant − credit = %d", got, granted, granted-1000)
	}
	if l.Level() != LevelNormal || a.minted.Load() != 0 {
		t.Fatalf("level %v, minted %d after the late grant", l.Level(), a.minted.Load())
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("conservation: %d != %d", lhs, rhs)
	}
}

// A lease that fails switches to fail-open; a request admitted on credit before the failure
// stays debt, and the rescue admissions after it are minted.
func TestFailedLeaseMintsRescue(t *testing.T) {
	c := clock.NewManual()
	g := newGate(c)
	l, a := creditLimiter(t, c, g)

	if d := a.Take(context.Background(), 5, 0); !d.Allowed {
		t.Fatalf("credit: %+v", d)
	}
	<-g.entered
	call := inFlight(t, a)
	g.release <- errDown
	<-call.done
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v after a failed lease, want fail-open", l.Level())
	}
	if d := a.Take(context.Background(), 7, 0); !d.Allowed {
		t.Fatalf("rescue: %+v", d)
	}
	if a.minted.Load() != 7 || a.balance.Load() != -5 || a.leased.Load() != 0 {
		t.Fatalf("minted %d, balance %d, leased %d; want 7 minted and the credit of 5 as debt",
			a.minted.Load(), a.balance.Load(), a.leased.Load())
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("conservation: %d != %d", lhs, rhs)
	}
}

// The rescue bucket is persistent: a second fail-open episode right after the first one only
// gets what refilled in between, not another burst.
func TestRescueBurstNotRenewedPerEpisode(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a") // rescue: burst 1000, 100/s with one live instance
	start := c.Now()
	var admitted int64
	var last time.Time // the end of the last episode's takes
	drain := func() {
		for a.Take(context.Background(), 1, 0).Allowed {
			admitted++
		}
	}
	for range 2 {
		ps.fail.Store(true)
		drain()
		last = c.Now()
		if l.Level() != LevelFailOpen {
			t.Fatalf("level %v with a failing Store", l.Level())
		}
		ps.fail.Store(false)
		c.Advance(time.Second)
		l.tick(c.Now()) // the probe ends the episode
		if l.Level() == LevelFailOpen {
			t.Fatal("still fail-open after a successful probe")
		}
	}
	elapsed := last.Sub(start)
	bound := int64(1000 + 100*elapsed.Seconds())
	if admitted > bound || admitted < 1000 {
		t.Fatalf("two episodes admitted %d; want one burst (1000) and at most burst + rate × %v = %d", admitted, elapsed, bound)
	}
	if a.minted.Load() != admitted {
		t.Fatalf("minted %d, admitted %d", a.minted.Load(), admitted)
	}
}
