package limiter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func ptr[T any](v T) *T { return &v }

// fleetOf builds n loop-less limiters (instances i1…) on one MemoryStore.
func fleetOf(t tb, n int, cfg Config) ([]*Limiter, *memstore.Store, *clock.Manual) {
	c := clock.NewManual()
	st := memstore.New(c)
	ls := make([]*Limiter, n)
	for i := range ls {
		cfg := cfg
		cfg.Instance = fmt.Sprintf("i%d", i+1)
		ls[i] = testLimiter(t, cfg, st, c, false)
	}
	return ls, st, c
}

// syncAll runs one tick on every limiter: their reports bring the overrides' version.
func syncAll(ls []*Limiter, c *clock.Manual) {
	c.Advance(time.Second)
	for _, l := range ls {
		l.tick(c.Now())
	}
}

func TestAppOverrideReachesEveryInstanceAndDeleteRestores(t *testing.T) {
	ls, _, c := fleetOf(t, 2, baseConfig())
	a, b := ls[0], ls[1]
	syncAll(ls, c)
	base := b.Config()

	res, err := a.SetAppOverride(context.Background(), "a", &AppOverride{Guaranteed: ptr(50.0), Priority: ptr(2)})
	if err != nil {
		t.Fatal(err)
	}
	want := pol(50, 1000, 2)
	if got := a.Config().Apps["a"]; got != want {
		t.Fatalf("instance A right after the change: %+v, want %+v", got, want)
	}
	if before, after := res.Before.(*store.AppPolicy), res.After.(*store.AppPolicy); *before != pol(100, 1000, 0) || *after != want {
		t.Fatalf("result before %+v after %+v", *before, *after)
	}
	if got := b.Config().Apps["a"]; got != pol(100, 1000, 0) {
		t.Fatalf("instance B before its report: %+v", got)
	}
	syncAll(ls, c)
	if got := b.Config().Apps["a"]; got != want {
		t.Fatalf("instance B after its report: %+v, want %+v", got, want)
	}
	if got := mustApp(t, b, "a").Policy(); got.Guaranteed != 50 || got.Priority != 2 {
		t.Fatalf("instance B's bucket enforces %+v", got)
	}
	if s := b.AppSource("a"); s != SourceOverride {
		t.Fatalf("source = %q, want %q", s, SourceOverride)
	}

	if _, err := b.SetAppOverride(context.Background(), "a", nil); err != nil {
		t.Fatal(err)
	}
	syncAll(ls, c)
	for i, l := range ls {
		if got := l.Config(); !reflect.DeepEqual(got.Apps, base.Apps) || got.Cluster != base.Cluster {
			t.Fatalf("instance %d after DELETE: %+v, want the loaded config %+v", i, got.Apps, base.Apps)
		}
		if s := l.AppSource("a"); s != SourceConfig {
			t.Fatalf("source after DELETE = %q", s)
		}
	}
}

func TestAppOverrideCreatesApp(t *testing.T) {
	ls, _, c := fleetOf(t, 2, baseConfig())
	if _, err := ls[0].SetAppOverride(context.Background(), "new-app", &AppOverride{Guaranteed: ptr(7.0), Burst: ptr(70.0)}); err != nil {
		t.Fatal(err)
	}
	syncAll(ls, c)
	for _, l := range ls {
		a := mustApp(t, l, "new-app")
		if a.Label() != "new-app" {
			t.Fatalf("an API-created app has label %q, want its id", a.Label())
		}
		// The template (Default) gives the fields the override leaves out: priority 2.
		if p := a.Policy(); p.Guaranteed != 7 || p.Burst != 70 || p.Priority != 2 {
			t.Fatalf("policy %+v", p)
		}
		if s := l.AppSource("new-app"); s != SourceAPI {
			t.Fatalf("source = %q, want api", s)
		}
	}
	if _, err := ls[1].SetAppOverride(context.Background(), "new-app", nil); err != nil {
		t.Fatal(err)
	}
	syncAll(ls, c)
	for _, l := range ls {
		if _, ok := l.Config().Apps["new-app"]; ok {
			t.Fatal("the app is still configured after DELETE")
		}
		if a, _ := l.App("new-app"); a == nil || a.Label() != "*" {
			t.Fatalf("after DELETE the id is an unknown app again: %v", a)
		}
	}
}

