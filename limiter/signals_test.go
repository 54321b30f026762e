package limiter

import (
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/adaptive"
	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func adaptiveConfig() Config {
	cfg := baseConfig()
	cfg.Cluster.Capacity = 10000
	cfg.Cluster.Adaptive = store.AdaptivePolicy{Min: 1000, Max: 20000, LatencyTarget: 100 * time.Millisecond}
	return cfg
}

// The backend's answers travel with the next cluster report, once: a later report carries
// only what came since.
func TestSignalsTravelWithTheReport(t *testing.T) {
	c := clock.NewManual()
	ps := &probeStore{Store: newStore(c), clock: c}
	l := testLimiter(t, adaptiveConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	admit(a, 1)
	for i := range 10 {
		a.Observe(time.Duration(i+1)*20*time.Millisecond, i < 2) // 2 throttles; 5 above 100ms
	}
	want := store.Signals{Answers: 10, Throttles: 2, Slow: 5}
	for i := range 10 {
		want.Latency[adaptive.Bucket(time.Duration(i+1)*20*time.Millisecond)]++
	}
	c.Advance(time.Second)
	l.tick(c.Now())
	if got := ps.lastReport.Load(); got == nil || got.Signals != want {
		t.Fatalf("report carries %+v, want %+v", got, want)
	}
	a.Observe(time.Millisecond, false)
	c.Advance(time.Second)
	l.tick(c.Now())
	next := store.Signals{Answers: 1}
	next.Latency[adaptive.Bucket(time.Millisecond)] = 1
	if got := ps.lastReport.Load(); got.Signals != next {
		t.Fatalf("the next report carries %+v, want %+v", got.Signals, next)
	}
}

// A static capacity counts nothing.
func TestSignalsOffWithStaticCapacity(t *testing.T) {
	c := clock.NewManual()
	ps := &probeStore{Store: newStore(c), clock: c}
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	a.Observe(time.Second, true)
	c.Advance(time.Second)
	l.tick(c.Now())
	if got := ps.lastReport.Load(); got == nil || got.Signals != (store.Signals{}) || a.sig.Load() != nil {
		t.Fatalf("static capacity: report %+v", got)
	}
}
