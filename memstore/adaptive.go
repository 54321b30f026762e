package memstore

import (
	"math"
	"time"

	"github.com/tierbucket/caddy-tierbucket/adaptive"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// memController is one cluster's capacity controller (docs/adaptive.md; Redis: the fields
// cap, ceil, qbase, ctl_ts, p_* (the period so far), lp_* (the last period) and chg_* (the last
// change) of the :l1 hash).
type memController struct {
	set      bool
	capacity float64 // the learned capacity, or the static one in force (adaptive resumes from it)
	ceiling  float64 // adaptive.Ceiling at the last decrease (0: none)
	base     float64 // adaptive.QueueBase, ns (0: none yet)
	start    int64   // µs: when the current control period began
	period   store.Signals
	last     store.AdaptiveState
}

// inForce is Report step 3a: the capacity in force for this report. With c.Adaptive on, it
// adds the fresh report's signals to the period, and when the period is at least
// adaptive.Period old applies the control law to it (demand: the cost of the last second,
// window) and starts the next one. Without, the configured capacity is in force and tracked,
// so that a learned capacity resumes from the figure in force when it was paused (an override)
// or switched on (a reload).
func (k *memController) inForce(c store.ClusterPolicy, sig *store.Signals, window float64, now int64) (float64, string) {
	a := c.Adaptive
	if !a.On() {
		k.set, k.capacity, k.start, k.ceiling, k.base = true, c.Capacity, now, 0, 0
		k.period = store.Signals{}
		return c.Capacity, store.CapacityConfig
	}
	if !k.set {
		k.set, k.capacity, k.start = true, c.Capacity, now
	}
	b := adaptive.Bounds{Min: a.Min, Max: a.Max}
	k.capacity = min(max(k.capacity, b.Min), b.Max)
	if sig != nil {
		k.period.Add(sig)
	}
	if now-k.start >= adaptive.Period.Microseconds() {
		prev := 1.0 // the previous period's step: the last change when it ended that period
		if ch := k.last.LastChange; ch.At.UnixMicro() == k.start && ch.From > 0 {
			prev = ch.To / ch.From
		}
		since := math.MaxInt // whole periods since the capacity last changed
		if ch := k.last.LastChange; ch.From > 0 {
			since = int(max(now-ch.At.UnixMicro(), 0) / adaptive.Period.Microseconds())
		}
		k.base = adaptive.QueueBase(&k.period.Latency, k.base)
		next, ceiling, cause := adaptive.Next(b, k.capacity, adaptive.Signals{
			Answers: k.period.Answers, Throttles: k.period.Throttles, Slow: k.period.Slow,
			Queued: adaptive.Queued(&k.period.Latency, a.LatencyTarget, k.base), Demand: window,
		}, prev, k.ceiling, since)
		k.ceiling = ceiling
		k.last.Period, k.last.PeriodCost = k.period, window
		if next != k.capacity {
			k.last.LastChange = store.CapacityChange{At: time.UnixMicro(now), From: k.capacity, To: next, Cause: cause.String()}
		}
		k.capacity, k.start, k.period = next, now, store.Signals{}
	}
	return k.capacity, store.CapacityAdaptive
}

// refusing reports whether the last control period showed the backend refusing work
// (throttles above adaptive.ThrottleShare of its answers): what lets usage at the threshold
// enter the automatic emergency under a learned capacity.
func (k *memController) refusing() bool {
	p := k.last.Period
	return adaptive.Overloaded(adaptive.Signals{Answers: p.Answers, Throttles: p.Throttles, Slow: p.Slow}) == adaptive.Throttled
}
