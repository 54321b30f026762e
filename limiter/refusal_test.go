package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// An expensive request's refusal does not block a cheaper one that L2 can still cover: the
// refusal was about the refused request's need. Requests L2 cannot cover are still rejected
// locally, without a Store call, until the retry-after.
func TestRefusalDoesNotBlockCheaperRequests(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps["slow"] = pol(0.01, 20, 0) // one token per 100 s: nothing refills during the test
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "slow")
	ctx := context.Background()

	for i := range 2 {
		if d := a.Take(ctx, 9, 0); !d.Allowed {
			t.Fatalf("9-token take %d = %+v, want admitted", i+1, d)
		}
	}
	d := a.Take(ctx, 9, 0)
	if d.Allowed || d.Reason != store.ReasonAppExhausted || d.RetryAfter < 600*time.Second {
		t.Fatalf("third 9-token take = %+v, want app_exhausted with a retry-after of ~700 s", d)
	}
	if tok, _ := a.Tokens(); tok+a.l2Left.Load() != 2 {
		t.Fatalf("local %d + L2 %d, want 2 tokens left in all", tok, a.l2Left.Load())
	}
	calls := ps.leases.Load()

	// L2 cannot cover another 9: rejected locally, no Store call.
	if d := a.Take(ctx, 9, 0); d.Allowed {
		t.Fatalf("9-token take during the refusal = %+v", d)
	}
	if got := ps.leases.Load(); got != calls {
		t.Fatalf("uncoverable take during the refusal made %d Store calls", got-calls)
	}

	// Two 1-token takes are covered by what L2 still holds.
	for i := range 2 {
		if d := a.Take(ctx, 1, 0); !d.Allowed {
			t.Fatalf("1-token take %d during the refusal = %+v, want admitted (L2 holds 2)", i+1, d)
		}
	}
	if tok, _ := a.Tokens(); tok != 0 || a.l2Left.Load() != 0 {
		t.Fatalf("local %d, L2 %d after spending the last 2 tokens, want 0 and 0", tok, a.l2Left.Load())
	}
	calls = ps.leases.Load()

	// The cheap leases did not shorten the refusal for the expensive request: L2 holds even
	// less now.
	c.Advance(time.Second)
	if d := a.Take(ctx, 9, 0); d.Allowed || d.RetryAfter < 600*time.Second {
		t.Fatalf("9-token take after the cheap leases = %+v, want a retry-after of ~700 s", d)
	}
	if got := ps.leases.Load(); got != calls {
		t.Fatalf("9-token take after the cheap leases made %d Store calls", got-calls)
	}

	// Now nothing is left: even a 1-token take is rejected without a Store call.
	for range 100 {
		if d := a.Take(ctx, 1, 0); d.Allowed || d.Reason != store.ReasonAppExhausted || d.RetryAfter <= 0 {
			t.Fatalf("1-token take with L2 empty = %+v", d)
		}
	}
	if got := ps.leases.Load(); got != calls {
		t.Fatalf("takes L2 cannot cover made %d Store calls", got-calls)
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("conservation: %d != %d", lhs, rhs)
	}
}

// A rejection's Remaining counts what L2 still holds, like an admission's.
func TestRejectionRemainingIncludesL2(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps["slow"] = pol(0.01, 20, 0)
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "slow")
	ctx := context.Background()

	var last Decision
	for range 2 {
		last = a.Take(ctx, 9, 0)
	}
	if !last.Allowed || last.Remaining != 2 {
		t.Fatalf("second 9-token take = %+v, want admitted with Remaining 2", last)
	}
	for _, tc := range []struct {
		name string
		cost int64
	}{{"refused by L2", 9}, {"rejected locally", 9}, {"above the burst", 25}} {
		d := a.Take(ctx, tc.cost, 0)
		if d.Allowed {
			t.Fatalf("%s: %+v, want rejected", tc.name, d)
		}
		if tok, _ := a.Tokens(); d.Remaining != tok+a.l2Left.Load() || d.Remaining != 2 {
			t.Fatalf("%s: Remaining = %d, want 2 (local %d + L2 %d)", tc.name, d.Remaining, tok, a.l2Left.Load())
		}
	}
}

// TestRetryAfterCoversRefill: a client refused right after the bucket drained is told how long
// the refill of its token takes, and waiting that long is enough. A lease that brought the last
// tokens sets a short refusal (when to ask the Store again); that was passed on as the
// Retry-After: "280 ms", then another 429 with "9.5 s".
func TestRetryAfterCoversRefill(t *testing.T) {
	c := clock.NewManual()
	cfg := baseConfig()
	cfg.Apps["slow"] = pol(0.1, 20, 0)
	l := testLimiter(t, cfg, newProbe(c), c, false)
	a := mustApp(t, l, "slow")
	for i := range 20 {
		if d := a.Take(context.Background(), 1, 0); !d.Allowed {
			t.Fatalf("take %d of the burst refused: %+v", i+1, d)
		}
		c.Advance(10 * time.Millisecond)
	}
	d := a.Take(context.Background(), 1, 0)
	if d.Allowed || d.RetryAfter < 9*time.Second {
		t.Fatalf("after the burst: %+v, want a rejection with the refill of one token (about 9.8 s)", d)
	}
	c.Advance(d.RetryAfter)
	if d := a.Take(context.Background(), 1, 0); !d.Allowed {
		t.Fatalf("after waiting the Retry-After: %+v", d)
	}
}
