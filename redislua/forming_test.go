package redislua

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestClusterStillForming starts two limiters on a Redis Cluster the moment its first node
// reports cluster_state:ok, as a fleet started together with its Redis does. The client's slot
// map, loaded while the others are still converging, can point the cluster's slot at a node
// that answers CLUSTERDOWN, and go-redis does not reload the map on that error: kept, it would
// hold both limiters in fail_open (each with its own full rescue bucket, twice the fleet quota)
// long after the cluster is healthy. Once every node agrees on the slot map, both limiters
// leave fail_open within a probe or two and lease from Redis.
func TestClusterStillForming(t *testing.T) {
	redistest.Slow(t, "starts several clusters")
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			cl := redistest.StartCluster(t, redistest.ClusterOptions{Forming: true})
			var lims []*limiter.Limiter
			var stores []*countingStore
			for i := range 2 {
				cfg := fleetConfig("c", fmt.Sprint("i", i), store.AppPolicy{Guaranteed: 200, Burst: 200})
				s, err := Open(Config{Address: cl.Addrs(), KeyPrefix: "forming"})
				if err != nil {
					t.Fatal(err)
				}
				cs := &countingStore{Store: s}
				l, err := limiter.New(cfg, cs)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close(); s.Close() })
				lims, stores = append(lims, l), append(stores, cs)
			}
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { // a light load on both: requests keep the leases going
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
					for _, l := range lims {
						a, _ := l.App("app")
						a.Take(context.Background(), 1, 0)
					}
				}
			}()
			defer func() { close(stop); <-done }()

			if err := cl.WaitOK(20 * time.Second); err != nil {
				t.Fatal(err)
			}
			converged := time.Now()
			leases := []int64{stores[0].leases.Load(), stores[1].leases.Load()}
			// Two probe intervals and a lease: generous, and far below the minute a stale
			// slot map lives in go-redis without a reload.
			waitFor(t, "both limiters out of fail_open and leasing", 3*time.Second, func() bool {
				for i, l := range lims {
					if l.Level() == limiter.LevelFailOpen || stores[i].leases.Load() == leases[i] {
						return false
					}
				}
				return true
			})
			t.Logf("out of fail_open and leasing %v after every node agreed on the slot map", time.Since(converged).Round(time.Millisecond))
			// Calls made while the cluster settled may have been slow enough for a latency
			// level, which is left only after 5 s of a fast Store (docs/operations.md,
			// "Degradation levels").
			waitFor(t, "both limiters at normal", 10*time.Second, func() bool {
				for _, l := range lims {
					if l.Level() != limiter.LevelNormal {
						return false
					}
				}
				return true
			})
		})
	}
}
