package redislua

import (
	"context"
	"fmt"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// BenchmarkLease is one lease round trip (EVALSHA of lease.lua) on the shared standalone server.
func BenchmarkLease(b *testing.B) {
	s := New(standaloneClient(b), uniquePrefix(b))
	req := store.LeaseRequest{
		Cluster: store.ClusterPolicy{ID: "c"}, App: "a",
		Policy: store.AppPolicy{Guaranteed: 1e9, Burst: 1e9}, Factor: 1, Want: 100, Need: 1, Instance: "i",
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Lease(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReport is one report round trip (a pipeline of the cluster script and one script per
// app) with 1 and 10 apps.
func BenchmarkReport(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("apps=%d", n), func(b *testing.B) {
			s := New(standaloneClient(b), uniquePrefix(b))
			rep := store.Report{
				Cluster:  store.ClusterPolicy{ID: "c", Capacity: 1e6, EmergencyThreshold: 0.95},
				Instance: "i", InFlight: 3,
			}
			for i := 0; i < n; i++ {
				rep.Apps = append(rep.Apps, store.AppReport{App: fmt.Sprintf("app%d", i), Requests: 10, Cost: 20, InFlight: 1})
			}
			ctx := context.Background()
			for b.Loop() {
				if _, err := s.Report(ctx, rep); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
