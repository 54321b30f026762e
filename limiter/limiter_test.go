package limiter

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func TestValidAppID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "tenant-1.prod:x_y": true, strings.Repeat("a", 128): true,
		"": false, strings.Repeat("a", 129): false, "a b": false, "a/b": false, "*": false, "é": false,
	} {
		if got := ValidAppID(id); got != want {
			t.Errorf("ValidAppID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"bad id":          {func(c *Config) { c.Apps["a b"] = pol(1, 1, 0) }, `app "a b": invalid app id`},
		"burst":           {func(c *Config) { c.Apps["x"] = pol(10, 5, 0) }, `app "x": burst must be >= guaranteed`},
		"guaranteed":      {func(c *Config) { c.Apps["x"] = pol(0, 5, 0) }, `app "x": guaranteed must be > 0`},
		"priority":        {func(c *Config) { c.Apps["x"] = pol(1, 5, 4) }, `app "x": priority must be 0-3`},
		"default missing": {func(c *Config) { c.Default = store.AppPolicy{} }, "app *: guaranteed must be > 0"},
		"warmup":          {func(c *Config) { c.Apps["x"] = store.AppPolicy{Guaranteed: 1, Burst: 5, Warmup: -1} }, `app "x": warmup must be >= 0`},
		"threshold":       {func(c *Config) { c.RefillThreshold = 2 }, "local.refill_threshold"},
		"rescue ratio":    {func(c *Config) { c.RescueRatio = -1 }, "rescue ratio"},
		"reserve":         {func(c *Config) { c.Reserve = -1 }, "local.reserve"},
	} {
		cfg := baseConfig()
		tc.mut(&cfg)
		_, err := newLimiter(cfg, memstore.New(nil), clock.NewManual())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, tc.want)
		}
	}
	cfg := baseConfig()
	cfg.Default = store.AppPolicy{}
	cfg.UnknownApp = UnknownReject
	cfg.Reserve = 0 // the default, 1000
	l, err := newLimiter(cfg, memstore.New(nil), clock.NewManual())
	if err != nil {
		t.Fatalf("reject mode needs no app *: %v", err)
	}
	got := l.Config()
	if got.Reserve != 1000 || got.SyncInterval != 100*time.Millisecond || got.StoreTimeout != 50*time.Millisecond ||
		got.LeaseTTL != 10*time.Second || got.StatsInterval != time.Minute || got.SyncBatch != 100_000 ||
		got.RefillThreshold != 0.2 || got.Instance == "" {
		t.Fatalf("defaults not applied: %+v", got)
	}
}

