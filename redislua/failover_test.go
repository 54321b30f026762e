package redislua

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestClusterMasterKilled kills (SIGKILL) the master that serves the app's slot under load, on
// a Redis Cluster with a replica per master and cluster-node-timeout 1 s. The replica is
// promoted; go-redis kept routing to the dead master (it reloads its slot map on MOVED, not on a
// refused connection), so the limiter stayed in fail_open and stopped leasing for as long as the
// map lived. Now the map is reloaded after the failed calls and the limiter is back to normal,
// leasing from the new master, soon after the cluster is ok again.
func TestClusterMasterKilled(t *testing.T) {
	redistest.Slow(t, "starts a 6-node cluster")
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: 1, NodeTimeout: time.Second})
	s, err := Open(Config{Address: cl.Addrs()[:3], KeyPrefix: "failover"})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: s}
	l, err := limiter.New(fleetConfig("c", "i1", store.AppPolicy{Guaranteed: 2000, Burst: 2000}), cs) // leases of at most 1000 (burst / 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); s.Close() })
	app, _ := l.App("app")

	slot, err := s.client.ClusterKeySlot(context.Background(), s.keys.l2("c", "app")).Result()
	if err != nil {
		t.Fatal(err)
	}
	victim, err := cl.Master(int(slot))
	if err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			app.Take(context.Background(), 2, 0) // 2000 tokens/s: a lease about every 0.5 s
		}
	}()
	defer func() { close(stop); <-done }()
	waitFor(t, "leases before the fault", 5*time.Second, func() bool { return cs.leases.Load() > 5 })

	victim.Stop() // SIGKILL
	waitFor(t, "the limiter to notice", 5*time.Second, func() bool { return l.Level() == limiter.LevelFailOpen })
	var promoted *redistest.Server
	defer func() {
		if !t.Failed() {
			return
		}
		for _, n := range cl.Nodes {
			if n.Running() {
				v, err := n.Do("CLUSTER", "NODES")
				t.Logf("%d: %v %v", n.Port, v, err)
				break
			}
		}
	}()
	waitFor(t, "a replica promoted", 20*time.Second, func() bool {
		promoted, err = cl.Master(int(slot))
		return err == nil && promoted != victim
	})
	if err := cl.WaitOK(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	leases := cs.leases.Load()
	// 10 s: calls slowed by the failover may have set a latency level, which is left only after
	// 5 s of a fast Store (docs/operations.md, "Degradation levels").
	waitFor(t, "normal and leasing from the new master :"+strconv.Itoa(promoted.Port), 10*time.Second, func() bool {
		return l.Level() == limiter.LevelNormal && cs.leases.Load() > leases
	})
	t.Logf("back to normal %v after the cluster was ok again", time.Since(healed).Round(time.Millisecond))
}
