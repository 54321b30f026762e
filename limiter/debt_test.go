package limiter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// An instance left with local debt (requests admitted on credit or in rescue during a Store
// hiccup) gets its share again while a peer keeps leasing small batches. Before, its leases
// asked L2 for debt + cost at once and got nothing while the peer kept L2 below that: a
// black-box run starved one of two gateways for minutes after a 3 s Redis freeze.
func TestDebtorIsNotStarvedByPeer(t *testing.T) {
	for _, debt := range []int64{25, 45, 73} { // 73: more than the burst
		t.Run(fmt.Sprint(debt), func(t *testing.T) {
			c := clock.NewManual()
			ms := memstore.New(c)
			p := store.AppPolicy{Guaranteed: 50, Burst: 50}
			var lims []*Limiter
			var apps []*App
			for i := range 2 {
				cfg := Config{
					Cluster:  store.ClusterPolicy{ID: "debt"},
					Apps:     map[string]store.AppPolicy{"app": p},
					Default:  p,
					Instance: fmt.Sprintf("i%d", i),
				}
				l := testLimiter(t, cfg, &probeStore{Store: ms, clock: c}, c, false)
				lims = append(lims, l)
				apps = append(apps, mustApp(t, l, "app"))
			}
			tick := func() {
				for _, l := range lims {
					l.tick(c.Now())
				}
			}
			for range 2 { // both instances see the fleet
				c.Advance(100 * time.Millisecond)
				tick()
			}
			apps[1].Charge(debt) // instance 1 owes what it admitted during the hiccup
			// Both offered 75 requests/s, together three times the quota, for 30 s.
			var admitted [2]int64
			ctx := context.Background()
			for ms := 1; ms <= 30000; ms++ {
				c.Advance(time.Millisecond)
				if ms%40 == 0 || ms%40 == 13 || ms%40 == 26 {
					for k := range 2 {
						i := (ms/40 + k) % 2
						if apps[i].Take(ctx, 1, 0).Allowed && ms > 10000 {
							admitted[i]++
						}
					}
				}
				if ms%100 == 0 {
					tick()
				}
			}
			// Over the last 20 s the quota allows 1000: each instance's fair share is 500.
			t.Logf("debt %d: admitted %d and %d over the last 20 s", debt, admitted[0], admitted[1])
			if admitted[1] < 350 || admitted[0] < 350 {
				t.Fatalf("debt %d: admitted %d and %d over the last 20 s, want each near 500", debt, admitted[0], admitted[1])
			}
		})
	}
}
