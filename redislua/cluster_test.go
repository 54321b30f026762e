package redislua

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestKeySlots checks the hash tags: one app's keys share a slot, the cluster's keys share a
// slot, and many apps spread over all three shards.
func TestKeySlots(t *testing.T) {
	c := clusterClient(t)
	ctx := context.Background()
	k := keys{prefix: "ratelimit"}
	slot := func(key string) int64 {
		s, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if a, b, n := slot(k.l1("c{1}")), slot(k.nodes("c{1}")), slot(k.clusterConn("c{1}")); a != b || a != n {
		t.Fatalf("cluster keys in slots %d %d %d", a, b, n)
	}
	slots, err := c.ClusterSlots(ctx).Result() //nolint:staticcheck // CLUSTER SHARDS needs Redis 7; older servers are supported
	if err != nil {
		t.Fatal(err)
	}
	shardOf := func(s int64) string {
		for _, r := range slots {
			if int64(r.Start) <= s && s <= int64(r.End) {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("slot %d not served", s)
		return ""
	}
	shards := map[string]int{}
	for i := 0; i < 30; i++ {
		app := fmt.Sprintf("app-%d", i)
		l2, conn := slot(k.l2("c1", app)), slot(k.appConn("c1", app))
		if l2 != conn {
			t.Fatalf("%s: l2 in slot %d, conn in slot %d", app, l2, conn)
		}
		shards[shardOf(l2)]++
	}
	if len(shards) != 3 {
		t.Fatalf("30 apps landed on %d shards: %v", len(shards), shards)
	}
	t.Logf("30 apps per shard: %v", shards)
}

// TestClusterReport runs a report touching apps on every shard: one pipeline, no CROSSSLOT.
func TestClusterReport(t *testing.T) {
	s := New(clusterClient(t), uniquePrefix(t))
	ctx := context.Background()
	var apps []store.AppReport
	for i := 0; i < 12; i++ {
		apps = append(apps, store.AppReport{App: fmt.Sprintf("app-%d", i), Requests: 1, Cost: 2, InFlight: 1})
	}
	cl := store.ClusterPolicy{ID: "c1", Capacity: 100, EmergencyThreshold: 0.95}
	if _, err := s.Report(ctx, store.Report{Cluster: cl, Instance: "i1", Apps: apps, InFlight: 12}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Report(ctx, store.Report{Cluster: cl, Instance: "i2", Apps: apps, InFlight: 12})
	if err != nil {
		t.Fatal(err)
	}
	if st.LiveInstances != 2 || st.RemoteClusterInFlight != 12 || len(st.RemoteInFlight) != 12 {
		t.Fatalf("state %+v", st)
	}
	if err := s.client.ScriptFlush(ctx).Err(); err != nil { // flushes every master
		t.Fatal(err)
	}
	if _, err := s.Report(ctx, store.Report{Cluster: cl, Instance: "i1", Apps: apps}); err != nil {
		t.Fatalf("report after SCRIPT FLUSH on the cluster: %v", err)
	}
}

// TestClusterNodeAsStandalone: one address that is a Redis Cluster node (an operator giving the
// cluster's one endpoint) is a configuration error with its remedy, at the probe and at the
// first call it breaks, not an endless outage. Every master: the probe must not depend on
// which slots the node serves.
func TestClusterNodeAsStandalone(t *testing.T) {
	for _, addr := range redistest.SharedCluster(t) {
		s := openT(t, Config{Address: []string{addr}, KeyPrefix: uniquePrefix(t)})
		err := probeT(s)
		if err != nil && strings.Contains(err.Error(), "READONLY") {
			continue // a replica
		}
		wantPermanent(t, err, KindCluster, "")
		var p *PermanentError
		if errors.As(err, &p) && !strings.Contains(p.Remedy(), "two or more of its nodes") {
			t.Errorf("%s: remedy %q", addr, p.Remedy())
		}
		// The calls: every app's lease fails on the nodes that do not serve its slot.
		refused := 0
		for i := range 8 {
			_, err := s.Lease(context.Background(), store.LeaseRequest{
				Cluster: store.ClusterPolicy{ID: "c1"}, App: fmt.Sprintf("app-%d", i), Instance: "i1",
				Policy: store.AppPolicy{Guaranteed: 10, Burst: 10}, Need: 1, Want: 1,
			})
			if err != nil {
				wantPermanent(t, err, KindCluster, "MOVED")
				refused++
			}
		}
		if refused == 0 {
			t.Errorf("%s: no lease of 8 apps was redirected", addr)
		}
		// From then on the report (the limiter's probe) fails too, even on the node that serves
		// the cluster's slot: the instance stays in fail_open instead of flapping.
		_, err = s.Report(context.Background(), store.Report{Cluster: store.ClusterPolicy{ID: "c1"}, Instance: "i1"})
		wantPermanent(t, err, KindCluster, "")
		// With a db other than 0 the node refuses the connection's SELECT.
		sel := openT(t, Config{Address: []string{addr}, DB: 1, KeyPrefix: uniquePrefix(t)})
		wantPermanent(t, probeT(sel), KindCluster, "SELECT is not allowed in cluster mode")
	}
}