func TestUnknownAppModes(t *testing.T) {
	c := clock.NewManual()
	t.Run("shared", func(t *testing.T) {
		ps := newProbe(c)
		l := testLimiter(t, baseConfig(), ps, c, false)
		admitted := int64(0)
		for i := range 1000 {
			a := mustApp(t, l, fmt.Sprintf("rot-%d", i))
			if a.Label() != "*" || a.ID() != "*" {
				t.Fatalf("unknown app bucket %q/%q, want the shared *", a.Label(), a.ID())
			}
			if a.Take(context.Background(), 1, 0).Allowed {
				admitted++
			}
		}
		// The template's burst is 100: rotating ids must not buy more.
		if admitted != 100 {
			t.Fatalf("rotating ids admitted %d, want the shared burst 100", admitted)
		}
	})
	t.Run("isolated", func(t *testing.T) {
		ps := newProbe(c)
		cfg := baseConfig()
		cfg.UnknownApp = UnknownIsolated
		cfg.MaxIsolated = 3
		logs := logTo(&cfg)
		l := testLimiter(t, cfg, ps, c, false)
		own := 0
		for i := range 10 {
			id := fmt.Sprintf("iso-%d", i)
			a := mustApp(t, l, id)
			if a.ID() == id {
				own++
			} else if a.ID() != "*" {
				t.Fatalf("id %s got bucket %s", id, a.ID())
			}
			if a.Label() != "*" {
				t.Fatalf("label %q, want *", a.Label())
			}
			a.Take(context.Background(), 1, 0)
		}
		if own != 3 {
			t.Fatalf("%d isolated buckets, want MaxIsolated = 3", own)
		}
		// The bound is logged once (7 ids beyond it), not per id.
		if full := logs.FilterMessageSnippet("bound on isolated buckets is reached"); full.Len() != 1 ||
			full.All()[0].ContextMap()["max_isolated"] != int64(3) {
			t.Fatalf("bound log lines: %v", full.All())
		}
		if a := mustApp(t, l, "iso-1"); a.ID() != "iso-1" {
			t.Fatal("isolated bucket not found again")
		}
		// Idle isolated buckets expire and return their tokens.
		c.Advance(l.Config().IsolatedTTL + time.Second)
		l.tick(c.Now())
		n := l.cat.isolated.len()
		if n != 0 {
			t.Fatalf("%d isolated buckets left after expiry", n)
		}
		if ps.returned.Load() == 0 {
			t.Fatal("expired isolated buckets returned no tokens")
		}
		if a := mustApp(t, l, "new-id"); a.ID() != "new-id" {
			t.Fatal("room for new isolated buckets after expiry")
		}
	})
	t.Run("reject", func(t *testing.T) {
		cfg := baseConfig()
		cfg.UnknownApp = UnknownReject
		l := testLimiter(t, cfg, newProbe(c), c, false)
		if a, r := l.App("nobody"); a != nil || r != store.ReasonUnknownApp {
			t.Fatalf("App(nobody) = %v, %v", a, r)
		}
		if a, r := l.App("bad id"); a != nil || r != store.ReasonInvalidAppID {
			t.Fatalf("App(bad id) = %v, %v", a, r)
		}
		if _, r := l.App("a"); r != store.ReasonNone {
			t.Fatalf("configured app: %v", r)
		}
	})
}

func TestReloadKeepsBucketsAndReturnsRemoved(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	p3 := mustApp(t, l, "p3")
	a.Take(context.Background(), 5, 0)
	p3.Take(context.Background(), 5, 0)
	a.Record(store.ReasonNone, 5)
	before, _ := a.Tokens()

	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(200, 2000, 1), "b": pol(10, 10, 0)}
	if err := l.Update(cfg); err != nil {
		t.Fatal(err)
	}
	a2 := mustApp(t, l, "a")
	if a2 != a {
		t.Fatal("reload replaced the bucket")
	}
	if got, _ := a2.Tokens(); got != before {
		t.Fatalf("tokens after reload = %d, want %d", got, before)
	}
	if p := a2.Policy(); p.Guaranteed != 200 || p.Priority != 1 {
		t.Fatalf("policy not updated in place: %+v", p)
	}
	if st := l.Stats(); st[0].Label != "a" || st[0].Requests[store.ReasonNone] != 1 || st[0].Cost != 5 {
		t.Fatalf("stats lost on reload: %+v", st)
	}
	// Update makes no Store call: the removed app's tokens go back at the next tick.
	if n := ps.returns.Load(); n != 0 {
		t.Fatalf("Update made %d Store returns, want none", n)
	}
	l.tick(c.Now())
	if tok, _ := p3.Tokens(); tok != 0 || ps.returned.Load() != 25 {
		t.Fatalf("removed app kept %d tokens, returned %d, want 0 and 25", tok, ps.returned.Load())
	}
	if _, r := l.App("b"); r != store.ReasonNone {
		t.Fatal("added app missing")
	}
	// The removed app's pending statistics went out with its tokens.
	if ret := ps.lastReturn.Load(); ret == nil || ret.App != "p3" || ret.Stats.Requests != 1 || ret.Stats.Seq == 0 {
		t.Fatalf("removed app's statistics did not travel with its return: %+v", ret)
	}
}

// hasApp reports whether rep carries the statistics of app id with req requests.
func hasApp(rep *store.Report, id string, req int64) bool {
	for _, a := range rep.Apps {
		if a.App == id && a.Requests == req && a.Seq != 0 {
			return true
		}
	}
	return false
}

