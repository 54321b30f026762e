package limiter

import (
	"context"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// The division of a learned capacity: guarantees up to the capacity, by priority (a priority
// short of its guarantee leaves nothing to those below); the elastic share only below the
// overload line, within it, and never beyond an app's max.
func TestPropCapacityShares(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{Apps: map[string]store.AppPolicy{}}
		for i := range rapid.IntRange(0, 8).Draw(t, "apps") {
			g := rapid.Float64Range(1, 1000).Draw(t, "g")
			cfg.Apps[string(rune('a'+i))] = store.AppPolicy{
				Guaranteed: g, Burst: g, Priority: rapid.IntRange(0, 3).Draw(t, "priority"),
				Max: g * rapid.SampledFrom([]float64{0, 1, 1.5, 4}).Draw(t, "maxx"),
			}
		}
		sums := sumsOf(cfg)
		capacity := rapid.Float64Range(0, 5000).Draw(t, "capacity")
		usage := rapid.Float64Range(0, 1.2).Draw(t, "usage")
		sh := capacityShares(capacity, usage, 0.9, &sums)
		var guaranteed, total, extra float64
		for p := range sh.cap {
			if sh.cap[p] < 0 || sh.cap[p] > 1 {
				t.Fatalf("cap[%d] = %v", p, sh.cap[p])
			}
			if sh.cap[p] < 1 {
				for q := p + 1; q < len(sh.cap); q++ {
					if sums.g[q] > 0 && sh.cap[q] > 0 {
						t.Fatalf("P%d short (%v) while P%d gets %v", p, sh.cap[p], q, sh.cap[q])
					}
				}
			}
			guaranteed += sh.cap[p] * sums.g[p]
			total += sums.g[p]
			extra += sh.extra[p] * sums.elasticG[p]
			if sh.extra[p] > 0 && (sh.cap[p] < 1 || usage >= 0.9) {
				t.Fatalf("elastic share %v at P%d with cap %v, usage %v", sh.extra[p], p, sh.cap[p], usage)
			}
			if sh.extra[p]*sums.elasticG[p] > sums.room[p]*(1+1e-9) {
				t.Fatalf("elastic share of P%d beyond its apps' max", p)
			}
		}
		// P0 out of the whole capacity; the rest, and every elastic share, out of handOut of it
		p0 := min(sums.g[0], capacity)
		out := max(handOut*capacity, p0)
		if got := sh.cap[0] * sums.g[0]; got < p0*(1-1e-9) || got > p0*(1+1e-9) {
			t.Fatalf("P0 gets %v, want min(its guaranteed, the capacity) = %v", got, p0)
		}
		if guaranteed > out*(1+1e-9) {
			t.Fatalf("guarantees %v over what %v hands out", guaranteed, capacity)
		}
		if handOut*capacity >= total && guaranteed < total*(1-1e-9) {
			t.Fatalf("capacity %v covers every guarantee (%v) but %v were given", capacity, total, guaranteed)
		}
		if guaranteed+extra > out*(1+1e-9) {
			t.Fatalf("guarantees %v + elastic %v over what %v hands out", guaranteed, extra, capacity)
		}
	})
}

// A learned capacity below the guarantees: P0 keeps min(its guaranteed, the capacity), the
// lower priority gets what is left; above them, an elastic app is refilled
// beyond its guaranteed rate up to its max; a static capacity changes nothing.
func TestAdaptiveFactor(t *testing.T) {
	cfg := Config{Cluster: store.ClusterPolicy{EmergencyThreshold: 0.95}, Apps: map[string]store.AppPolicy{
		"gold":   {Guaranteed: 600, Burst: 600, Priority: 0, Max: 1200},
		"bronze": {Guaranteed: 200, Burst: 200, Priority: 3, Max: 600},
	}}
	s := &snapshot{cfg: cfg, sums: sumsOf(cfg)}
	st := &store.ClusterState{Factors: [4]float64{1, 1, 1, 1}, CapacitySource: store.CapacityAdaptive, Capacity: 500, Usage: 0.5}
	if f := s.adaptiveFactor(st, cfg.Apps["gold"]); f != 500.0/600 {
		t.Errorf("gold at capacity 500: factor %v, want 500/600", f)
	}
	if f := s.adaptiveFactor(st, cfg.Apps["bronze"]); f != 0 {
		t.Errorf("bronze at capacity 500: factor %v, want 0", f)
	}
	st.Capacity = 2000 // 0.85 × 2000 − 800 = 900 spare: gold takes its room (600), bronze the rest (300 of its 400)
	if f := s.adaptiveFactor(st, cfg.Apps["gold"]); f != 2 {
		t.Errorf("gold at capacity 2000: factor %v, want 2 (its max)", f)
	}
	if f := s.adaptiveFactor(st, cfg.Apps["bronze"]); f != 2.5 {
		t.Errorf("bronze at capacity 2000: factor %v, want 2.5", f)
	}
	st.Usage = 0.96 // over the emergency threshold: the elastic share is taken back
	if f := s.adaptiveFactor(st, cfg.Apps["gold"]); f != 1 {
		t.Errorf("gold over the overload line: factor %v, want 1", f)
	}
	st.CapacitySource, st.Capacity, st.Usage = store.CapacityConfig, 500, 0.5
	if f := s.adaptiveFactor(st, cfg.Apps["gold"]); f != 1 {
		t.Errorf("static capacity: factor %v, want L1's 1", f)
	}
}

