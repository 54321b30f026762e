package admin

import (
	"context"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// TestAppBorrowing: an app's view shows L2's borrowed and debt as of this instance's last lease.
func TestAppBorrowing(t *testing.T) {
	cfg := limiter.Config{
		Cluster: store.ClusterPolicy{Capacity: 1000, ReservedRatio: 0.1},
		Apps: map[string]store.AppPolicy{
			"lender": {Guaranteed: 0.01, Burst: 5, MaxBorrow: 10}, // nothing refills during the test
		},
		Default: store.AppPolicy{Guaranteed: 100, Burst: 200},
	}
	c := newCluster(t, "c1", cfg, nil)
	a, _ := c.lim.App("lender")
	var v AppView
	get(t, apiWith(c), "/rate_limit/apps/lender", &v)
	if v.Borrowed != 0 || v.Debt != 0 {
		t.Fatalf("before any lease: borrowed %v debt %v, want 0 0", v.Borrowed, v.Debt)
	}
	if d := a.Take(context.Background(), 5, 0); !d.Allowed {
		t.Fatalf("take of the whole burst: %+v", d)
	}
	if d := a.Take(context.Background(), 3, 0); !d.Allowed {
		t.Fatalf("take of 3 on an empty bucket: %+v, want admitted on borrowed tokens", d)
	}
	get(t, apiWith(c), "/rate_limit/apps/lender", &v)
	if v.Borrowed != 3 || v.Debt != 4 { // debt ceil(3 × 1.2)
		t.Errorf("after borrowing 3: borrowed %v debt %v, want 3 4", v.Borrowed, v.Debt)
	}
}
