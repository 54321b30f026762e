package connlimit

import (
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// newTest returns a Counter on a manual clock, closed at the end of the test.
func newTest(t testing.TB, cfg Config) (*Counter, *clock.Manual) {
	clk := clock.NewManual()
	c := New(cfg, clk)
	t.Cleanup(c.Close)
	return c, clk
}

// stats returns the Stats of app ("" = cluster), failing if it is missing.
func stats(t testing.TB, c *Counter, app string) Stats {
	t.Helper()
	for _, s := range c.Snapshot() {
		if s.App == app {
			return s
		}
	}
	t.Fatalf("no stats for app %q", app)
	return Stats{}
}

func mustAcquire(t testing.TB, c *Counter, app string, limit int64) *Ticket {
	t.Helper()
	tk, r := c.Acquire(app, limit)
	if tk == nil || r != store.ReasonNone {
		t.Fatalf("Acquire(%q, %d) = %v, %v; want a ticket", app, limit, tk, r)
	}
	return tk
}

func TestAppLimit(t *testing.T) {
	c, _ := newTest(t, Config{Cluster: 100})
	a := mustAcquire(t, c, "a", 2)
	mustAcquire(t, c, "a", 2)
	if tk, r := c.Acquire("a", 2); tk != nil || r != store.ReasonAppLimitExceeded {
		t.Fatalf("third Acquire = %v, %v; want nil, app_limit_exceeded", tk, r)
	}
	if s := stats(t, c, "a"); s.Current != 2 || s.Rejected != 1 || s.Peak != 2 || s.Limit != 2 {
		t.Fatalf("app stats %+v, want current 2, rejected 1, peak 2, limit 2", s)
	}
	// The app rejection rolled the cluster slot back and is not the cluster's rejection.
	if s := stats(t, c, ""); s.Current != 2 || s.Rejected != 0 || s.Peak != 2 {
		t.Fatalf("cluster stats %+v, want current 2, rejected 0, peak 2", s)
	}
	// Other apps are not affected by a's limit.
	mustAcquire(t, c, "b", 2)
	a.Release()
	mustAcquire(t, c, "a", 2)
	if s := stats(t, c, "a"); s.Current != 2 || s.Peak != 2 {
		t.Fatalf("after release and acquire: %+v, want current 2, peak 2", s)
	}
}

func TestDefaultAppLimit(t *testing.T) {
	c, _ := newTest(t, Config{App: 1})
	mustAcquire(t, c, "a", 0)
	if _, r := c.Acquire("a", 0); r != store.ReasonAppLimitExceeded {
		t.Fatalf("Acquire over the default app limit = %v, want app_limit_exceeded", r)
	}
	if _, r := c.Acquire("a", -4); r != store.ReasonAppLimitExceeded {
		t.Fatalf("Acquire with a negative limit = %v, want the default (app_limit_exceeded)", r)
	}
	mustAcquire(t, c, "a", 2) // max_connections overrides the default
}

func TestClusterLimit(t *testing.T) {
	c, _ := newTest(t, Config{Cluster: 3})
	mustAcquire(t, c, "a", 10)
	mustAcquire(t, c, "b", 10)
	mustAcquire(t, c, "b", 10)
	if tk, r := c.Acquire("a", 10); tk != nil || r != store.ReasonClusterLimitExceeded {
		t.Fatalf("Acquire over the cluster limit = %v, %v; want nil, cluster_limit_exceeded", tk, r)
	}
	if s := stats(t, c, ""); s.Current != 3 || s.Rejected != 1 || s.Peak != 3 || s.Limit != 3 {
		t.Fatalf("cluster stats %+v, want current 3, rejected 1, peak 3, limit 3", s)
	}
	if s := stats(t, c, "a"); s.Current != 1 || s.Rejected != 0 {
		t.Fatalf("app stats %+v, want current 1 (unchanged), rejected 0", s)
	}
}

func TestPeakIsAMax(t *testing.T) {
	c, _ := newTest(t, Config{})
	var ts []*Ticket
	for range 5 {
		ts = append(ts, mustAcquire(t, c, "a", 0))
	}
	for _, tk := range ts {
		tk.Release()
	}
	mustAcquire(t, c, "a", 0)
	s := stats(t, c, "a")
	if s.Current != 1 || s.Peak != 5 {
		t.Fatalf("stats %+v, want current 1, peak 5 (kept after releases)", s)
	}
}

func TestDoubleRelease(t *testing.T) {
	c, _ := newTest(t, Config{})
	tk := mustAcquire(t, c, "a", 0)
	h := tk.Handle()
	tk.Release()
	tk.Release()
	h.Release()
	for _, s := range c.Snapshot() {
		if s.Current != 0 {
			t.Fatalf("after double release %+v, want current 0", s)
		}
	}
	// A stale handle must not release a later acquisition, even of the same recycled Ticket.
	var live []*Ticket
	for range 10 {
		live = append(live, mustAcquire(t, c, "a", 0))
	}
	h.Release()
	h.Touch()
	if s := stats(t, c, "a"); s.Current != 10 {
		t.Fatalf("stale handle changed current to %d, want 10", s.Current)
	}
	for _, tk := range live {
		tk.Release()
	}
	if s := stats(t, c, ""); s.Current != 0 {
		t.Fatalf("cluster current %d, want 0", s.Current)
	}
	var zero Handle
	zero.Release() // the zero Handle is harmless
	zero.Touch()
}

func TestRemoteCounts(t *testing.T) {
	c, _ := newTest(t, Config{Cluster: 5})
	c.SetRemote(map[string]int64{"a": 2, "fleet-only": 1}, 3)
	// app a: local + 2 < 3 admits exactly one.
	mustAcquire(t, c, "a", 3)
	if _, r := c.Acquire("a", 3); r != store.ReasonAppLimitExceeded {
		t.Fatalf("Acquire = %v, want app_limit_exceeded (1 local + 2 remote = 3)", r)
	}
	// cluster: local 1 + 3 < 5 admits one more.
	mustAcquire(t, c, "b", 10)
	if _, r := c.Acquire("b", 10); r != store.ReasonClusterLimitExceeded {
		t.Fatalf("Acquire = %v, want cluster_limit_exceeded (2 local + 3 remote = 5)", r)
	}
	if lim, cur := c.Limits("a", 3); lim != 3 || cur != 3 {
		t.Fatalf("Limits(a) = %d, %d; want 3, 3", lim, cur)
	}
	if lim, cur := c.Limits("", 0); lim != 5 || cur != 5 {
		t.Fatalf("Limits(cluster) = %d, %d; want 5, 5", lim, cur)
	}
	if s := stats(t, c, "fleet-only"); s.Remote != 1 || s.Current != 0 {
		t.Fatalf("fleet-only stats %+v, want remote 1, current 0", s)
	}
	apps, cluster := c.InFlight()
	if cluster != 2 || apps["a"] != 1 || apps["b"] != 1 || apps["fleet-only"] != 0 || len(apps) != 3 {
		t.Fatalf("InFlight = %v, %d; want a:1 b:1 fleet-only:0, 2", apps, cluster)
	}
	// An app omitted by SetRemote has remote 0 again.
	c.SetRemote(map[string]int64{"b": 1}, 0)
	mustAcquire(t, c, "a", 3)
	mustAcquire(t, c, "a", 3)
	if s := stats(t, c, "a"); s.Remote != 0 || s.Current != 3 {
		t.Fatalf("a stats %+v, want remote 0, current 3", s)
	}
	if s := stats(t, c, "b"); s.Remote != 1 {
		t.Fatalf("b stats %+v, want remote 1", s)
	}
}

func TestLimitsUnknownApp(t *testing.T) {
	c, _ := newTest(t, Config{App: 7})
	if lim, cur := c.Limits("nobody", 0); lim != 7 || cur != 0 {
		t.Fatalf("Limits = %d, %d; want 7, 0", lim, cur)
	}
	if len(c.Snapshot()) != 1 {
		t.Fatal("Limits must not create an app")
	}
}

func TestUpdateKeepsCounters(t *testing.T) {
	c, _ := newTest(t, Config{App: 2, Cluster: 10})
	mustAcquire(t, c, "a", 0)
	mustAcquire(t, c, "a", 0)
	if _, r := c.Acquire("a", 0); r != store.ReasonAppLimitExceeded {
		t.Fatalf("Acquire = %v, want app_limit_exceeded", r)
	}
	c.Update(Config{App: 3, Cluster: 10, SweepInterval: time.Hour})
	mustAcquire(t, c, "a", 0)
	s := stats(t, c, "a")
	if s.Current != 3 || s.Rejected != 1 || s.Peak != 3 {
		t.Fatalf("after Update %+v, want current 3, rejected 1, peak 3", s)
	}
	c.Update(Config{Cluster: 3})
	if _, r := c.Acquire("b", 0); r != store.ReasonClusterLimitExceeded {
		t.Fatalf("Acquire = %v, want cluster_limit_exceeded after lowering the cluster limit", r)
	}
	if s := stats(t, c, ""); s.Limit != 3 {
		t.Fatalf("cluster limit %d, want 3", s.Limit)
	}
}

func TestAppsBounded(t *testing.T) {
	c, _ := newTest(t, Config{MaxApps: 2})
	mustAcquire(t, c, "a", 0)
	mustAcquire(t, c, "b", 0)
	tk := mustAcquire(t, c, "c", 0) // past the bound: counted under "*"
	if s := stats(t, c, UnknownApp); s.Current != 1 {
		t.Fatalf("* stats %+v, want current 1", s)
	}
	tk.Release()
	if n := len(c.Snapshot()); n != 4 {
		t.Fatalf("%d entries, want cluster + a, b, *", n)
	}
}

func TestAcquireReleaseAllocs(t *testing.T) {
	c, _ := newTest(t, Config{})
	mustAcquire(t, c, "a", 0).Release() // create the app
	allocs := testing.AllocsPerRun(1000, func() {
		tk, _ := c.Acquire("a", 0)
		tk.Touch()
		tk.Release()
	})
	if allocs != 0 {
		t.Fatalf("Acquire+Touch+Release: %v allocs, want 0", allocs)
	}
}