func TestLeaseTTLReturnsUnspentTokens(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	a.Take(context.Background(), 5, 0) // 30 leased, 25 held
	c.Advance(5 * time.Second)
	l.tick(c.Now())
	if got, _ := a.Tokens(); got != 25 {
		t.Fatalf("tokens returned before the TTL: %d left", got)
	}
	c.Advance(6 * time.Second)
	l.tick(c.Now())
	got, _ := a.Tokens()
	if got >= 25 || ps.returned.Load() != 25-got {
		t.Fatalf("after the TTL: %d held, %d returned", got, ps.returned.Load())
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("conservation: %d != %d", lhs, rhs)
	}
}

func TestCloseReturnsTokensAndFlushesStats(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	for range 3 {
		admit(a, 2)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if tok, _ := a.Tokens(); tok != 0 || ps.returned.Load() != 24 {
		t.Fatalf("after Close: %d held, %d returned; want 0 and 24", tok, ps.returned.Load())
	}
	if rep := ps.lastReport.Load(); rep == nil || !hasApp(rep, "a", 3) || rep.Cost != 6 {
		t.Fatalf("Close did not flush statistics and cost: %+v", rep)
	}
	if d := admit(a, 1); d.Allowed || d.Reason != store.ReasonRedisUnavailable {
		t.Fatalf("take after Close = %+v", d)
	}
	calls := ps.leases.Load()
	if calls != 1 {
		t.Fatalf("leases = %d, want 1 (none after Close)", calls)
	}
}

func TestReasonMapping(t *testing.T) {
	emerg := &store.ClusterState{Emergency: true, Factors: [4]float64{1, 0.5, 0.1, 0}, LiveInstances: 1}
	over := &store.ClusterState{Factors: [4]float64{1, 0.9, 0.8, 0.7}, LiveInstances: 1}
	calm := &store.ClusterState{Factors: [4]float64{1, 1, 1, 1}, LiveInstances: 1}
	for _, tc := range []struct {
		st   *store.ClusterState
		prio int
		in   store.Reason
		want store.Reason
	}{
		{emerg, 3, store.ReasonAppExhausted, store.ReasonEmergencyBlocked},
		{emerg, 1, store.ReasonAppExhausted, store.ReasonEmergencyQuotaExceeded},
		// P0's ratio is 1: the emergency left its quota whole, so the quota is what ran out
		// (and an emergency stops borrowing: a borrow refusal raced it).
		{emerg, 0, store.ReasonAppExhausted, store.ReasonAppExhausted},
		{emerg, 0, store.ReasonBorrowLimitExceeded, store.ReasonAppExhausted},
		{over, 2, store.ReasonAppExhausted, store.ReasonClusterExhausted},
		{over, 0, store.ReasonAppExhausted, store.ReasonAppExhausted},
		// A refused borrow says why, overload or not.
		{over, 2, store.ReasonBorrowLimitExceeded, store.ReasonBorrowLimitExceeded},
		{over, 2, store.ReasonClusterExhausted, store.ReasonClusterExhausted},
		{calm, 1, store.ReasonBorrowLimitExceeded, store.ReasonBorrowLimitExceeded},
		{calm, 1, store.ReasonNone, store.ReasonAppExhausted},
		{calm, 1, store.ReasonRedisUnavailable, store.ReasonRedisUnavailable},
	} {
		if got := mapReason(tc.st, tc.prio, tc.in); got != tc.want {
			t.Errorf("mapReason(emergency=%v, p%d, %v) = %v, want %v", tc.st.Emergency, tc.prio, tc.in, got, tc.want)
		}
	}
}

func TestEmergencyFromReport(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps["p1"] = pol(10, 10, 1)
	l := testLimiter(t, cfg, ps, c, false)
	ps.state.Store(&store.ClusterState{Emergency: true, Factors: [4]float64{1, 0.5, 0.1, 0}, LiveInstances: 1})
	l.tick(c.Now().Add(time.Second))
	if !l.State().Emergency {
		t.Fatal("state not taken from the report")
	}
	calls := ps.leases.Load()
	if d := mustApp(t, l, "p3").Take(context.Background(), 1, 0); d.Allowed || d.Reason != store.ReasonEmergencyBlocked {
		t.Fatalf("P3 in emergency: %+v", d)
	}
	if ps.leases.Load() != calls {
		t.Fatal("emergency_blocked made a Store call")
	}
	p1 := mustApp(t, l, "p1")
	var d Decision
	for range 20 {
		d = p1.Take(context.Background(), 1, 0)
	}
	if d.Allowed || d.Reason != store.ReasonEmergencyQuotaExceeded {
		t.Fatalf("exhausted P1 in emergency: %+v", d)
	}
}

func TestCostAboveBurstBecomesDebt(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps["small"] = pol(10, 10, 0)
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "small")
	d := a.Take(context.Background(), 25, 0)
	if !d.Allowed {
		t.Fatalf("cost above burst with a full bucket: %+v", d)
	}
	if tok, debt := a.Tokens(); tok != 0 || debt != 15 {
		t.Fatalf("tokens %d debt %d, want 0 and 15", tok, debt)
	}
	if d := a.Take(context.Background(), 1, 0); d.Allowed {
		t.Fatalf("admitted while L2 is empty and the app in debt: %+v", d)
	}
}

