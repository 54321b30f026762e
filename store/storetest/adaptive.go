package storetest

import (
	"time"

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

// More than 1 % throttles in a period: one decrease by 0.8 when the period ends, recorded
// with its cause; the next period holds, whatever it shows; the one after decreases again.
func adaptiveDecreasesOnThrottles(e *env) {
	e.withAdaptive()
	e.signal(0, 0, answers(200, 3, 0))
	e.advance(time.Second)
	st := e.signal(0, 0, store.Signals{})
	e.wantCapacity(st, 800, store.CapacityAdaptive)
	if c := st.Adaptive.LastChange; c.From != 1000 || c.To != 800 || c.Cause != "throttles" || !c.At.Equal(e.clk.Now()) {
		e.t.Fatalf("last change %+v; want 1000 → 800 on throttles now", c)
	}
	if p := st.Adaptive.Period; p != answers(200, 3, 0) {
		e.t.Fatalf("last period %+v; want the 200 answers, 3 throttles", p)
	}
	e.advance(500 * time.Millisecond)
	e.wantCapacity(e.signal(0, 0, answers(100, 50, 0)), 800, store.CapacityAdaptive) // one decrease per period
	e.advance(500 * time.Millisecond)
	// the period after a decrease holds: its answers are of requests admitted at the old figure
	e.wantCapacity(e.signal(0, 0, answers(100, 50, 0)), 800, store.CapacityAdaptive)
	e.signal(0, 0, answers(100, 50, 0))
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 640, store.CapacityAdaptive)
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 640, store.CapacityAdaptive) // held
	// exactly 1 % is not overload, and without demand there is no increase
	e.signal(0, 0, answers(300, 3, 0))
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 640, store.CapacityAdaptive)
}

// More than 10 % of the answers slower than the target (the p90 above it): a decrease.
func adaptiveDecreasesOnLatency(e *env) {
	e.withAdaptive()
	e.signal(0, 0, answers(100, 0, 11))
	e.advance(time.Second)
	st := e.signal(0, 0, store.Signals{})
	e.wantCapacity(st, 800, store.CapacityAdaptive)
	if st.Adaptive.LastChange.Cause != "latency" {
		e.t.Fatalf("cause %q; want latency", st.Adaptive.LastChange.Cause)
	}
	e.signal(0, 0, answers(100, 0, 10)) // exactly 10 %: the p90 is within the target
	e.advance(time.Second)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 800, store.CapacityAdaptive)
}

// Healthy answers raise the capacity by 5 % only when the demand reaches 0.75 of it.
func adaptiveIncreasesOnlyWithDemand(e *env) {
	e.withAdaptive()
	e.signal(0, 740, answers(100, 0, 0)) // 0.74 of the capacity
	e.advance(500 * time.Millisecond)
	e.signal(0, 0, store.Signals{})
	e.advance(500 * time.Millisecond)
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 1000, store.CapacityAdaptive)
	e.signal(0, 900, answers(100, 0, 0)) // 0.9 of it
	e.advance(time.Second)
	st := e.signal(0, 50, store.Signals{})
	e.wantCapacity(st, 1050, store.CapacityAdaptive)
	if c := st.Adaptive.LastChange; c.Cause != "demand" || c.From != 1000 || c.To != 1050 {
		e.t.Fatalf("last change %+v; want 1000 → 1050 on demand", c)
	}
	if st.Usage != 900.0/1050 || st.Adaptive.PeriodCost != 900 { // the last ten complete slots: the 900
		e.t.Fatalf("usage %v, period cost %v; want 900 of the new capacity", st.Usage, st.Adaptive.PeriodCost)
	}
}

// The learned capacity stays within [min, max].
func adaptiveBounded(e *env) {
	e.withAdaptive()
	want := []float64{800, 640, 512, 500, 500}
	for _, w := range want {
		e.signal(0, 0, answers(100, 100, 0))
		e.advance(time.Second)
		e.wantCapacity(e.signal(0, 0, store.Signals{}), w, store.CapacityAdaptive)
		e.advance(time.Second) // the period after a decrease holds
		e.wantCapacity(e.signal(0, 0, store.Signals{}), w, store.CapacityAdaptive)
	}
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
	e.wantCapacity(e.signal(0, 0, store.Signals{}), 800, store.CapacityAdaptive)
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
// the last control period showed the backend overloaded.
func adaptiveEmergencyNeedsOverload(e *env) {
	e.withAdaptive()
	if st := e.signal(0, 980, answers(100, 0, 0)); st.Emergency {
		e.t.Fatalf("usage %v with a healthy backend: emergency", st.Usage)
	}
	e.signal(0, 0, answers(100, 5, 0))
	e.advance(time.Second)
	st := e.signal(0, 980, store.Signals{})
	if !st.Emergency || st.EmergencySource != store.EmergencySourceAuto || st.Capacity != 800 {
		e.t.Fatalf("usage %v after a throttling period: emergency %v (%s), capacity %v; want the automatic emergency at 800",
			st.Usage, st.Emergency, st.EmergencySource, st.Capacity)
	}
}
