package storetest

import (
	"math"
	"time"

	"github.com/tierbucket/caddy-tierbucket/adaptive"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Adaptive cases: capacity 1000 learned within [500, 2000], latency target 100 ms; the control
// period is one second (package adaptive).

func adaptiveCases() []testCase {
	return []testCase{
		{"AdaptiveStartsAtCapacity", adaptiveStartsAtCapacity},
		{"AdaptiveDecreasesOnThrottles", adaptiveDecreasesOnThrottles},
		{"AdaptiveDecreasesOnLatency", adaptiveDecreasesOnLatency},
		{"AdaptiveIncreasesOnlyWithDemand", adaptiveIncreasesOnlyWithDemand},
		{"AdaptivePlateauThenGentleProbe", adaptivePlateauThenGentleProbe},
		{"AdaptiveNoPlateauWithoutQueue", adaptiveNoPlateauWithoutQueue},
		{"AdaptiveBounded", adaptiveBounded},
		{"AdaptiveSignalsOncePerSeq", adaptiveSignalsOncePerSeq},
		{"AdaptiveResumesFromFigureInForce", adaptiveResumesFromFigureInForce},
		{"AdaptiveEmergencyNeedsOverload", adaptiveEmergencyNeedsOverload},
	}
}

func (e *env) withAdaptive() {
	e.cluster.Capacity = 1000
	e.cluster.Adaptive = store.AdaptivePolicy{Min: 500, Max: 2000, LatencyTarget: 100 * time.Millisecond}
}

// signal reports cost and signals from instance i1 under seq (0: unnumbered).
func (e *env) signal(seq uint64, cost int64, sig store.Signals) store.ClusterState {
	e.t.Helper()
	return e.reportOver("i1", 0, store.Report{Cost: cost, Seq: seq, Signals: sig})
}

func (e *env) wantCapacity(st store.ClusterState, capacity float64, source string) {
	e.t.Helper()
	if st.Capacity != capacity || st.CapacitySource != source {
		e.t.Fatalf("capacity %v (%s); want %v (%s)", st.Capacity, st.CapacitySource, capacity, source)
	}
}

func answers(n, throttles, slow int64) store.Signals {
	s := store.Signals{Answers: n, Throttles: throttles, Slow: slow}
	s.Latency[3] = n - slow
	s.Latency[12] = slow
	return s
}

func adaptiveStartsAtCapacity(e *env) {
	e.withAdaptive()
	st := e.signal(0, 400, answers(10, 0, 0))
	e.wantCapacity(st, 1000, store.CapacityAdaptive)
	if st.Usage != 0.4 {
		e.t.Fatalf("usage %v; want 0.4 of the starting capacity", st.Usage)
	}
}

// landing is where a decrease takes capacity c after a period with answers of which throttles
// (following a held period): adaptive.DrainOf its cause of the share served, computed as the
// law does.
func landing(c float64, answers, throttles int64) float64 {
	s := adaptive.Signals{Answers: answers, Throttles: throttles, Slow: answers}
	return adaptive.DrainOf(adaptive.Overloaded(s)) * adaptive.Ceiling(c, s, 1)
}

// More than 1 % throttles in a period: one decrease when the period ends, below what the
// backend served (Drain of the capacity times the share of answers that were not throttles),
// recorded with its cause; the next period holds, whatever it shows; the one after decreases
// again.
func adaptiveDecreasesOnThrottles(e *env) {
	e.withAdaptive()
	e.cluster.Adaptive.Min = 100          // two decreases stay above it
	e.signal(0, 800, answers(200, 10, 0)) // 5 % throttled
	e.advance(time.Second)
	st := e.signal(0, 0, store.Signals{})
	first := landing(1000, 200, 10)
	e.wantCapacity(st, first, store.CapacityAdaptive)
	if c := st.Adaptive.LastChange; c.From != 1000 || c.To != first || c.Cause != "throttles" || !c.At.Equal(e.clk.Now()) {
		e.t.Fatalf("last change %+v; want 1000 → %v on throttles now", c, first)
	}
	if p := st.Adaptive.Period; p != answers(200, 10, 0) || st.Adaptive.PeriodCost != 800 {
		e.t.Fatalf("last period %+v (demand %v); want the 200 answers, 10 throttles, 800/s", p, st.Adaptive.PeriodCost)
	}
	e.advance(500 * time.Millisecond)
	e.wantCapacity(e.signal(0, 0, answers(100, 50, 0)), first, store.CapacityAdaptive) // one decrease per period
	e.advance(500 * time.Millisecond)
	// the period after a decrease holds: its answers are of requests admitted at the old figure
	e.wantCapacity(e.signal(0, 0, answers(100, 50, 0)), first, store.CapacityAdaptive)
	e.signal(0, 600, answers(100, 5, 0))
	e.advance(time.Second)
	second := landing(first, 100, 5)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), second, store.CapacityAdaptive)
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), second, store.CapacityAdaptive) // held
	// exactly 1 % is not overload, and without demand there is no increase
	e.signal(0, 0, answers(300, 3, 0))
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), second, store.CapacityAdaptive)
}

