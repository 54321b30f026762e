package limiter

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func rapidLimiter(t *rapid.T) (*Limiter, *probeStore, *clock.Manual) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps["r"] = store.AppPolicy{
		Guaranteed: float64(rapid.IntRange(1, 1000).Draw(t, "guaranteed")),
		Burst:      float64(rapid.IntRange(1000, 5000).Draw(t, "burst")),
		Priority:   rapid.IntRange(0, 3).Draw(t, "priority"),
	}
	cfg.OnStoreFailure = FailureMode(rapid.IntRange(0, 2).Draw(t, "failmode"))
	return testLimiter(t, cfg, ps, c, false), ps, c
}

// Property 2: a local hit lowers local tokens by exactly the cost (plus any background refill
// it started, which is counted as leased) and raises pending consumption by the cost.
func TestPropLocalHit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l, _, c := rapidLimiter(t)
		a := mustApp(t, l, "r")
		for i := range rapid.IntRange(1, 50).Draw(t, "n") {
			cost := rapid.Int64Range(0, 200).Draw(t, "cost")
			b0, leased0 := a.balance.Load(), a.leased.Load()
			pend0 := a.consumed.Load() - a.costSent
			d := a.Take(context.Background(), cost, 0)
			if d.LocalHit {
				got := a.balance.Load() - (a.leased.Load() - leased0)
				if got != b0-cost {
					t.Fatalf("step %d: local hit of %d: balance %d -> %d (net of refill), want %d", i, cost, b0, got, b0-cost)
				}
				if pend := a.consumed.Load() - a.costSent; pend != pend0+cost {
					t.Fatalf("step %d: pending consumption %d -> %d, want +%d", i, pend0, pend, cost)
				}
			}
			if rapid.Bool().Draw(t, "tick") {
				c.Advance(time.Duration(rapid.IntRange(1, 2000).Draw(t, "ms")) * time.Millisecond)
				l.tick(c.Now())
			}
		}
	})
}

// Property 7: tokens leased = spent + returned + dropped + held, on the limiter's own counters
// and against what the Store granted, got back, and was sent by Returns that failed (whose
// tokens are dropped), over random sequences including Store outages, admissions on credit,
// reloads and Close. A Close whose Store failed drops what it holds without asking again.
func TestPropConservation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l, ps, c := rapidLimiter(t)
		a := mustApp(t, l, "r")
		var unasked int64 // tokens Close dropped without a Return, the Store having failed
		check := func(step string) {
			if lhs, rhs := conserved(a); lhs != rhs {
				t.Fatalf("%s: leased+minted %d != consumed+returned+dropped+held %d", step, lhs, rhs)
			}
			if ps.granted.Load() != a.leased.Load() || ps.returned.Load() != a.returned.Load() ||
				ps.lost.Load()+unasked != a.dropped.Load() {
				t.Fatalf("%s: store granted %d / got back %d / failed returns of %d, limiter leased %d / returned %d / dropped %d",
					step, ps.granted.Load(), ps.returned.Load(), ps.lost.Load(), a.leased.Load(), a.returned.Load(), a.dropped.Load())
			}
		}
		for range rapid.IntRange(1, 80).Draw(t, "n") {
			switch op := rapid.IntRange(0, 7).Draw(t, "op"); op {
			case 0, 1:
				a.Take(context.Background(), rapid.Int64Range(0, 300).Draw(t, "cost"), 0)
			case 2:
				a.Refund(rapid.Int64Range(0, 300).Draw(t, "refund"))
			case 3:
				a.Charge(rapid.Int64Range(0, 300).Draw(t, "charge"))
			case 4:
				c.Advance(time.Duration(rapid.IntRange(1, 15000).Draw(t, "ms")) * time.Millisecond)
				l.tick(c.Now())
			case 5:
				ps.fail.Store(rapid.Bool().Draw(t, "fail"))
			case 6:
				cfg := l.Config()
				p := cfg.Apps["r"]
				p.Burst = float64(rapid.IntRange(int(p.Guaranteed), 5000).Draw(t, "newburst"))
				cfg.Apps = map[string]store.AppPolicy{"r": p, "a": cfg.Apps["a"]}
				if err := l.Update(cfg); err != nil {
					t.Fatal(err)
				}
			case 7: // a request that gave up waiting for a lease in flight: credit, not minted
				cost := rapid.Int64Range(0, 300).Draw(t, "credit")
				p := a.pol.Load()
				minted := a.minted.Load()
				a.creditTake(cost, min(cost, p.burst), p, l.state.Load())
				if a.minted.Load() != minted {
					t.Fatalf("credit minted %d tokens", a.minted.Load()-minted)
				}
			}
			check("step")
		}
		ps.fail.Store(rapid.Bool().Draw(t, "fail at close")) // failed returns drop their tokens
		held, returns := a.balance.Load(), ps.returns.Load()
		if err := l.Close(); err != nil && ps.returns.Load() == returns {
			unasked = max(held, 0) // the report failed first (a debt is not dropped)
		}
		check("close")
		if tok, _ := a.Tokens(); tok != 0 {
			t.Fatalf("%d tokens held after Close", tok)
		}
	})
}

// Property 8: rolling back an admitted request restores the local tokens exactly (net of a
// lease the take itself made) and the pending consumption.
func TestPropRollback(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l, _, c := rapidLimiter(t)
		a := mustApp(t, l, "r")
		for range rapid.IntRange(1, 40).Draw(t, "n") {
			cost := rapid.Int64Range(0, 300).Draw(t, "cost")
			b0, leased0, cons0 := a.balance.Load(), a.leased.Load(), a.consumed.Load()
			if d := a.Take(context.Background(), cost, 0); d.Allowed {
				a.Refund(cost)
				if got := a.balance.Load() - (a.leased.Load() - leased0); got != b0 {
					t.Fatalf("rollback of %d: balance %d, want %d", cost, got, b0)
				}
				if a.consumed.Load() != cons0 {
					t.Fatalf("rollback of %d: consumption %d, want %d", cost, a.consumed.Load(), cons0)
				}
			}
			c.Advance(time.Duration(rapid.IntRange(0, 500).Draw(t, "ms")) * time.Millisecond)
			if rapid.Bool().Draw(t, "tick") {
				l.tick(c.Now())
			}
		}
	})
}
