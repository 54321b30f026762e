package storetest

import (
	"math"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// L1 cases use capacity 1000, threshold 0.95, ratios 1 / 0.5 / 0.1 / 0, and start on a whole
// second, so a report of cost c in an otherwise empty window gives u = c / 1000 exactly.

func l1Cases() []testCase {
	return []testCase{
		{"HeartbeatLiveInstances", heartbeatLiveInstances},
		{"SilentInstanceDropsOut", silentInstanceDropsOut},
		{"RemoteInFlightExcludesReporter", remoteInFlightExcludesReporter},
		{"AppInFlightNeedsReports", appInFlightNeedsReports},
		{"LeavingReport", leavingReport},
		{"LeavingReportCountsOnce", leavingReportCountsOnce},
		{"UsageSlidingWindow", usageSlidingWindow},
		{"UsageSpread", usageSpread},
		{"UsageBunchedEachSecond", usageBunchedEachSecond},
		{"UsageBunchedByTicks", usageBunchedByTicks},
		{"UsageUnevenReports", usageUnevenReports},
		{"UsageSteady", usageSteady},
		{"FactorsOneBelowOverload", factorsOneBelowOverload},
		{"OverloadFormula", overloadFormula},
		{"EmergencyAtThreshold", emergencyAtThreshold},
		{"EmergencyLeavesAfterCalm", emergencyLeavesAfterCalm},
		{"EmergencyCalmRestarts", emergencyCalmRestarts},
		{"NoCapacityNoL1", noCapacityNoL1},
	}
}

var (
	allOne    = [store.MaxPriority + 1]float64{1, 1, 1, 1}
	emergency = [store.MaxPriority + 1]float64{1, 0.5, 0.1, 0}
)

func (e *env) withL1() { e.cluster.Capacity = 1000 }

func (e *env) wantLive(st store.ClusterState, n int) {
	e.t.Helper()
	if st.LiveInstances != n {
		e.t.Fatalf("LiveInstances = %d; want %d", st.LiveInstances, n)
	}
}

// wantRemote compares in-flight sums; an app whose sum is 0 may be absent from the map.
func (e *env) wantRemote(st store.ClusterState, cluster int64, apps map[string]int64) {
	e.t.Helper()
	if st.RemoteClusterInFlight != cluster {
		e.t.Fatalf("RemoteClusterInFlight = %d; want %d", st.RemoteClusterInFlight, cluster)
	}
	nonZero := func(m map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range m {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	got, want := nonZero(st.RemoteInFlight), nonZero(apps)
	if len(got) != len(want) {
		e.t.Fatalf("RemoteInFlight = %v; want %v", st.RemoteInFlight, apps)
	}
	for k, v := range want {
		if got[k] != v {
			e.t.Fatalf("RemoteInFlight = %v; want %v", st.RemoteInFlight, apps)
		}
	}
}

func (e *env) wantL1(st store.ClusterState, usage float64, inEmergency bool, factors [store.MaxPriority + 1]float64) {
	e.t.Helper()
	if st.Usage != usage || st.Emergency != inEmergency || st.Factors != factors {
		e.t.Fatalf("state = usage %v, emergency %v, factors %v; want usage %v, emergency %v, factors %v",
			st.Usage, st.Emergency, st.Factors, usage, inEmergency, factors)
	}
	wantReason := ""
	if inEmergency {
		wantReason = "auto"
	}
	if st.EmergencyReason != wantReason || st.EmergencySource != wantReason || !st.EmergencyUntil.IsZero() {
		e.t.Fatalf("emergency source %q reason %q until %v; want %q, %q, no end time",
			st.EmergencySource, st.EmergencyReason, st.EmergencyUntil, wantReason, wantReason)
	}
}

func heartbeatLiveInstances(e *env) {
	e.wantLive(e.report("a", 0), 1)
	e.wantLive(e.report("b", 0), 2)
	e.advance(2 * time.Second)
	e.wantLive(e.report("a", 0), 2)
	e.advance(time.Second) // b's heartbeat is exactly InstanceTTL old: still live
	e.wantLive(e.report("a", 0), 2)
	e.advance(time.Millisecond)
	e.wantLive(e.report("a", 0), 1)
	e.wantLive(e.report("b", 0), 2) // b is back
}

func silentInstanceDropsOut(e *env) {
	x := func(n int64) store.AppReport { return store.AppReport{App: "x", InFlight: n} }
	e.report("a", 5, x(3))
	e.wantRemote(e.report("b", 7, x(4)), 5, map[string]int64{"x": 3})
	e.advance(3500 * time.Millisecond) // a is silent for longer than InstanceTTL
	st := e.report("b", 7, x(4))
	e.wantLive(st, 1)
	e.wantRemote(st, 0, nil)
	// a comes back with new counts: its old ones were deleted, not kept.
	e.wantRemote(e.report("a", 1, x(1)), 7, map[string]int64{"x": 4})
	e.wantRemote(e.report("b", 7, x(4)), 1, map[string]int64{"x": 1})
}

func remoteInFlightExcludesReporter(e *env) {
	app := func(id string, n int64) store.AppReport { return store.AppReport{App: id, InFlight: n} }
	e.report("a", 5, app("x", 3))
	e.wantRemote(e.report("b", 7, app("x", 4), app("y", 2)), 5, map[string]int64{"x": 3})
	e.wantRemote(e.report("a", 5, app("x", 3)), 7, map[string]int64{"x": 4})
	e.wantRemote(e.report("a", 5, app("x", 3), app("y", 1)), 7, map[string]int64{"x": 4, "y": 2})
	e.wantRemote(e.report("c", 0, app("x", 0), app("y", 0)), 12, map[string]int64{"x": 7, "y": 3})
}

// appInFlightNeedsReports: an app's in-flight entry lives InstanceTTL after the last report
// that carried the app, even while its instance stays live (see memLedger.recordInFlight).
func appInFlightNeedsReports(e *env) {
	x := func(n int64) store.AppReport { return store.AppReport{App: "x", InFlight: n} }
	e.report("a", 1, x(3))
	e.advance(2 * time.Second)
	e.report("a", 1) // live, without x
	e.wantRemote(e.report("b", 0, x(0)), 1, map[string]int64{"x": 3})
	e.advance(time.Second) // x last carried exactly InstanceTTL ago: still counted
	e.report("a", 1)
	e.wantRemote(e.report("b", 0, x(0)), 1, map[string]int64{"x": 3})
	e.advance(time.Millisecond)
	e.report("a", 1)
	st := e.report("b", 0, x(0))
	e.wantLive(st, 2)
	e.wantRemote(st, 1, nil)
}

// leavingReport: a report with Leaving is applied and answered as any other, then its instance
// is out of the live set at once (not InstanceTTL later): the next report of another instance
// counts one instance fewer and none of the leaver's in-flight counts. An app's count the
// leaving report does not carry expires as usual. A later report of the leaver rejoins.
func leavingReport(e *env) {
	x := func(n int64) store.AppReport { return store.AppReport{App: "x", InFlight: n} }
	y := func(n int64) store.AppReport { return store.AppReport{App: "y", InFlight: n} }
	e.report("a", 5, x(3), y(2))
	e.report("a", 5, x(3)) // y is not carried again: its entry lives on its own
	st := e.report("b", 7, x(4), y(1))
	e.wantLive(st, 2)
	e.wantRemote(st, 5, map[string]int64{"x": 3, "y": 2})
	e.advance(10 * time.Millisecond)
	left := e.reportOver("a", 0, store.Report{InFlight: 5, Apps: []store.AppReport{x(3)}, Leaving: true})
	e.wantLive(left, 2) // answered as any report: it counts itself
	e.wantRemote(left, 7, map[string]int64{"x": 4})
	if left.Rejoined {
		e.t.Fatal("leaving report: rejoined")
	}
	e.advance(10 * time.Millisecond)
	st = e.report("b", 7, x(4), y(1))
	e.wantLive(st, 1)
	e.wantRemote(st, 0, map[string]int64{"y": 2}) // y was not in the leaving report
	e.advance(store.InstanceTTL)
	e.wantRemote(e.report("b", 7, x(4), y(1)), 0, nil)
	st = e.report("a", 1, x(1))
	if !st.Rejoined {
		e.t.Fatal("the leaver's next report: not rejoined")
	}
	e.wantLive(st, 2)
	e.wantRemote(e.report("b", 7, x(4)), 1, map[string]int64{"x": 1})
}

// leavingReportCountsOnce: a leaving report's figures are applied like any report's, and its
// Seq is kept, so the same leaving report sent again (its reply was lost) adds nothing.
func leavingReportCountsOnce(e *env) {
	e.withL1()
	e.report("b", 0)
	rep := store.Report{Cost: 100, Seq: 7, Leaving: true}
	e.reportOver("a", 0, rep)
	e.reportOver("a", 0, rep)
	st := e.report("b", 0)
	e.wantLive(st, 1)
	if st.Usage != 0.1 {
		e.t.Fatalf("usage %v after a leaving report of cost 100 (capacity 1000) sent twice; want 0.1", st.Usage)
	}
}

// usageSlidingWindow: u is the cost of the last second (capacity 1000), kept in 100 ms slots.
// Reports without a span count at their time.
func usageSlidingWindow(e *env) {
	e.withL1()
	st := e.report("a", 0, store.AppReport{App: "x", Cost: 300}, store.AppReport{App: "y", Cost: 200})
	e.wantL1(st, 0.5, false, allOne) // a report counts at once
	e.advance(500 * time.Millisecond)
	e.wantL1(e.report("b", 0, store.AppReport{App: "x", Cost: 300}), 0.8, false, allOne) // 500 + 300
	e.advance(750 * time.Millisecond)
	// 1.25 s: the 500 of 0 s is out, the 300 of 0.5 s in.
	e.wantL1(e.report("a", 0, store.AppReport{App: "x", Cost: 100}), 0.4, false, allOne)
	e.advance(400 * time.Millisecond)
	e.wantL1(e.report("a", 0), 0.1, false, allOne) // 1.65 s: only the 100 of 1.25 s
	e.advance(2 * time.Second)                     // a gap of two seconds empties the window
	e.wantL1(e.report("a", 0), 0, false, allOne)
}

// usageSpread: a report's cost is spread over its span, so only the part of the span within the
// last second counts.
func usageSpread(e *env) {
	e.withL1()
	e.advance(2 * time.Second)
	// 800 admitted over the last 2 s: 400 of them in the last second.
	e.wantL1(e.reportOver("a", 2*time.Second, store.Report{Cost: 800}), 0.4, false, allOne)
	e.advance(500 * time.Millisecond)
	e.wantL1(e.reportOver("a", 0, store.Report{}), 0.2, false, allOne) // 200 of them left
	// A span beyond store.MaxCostSpan counts as MaxCostSpan: 1200 over 2 s, not over 4 s.
	e.advance(2 * time.Second)
	e.wantL1(e.reportOver("a", 4*time.Second, store.Report{Cost: 1200}), 0.6, false, allOne)
}

// usageBunchedEachSecond: cost that arrives at the start of every second is counted once. The
// two-bucket estimate win_prev × (1 − f) + win_cur read 650 per second bunched so as 1.3 of the
// capacity just after each second began, an automatic emergency at 65 % of capacity. The
// instance reports every 100 ms, each report's cost admitted over the 100 ms before it.
func usageBunchedEachSecond(e *env) {
	e.withL1()
	e.advance(2 * time.Second)
	for range 5 {
		e.wantL1(e.reportOver("i1", 100*time.Millisecond, store.Report{Cost: 650}), 0.65, false, allOne)
		for range 9 {
			e.advance(100 * time.Millisecond)
			e.wantL1(e.reportOver("i1", 100*time.Millisecond, store.Report{}), 0.65, false, allOne)
		}
		e.advance(100 * time.Millisecond)
	}
}

// usageBunchedByTicks: 790 cost settled in the first 75 ms of every second, reported by the tick
// after it, every 100 ms with a few ms of jitter, reads about 0.79 at every report. Placed
// whole at its report's time, a bunch reported 2 ms after a slot's start and the next one 2 ms
// before a slot's start would fall into one span of ten slots and read 1.58: an automatic
// emergency at 79 % of capacity.
func usageBunchedByTicks(e *env) {
	e.withL1()
	start := 2 * time.Second
	e.advance(start)
	at := start // the suite clock's time since Start
	for sec := 2; sec < 8; sec++ {
		jitter := 2 * time.Millisecond
		if sec%2 == 1 {
			jitter = -jitter
		}
		for k := 1; k <= 10; k++ { // ticks at sec + k × 100 ms + jitter
			tick := time.Duration(sec)*time.Second + time.Duration(k)*100*time.Millisecond + jitter
			var cost int64
			if k == 1 {
				cost = 790
			}
			e.advance(tick - at)
			st := e.reportOver("i1", tick-at, store.Report{Cost: cost})
			at = tick
			// At most 0.79 arrived in any second; a report's cost is taken as even over its span,
			// so its few ms of jitter may add their share: 4 ms of a 100 ms span is 4 %.
			if st.Usage > 0.79*1.04+1e-9 || st.Emergency {
				e.t.Fatalf("%v: usage %v (emergency %v); at most 0.79 arrived in any second", at, st.Usage, st.Emergency)
			}
		}
	}
}

// usageUnevenReports: a steady 800/s reported at uneven intervals (60 and 140 ms, each report
// carrying what was admitted since the last) reads 0.8 at every report. Counted in whole slots
// instead, a slot with two reports and one with none made it jump by a report's worth.
func usageUnevenReports(e *env) {
	e.withL1()
	e.advance(2 * time.Second)
	for i := range 40 {
		step := 60 * time.Millisecond
		if i%2 == 1 {
			step = 140 * time.Millisecond
		}
		e.advance(step)
		st := e.reportOver("i1", step, store.Report{Cost: int64(800 * step.Seconds())})
		if i >= 12 && math.Abs(st.Usage-0.8) > 1e-9 { // after the first second
			e.t.Fatalf("report %d: usage %v; want 0.8", i, st.Usage)
		}
	}
}

// usageSteady: a steady rate reported every 100 ms reads as that rate at every report.
func usageSteady(e *env) {
	e.withL1()
	for range 10 { // the first second fills the window
		e.reportOver("i1", 100*time.Millisecond, store.Report{Cost: 80})
		e.advance(100 * time.Millisecond)
	}
	for range 25 {
		e.wantL1(e.reportOver("i1", 100*time.Millisecond, store.Report{Cost: 80}), 0.8, false, allOne)
		e.advance(100 * time.Millisecond)
	}
}

func factorsOneBelowOverload(e *env) {
	e.withL1()
	e.wantL1(e.reportCost(890), 0.89, false, allOne)
	e.advance(2 * time.Second)
	e.wantL1(e.reportCost(900), 0.9, false, allOne) // u = 0.9: the formula gives 1 too
}

func overloadFormula(e *env) {
	e.withL1()
	for _, c := range []struct {
		cost   int64
		approx [store.MaxPriority + 1]float64
	}{
		{925, [store.MaxPriority + 1]float64{1, 5.0 / 6, 2.0 / 3, 0.5}},
		{940, [store.MaxPriority + 1]float64{1, 1 - 0.8/3, 1 - 1.6/3, 0.2}},
	} {
		e.advance(2 * time.Second)
		st := e.reportCost(c.cost)
		u := float64(c.cost) / 1000
		exact := e.overload(u)
		for p := range exact {
			if math.Abs(exact[p]-c.approx[p]) > 1e-9 {
				e.t.Fatalf("u %v: factor(%d) = %v; want about %v", u, p, exact[p], c.approx[p])
			}
		}
		e.wantL1(st, u, false, exact)
	}
}

func emergencyAtThreshold(e *env) {
	e.withL1()
	e.wantL1(e.reportCost(949), 0.949, false, e.overload(0.949))
	e.advance(2 * time.Second)
	e.wantL1(e.reportCost(950), 0.95, true, emergency)
	// Factors follow the policy's ratios.
	e.advance(2 * time.Second)
	e.cluster.EmergencyRatios = [store.MaxPriority + 1]float64{0.9, 0.6, 0.3, 0.05}
	e.wantL1(e.reportCost(2000), 2, true, e.cluster.EmergencyRatios)
}

// overload is the Store semantics' overload formula for the case's threshold,
// clamp(1 - (u - 0.9) / (thr - 0.9) * p / 3, 0, 1), evaluated left to right in float64 at run
// time (thr is a variable: Go would fold a constant 0.95 - 0.9 exactly, unlike Lua).
func (e *env) overload(u float64) [store.MaxPriority + 1]float64 {
	thr := e.cluster.EmergencyThreshold
	var f [store.MaxPriority + 1]float64
	for p := range f {
		f[p] = min(max(1-(u-0.9)/(thr-0.9)*float64(p)/3, 0), 1)
	}
	return f
}

// at sets the clock to Start + d.
func (e *env) at(d time.Duration) { e.clk.Advance(Start.Add(d).Sub(e.clk.Now())) }

func emergencyLeavesAfterCalm(e *env) {
	e.withL1()
	e.wantL1(e.reportCost(960), 0.96, true, emergency)
	e.at(2 * time.Second) // u = 0 < thr - 0.1: calm from here
	e.wantL1(e.reportCost(0), 0, true, emergency)
	e.at(7 * time.Second)
	e.wantL1(e.reportCost(0), 0, true, emergency)
	e.at(11999 * time.Millisecond) // calm for 9.999 s
	e.wantL1(e.reportCost(0), 0, true, emergency)
	e.at(12 * time.Second) // calm for 10 s
	e.wantL1(e.reportCost(0), 0, false, allOne)
}

func emergencyCalmRestarts(e *env) {
	e.withL1()
	e.wantL1(e.reportCost(960), 0.96, true, emergency)
	e.at(2 * time.Second)
	e.wantL1(e.reportCost(0), 0, true, emergency) // calm from 2 s
	e.at(6 * time.Second)
	e.wantL1(e.reportCost(900), 0.9, true, emergency) // 0.9 >= thr - 0.1: not calm any more
	e.at(8 * time.Second)
	e.wantL1(e.reportCost(0), 0, true, emergency) // calm again from 8 s
	e.at(12500 * time.Millisecond)                // would have ended at 12 s without the restart
	e.wantL1(e.reportCost(0), 0, true, emergency)
	e.at(17900 * time.Millisecond)
	e.wantL1(e.reportCost(0), 0, true, emergency)
	e.at(18 * time.Second)
	e.wantL1(e.reportCost(0), 0, false, allOne)
}

func noCapacityNoL1(e *env) {
	st := e.reportCost(1_000_000)
	e.wantL1(st, 0, false, allOne)
	e.wantLive(st, 1)
}