func TestMaxWait(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps["small"] = pol(10, 10, 0)
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "small")
	for range 10 {
		a.Take(context.Background(), 1, 0)
	}
	start := c.Now()
	if d := a.Take(context.Background(), 1, 2*time.Second); !d.Allowed {
		t.Fatalf("max_wait take = %+v", d)
	}
	if waited := c.Now().Sub(start); waited <= 0 || waited > 2*time.Second {
		t.Fatalf("waited %v, want (0, 2s]", waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 10 {
		a.Take(context.Background(), 1, 0)
	}
	if d := a.Take(ctx, 1, time.Hour); d.Allowed {
		t.Fatalf("cancelled wait admitted: %+v", d)
	}
	// Not waitable: rejected at once.
	if d := a.Take(context.Background(), 1, 0); d.Allowed {
		t.Fatalf("%+v", d)
	}
}

// Statistics travel with leases; the report flushes an app's statistics once SyncBatch of them
// wait (or after the configured StatsInterval), and carries the cluster's cost in every report.
func TestSyncBatchFlushesStats(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.SyncBatch = 5
	cfg.StatsInterval = 5 * time.Second // local.stats_interval
	cfg.Reserve = 500                   // one lease covers the test: no lease carries the statistics
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "a")
	interval := l.Config().SyncInterval
	for range 4 {
		admit(a, 1)
	}
	c.Advance(interval + time.Millisecond)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); rep == nil || hasApp(rep, "a", 4) || rep.Cost != 4 {
		t.Fatalf("report before the batch: %+v; want the cost and no statistics", rep)
	}
	admit(a, 1)
	c.Advance(interval + time.Millisecond)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); !hasApp(rep, "a", 5) || rep.Cost != 1 || l.StatsFlushes() != 1 {
		t.Fatalf("batch did not flush (%d flushes counted): %+v", l.StatsFlushes(), rep)
	}
	// Later requests wait for a lease, the next batch or StatsInterval after the last delivery.
	admit(a, 1)
	step := interval + time.Millisecond
	c.Advance(step)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); len(rep.Apps) != 0 {
		t.Fatalf("statistics flushed before the batch or the interval: %+v", rep)
	}
	c.Advance(cfg.StatsInterval - 2*step)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); len(rep.Apps) != 0 {
		t.Fatalf("statistics flushed %v before StatsInterval: %+v", step, rep)
	}
	c.Advance(step)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); !hasApp(rep, "a", 1) || l.StatsFlushes() != 2 {
		t.Fatalf("statistics not flushed after StatsInterval (%d flushes counted): %+v", l.StatsFlushes(), rep)
	}
}

