package limiter

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

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

// A throttling backend lowers the learned capacity: the instance sees the change, keeps it for
// operators, and logs the episode once when it starts (with its cause) and once when the
// capacity grows again, however many decreases it took.
func TestCapacityEpisodeLoggedOnce(t *testing.T) {
	c := clock.NewManual()
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := adaptiveConfig()
	cfg.Apps["a"] = pol(5000, 10000, 0)
	cfg.Logger = zap.New(core)
	l := testLimiter(t, cfg, newStore(c), c, false)
	a := mustApp(t, l, "a")
	period := func(throttles bool) {
		for range 100 {
			a.Observe(time.Millisecond, throttles)
		}
		c.Advance(600 * time.Millisecond)
		l.tick(c.Now())
		c.Advance(600 * time.Millisecond)
		l.tick(c.Now())
	}
	if capacity, source := l.Capacity(); capacity != 10000 || source != store.CapacityConfig {
		t.Fatalf("before the first report: %v %s", capacity, source)
	}
	period(false) // the first report starts the controller; no demand: hold
	for range 4 { // two decreases, each followed by a held period
		period(true)
	}
	low, source := l.Capacity()
	ch := l.CapacityChanges()
	if len(ch) != 2 || source != store.CapacityAdaptive || ch[0].Cause != "throttles" || ch[1].Cause != "throttles" ||
		ch[1].From != 10000 || ch[0].From != ch[1].To || ch[0].To != low || low >= ch[1].To {
		t.Fatalf("after four throttling periods: %v %s, changes %+v", low, source, ch)
	}
	if n := logs.FilterMessageSnippet("lowering the learned capacity").Len(); n != 1 {
		t.Fatalf("episode start logged %d times, want once", n)
	}
	// demand comes back and the backend is healthy: one increase ends the episode
	admit(a, 5000)
	period(false)
	if capacity, _ := l.Capacity(); capacity != low*(1+adaptive.Alpha) {
		t.Fatalf("after demand: capacity %v, want one increase from %v", capacity, low)
	}
	rec := logs.FilterMessageSnippet("raising the learned capacity").All()
	if len(rec) != 1 || rec[0].ContextMap()["decreases"] != int64(2) || rec[0].ContextMap()["lowest"] != low {
		t.Fatalf("recovery logged %d times: %+v", len(rec), rec)
	}
	// a queue that persists trims the capacity; outside an episode that is not logged
	for range 2 {
		for i := range 100 {
			a.Observe(time.Duration(1+79*(i%3/2))*time.Millisecond, false) // a third at 80ms
		}
		c.Advance(600 * time.Millisecond)
		l.tick(c.Now())
		c.Advance(600 * time.Millisecond)
		l.tick(c.Now())
	}
	if ch := l.CapacityChanges(); ch[0].Cause != "queue" || ch[0].To >= ch[0].From {
		t.Fatalf("after a queue: changes %+v, want a trim", ch)
	}
	if n := logs.FilterMessageSnippet("lowering the learned capacity").Len(); n != 1 {
		t.Fatalf("a trim on a queue logged an episode: %d starts", n)
	}
}
