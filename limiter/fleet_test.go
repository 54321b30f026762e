package limiter

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// fleetResult is what one simulated fleet run admitted.
type fleetResult struct {
	total, expected int64
	per             []int64
	leases, reports int64
	takes, hits     int64
}

// simulateFleet runs n Limiters sharing one MemoryStore under a manual clock for dur, each
// offered more load than the whole quota, in 1 ms steps (the instance order rotates so no
// instance always asks first), with sync ticks every 100 ms.
// offer is each instance's offered cost per ms (0: the whole quota's rate × 4; < 0: one request
// in a ms with probability -offer / 1000, so -offer requests per second); maxCost 1 makes
// every request cost 1, otherwise costs are 1..maxCost.
func simulateFleet(t *testing.T, n int, p store.AppPolicy, dur time.Duration, seed uint64, offer, maxCost int64) fleetResult {
	c := clock.NewManual()
	ms := memstore.New(c)
	var stores []*probeStore
	var apps []*App
	var lims []*Limiter
	for i := range n {
		ps := &probeStore{Store: ms, clock: c}
		cfg := Config{
			Cluster:  store.ClusterPolicy{ID: "fleet"},
			Apps:     map[string]store.AppPolicy{"app": p},
			Default:  p,
			Instance: fmt.Sprintf("i%d", i),
		}
		l := testLimiter(t, cfg, ps, c, false)
		stores = append(stores, ps)
		lims = append(lims, l)
		apps = append(apps, mustApp(t, l, "app"))
	}
	tickAll := func() {
		for _, l := range lims {
			l.tick(c.Now())
		}
	}
	// Let every instance see the fleet (LiveInstances) before the load starts.
	for range 2 {
		c.Advance(100 * time.Millisecond)
		tickAll()
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	res := fleetResult{per: make([]int64, n)}
	if offer == 0 {
		offer = max(int64(math.Ceil(p.Guaranteed/1000))*4, 4)
	}
	start := c.Now()
	for step := 0; c.Now().Sub(start) < dur; step++ {
		c.Advance(time.Millisecond)
		for k := range n {
			i := (step + k) % n
			var offered int64
			if offer < 0 && rng.Float64() >= float64(-offer)/1000 {
				continue // sparse: -offer requests per second on average
			}
			for offered < max(offer, 1) {
				cost := int64(rng.IntN(int(maxCost)) + 1)
				offered += cost
				res.takes++
				if d := apps[i].Take(context.Background(), cost, 0); d.Allowed {
					res.per[i] += cost
					if d.LocalHit {
						res.hits++
					}
				}
			}
		}
		if step%100 == 99 {
			tickAll()
		}
	}
	for i := range n {
		res.total += res.per[i]
		res.leases += stores[i].leases.Load()
		res.reports += stores[i].reps.Load()
		if lhs, rhs := conserved(apps[i]); lhs != rhs {
			t.Fatalf("instance %d: conservation %d != %d", i, lhs, rhs)
		}
	}
	res.expected = int64(p.Burst + p.Guaranteed*dur.Seconds())
	return res
}

// Property 12, accuracy: admitted cost across 4 instances stays within ±5% of burst +
// rate × T, for a small and a large quota, and each instance gets at least half its fair share.
func TestFleetAccuracy(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    store.AppPolicy
		dur  time.Duration
	}{
		{"small_100/s", pol(100, 100, 0), 20 * time.Second},
		{"large_50k/s", pol(50000, 50000, 0), 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := simulateFleet(t, 4, tc.p, tc.dur, 1, 0, 4)
			dev := float64(r.total-r.expected) / float64(r.expected)
			t.Logf("admitted %d, expected %d (%+.2f%%), per instance %v, %d leases, %d reports, %d takes (%.2f Store calls per 1000 takes)",
				r.total, r.expected, 100*dev, r.per, r.leases, r.reports, r.takes, 1000*float64(r.leases+r.reports)/float64(r.takes))
			if math.Abs(dev) > 0.05 {
				t.Fatalf("admitted %d, %+.2f%% off the quota's %d", r.total, 100*dev, r.expected)
			}
			fair := r.total / 4
			for i, got := range r.per {
				if got < fair/2 {
					t.Fatalf("instance %d admitted %d, less than half its fair share %d", i, got, fair)
				}
			}
		})
	}
}

// Target: at steady load within the quota, ≥ 99% of requests are local hits and the Store
// sees ≤ 5 calls per 1000 requests (leases and reports together).
func TestFleetSteadyLoadStaysLocal(t *testing.T) {
	r := simulateFleet(t, 4, pol(50000, 50000, 0), 10*time.Second, 2, 10, 1) // 4 × 10k/s of 50k/s
	calls := 1000 * float64(r.leases+r.reports) / float64(r.takes)
	hit := float64(r.hits) / float64(r.takes)
	t.Logf("%d requests, %d admitted, %.2f%% local hits, %d leases + %d reports = %.2f Store calls per 1000 requests",
		r.takes, r.total, 100*hit, r.leases, r.reports, calls)
	if r.total != r.takes {
		t.Fatalf("within the quota, %d of %d requests admitted", r.total, r.takes)
	}
	if hit < 0.99 || calls > 5 {
		t.Fatalf("local hits %.2f%%, %.2f Store calls per 1000 requests", 100*hit, calls)
	}
}

