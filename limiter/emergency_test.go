package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestSetEmergency: the operator emergency applies on this instance at once (no tick): the
// priority-3 app is blocked until its end (Retry-After), the priority-0 app is served; a second
// limiter on the same Store learns it at its next report; deactivating clears it; a closed
// limiter refuses.
func TestSetEmergency(t *testing.T) {
	clk := clock.NewManual()
	shared := memstore.New(clk)
	cfg := baseConfig()
	cfg.Cluster.EmergencyRatios = [store.MaxPriority + 1]float64{1, 0.5, 0.1, 0}
	l := testLimiter(t, cfg, shared, clk, false)
	defer l.Close()
	cfg2 := cfg
	cfg2.Instance = "i2"
	l2 := testLimiter(t, cfg2, shared, clk, false)
	defer l2.Close()

	until := clk.Now().Add(time.Minute)
	if err := l.SetEmergency(context.Background(), store.Emergency{Active: true, Reason: "drill", Until: until}); err != nil {
		t.Fatal(err)
	}
	st := l.State()
	if !st.Emergency || st.EmergencySource != store.EmergencySourceOperator || st.EmergencyReason != "drill" || !st.EmergencyUntil.Equal(until) {
		t.Fatalf("state right after SetEmergency: %+v", st)
	}
	d := mustApp(t, l, "p3").Take(context.Background(), 1, 0)
	if d.Allowed || d.Reason != store.ReasonEmergencyBlocked || d.RetryAfter != time.Minute {
		t.Fatalf("P3 in the operator emergency: %+v", d)
	}
	if d := mustApp(t, l, "a").Take(context.Background(), 1, 0); !d.Allowed {
		t.Fatalf("P0 in the operator emergency: %+v", d)
	}
	if l2.State().Emergency {
		t.Fatal("the other instance knew before its report")
	}
	clk.Advance(cfg.SyncInterval + time.Second)
	l2.tick(clk.Now())
	if st := l2.State(); !st.Emergency || st.EmergencySource != store.EmergencySourceOperator {
		t.Fatalf("the other instance after its report: %+v", st)
	}

	if err := l2.SetEmergency(context.Background(), store.Emergency{}); err != nil {
		t.Fatal(err)
	}
	if l2.State().Emergency {
		t.Fatal("still in emergency after deactivation")
	}
	l.tick(clk.Now().Add(time.Hour))
	if d := mustApp(t, l, "p3").Take(context.Background(), 1, 0); !d.Allowed {
		t.Fatalf("P3 after deactivation: %+v", d)
	}

	_ = l.Close()
	if err := l.SetEmergency(context.Background(), store.Emergency{Active: true}); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed limiter: %v", err)
	}
}

// The cluster's emergency, as reports bring it, is logged once when it starts and once when it
// ends, whatever its source: the automatic one has no other trace in the log.
func TestEmergencyLoggedOnce(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, ps, c, false)
	auto := store.ClusterState{
		Usage: 0.97, Factors: [4]float64{1, 0.5, 0.1, 0}, Emergency: true,
		EmergencySource: store.EmergencySourceAuto, EmergencyReason: "auto", LiveInstances: 1,
	}
	normal := store.ClusterState{Usage: 0.2, Factors: [4]float64{1, 1, 1, 1}, LiveInstances: 1}
	for _, st := range []store.ClusterState{normal, auto, auto, auto, normal, normal} {
		ps.state.Store(&st)
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	var got []string
	for _, e := range logs.All() {
		f := e.ContextMap()
		got = append(got, fmt.Sprintf("%s %s source=%v was=%v", e.Level, e.Message, f["source"], f["was"]))
	}
	want := []string{
		"warn rate_limit: the cluster is in emergency: lower priorities are throttled or blocked source=auto was=<nil>",
		"info rate_limit: the cluster left its emergency source=<nil> was=auto",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A new instance that calls SyncNow enforces the fleet's overrides and emergency after one
// report, not after its first sync interval (an hour here): a restarted gateway used to serve
// under its config alone for about 120 ms, during an operator emergency too.
func TestSyncNowLoadsFleetState(t *testing.T) {
	shared := memstore.New(nil)
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(10, 10, 3)}
	first, err := New(cfg, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	g := 42.0
	if _, err := first.SetAppOverride(context.Background(), "a", &AppOverride{Guaranteed: &g}); err != nil {
		t.Fatal(err)
	}
	if err := first.SetEmergency(context.Background(), store.Emergency{Active: true, Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	cfg.SyncInterval = time.Hour
	cfg.Instance = "i2"
	second, err := New(cfg, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SyncNow()
	deadline := time.Now().Add(10 * time.Second)
	for !second.State().Emergency || second.Config().Apps["a"].Guaranteed != 42 {
		if time.Now().After(deadline) {
			t.Fatalf("after SyncNow: emergency %v, guaranteed %v; want the fleet's", second.State().Emergency,
				second.Config().Apps["a"].Guaranteed)
		}
		time.Sleep(time.Millisecond) // the loop's report and override read: one round trip each
	}
}
