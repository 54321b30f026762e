package store

import (
	"fmt"
	"time"

	"github.com/tierbucket/caddy-tierbucket/adaptive"
)

// AdaptivePolicy makes L1 learn the cluster's capacity from what the fleet sees of the backend
// (docs/adaptive.md). The zero value is off: Capacity is static.
type AdaptivePolicy struct {
	Min           float64       // the learned capacity never goes below (tokens/s); > 0
	Max           float64       // nor above; >= Min. 0: adaptive is off
	LatencyTarget time.Duration // the backend's p90 time to response headers when healthy; > 0
}

// On reports whether the capacity is learned.
func (a AdaptivePolicy) On() bool { return a.Max > 0 }

// AdmissionCapacity is the capacity that guarantees must fit in: the configured Capacity,
// also when it is only the starting figure of a learned one. Guarantees are what the operator
// sold; a learned capacity below them is shared by priority (docs/adaptive.md) rather than
// refused at configuration time, which would forbid the very floor (Min) that lets the fleet
// follow a backend that lost half its capacity.
func (c ClusterPolicy) AdmissionCapacity() float64 { return c.Capacity }

// validateAdaptive adds the invalid fields of c.Adaptive to es.
func (c ClusterPolicy) validateAdaptive(es *FieldErrors) {
	a := c.Adaptive
	if !a.On() && a == (AdaptivePolicy{}) {
		return
	}
	switch {
	case c.Capacity <= 0:
		es.add("adaptive", "needs a capacity > 0 (the starting figure)")
	case !finite(a.Min) || a.Min <= 0 || a.Min > c.Capacity:
		es.add("adaptive.min", "must be > 0 and <= capacity (%v), got %v", c.Capacity, a.Min)
	case !finite(a.Max) || a.Max < c.Capacity || a.Max > MaxAmount:
		es.add("adaptive.max", "must be >= capacity (%v) and <= 2^53, got %v", c.Capacity, a.Max)
	}
	if a.LatencyTarget <= 0 {
		es.add("adaptive.latency_target", "must be > 0, got %v", a.LatencyTarget)
	}
}

// Signals are what one instance saw of the backend since its previous report, on the
// requests it admitted and passed on: the backend's answers, how many were throttles
// (throttle_status), how many came slower than the latency target, and their time to response
// headers. They travel with the report's cost under its Seq, applied at most once.
type Signals struct {
	Answers   int64
	Throttles int64
	Slow      int64
	Latency   adaptive.Sketch
}

// Add adds o to s.
func (s *Signals) Add(o *Signals) {
	s.Answers += o.Answers
	s.Throttles += o.Throttles
	s.Slow += o.Slow
	s.Latency.Add(&o.Latency)
}

// validate reports negative counts.
func (s *Signals) validate(instance string) error {
	bad := s.Answers < 0 || s.Throttles < 0 || s.Slow < 0 || s.Answers > MaxAmount
	for _, n := range s.Latency {
		bad = bad || n < 0 || n > MaxAmount
	}
	if bad {
		return fmt.Errorf("report from instance %q: signals %+v: counts must be >= 0 and <= 2^53", instance, *s)
	}
	return nil
}

// Capacity sources (ClusterState.CapacitySource).
const (
	CapacityConfig   = "config"   // the configured capacity (no adaptive block)
	CapacityAdaptive = "adaptive" // learned
	CapacityOverride = "override" // pinned through the admin API (adaptive paused)
)

// CapacityChange is one move of the learned capacity: when, from and to what, and why
// (adaptive.Cause's name: "throttles", "latency", "demand").
type CapacityChange struct {
	At       time.Time
	From, To float64
	Cause    string
}

// AdaptiveState is the controller's state that Report returns with L1's: the signals of the
// last complete control period (fleet-wide) and the last change of the capacity.
type AdaptiveState struct {
	Period     Signals // the last complete control period's signals
	PeriodCost float64 // admitted cost per second when that period ended (its demand)
	LastChange CapacityChange
}
