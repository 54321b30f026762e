package limiter

import (
	"testing"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// An isolated tenant has counters of its own, beside "*" (which still counts every unknown
// app), and is found by id while active; the totals are Stats summed.
func TestIsolatedTenantCounters(t *testing.T) {
	c := clock.NewManual()
	cfg := baseConfig()
	cfg.UnknownApp = UnknownIsolated
	l := testLimiter(t, cfg, newProbe(c), c, false)
	for i, id := range []string{"t1", "t2", "t2", "a"} {
		app := mustApp(t, l, id)
		app.Record(store.ReasonNone, int64(i+1))
	}
	mustApp(t, l, "t1").Record(store.ReasonAppExhausted, 5)

	t1, iso, ok := l.AppStatsOf("t1")
	if !ok || !iso || t1.Label != "t1" || t1.Requests[store.ReasonNone] != 1 || t1.Requests[store.ReasonAppExhausted] != 1 || t1.Cost != 1 {
		t.Errorf("t1: %+v isolated %v ok %v; want its own 1 admitted (cost 1) and 1 rejected", t1, iso, ok)
	}
	t2, _, _ := l.AppStatsOf("t2")
	if t2.Requests[store.ReasonNone] != 2 || t2.Cost != 5 {
		t.Errorf("t2: %+v, want 2 admitted, cost 5", t2)
	}
	star, iso, ok := l.AppStatsOf("*")
	if !ok || iso || star.Requests[store.ReasonNone] != 3 || star.Cost != 6 {
		t.Errorf("*: %+v, want the three unknown requests (cost 6)", star)
	}
	if a, iso, ok := l.AppStatsOf("a"); !ok || iso || a.Cost != 4 {
		t.Errorf("a: %+v %v %v", a, iso, ok)
	}
	if _, _, ok := l.AppStatsOf("never"); ok {
		t.Error("an id never seen is found")
	}
	got := map[string]int64{}
	for _, s := range l.IsolatedStats() {
		got[s.Label] = s.Requests[store.ReasonNone]
	}
	if len(got) != 2 || got["t1"] != 1 || got["t2"] != 2 {
		t.Errorf("IsolatedStats: %v", got)
	}
	var want AppStats
	for _, s := range l.Stats() {
		for i, n := range s.Requests {
			want.Requests[i] += n
		}
		want.Cost += s.Cost
	}
	if tot := l.StatsTotals(); tot.Requests != want.Requests || tot.Cost != want.Cost {
		t.Errorf("StatsTotals %+v, want Stats summed %+v", tot, want)
	}
}