func TestOverrideValidationChangesNothing(t *testing.T) {
	cfg := baseConfig()
	cfg.Cluster.Capacity = 1000
	cfg.Cluster.ReservedRatio = 0.1 // 900 to give out, 200 given
	ls, st, _ := fleetOf(t, 1, cfg)
	l := ls[0]
	before := l.Config()
	for name, tc := range map[string]struct {
		id     string
		o      AppOverride
		fields []string
	}{
		"burst below guaranteed": {"a", AppOverride{Burst: ptr(50.0)}, []string{"burst"}},
		"two bad fields":         {"a", AppOverride{Guaranteed: ptr(-1.0), Priority: ptr(9)}, []string{"guaranteed", "priority"}},
		"over capacity":          {"a", AppOverride{Guaranteed: ptr(801.0), Burst: ptr(801.0)}, []string{"guaranteed"}},
		"new app over capacity":  {"x", AppOverride{Guaranteed: ptr(701.0), Burst: ptr(701.0)}, []string{"guaranteed"}},
		"invalid id":             {"a b", AppOverride{Guaranteed: ptr(1.0)}, []string{"id"}},
		"negative warmup":        {"a", AppOverride{Warmup: ptr(-time.Second)}, []string{"warmup"}},
	} {
		_, err := l.SetAppOverride(context.Background(), tc.id, &tc.o)
		var fe store.FieldErrors
		if !errors.As(err, &fe) {
			t.Fatalf("%s: err = %v, want FieldErrors", name, err)
		}
		var got []string
		for _, e := range fe {
			got = append(got, e.Field)
		}
		if !reflect.DeepEqual(got, tc.fields) {
			t.Errorf("%s: fields %v, want %v (%v)", name, got, tc.fields, err)
		}
	}
	_, err := l.SetClusterOverride(context.Background(), &ClusterOverride{Capacity: ptr(100.0)})
	var fe store.FieldErrors
	if !errors.As(err, &fe) || fe[0].Field != "apps" {
		t.Fatalf("capacity below the guarantees: err = %v, want FieldErrors on apps", err)
	}
	if !reflect.DeepEqual(l.Config(), before) {
		t.Fatal("a refused change changed the configuration")
	}
	if o, _ := st.Overrides(context.Background(), "c1"); o.Version != 0 {
		t.Fatalf("a refused change reached the Store: %+v", o)
	}
}

func TestReloadKeepsOverridesAndSkipsConflicts(t *testing.T) {
	cfg := baseConfig()
	cfg.Cluster.Capacity = 1000
	core, logs := observer.New(zap.ErrorLevel)
	cfg.Logger = zap.New(core)
	ls, _, c := fleetOf(t, 1, cfg)
	l := ls[0]
	syncAll(ls, c)
	if _, err := l.SetAppOverride(context.Background(), "a", &AppOverride{Guaranteed: ptr(600.0)}); err != nil {
		t.Fatal(err)
	}
	// A reload keeps the override winning.
	next := baseConfig()
	next.Cluster.Capacity = 1000
	next.Logger = cfg.Logger
	next.Apps["b"] = pol(5, 5, 1)
	if err := l.Update(next); err != nil {
		t.Fatal(err)
	}
	if got := l.Config().Apps["a"].Guaranteed; got != 600 {
		t.Fatalf("after a reload the override lost: guaranteed %v", got)
	}
	// A reload whose capacity no longer fits the override leaves it out, logged once.
	next.Cluster.Capacity = 300
	if err := l.Update(next); err != nil {
		t.Fatalf("a valid reload failed because of an override: %v", err)
	}
	if got := l.Config().Apps["a"].Guaranteed; got != 100 {
		t.Fatalf("guaranteed %v, want the loaded 100 while the override does not fit", got)
	}
	if _, ok := l.SkippedOverrides()[store.OverrideAppKey("a")]; !ok || logs.Len() != 1 {
		t.Fatalf("skipped %v, %d error lines; want app:a skipped and logged once", l.SkippedOverrides(), logs.Len())
	}
	_ = l.Update(next)
	if logs.Len() != 1 {
		t.Fatalf("%d error lines after a second reload, want still 1", logs.Len())
	}
	// Capacity back: the override applies again.
	next.Cluster.Capacity = 1000
	if err := l.Update(next); err != nil {
		t.Fatal(err)
	}
	if got := l.Config().Apps["a"].Guaranteed; got != 600 {
		t.Fatalf("guaranteed %v after the capacity came back, want 600", got)
	}
}