// More than 10 % of the answers slower than the target (the p90 above it): a decrease, to
// Drain of the capacity.
func adaptiveDecreasesOnLatency(e *env) {
	e.withAdaptive()
	e.signal(0, 1200, answers(100, 0, 11))
	e.advance(time.Second)
	st := e.signal(0, 0, store.Signals{})
	e.wantCapacity(st, landing(1000, 100, 0), store.CapacityAdaptive)
	if st.Adaptive.LastChange.Cause != "latency" {
		e.t.Fatalf("cause %q; want latency", st.Adaptive.LastChange.Cause)
	}
	e.advance(time.Second)              // held
	e.signal(0, 0, answers(100, 0, 10)) // exactly 10 %: the p90 is within the target
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), landing(1000, 100, 0), store.CapacityAdaptive)
}

// Healthy answers raise the capacity only when the demand reaches DemandShare of it; increases
// in a row grow by Alpha each.
func adaptiveIncreasesOnlyWithDemand(e *env) {
	e.withAdaptive()
	e.signal(0, 590, answers(100, 0, 0)) // below 0.6 of the capacity
	e.advance(500 * time.Millisecond)
	e.signal(0, 0, store.Signals{})
	e.advance(500 * time.Millisecond)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 1000, store.CapacityAdaptive)
	e.signal(0, 900, answers(100, 0, 0)) // 0.9 of it
	e.advance(time.Second)
	st := e.signal(0, 50, store.Signals{})
	first := 1000 * (1 + adaptive.Alpha)
	e.wantCapacity(st, first, store.CapacityAdaptive)
	if c := st.Adaptive.LastChange; c.Cause != "demand" || c.From != 1000 || c.To != first {
		e.t.Fatalf("last change %+v; want 1000 → %v on demand", c, first)
	}
	if st.Usage != 900/first || st.Adaptive.PeriodCost != 900 { // the last ten complete slots: the 900
		e.t.Fatalf("usage %v, period cost %v; want 900 of the new capacity", st.Usage, st.Adaptive.PeriodCost)
	}
	e.signal(0, 900, answers(100, 0, 0))
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), first*(1+2*adaptive.Alpha), store.CapacityAdaptive)
}

