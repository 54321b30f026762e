package limiter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
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

// Local debt is repaid as L2 refills, whether requests come or not: the debt of a large upload
// (settled above its estimate) used to wait for the leases of later requests, and the app's
// first requests after an idle period longer than the debt were refused.
func TestDebtRepaidWhileIdle(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(10, 10, 0)}
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "a")
	d := a.Take(context.Background(), 10, 0) // an upload charged its burst up front
	if !d.Allowed {
		t.Fatalf("upload: %+v", d)
	}
	a.Settle(d, 10, 37) // it cost 37: 27 of debt
	if _, debt := a.Tokens(); debt != 27 {
		t.Fatalf("debt %d, want 27", debt)
	}
	for range 100 { // 10 s idle, at 10 tokens/s: 100 tokens refilled, 27 owed
		c.Advance(100 * time.Millisecond)
		l.tick(c.Now())
	}
	if _, debt := a.Tokens(); debt != 0 {
		t.Fatalf("after 10 s idle: debt %d, want it repaid", debt)
	}
	if d := a.Take(context.Background(), 1, 0); !d.Allowed {
		t.Fatalf("the first request after the idle period: %+v", d)
	}
}
