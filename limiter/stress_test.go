package limiter

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
)

// Concurrent takes, refunds, charges, ticks, Store outages and reloads with real background
// leases: no race, and tokens are conserved once everything has settled.
func TestConcurrentConservation(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps["s"] = pol(500, 2000, 1)
	cfg.StoreTimeout = time.Minute // no waiter gives up: the outcome must not depend on timing
	l := testLimiter(t, cfg, ps, c, true)
	ids := []string{"a", "s", "unknown-1", "unknown-2"}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 3000 {
				a := mustApp(t, l, ids[rng.IntN(len(ids))])
				cost := int64(rng.IntN(20))
				if a.Take(context.Background(), cost, 0).Allowed {
					switch rng.IntN(4) {
					case 0:
						a.Refund(cost)
					case 1:
						a.Charge(int64(rng.IntN(10)))
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 200 {
			c.Advance(50 * time.Millisecond)
			ps.fail.Store(i%50 >= 40)
			if i == 100 {
				if err := l.Update(cfg); err != nil {
					t.Error(err)
				}
			}
			l.tick(c.Now())
		}
	}()
	wg.Wait()
	ps.fail.Store(false)
	// The Store is back: its probe ends fail_open (Close does not ask a Store it knows away).
	for i := 0; l.Level() == LevelFailOpen && i < 10; i++ {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	// Let background leases finish: each holds its app's call until done.
	for _, a := range l.apps() {
		a.mu.Lock()
		call := a.call
		a.mu.Unlock()
		if call != nil {
			<-call.done
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var leased, returned int64
	for _, a := range l.apps() {
		if lhs, rhs := conserved(a); lhs != rhs {
			t.Fatalf("app %s: leased+minted %d != consumed+returned+dropped+held %d", a.id, lhs, rhs)
		}
		if tok, _ := a.Tokens(); tok != 0 {
			t.Fatalf("app %s holds %d tokens after Close", a.id, tok)
		}
		leased += a.leased.Load()
		returned += a.returned.Load()
	}
	if leased != ps.granted.Load() || returned != ps.returned.Load() {
		t.Fatalf("limiter leased %d / returned %d, Store granted %d / got back %d",
			leased, returned, ps.granted.Load(), ps.returned.Load())
	}
}