// With the Store away, the rescue limits keep to the last learned capacity: a P0 app's rescue
// bucket is its share of it (burst and rate), and a priority that the capacity left nothing
// gets nothing.
func TestRescueUsesLastLearnedCapacity(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Cluster.Capacity = 1000
	cfg.Cluster.Adaptive = store.AdaptivePolicy{Min: 100, Max: 2000, LatencyTarget: time.Second}
	cfg.Apps = map[string]store.AppPolicy{"gold": pol(600, 600, 0), "bronze": pol(200, 200, 3)}
	l := testLimiter(t, cfg, ps, c, false)
	learned := store.ClusterState{
		Factors: [4]float64{1, 1, 1, 1}, LiveInstances: 1, Capacity: 300, CapacitySource: store.CapacityAdaptive,
	}
	ps.state.Store(&learned)
	c.Advance(time.Second)
	l.tick(c.Now()) // L1 answers: the backend sustains 300 now
	gold, bronze := mustApp(t, l, "gold"), mustApp(t, l, "bronze")
	ps.fail.Store(true)
	var admitted int64
	for gold.Take(context.Background(), 1, 0).Allowed {
		admitted++
	}
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v with a failing Store", l.Level())
	}
	// a rescue burst of 600 × 300/600
	if minted := gold.minted.Load(); minted != 300 {
		t.Errorf("gold's rescue bucket admitted %d, want its share of the learned capacity, 300", minted)
	}
	if bronze.Take(context.Background(), 1, 0).Allowed && bronze.minted.Load() > 0 {
		t.Errorf("bronze admitted by its rescue bucket: the learned capacity leaves it nothing")
	}
}

// An app at its quota in a fleet leases its share of the refill factor it asks L2 for: under
// a learned capacity that leaves P0 part of its guarantee, the leases (and the bursts of
// admissions they let through) shrink with the capacity.
func TestQuotaLeaseFollowsLearnedShare(t *testing.T) {
	c := clock.NewManual()
	cfg := adaptiveConfig()
	cfg.Apps = map[string]store.AppPolicy{"gold": pol(600, 60000, 0)} // a burst that caps nothing
	l := testLimiter(t, cfg, newStore(c), c, false)
	a := mustApp(t, l, "gold")
	a.short.Store(true) // at its quota
	s, p := l.snap(), a.pol.Load()
	st := &store.ClusterState{
		Factors: [4]float64{1, 1, 1, 1}, LiveInstances: 2, Capacity: 400, CapacitySource: store.CapacityAdaptive,
	}
	horizon := AtQuotaHorizon(s.cfg, 2).Seconds()
	m := leaseMultiplier(l.Level())
	want := int64(math.Ceil(600*(400.0/600)/2*horizon)) * m
	if got := a.want(0, 0, p, st, s); got != want {
		t.Fatalf("lease at the quota under a learned capacity of 400: %d tokens, want %d (its share of 400/s)", got, want)
	}
	st.CapacitySource = store.CapacityConfig // static: L1's factor, 1
	if got, static := a.want(0, 0, p, st, s), int64(math.Ceil(600.0/2*horizon))*m; got != static {
		t.Fatalf("lease at the quota under a static capacity: %d tokens, want %d", got, static)
	}
}