// An isolated tenant idle past IsolatedTTL keeps its bucket while its statistics may still wait
// (a longer StatsInterval): retired at once, they would cost a flush of their own a minute
// after its last request. Once they are due, the report flushes them and the bucket goes.
func TestIsolatedBucketWaitsForItsStatistics(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.UnknownApp = UnknownIsolated
	cfg.StatsInterval = 10 * time.Minute
	cfg.Default = pol(1, 2, 2) // a lease of one token (burst / 2), spent by the request: nothing to return
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "tenant")
	if a.ID() != "tenant" {
		t.Fatalf("bucket %q, want an isolated one", a.ID())
	}
	if d := admit(a, 1); !d.Allowed || a.balance.Load() != 0 {
		t.Fatalf("request: %+v, balance %d; want admitted with nothing left", d, a.balance.Load())
	}
	isolated := func() int {
		return l.cat.isolated.len()
	}
	c.Advance(l.Config().IsolatedTTL + time.Second)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); isolated() != 1 || rep == nil || len(rep.Apps) != 0 || l.StatsFlushes() != 0 {
		t.Fatalf("idle past IsolatedTTL with statistics not yet due: %d isolated, %d flushes, report %+v; "+
			"want the bucket kept and nothing flushed", isolated(), l.StatsFlushes(), rep)
	}
	c.Advance(cfg.StatsInterval)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); isolated() != 0 || !hasApp(rep, "tenant", 1) || l.StatsFlushes() != 1 {
		t.Fatalf("after StatsInterval: %d isolated, %d flushes, report %+v; want the request flushed "+
			"once and the bucket retired", isolated(), l.StatsFlushes(), rep)
	}
}

// A batch whose call failed goes out again with the next report, whatever StatsInterval: the
// Store may have applied it all the same, and it remembers the Seq only as long as the app's
// record lives (about a minute). Sent again only after StatsInterval (10 minutes here), it
// could be counted twice.
func TestFailedStatisticsSentAgainAtOnce(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	fs := &returnFailingStore{probeStore: ps}
	cfg := baseConfig()
	cfg.StatsInterval = 10 * time.Minute
	l := testLimiter(t, cfg, fs, c, false)
	a := mustApp(t, l, "a")
	if d := admit(a, 1); !d.Allowed {
		t.Fatalf("request: %+v", d)
	}
	c.Advance(l.Config().LeaseTTL + time.Second)
	fs.failReturns.Store(true) // the idle lease's return carries the request's statistics, and fails
	l.tick(c.Now())
	if fs.failed.Load() == 0 {
		t.Fatal("no return was attempted: the test needs one to carry the statistics")
	}
	fs.failReturns.Store(false)
	// A failed call puts the limiter in fail_open: its reports are then probes, once a second.
	for range 30 {
		if hasApp(ps.lastReport.Load(), "a", 1) {
			return
		}
		c.Advance(l.Config().SyncInterval)
		l.tick(c.Now())
	}
	t.Fatalf("the failed batch was not sent again within 3 s: last report %+v", ps.lastReport.Load())
}

// returnFailingStore fails Returns while failReturns is set; every other call succeeds.
type returnFailingStore struct {
	*probeStore
	failReturns atomic.Bool
	failed      atomic.Int64
}

func (f *returnFailingStore) Return(ctx context.Context, r store.Return) error {
	if f.failReturns.Load() {
		f.failed.Add(1)
		return errDown
	}
	return f.probeStore.Return(ctx, r)
}

type signalStore struct {
	store.Store
	reported chan struct{}
}

func (s *signalStore) Report(ctx context.Context, r store.Report) (store.ClusterState, error) {
	st, err := s.Store.Report(ctx, r)
	select {
	case s.reported <- struct{}{}:
	default:
	}
	return st, err
}

func TestSyncLoopRuns(t *testing.T) {
	c := clock.NewManual()
	ss := &signalStore{Store: newStore(c), reported: make(chan struct{}, 1)}
	cfg := baseConfig()
	l, err := newWithClock(cfg, ss, c)
	if err != nil {
		t.Fatal(err)
	}
	mustApp(t, l, "a").Take(context.Background(), 1, 0)
	c.Advance(time.Second) // the loop's next timer finds a report due
	select {
	case <-ss.reported:
	case <-time.After(10 * time.Second):
		t.Fatal("the sync loop did not report")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.done:
	default:
		t.Fatal("Close returned before the sync loop stopped")
	}
}