// After a decrease the capacity climbs back to the ceiling, holds there for adaptive.Plateau
// periods while the backend shows a queue, then probes above it; a queue that persists (more
// than a quarter of the answers slower than a quarter of the target and four times the
// period's p2) trims it by one step.
func adaptivePlateauThenGentleProbe(e *env) {
	e.withAdaptive()
	e.cluster.Adaptive.Min = 100
	// near the line: a few answers (5 %) show a queue
	near := store.Signals{Answers: 100}
	near.Latency[3], near.Latency[10] = 95, 5
	ceiling := e.backToCeiling(near)
	for i := 1; i < adaptive.Plateau; i++ {
		e.signal(0, 2000, near)
		e.advance(time.Second)
		e.wantCapacity(e.signal(0, 0, store.Signals{}), ceiling, store.CapacityAdaptive)
	}
	e.signal(0, 2000, near)
	e.advance(time.Second)
	probe := ceiling * (1 + adaptive.Alpha)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), probe, store.CapacityAdaptive)
	queue := store.Signals{Answers: 100}
	queue.Latency[3], queue.Latency[10] = 70, 30 // 30 answers of 65–131 ms, none over the target
	e.signal(0, 2000, queue)
	e.advance(time.Second)
	trimmed := probe * (1 - adaptive.Alpha)
	st := e.signal(0, 0, store.Signals{})
	e.wantCapacity(st, trimmed, store.CapacityAdaptive)
	if c := st.Adaptive.LastChange; c.Cause != "queue" {
		e.t.Fatalf("last change %+v; want a trim on the queue", c)
	}
	e.signal(0, 2000, near) // the period after a trim holds
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), trimmed, store.CapacityAdaptive)
	e.signal(0, 2000, near) // then one step, back to the ceiling the trim went under
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), min(trimmed*(1+adaptive.Alpha), ceiling), store.CapacityAdaptive)
}

// At the ceiling, a backend that answers without any queue has grown: no plateau.
func adaptiveNoPlateauWithoutQueue(e *env) {
	e.withAdaptive()
	ceiling := e.backToCeiling(answers(100, 0, 0))
	e.signal(0, 2000, answers(100, 0, 0))
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), ceiling*(1+adaptive.Alpha), store.CapacityAdaptive)
}

// backToCeiling throttles the backend for a period, holds the one after the decrease, and
// climbs back to the ceiling under demand with the signals sig; it returns the ceiling (the
// law's own figure).
func (e *env) backToCeiling(sig store.Signals) float64 {
	e.t.Helper()
	e.signal(0, 800, answers(200, 10, 0))
	e.advance(time.Second)
	c := e.signal(0, 0, store.Signals{}).Capacity
	ceiling := c / adaptive.DrainThrottled
	e.advance(time.Second) // held
	e.signal(0, 0, store.Signals{})
	for climbs := 0; math.Abs(c-ceiling) > 1e-9*ceiling; climbs++ {
		if climbs > 10 {
			e.t.Fatalf("capacity %v after %d increases; want the ceiling %v", c, climbs, ceiling)
		}
		e.signal(0, 2000, sig)
		e.advance(time.Second)
		c = e.signal(0, 0, store.Signals{}).Capacity
	}
	return c
}

// The learned capacity stays within [min, max].
func adaptiveBounded(e *env) {
	e.withAdaptive()
	for range 2 { // nothing admitted, everything throttled: down to min and no further
		e.signal(0, 0, answers(100, 100, 0))
		e.advance(time.Second)
		e.wantCapacity(e.signal(0, 0, store.Signals{}), 500, store.CapacityAdaptive)
		e.advance(time.Second) // the period after a decrease holds
		e.wantCapacity(e.signal(0, 0, store.Signals{}), 500, store.CapacityAdaptive)
	}
	var st store.ClusterState
	for range 30 { // demand far above: up to max and no further
		e.signal(0, 5000, answers(100, 0, 0))
		e.advance(time.Second)
		st = e.signal(0, 0, store.Signals{})
		if st.Capacity > 2000 {
			e.t.Fatalf("capacity %v above max", st.Capacity)
		}
	}
	e.wantCapacity(st, 2000, store.CapacityAdaptive)
	e.cluster.Capacity, e.cluster.Adaptive.Max = 1000, 1000
	e.cluster.Adaptive.Min = 1000 // a reload that narrows the bounds brings the figure inside
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 1000, store.CapacityAdaptive)
}

