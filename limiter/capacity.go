package limiter

import (
	"github.com/tierbucket/caddy-tierbucket/store"
)

// handOut is the share of a learned capacity that is handed out to the priorities below P0:
// below the usage of 0.9 where L1's overload factors begin, with room for the bursts of
// leases, so that a fleet serving them at its learned capacity is not in the overload (where
// the factors would throttle them, and their return a moment later would come as a burst).
// P0 is handed all of it: what L1 protects first may use what the backend sustains, and the
// overload factors never throttle P0.
const handOut = 0.85

// prioritySums are the configured apps' guaranteed rates per priority and, of those whose max
// is above their guaranteed (elastic apps), their guaranteed rates and their room
// (max − guaranteed). Computed once per configuration.
type prioritySums struct {
	g, elasticG, room [store.MaxPriority + 1]float64
}

func sumsOf(cfg Config) prioritySums {
	var s prioritySums
	for _, p := range cfg.Apps {
		s.g[p.Priority] += p.Guaranteed
		if p.Max > p.Guaranteed {
			s.elasticG[p.Priority] += p.Guaranteed
			s.room[p.Priority] += p.Max - p.Guaranteed
		}
	}
	return s
}

// shares is how a learned capacity is divided (docs/adaptive.md): cap[p] is the most of
// their guaranteed rate the apps of priority p get, P0 first, out of all of the capacity,
// then P1, P2, P3 out of what P0 leaves of handOut of it; and extra[p] the elastic share per
// token/s of guaranteed of an elastic app of priority p, out of what the guarantees leave of
// handOut, again by priority and in proportion to the guaranteed rates. Every guarantee is
// reserved before any elastic share, so an app whose demand returns finds its guaranteed rate
// free: there is nothing to take back from the others.
type shares struct {
	cap, extra [store.MaxPriority + 1]float64
}

// capacityShares divides capacity among the priorities; the elastic share only while usage is
// below limit (above it, the share is taken back at the next report).
func capacityShares(capacity, usage, limit float64, s *prioritySums) shares {
	var sh shares
	capacity = max(capacity, 0)
	p0 := min(s.g[0], capacity) // P0's guarantees, out of the whole capacity
	sh.cap[0] = 1
	if s.g[0] > capacity {
		sh.cap[0] = capacity / s.g[0]
	}
	left := max(handOut*capacity-p0, 0)
	for p := 1; p < len(s.g); p++ {
		g := s.g[p]
		sh.cap[p] = 1
		if g > 0 {
			if left >= g {
				left -= g
			} else {
				sh.cap[p], left = left/g, 0
			}
		}
	}
	if usage >= limit {
		return sh
	}
	spare := left
	for p := range s.g {
		if sh.cap[p] < 1 || s.room[p] <= 0 || spare <= 0 {
			continue
		}
		give := min(spare, s.room[p])
		sh.extra[p] = give / s.elasticG[p]
		spare -= give
	}
	return sh
}

// adaptiveFactor is the refill factor of an app of policy p under L1's state st: L1's factor
// for its priority, and with a learned capacity also at most its priority's share of it, plus
// its elastic share (up to its max) while the cluster has room: outside an emergency, usage
// below the emergency threshold.
func (s *snapshot) adaptiveFactor(st *store.ClusterState, p store.AppPolicy) float64 {
	f := st.Factors[p.Priority]
	if st.CapacitySource != store.CapacityAdaptive {
		return f
	}
	sh := capacityShares(st.Capacity, st.Usage, s.cfg.Cluster.EmergencyThreshold, &s.sums)
	f = min(f, sh.cap[p.Priority])
	if f >= 1 && !st.Emergency && p.Max > p.Guaranteed {
		f += min(sh.extra[p.Priority], p.Max/p.Guaranteed-1)
	}
	return f
}

// unallocatedNow is the borrow pool's refill rate under L1's state: of the learned capacity
// when there is one, else of the configured one.
func (s *snapshot) unallocatedNow(st *store.ClusterState) float64 {
	if st.CapacitySource != store.CapacityAdaptive {
		return s.unallocated
	}
	var sum float64
	for _, g := range s.sums.g {
		sum += g
	}
	return max((1-s.cfg.Cluster.ReservedRatio)*st.Capacity-sum, 0)
}

// capacityShare is the share of their guaranteed rate the apps of priority prio get from a
// learned capacity (1 without one): what the rescue limits keep to while the Store is away,
// from the last capacity it answered.
func (s *snapshot) capacityShare(st *store.ClusterState, prio int) float64 {
	if st.CapacitySource != store.CapacityAdaptive {
		return 1
	}
	return capacityShares(st.Capacity, 0, 0, &s.sums).cap[prio]
}