func TestZeroAllocs(t *testing.T) {
	c := clock.NewManual()
	cfg := baseConfig()
	cfg.Apps["small"] = pol(10, 10, 0)
	l := testLimiter(t, cfg, newProbe(c), c, false)
	a := mustApp(t, l, "a")
	a.Refund(1 << 40) // plenty of local tokens
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { l.App("a") }); n != 0 {
		t.Errorf("App(configured) allocates %v", n)
	}
	if n := testing.AllocsPerRun(1000, func() { a.Take(ctx, 1, 0) }); n != 0 {
		t.Errorf("local hit allocates %v", n)
	}
	s := mustApp(t, l, "small")
	for range 20 {
		s.Take(ctx, 1, 0)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if s.Take(ctx, 1, 0).Allowed {
			t.Fatal("admitted")
		}
	}); n != 0 {
		t.Errorf("local rejection allocates %v", n)
	}
}

func TestStats(t *testing.T) {
	c := clock.NewManual()
	cfg := baseConfig()
	cfg.UnknownApp = UnknownIsolated
	l := testLimiter(t, cfg, newProbe(c), c, false)
	a := mustApp(t, l, "a")
	a.Take(context.Background(), 5, 0) // lease of 30
	a.Take(context.Background(), 5, 0) // local hit
	a.Record(store.ReasonNone, 5)
	a.Record(store.ReasonNone, 5)
	a.Record(store.ReasonAppExhausted, 3)
	for _, id := range []string{"u1", "u2"} {
		u := mustApp(t, l, id)
		u.Take(context.Background(), 1, 0)
		u.Record(store.ReasonNone, 1)
	}
	st := l.Stats()
	if len(st) != 3 || st[0].Label != "a" || st[1].Label != "p3" || st[2].Label != "*" {
		t.Fatalf("labels: %+v", st)
	}
	want := AppStats{Label: "a", Cost: 10, LocalHits: 1, Leases: 1, LeaseTokens: 30, LocalTokens: 20}
	want.Requests[store.ReasonNone], want.Requests[store.ReasonAppExhausted] = 2, 1
	if st[0] != want {
		t.Fatalf("stats of a = %+v, want %+v", st[0], want)
	}
	// Unknown apps together: two isolated buckets, each leased Reserve (30) and spent 1.
	if u := st[2]; u.Requests[store.ReasonNone] != 2 || u.Cost != 2 || u.Leases != 2 || u.LocalTokens != 58 {
		t.Fatalf("stats of * = %+v", u)
	}
}

func TestUpdateUnknownModeSettlesBuckets(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	u := mustApp(t, l, "someone")
	u.Take(context.Background(), 1, 0)
	held, _ := u.Tokens()
	cfg := baseConfig()
	cfg.UnknownApp = UnknownReject
	if err := l.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if _, r := l.App("someone"); r != store.ReasonUnknownApp {
		t.Fatalf("after switching to reject: %v", r)
	}
	l.tick(c.Now())
	if tok, _ := u.Tokens(); tok != 0 || ps.returned.Load() != held {
		t.Fatalf("old shared bucket kept %d, returned %d of %d", tok, ps.returned.Load(), held)
	}
	if l.Config().Instance != "i1" {
		t.Fatal("instance id changed on reload")
	}
}

// L1's usage window gets a request's actual cost once it is settled, never its estimate: an
// estimate of a million (a declared body nobody sends) would put the cluster into emergency.
func TestReportCountsSettledCost(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	d := a.Take(context.Background(), 1_000_000, 0)
	if !d.Allowed {
		t.Fatalf("the first request is admitted into debt: %+v", d)
	}
	c.Advance(time.Second)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); rep == nil || rep.Cost != 0 {
		t.Fatalf("report while the request is in flight: %+v, want cost 0", rep)
	}
	a.Settle(d, 1_000_000, 6)
	c.Advance(time.Second)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); rep.Cost != 6 {
		t.Fatalf("report after the settlement: cost %d, want 6", rep.Cost)
	}
	if tok, debt := a.Tokens(); debt != 0 || tok < 0 {
		t.Fatalf("after the settlement: tokens %d debt %d", tok, debt)
	}
}