// A report sent again under a Seq already applied adds no signals (nor cost).
func adaptiveSignalsOncePerSeq(e *env) {
	e.withAdaptive()
	e.signal(1, 0, answers(100, 1, 0))
	e.signal(1, 0, answers(100, 1, 0)) // the same batch again: 1 throttle of 100, not 2 of 200
	e.advance(time.Second)
	st := e.signal(2, 0, store.Signals{})
	e.wantCapacity(st, 1000, store.CapacityAdaptive)
	if p := st.Adaptive.Period; p != answers(100, 1, 0) {
		e.t.Fatalf("period %+v; want the batch once", p)
	}
}

// Without an adaptive policy (static, or pinned by an override) the configured capacity is in
// force; a learned capacity resumes from it.
func adaptiveResumesFromFigureInForce(e *env) {
	e.withAdaptive()
	e.signal(0, 0, answers(100, 100, 0))
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 500, store.CapacityAdaptive)
	pinned := e.cluster
	e.cluster.Capacity, e.cluster.Adaptive = 1500, store.AdaptivePolicy{}
	e.wantCapacity(e.signal(0, 0, answers(100, 100, 0)), 1500, store.CapacityConfig)
	e.advance(time.Second)
	e.cluster = pinned
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 1500, store.CapacityAdaptive)
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 1500, store.CapacityAdaptive) // the pinned period's throttles are gone
}

// Under a learned capacity, usage at the threshold enters the automatic emergency only when
// the last control period showed the backend refusing work (throttles); a slow backend lowers
// the capacity only.
func adaptiveEmergencyNeedsOverload(e *env) {
	e.withAdaptive()
	e.cluster.Adaptive.Min = 100 // two decreases stay above it
	if st := e.signal(0, 980, answers(100, 0, 0)); st.Emergency {
		e.t.Fatalf("usage %v with a healthy backend: emergency", st.Usage)
	}
	e.signal(0, 0, answers(100, 0, 50))
	e.advance(time.Second)
	slow := landing(1000, 100, 0)
	if st := e.signal(0, 980, store.Signals{}); st.Emergency || st.Capacity != slow || st.Usage < 0.95 {
		e.t.Fatalf("usage %v after a slow period: emergency %v, capacity %v; want no emergency at %v",
			st.Usage, st.Emergency, st.Capacity, slow)
	}
	for range adaptive.DrainPeriods { // the period after the decrease holds; then a quiet one
		e.advance(time.Second)
		e.signal(0, 0, store.Signals{})
	}
	e.signal(0, 1500, answers(100, 5, 0))
	e.advance(time.Second)
	st := e.signal(0, 980, store.Signals{})
	if want := landing(slow, 100, 5); !st.Emergency || st.EmergencySource != store.EmergencySourceAuto || st.Capacity != want {
		e.t.Fatalf("usage %v after a throttling period: emergency %v (%s), capacity %v; want the automatic emergency at %v",
			st.Usage, st.Emergency, st.EmergencySource, st.Capacity, want)
	}
	// left adaptive.EmergencyPeriods after the backend stopped refusing, though the fleet keeps
	// admitting above the threshold: healthy periods, usage above 1
	hold := adaptive.EmergencyPeriods
	for i := range hold + 2 {
		e.advance(time.Second)
		st = e.signal(0, int64(1.2*st.Capacity), answers(100, 0, 0))
		if i < hold-1 && !st.Emergency {
			e.t.Fatalf("emergency left %d s after the last refusing period; want %d s", i+1, hold)
		}
	}
	if st.Emergency || st.Usage < 0.95 {
		e.t.Fatalf("usage %v, %d s after the backend stopped refusing: emergency %v; want it left", st.Usage, hold+2, st.Emergency)
	}
}