func TestConcurrentOverrideChangesBothLand(t *testing.T) {
	ls, st, c := fleetOf(t, 2, baseConfig())
	syncAll(ls, c)
	// B's view is stale: A changes after B loaded. B's change conflicts, re-reads and lands.
	if _, err := ls[0].SetAppOverride(context.Background(), "a", &AppOverride{Priority: ptr(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ls[1].SetAppOverride(context.Background(), "p3", &AppOverride{Priority: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	o, _ := st.Overrides(context.Background(), "c1")
	if len(o.Entries) != 2 {
		t.Fatalf("entries %v, want both changes", o.Entries)
	}
	syncAll(ls, c)
	for i, l := range ls {
		if a, p3 := l.Config().Apps["a"], l.Config().Apps["p3"]; a.Priority != 1 || p3.Priority != 2 {
			t.Fatalf("instance %d: a %+v p3 %+v", i, a, p3)
		}
	}
}

// A change refused after a conflict (another instance's change landed first and the two no
// longer fit together) leaves the refusing instance on what the fleet enforces, at once and
// after the next reports.
func TestRefusedChangeAfterConflictAppliesWhatItRead(t *testing.T) {
	cfg := baseConfig()
	cfg.Cluster.Capacity = 1000
	ls, _, c := fleetOf(t, 2, cfg)
	syncAll(ls, c)
	if _, err := ls[0].SetAppOverride(context.Background(), "new1", &AppOverride{Guaranteed: ptr(435.0), Burst: ptr(435.0)}); err != nil {
		t.Fatal(err)
	}
	// ls[1] has not seen new1: a at 466 fits its view (566 of 1000) but not the fleet's (1001).
	if _, err := ls[1].SetAppOverride(context.Background(), "a", &AppOverride{Guaranteed: ptr(466.0)}); err == nil {
		t.Fatal("a change beyond the capacity was accepted")
	}
	check := func(when string) {
		for i, l := range ls {
			apps := l.Config().Apps
			if apps["new1"].Guaranteed != 435 || apps["a"].Guaranteed != 100 {
				t.Fatalf("%s: instance %d enforces %v, want new1 at 435 and a at 100", when, i, apps)
			}
		}
	}
	check("after the refusal")
	syncAll(ls, c)
	check("after the reports")
}

// TestPropOverridesConverge checks that, after any sequence of changes through any instances
// and one round of reports, every instance enforces the same merge of the loaded config and
// the stored overrides, and that removing them all restores the loaded config exactly.
func TestPropOverridesConverge(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := baseConfig()
		cfg.Cluster.Capacity = rapid.SampledFrom([]float64{0, 1000}).Draw(rt, "capacity")
		ls, st, c := fleetOf(rt, 3, cfg)
		syncAll(ls, c)
		loaded := ls[0].Config()
		ids := []string{"a", "p3", "new1", "new2"}
		for range rapid.IntRange(1, 12).Draw(rt, "changes") {
			l := ls[rapid.IntRange(0, 2).Draw(rt, "via")]
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			var o *AppOverride
			if rapid.Bool().Draw(rt, "set") {
				g := float64(rapid.IntRange(-5, 600).Draw(rt, "guaranteed"))
				o = &AppOverride{Guaranteed: &g}
				if rapid.Bool().Draw(rt, "with burst") {
					b := float64(rapid.IntRange(0, 2000).Draw(rt, "burst"))
					o.Burst = &b
				}
			}
			_, _ = l.SetAppOverride(context.Background(), id, o) // refusals are part of the game
			if rapid.Bool().Draw(rt, "sync") {
				syncAll(ls, c)
			}
		}
		syncAll(ls, c)
		stored, _ := st.Overrides(context.Background(), "c1")
		want, _ := merge(ls[0].ovr.base, decodeOverrides(stored))
		for i, l := range ls {
			if got := l.Config().Apps; !reflect.DeepEqual(got, want.Apps) {
				rt.Fatalf("instance %d enforces %v, want %v", i, got, want.Apps)
			}
		}
		keys := make([]string, 0, len(stored.Entries))
		for k := range stored.Entries {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, err := ls[0].SetAppOverride(context.Background(), k[len("app:"):], nil); err != nil {
				rt.Fatal(err)
			}
		}
		syncAll(ls, c)
		for i, l := range ls {
			if got := l.Config(); !reflect.DeepEqual(got.Apps, loaded.Apps) {
				rt.Fatalf("instance %d after removing every override: %v, want %v", i, got.Apps, loaded.Apps)
			}
		}
	})
}

// A refusal recorded under a policy does not outlive it: after an override to a tiny rate is
// removed, the app is served at its configured rate at once.
func TestPolicyChangeClearsRefusal(t *testing.T) {
	ls, _, c := fleetOf(t, 1, baseConfig())
	l := ls[0]
	syncAll(ls, c)
	if _, err := l.SetAppOverride(context.Background(), "a", &AppOverride{Guaranteed: ptr(0.1), Burst: ptr(2.0)}); err != nil {
		t.Fatal(err)
	}
	a := mustApp(t, l, "a")
	for range 5 {
		a.Take(context.Background(), 1, 0)
	}
	if d := a.Take(context.Background(), 1, 0); d.Allowed || d.RetryAfter < time.Second {
		t.Fatalf("at 0.1/s after its burst: %+v, want a refusal for seconds", d)
	}
	if _, err := l.SetAppOverride(context.Background(), "a", nil); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second) // 100 tokens at the configured rate
	if d := a.Take(context.Background(), 1, 0); !d.Allowed {
		t.Fatalf("after the override was removed: %+v, want admitted", d)
	}
}

// lossyStore is a Store that can lose all its data (a Redis restart without persistence).
type lossyStore struct{ store.Store }

// lossSetup is a limiter on a Store that can lose its data, enforcing an override of app "a"
// (guaranteed 42) and an operator emergency ("drill"), both set through it.
func lossSetup(t *testing.T) (*clock.Manual, *lossyStore, Config, *observer.ObservedLogs, *Limiter) {
	t.Helper()
	c := clock.NewManual()
	shared := &lossyStore{memstore.New(c)}
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(10, 10, 3)}
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, shared, c, false)
	g := 42.0
	if _, err := l.SetAppOverride(context.Background(), "a", &AppOverride{Guaranteed: &g}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetEmergency(context.Background(), store.Emergency{Active: true, Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	return c, shared, cfg, logs, l
}

// When the Store loses its data, the overrides and the operator emergency the fleet enforces
// are written back by the first instance that notices (their version went backwards), not
// silently dropped; the other instances read them back. Before, a Redis restart without
// persistence ended every override and the emergency.
func TestStoreLossRestoresOverridesAndEmergency(t *testing.T) {
	c, shared, cfg, logs, l1 := lossSetup(t)
	cfg2 := cfg
	cfg2.Instance, cfg2.Logger = "i2", nil
	l2 := testLimiter(t, cfg2, shared, c, false)
	tick := func() {
		c.Advance(time.Second)
		l1.tick(c.Now())
		l2.tick(c.Now())
	}
	tick()
	shared.Store = memstore.New(c) // Redis restarted without its data
	c.Advance(time.Second)
	l1.tick(c.Now())
	if st := l1.State(); !st.Emergency || st.Factors[3] != 0 {
		t.Errorf("the first report from the emptied Store lifted the emergency: %+v", st)
	}
	l2.tick(c.Now())
	tick()
	for i, l := range []*Limiter{l1, l2} {
		if st := l.State(); !st.Emergency || st.EmergencySource != store.EmergencySourceOperator || st.EmergencyReason != "drill" {
			t.Errorf("limiter %d after the loss: emergency %+v, want the operator's", i+1, st)
		}
		if got := l.Config().Apps["a"].Guaranteed; got != 42 {
			t.Errorf("limiter %d after the loss: guaranteed %v, want the override's 42", i+1, got)
		}
	}
	if o, err := shared.Overrides(context.Background(), "c1"); err != nil || len(o.Entries) != 1 {
		t.Errorf("the new Store holds %+v (%v), want the override written back", o, err)
	}
	if n := logs.FilterMessageSnippet("lost the cluster's overrides").Len(); n != 1 {
		t.Errorf("%d WARNs for the lost overrides, want 1", n)
	}
	if n := logs.FilterMessageSnippet("lost the operator emergency").Len(); n != 1 {
		t.Errorf("%d WARNs for the lost emergency, want 1", n)
	}
	if n := logs.FilterMessageSnippet("left its emergency").Len(); n != 0 {
		t.Errorf("the emergency was logged as left %d times while it was written back", n)
	}

	// Lost again and again (a Redis evicting our keys under maxmemory): restored every time,
	// logged once a minute at most, with how many times since the last line.
	for range 5 {
		shared.Store = memstore.New(c)
		tick()
	}
	c.Advance(time.Minute)
	shared.Store = memstore.New(c)
	tick()
	if got := l1.Config().Apps["a"].Guaranteed; got != 42 || !l1.State().Emergency {
		t.Errorf("after repeated losses: guaranteed %v, emergency %v; want both restored", got, l1.State().Emergency)
	}
	for _, msg := range []string{"lost the cluster's overrides", "lost the operator emergency"} {
		lines := logs.FilterMessageSnippet(msg).All()
		if len(lines) != 2 || lines[1].ContextMap()["times"] != int64(6) {
			t.Errorf("%q: %d WARNs (%v), want 2, the second with times=6", msg, len(lines), lines)
		}
	}
}

// TestStoreLossSeenByWatchFirst: when the Watch notices the loss before any report (a Redis
// restart wakes the subscription), the overrides are written back first, and their version no
// longer shows the loss to the report: the operator emergency must still be restored, not
// lifted. The e2e TestOverridesSurviveRedisDataLoss met this order under load.
func TestStoreLossSeenByWatchFirst(t *testing.T) {
	c, shared, cfg, logs, l := lossSetup(t)
	c.Advance(time.Second)
	l.tick(c.Now())
	shared.Store = memstore.New(c) // Redis restarted without its data
	l.refreshOverrides()           // the Watch's notification, before any report
	for range 2 {
		c.Advance(time.Second)
		l.tick(c.Now())
		if st := l.State(); !st.Emergency || st.EmergencySource != store.EmergencySourceOperator {
			t.Fatalf("after the loss: emergency %+v, want the operator's", st)
		}
	}
	if st, err := shared.Report(context.Background(), store.Report{Cluster: cfg.Cluster, Instance: "probe"}); err != nil || !st.Emergency {
		t.Errorf("the Store after the loss: emergency %v (%v), want it set again", st.Emergency, err)
	}
	if n := logs.FilterMessageSnippet("left its emergency").Len(); n != 0 {
		t.Errorf("the emergency was logged as left %d times", n)
	}

	// An emergency the Store still has is not "restored": only the overrides' key was lost.
	shared.Store = memstore.New(c)
	if err := l.SetEmergency(context.Background(), store.Emergency{Active: true, Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	before := logs.FilterMessageSnippet("lost the operator emergency").Len()
	l.refreshOverrides()
	c.Advance(time.Minute) // past the WARN's throttle
	l.tick(c.Now())
	if n := logs.FilterMessageSnippet("lost the operator emergency").Len(); n != before {
		t.Errorf("an emergency the Store kept was restored and logged as lost")
	}
}

// evictingStore loses all its data again right after each write of an override, while armed:
// a Redis evicting the overrides' key under memory pressure between the write-back and the
// read that follows it.
type evictingStore struct {
	store.Store
	clock *clock.Manual
	armed bool
}

func (s *evictingStore) SetOverride(ctx context.Context, cluster string, ch store.OverrideChange) (uint64, error) {
	v, err := s.Store.SetOverride(ctx, cluster, ch)
	if err == nil && s.armed {
		s.Store = memstore.New(s.clock)
	}
	return v, err
}

// Overrides lost again between their write-back and the read after it stay in force: applying
// that read, empty, would drop the override for good, with nothing in the log (the Store's key
// deleted every 50 ms exercises the window).
func TestOverridesLostAgainStayInForce(t *testing.T) {
	c := clock.NewManual()
	st := &evictingStore{Store: memstore.New(c), clock: c}
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(10, 10, 3)}
	l := testLimiter(t, cfg, st, c, false)
	g := 42.0
	if _, err := l.SetAppOverride(context.Background(), "a", &AppOverride{Guaranteed: &g}); err != nil {
		t.Fatal(err)
	}
	tick := func() {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	tick()
	st.armed = true
	st.Store = memstore.New(c) // lost, and lost again after every write-back
	for range 5 {
		tick()
		if got := l.Config().Apps["a"].Guaranteed; got != 42 {
			t.Fatalf("while the Store keeps losing them: guaranteed %v, want the override's 42", got)
		}
	}
	st.armed = false
	tick()
	tick()
	if got := l.Config().Apps["a"].Guaranteed; got != 42 {
		t.Fatalf("after the losses: guaranteed %v, want 42", got)
	}
	if o, err := st.Overrides(context.Background(), "c1"); err != nil || len(o.Entries) != 1 {
		t.Fatalf("the Store holds %+v (%v), want the override written back", o, err)
	}
}

// A removal the Store lost (a failover to a replica that had the override but not its
// removal) is written back like any other change: the fleet keeps the override removed,
// rather than reading the stale entry back and enforcing again what the operator removed.
func TestLostRemovalIsWrittenBack(t *testing.T) {
	c := clock.NewManual()
	shared := &lossyStore{memstore.New(c)}
	replica := memstore.New(c)
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(10, 10, 3)}
	l := testLimiter(t, cfg, shared, c, false)
	ctx := context.Background()
	g := 42.0
	if _, err := l.SetAppOverride(ctx, "a", &AppOverride{Guaranteed: &g}); err != nil {
		t.Fatal(err)
	}
	o, err := shared.Overrides(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	key := store.OverrideAppKey("a")
	if _, err := replica.SetOverride(ctx, "c1", store.OverrideChange{Key: key, Value: o.Entries[key]}); err != nil {
		t.Fatal(err) // the replica received the override
	}
	tick := func() {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	tick()
	if _, err := l.SetAppOverride(ctx, "a", nil); err != nil { // the removal, acknowledged
		t.Fatal(err)
	}
	tick()
	shared.Store = replica // the failover: the replica never received the removal
	tick()
	tick()
	if got := l.Config().Apps["a"].Guaranteed; got != 10 {
		t.Errorf("after the failover: guaranteed %v, want the config's 10 (the removed override came back)", got)
	}
	if o, err := replica.Overrides(ctx, "c1"); err != nil || len(o.Entries) != 0 {
		t.Errorf("the promoted replica holds %+v (%v), want the removal written back", o.Entries, err)
	}
	cfg2 := cfg
	cfg2.Instance = "i2"
	l2 := testLimiter(t, cfg2, shared, c, false)
	c.Advance(time.Second)
	l2.tick(c.Now())
	if got := l2.Config().Apps["a"].Guaranteed; got != 10 {
		t.Errorf("an instance started after the failover enforces guaranteed %v, want 10", got)
	}
}