// One hot app at 40k requests/s on one instance costs at most one Store call per 1000
// requests: its leases follow its rate (reserve is only the first one's size).
func TestHotAppLeasesFollowRate(t *testing.T) {
	r := simulateFleet(t, 1, pol(100000, 100000, 0), 10*time.Second, 3, 40, 1)
	calls := 1000 * float64(r.leases+r.reports) / float64(r.takes)
	t.Logf("%d requests, %d admitted, %d leases + %d reports = %.3f Store calls per 1000 requests",
		r.takes, r.total, r.leases, r.reports, calls)
	if r.total != r.takes || calls > 1 {
		t.Fatalf("admitted %d of %d; %.3f Store calls per 1000 requests, want <= 1", r.total, r.takes, calls)
	}
}

// An app over its quota in a large fleet of 100 instances. Each instance leases its share for
// min(horizon, burst / 2 × quota), so the fleet's lease calls for the app stay near live / that
// per second: 33 with a burst of 6 s, 200 with the default burst of 1 s (a fixed 300 ms horizon
// cost 22 690 with the 6 s burst, and the instances served first kept being served), whether
// each instance is offered 10 times its share steadily or twice it at random (a pacing instance
// whose requests come late must not lose its share). Accuracy holds, and every instance gets
// at least 3/4 of its fair share (the 4-instance test asks for half).
func TestLargeFleetAtQuotaCallsBounded(t *testing.T) {
	const n, dur = 100, 60 * time.Second
	for _, tc := range []struct {
		name  string
		p     store.AppPolicy
		offer int64 // per instance and ms (< 0: -offer requests per second at random)
	}{
		{"burst_6s", pol(10000, 60000, 0), 1},
		{"burst_1s", pol(10000, 10000, 0), 1},
		{"sparse_burst_1s", pol(1000, 1000, 0), -20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			r := simulateFleet(t, n, p, dur, 4, tc.offer, 1)
			dev := float64(r.total-r.expected) / float64(r.expected)
			perSec := float64(r.leases) / dur.Seconds()
			fair := r.total / n
			lo, hi := slices.Min(r.per), slices.Max(r.per)
			t.Logf("admitted %d, expected %d (%+.2f%%), %d lease calls (%.0f/s), %d reports; per instance %.2f–%.2f of the fair share",
				r.total, r.expected, 100*dev, r.leases, perSec, r.reports, float64(lo)/float64(fair), float64(hi)/float64(fair))
			if math.Abs(dev) > 0.05 {
				t.Fatalf("admitted %d, %+.2f%% off the quota's %d", r.total, 100*dev, r.expected)
			}
			if lo < fair*3/4 {
				t.Fatalf("an instance admitted %d, less than 3/4 of its fair share %d", lo, fair)
			}
			lease := min(n*AtQuotaSpacing.Seconds(), p.Burst/(2*p.Guaranteed)) // seconds of its share
			if limit := 2 * n / lease; perSec > limit {
				t.Fatalf("%.0f lease calls/s for one app at its quota, want <= %.0f", perSec, limit)
			}
		})
	}
}

// An app over its quota in a small fleet (3 and 10 instances, each offered twice its share):
// after a short lease every instance asks for its share of the refill and waits until that
// share has covered what it got (paced), so the app costs the Store at most about
// 4 × live / AtQuotaHorizon lease calls per second: 10 instances asked 35 times a second each
// when small fleets did not pace (133 allowed here). Accuracy holds, and every instance gets at
// least 3/4 of its fair share.
func TestSmallFleetAtQuotaCallsBounded(t *testing.T) {
	const dur = 30 * time.Second
	for _, n := range []int{3, 10} {
		t.Run(fmt.Sprintf("%d_instances", n), func(t *testing.T) {
			p := pol(10000, 10000, 0)
			r := simulateFleet(t, n, p, dur, 5, int64(math.Ceil(2*10/float64(n))), 1)
			dev := float64(r.total-r.expected) / float64(r.expected)
			perSec := float64(r.leases) / dur.Seconds()
			fair := r.total / int64(n)
			lo, hi := slices.Min(r.per), slices.Max(r.per)
			t.Logf("admitted %d, expected %d (%+.2f%%), %d lease calls (%.0f/s), per instance %.2f–%.2f of the fair share",
				r.total, r.expected, 100*dev, r.leases, perSec, float64(lo)/float64(fair), float64(hi)/float64(fair))
			if math.Abs(dev) > 0.05 {
				t.Fatalf("admitted %d, %+.2f%% off the quota's %d", r.total, 100*dev, r.expected)
			}
			if lo < fair*3/4 {
				t.Fatalf("an instance admitted %d, less than 3/4 of its fair share %d", lo, fair)
			}
			horizon := AtQuotaHorizon(Config{SyncInterval: DefaultSyncInterval}, n)
			if limit := 4 * float64(n) / horizon.Seconds(); perSec > limit {
				t.Fatalf("%.0f lease calls/s for one app at its quota on %d instances, want <= %.0f", perSec, n, limit)
			}
		})
	}
}
