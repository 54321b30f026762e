package redislua

import (
	"context"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

var testPolicy = store.AppPolicy{Guaranteed: 10, Burst: 100}

func lease(t *testing.T, s *Store, app string, want, need int64, factor float64) store.Lease {
	t.Helper()
	l, err := s.Lease(context.Background(), store.LeaseRequest{
		Cluster: store.ClusterPolicy{ID: "c1"}, App: app, Policy: testPolicy, Factor: factor,
		Want: want, Need: need, Instance: "i1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLeaseRefillReturn(t *testing.T) {
	clk := clock.NewManual()
	s := New(standaloneClient(t), uniquePrefix(t), WithClock(clk))
	if l := lease(t, s, "a", 60, 1, 1); l.Granted != 60 || l.Remaining != 40 {
		t.Fatalf("first lease %+v, want 60 granted of a full bucket of 100", l)
	}
	// 40 left: a want of 60 with need 10 gets the 40 there are.
	if l := lease(t, s, "a", 60, 10, 1); l.Granted != 40 || l.Remaining != 0 {
		t.Fatalf("second lease %+v", l)
	}
	// Empty: need 5 at 10/s is there in 0.5 s.
	l := lease(t, s, "a", 60, 5, 1)
	if l.Granted != 0 || l.Reason != store.ReasonAppExhausted || l.RetryAfter != 500*time.Millisecond {
		t.Fatalf("empty lease %+v", l)
	}
	// Factor 0.5 halves the refill: 2 s → 10 tokens.
	clk.Advance(2 * time.Second)
	if l := lease(t, s, "a", 100, 0, 0.5); l.Granted != 10 {
		t.Fatalf("refill at factor 0.5: %+v, want 10", l)
	}
	if err := s.Return(context.Background(), store.Return{
		Cluster: store.ClusterPolicy{ID: "c1"}, App: "a",
		Policy: testPolicy, Tokens: 500,
	}); err != nil {
		t.Fatal(err)
	}
	if l := lease(t, s, "a", 1000, 0, 1); l.Granted != 100 {
		t.Fatalf("return is capped at burst: granted %d, want 100", l.Granted)
	}
}

func TestReportTwoInstances(t *testing.T) {
	clk := clock.NewManual()
	s := New(standaloneClient(t), uniquePrefix(t), WithClock(clk))
	cl := store.ClusterPolicy{
		ID: "c1", Capacity: 1000, ReservedRatio: 0.1, EmergencyThreshold: 0.95,
		EmergencyRatios: [4]float64{1, 0.5, 0.1, 0},
	}
	ctx := context.Background()
	rep := func(inst string, cost, inflight int64) store.ClusterState {
		st, err := s.Report(ctx, store.Report{
			Cluster: cl, Instance: inst, InFlight: inflight,
			Apps: []store.AppReport{{App: "a", Requests: 3, Cost: cost, InFlight: inflight}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	rep("i1", 100, 4)
	st := rep("i2", 820, 7)
	if st.LiveInstances != 2 || st.RemoteClusterInFlight != 4 || st.RemoteInFlight["a"] != 4 {
		t.Fatalf("state %+v", st)
	}
	if st.Usage != 0.92 || st.Emergency || st.Factors[0] != 1 || !(st.Factors[3] < 1) {
		t.Fatalf("usage %v factors %v emergency %v; want 0.92, overload factors", st.Usage, st.Factors, st.Emergency)
	}
	st = rep("i1", 100, 4)
	if !st.Emergency || st.EmergencyReason != "auto" || st.Factors != cl.EmergencyRatios {
		t.Fatalf("u=%v: want auto emergency, got %+v", st.Usage, st)
	}
	// i2 falls silent: after the TTL its counts vanish.
	clk.Advance(store.InstanceTTL + time.Millisecond)
	st = rep("i1", 0, 4)
	if st.LiveInstances != 1 || st.RemoteClusterInFlight != 0 || len(st.RemoteInFlight) != 0 {
		t.Fatalf("after i2's TTL: %+v", st)
	}
	if n, _ := s.client.HGet(ctx, s.keys.l2("c1", "a"), "requests").Int64(); n != 12 {
		t.Fatalf("requests statistic %d, want 12", n)
	}
}

func TestNoscriptReload(t *testing.T) {
	c := standaloneClient(t)
	s := New(c, uniquePrefix(t))
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if l := lease(t, s, "a", 1, 1, 1); l.Granted != 1 {
		t.Fatalf("lease after SCRIPT FLUSH: %+v", l)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Report(ctx, store.Report{
		Cluster: store.ClusterPolicy{ID: "c1"}, Instance: "i1",
		Apps: []store.AppReport{{App: "a", Requests: 1}, {App: "b", Requests: 1}},
	})
	if err != nil || st.LiveInstances != 1 {
		t.Fatalf("report after SCRIPT FLUSH: %+v %v", st, err)
	}
}

// TestIdleExpiry checks the PEXPIRE of every write: max(60 s, 2 × burst / guaranteed) for an app
// bucket, renewed by a report; the instance records expire too.
func TestIdleExpiry(t *testing.T) {
	s := New(standaloneClient(t), uniquePrefix(t))
	ctx := context.Background()
	cl := store.ClusterPolicy{ID: "c1"}
	pttl := func(key string) time.Duration {
		d, err := s.client.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if _, err := s.Lease(ctx, store.LeaseRequest{
		Cluster: cl, App: "slow", Factor: 1, Want: 1,
		Policy: store.AppPolicy{Guaranteed: 1, Burst: 1000},
	}); err != nil {
		t.Fatal(err)
	}
	if d := pttl(s.keys.l2("c1", "slow")); d <= 1900*time.Second || d > 2000*time.Second {
		t.Fatalf("TTL of a bucket that fills in 1000 s: %v, want 2000 s", d)
	}
	lease(t, s, "fast", 1, 1, 1) // 100 tokens at 10/s: the 60 s minimum
	if d := pttl(s.keys.l2("c1", "fast")); d <= 50*time.Second || d > 60*time.Second {
		t.Fatalf("TTL of a bucket that fills in 10 s: %v, want the 60 s minimum", d)
	}
	if err := s.client.PExpire(ctx, s.keys.l2("c1", "slow"), time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Report(ctx, store.Report{
		Cluster: cl, Instance: "i1",
		Apps: []store.AppReport{{App: "slow", Requests: 1}, {App: "new", Requests: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	if d := pttl(s.keys.l2("c1", "slow")); d <= 1900*time.Second {
		t.Fatalf("a report did not renew the bucket's lifetime: %v", d)
	}
	for _, k := range []string{s.keys.l2("c1", "new"), s.keys.nodes("c1"), s.keys.clusterConn("c1"), s.keys.appConn("c1", "new")} {
		if d := pttl(k); d <= 0 || d > 60*time.Second {
			t.Fatalf("%s: TTL %v, want at most 60 s", k, d)
		}
	}
}

// TestRecordOutlivesStatsInterval: an app record lives at least the caller's statistics
// interval plus its grace after every write (lease, return, borrow, report), so that statistics
// that waited the interval reach the record they belong to. With a lifetime equal to the
// interval (60 s by default), the final flush of an app that stopped would race the expiry, and
// the record made anew would hold the flush's count alone.
func TestRecordOutlivesStatsInterval(t *testing.T) {
	s := New(standaloneClient(t), uniquePrefix(t))
	ctx := context.Background()
	cl := store.ClusterPolicy{ID: "c1"}
	pol := store.AppPolicy{Guaranteed: 10, Burst: 100} // fills in 10 s: the minimum lifetime
	pttl := func(app string) time.Duration {
		d, err := s.client.PTTL(ctx, s.keys.l2("c1", app)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	within := func(what string, d, want time.Duration) {
		t.Helper()
		if d <= want-10*time.Second || d > want {
			t.Fatalf("%s: TTL %v, want %v", what, d, want)
		}
	}
	if _, err := s.Lease(ctx, store.LeaseRequest{
		Cluster: cl, App: "a", Policy: pol, Factor: 1, Want: 1,
		Instance: "i1", StatsInterval: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	within("lease, stats_interval 1m", pttl("a"), store.RecordIdle(time.Minute))
	if err := s.Return(ctx, store.Return{
		Cluster: cl, App: "b", Policy: pol, Tokens: 1, Instance: "i1",
		StatsInterval: 10 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	within("return, stats_interval 10m", pttl("b"), 10*time.Minute+30*time.Second)
	// A report renews a record to the longer of its stored lifetime and the interval's, and
	// gives a record it makes (statistics alone) the interval's.
	if err := s.client.PExpire(ctx, s.keys.l2("c1", "a"), time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Report(ctx, store.Report{
		Cluster: cl, Instance: "i1", StatsInterval: 5 * time.Minute,
		Apps: []store.AppReport{{App: "a", Requests: 1}, {App: "c", Requests: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	within("report, stats_interval 5m, over a record leased with 1m", pttl("a"), 5*time.Minute+30*time.Second)
	within("report making a record, stats_interval 5m", pttl("c"), 5*time.Minute+30*time.Second)
	if _, err := s.Lease(ctx, store.LeaseRequest{Cluster: cl, App: "d", Policy: pol, Factor: 1, Want: 1}); err != nil {
		t.Fatal(err)
	}
	within("lease without an interval", pttl("d"), store.MinRecordIdle)
}

// TestRedisTime checks that without WithClock the scripts use Redis TIME.
func TestRedisTime(t *testing.T) {
	s := New(standaloneClient(t), uniquePrefix(t))
	lease(t, s, "a", 1, 1, 1)
	ts, err := s.client.HGet(context.Background(), s.keys.l2("c1", "a"), "ts").Float64()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(time.UnixMicro(int64(ts))); d < -time.Minute || d > time.Minute {
		t.Fatalf("bucket time %v is not the server's clock (now %v)", time.UnixMicro(int64(ts)), time.Now())
	}
}

// TestOperatorEmergencyKeys: the operator emergency lives in the cluster's l1 hash (op_active,
// op_reason, op_until_us), which does not expire while one set until deactivated is in force,
// and lives at least until the end of one with an end; reports keep it so.
func TestOperatorEmergencyKeys(t *testing.T) {
	clk := clock.NewManual()
	s := New(standaloneClient(t), uniquePrefix(t), WithClock(clk))
	ctx := context.Background()
	cl := store.ClusterPolicy{ID: "c1", EmergencyRatios: [4]float64{1, 0.5, 0.1, 0}}
	key := s.keys.l1("c1")
	report := func() {
		t.Helper()
		if _, err := s.Report(ctx, store.Report{Cluster: cl, Instance: "i1", Seq: uint64(clk.Now().UnixMicro())}); err != nil {
			t.Fatal(err)
		}
	}
	ttl := func() time.Duration {
		t.Helper()
		d, err := s.client.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if err := s.SetEmergency(ctx, cl, store.Emergency{Active: true, Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	report()
	if f, _ := s.client.HMGet(ctx, key, "op_active", "op_reason", "op_until_us").Result(); len(f) != 3 ||
		f[0] != "1" || f[1] != "r" || f[2] != "0" {
		t.Fatalf("fields %v", f)
	}
	if d := ttl(); d != -1 {
		t.Fatalf("PTTL %v with an emergency until deactivated, want none", d)
	}
	if err := s.SetEmergency(ctx, cl, store.Emergency{Active: true, Reason: "r", Until: clk.Now().Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	report()
	if d := ttl(); d < 2*time.Hour+59*time.Minute || d > 3*time.Hour {
		t.Fatalf("PTTL %v with an emergency ending in 2 h, want about 3 h", d)
	}
	if err := s.SetEmergency(ctx, cl, store.Emergency{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.client.HExists(ctx, key, "op_active").Result(); n {
		t.Fatal("op_active kept after deactivation")
	}
	if d := ttl(); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("PTTL %v after deactivation, want about 1 h", d)
	}
}
