package memstore

import (
	"context"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestMemoryStoreRefillProperty checks the refill: after elapsed seconds at factor f,
// the bucket holds min(burst, tokens + elapsed × guaranteed × f), and what did not fit pays
// debt; borrowed shrinks in proportion to the debt repaid and is 0 with the debt.
// Debt only arises from borrowing, so the test plants it in the record directly.
func TestMemoryStoreRefillProperty(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rapid.Check(t, func(t *rapid.T) {
		p := store.AppPolicy{
			Guaranteed: rapid.Float64Range(0.01, 10000).Draw(t, "guaranteed"),
		}
		p.Burst = rapid.Float64Range(p.Guaranteed, 100000).Draw(t, "burst")
		tokens := rapid.Float64Range(0, p.Burst).Draw(t, "tokens")
		debt := rapid.SampledFrom([]float64{0, rapid.Float64Range(0.001, 50000).Draw(t, "debt")}).Draw(t, "debt?")
		borrowed := 0.0
		if debt > 0 {
			borrowed = rapid.Float64Range(0, debt).Draw(t, "borrowed")
		}
		factor := rapid.SampledFrom([]float64{0, 0.1, 0.5, 1, rapid.Float64Range(0, 1).Draw(t, "f")}).Draw(t, "factor")
		elapsedUS := rapid.Int64Range(0, 100_000_000).Draw(t, "elapsed µs")

		clk := clock.NewManual()
		clk.Set(start)
		m := New(clk)
		k := memAppKey{"c", "a"}
		m.apps[k] = &memBucket{
			hasBucket: true, tokens: tokens, ts: start.UnixMicro(), debt: debt, borrowed: borrowed,
			touched: start.UnixMicro(), ttl: memMaxIdleTTL,
		}
		clk.Advance(time.Duration(elapsedUS) * time.Microsecond)
		now := clk.Now()

		l, err := m.Lease(context.Background(), store.LeaseRequest{Cluster: store.ClusterPolicy{ID: "c"}, App: "a", Policy: p, Factor: factor})
		if err != nil {
			t.Fatal(err)
		}
		if l.Granted != 0 {
			t.Fatalf("lease(0, 0) granted %d", l.Granted)
		}
		total := tokens + float64(elapsedUS)/1e6*p.Guaranteed*factor
		wantTokens := math.Min(p.Burst, total)
		wantDebt := debt - math.Min(debt, math.Max(0, total-p.Burst)) // only what does not fit pays
		st, _ := m.AppState("c", "a")
		if st.Tokens != wantTokens || st.Debt != wantDebt {
			t.Fatalf("tokens %v, debt %v; want %v, %v", st.Tokens, st.Debt, wantTokens, wantDebt)
		}
		if l.Remaining != int64(math.Floor(wantTokens)) {
			t.Fatalf("remaining %d; want floor(%v)", l.Remaining, wantTokens)
		}
		switch {
		case wantDebt == 0 && st.Borrowed != 0:
			t.Fatalf("debt repaid but borrowed = %v", st.Borrowed)
		case debt > 0 && wantDebt > 0 && math.Abs(st.Borrowed-borrowed*wantDebt/debt) > 1e-9*borrowed:
			t.Fatalf("borrowed %v; want %v × %v / %v", st.Borrowed, borrowed, wantDebt, debt)
		case st.Borrowed > borrowed:
			t.Fatalf("borrowed grew from %v to %v on a refill", borrowed, st.Borrowed)
		}
		if !st.TS.Equal(now) {
			t.Fatalf("ts %v; want %v", st.TS, now)
		}
	})
}
