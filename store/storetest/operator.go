package storetest

import (
	"context"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// The operator emergency (Store.SetEmergency): fleet-wide, with or without L1, until a time or
// until deactivated, beside L1's automatic emergency.

func operatorCases() []testCase {
	return []testCase{
		{"OperatorEmergencyWithoutCapacity", operatorWithoutCapacity},
		{"OperatorEmergencyWithCapacity", operatorWithCapacity},
		{"OperatorEmergencyExpires", operatorExpires},
		{"OperatorEmergencyEndedBeforeSet", operatorEndedBeforeSet},
		{"OperatorEmergencyReplaced", operatorReplaced},
		{"OperatorEmergencyBesideAuto", operatorBesideAuto},
		{"OperatorEmergencyInvalid", operatorInvalid},
	}
}

func (e *env) setEmergency(em store.Emergency) {
	e.t.Helper()
	if err := e.s.SetEmergency(context.Background(), e.cluster, em); err != nil {
		e.t.Fatalf("SetEmergency(%+v): %v", em, err)
	}
}

func (e *env) activate(reason string, until time.Time) {
	e.t.Helper()
	e.setEmergency(store.Emergency{Active: true, Reason: reason, Until: until})
}

func (e *env) deactivate() {
	e.t.Helper()
	e.setEmergency(store.Emergency{})
}

// wantOperator requires the operator emergency in st: source "operator", the reason, the end
// time (zero: none), the ratios as factors, and the usage.
func (e *env) wantOperator(st store.ClusterState, usage float64, reason string, until time.Time) {
	e.t.Helper()
	if !st.Emergency || st.EmergencySource != store.EmergencySourceOperator || st.EmergencyReason != reason ||
		!st.EmergencyUntil.Equal(until) || st.EmergencyUntil.IsZero() != until.IsZero() ||
		st.Factors != e.cluster.EmergencyRatios || st.Usage != usage {
		e.t.Fatalf("state = emergency %v source %q reason %q until %v factors %v usage %v; "+
			"want operator emergency %q until %v, factors %v, usage %v", st.Emergency, st.EmergencySource,
			st.EmergencyReason, st.EmergencyUntil, st.Factors, st.Usage, reason, until, e.cluster.EmergencyRatios, usage)
	}
}

func operatorWithoutCapacity(e *env) {
	e.wantL1(e.reportCost(10), 0, false, allOne)
	e.activate("incident #42: backend degraded", time.Time{})
	st := e.reportCost(10)
	e.wantOperator(st, 0, "incident #42: backend degraded", time.Time{})
	e.wantLive(st, 1)
	// Every instance sees it, at any later time.
	e.advance(time.Hour)
	e.wantOperator(e.report("other", 0), 0, "incident #42: backend degraded", time.Time{})
	// The factors follow the policy of the report.
	e.cluster.EmergencyRatios = [store.MaxPriority + 1]float64{0.9, 0.6, 0.3, 0.05}
	e.wantOperator(e.reportCost(0), 0, "incident #42: backend degraded", time.Time{})
	e.deactivate()
	e.wantL1(e.reportCost(10), 0, false, allOne)
	e.deactivate() // deactivating twice is a no-op
	e.wantL1(e.report("other", 0), 0, false, allOne)
}

func operatorWithCapacity(e *env) {
	e.withL1()
	e.wantL1(e.reportCost(100), 0.1, false, allOne)
	until := e.clk.Now().Add(5 * time.Minute)
	e.activate("  stored as given: ünïcode \"quotes\" ", until)
	e.wantOperator(e.reportCost(100), 0.2, "  stored as given: ünïcode \"quotes\" ", until)
	e.deactivate()
	e.wantL1(e.reportCost(100), 0.3, false, allOne)
}

func operatorExpires(e *env) {
	until := e.clk.Now().Add(2*time.Second + 1500*time.Nanosecond) // kept in whole µs
	kept := until.Truncate(time.Microsecond)
	e.activate("short", until)
	e.wantOperator(e.report("a", 0), 0, "short", kept)
	e.at(2*time.Second + 999*time.Nanosecond) // in µs, 1 µs before the end
	e.wantOperator(e.report("a", 0), 0, "short", kept)
	e.at(2*time.Second + time.Microsecond) // now == until: ended
	e.wantL1(e.report("a", 0), 0, false, allOne)
	e.wantL1(e.report("b", 0), 0, false, allOne)

	// With L1 too, and a deactivation after the end changes nothing.
	e.withL1()
	e.activate("with L1", e.clk.Now().Add(time.Second))
	e.wantOperator(e.reportCost(0), 0, "with L1", e.clk.Now().Add(time.Second))
	e.advance(time.Second)
	e.wantL1(e.reportCost(0), 0, false, allOne)
	e.deactivate()
	e.wantL1(e.reportCost(0), 0, false, allOne)
}

func operatorEndedBeforeSet(e *env) {
	e.activate("first", time.Time{})
	e.activate("already over", e.clk.Now()) // until <= now: not set, and the old one is cleared
	e.wantL1(e.report("a", 0), 0, false, allOne)
	e.activate("in the past", e.clk.Now().Add(-time.Minute))
	e.wantL1(e.report("a", 0), 0, false, allOne)
}

func operatorReplaced(e *env) {
	first := e.clk.Now().Add(10 * time.Second)
	e.activate("first", first)
	e.wantOperator(e.report("a", 0), 0, "first", first)
	e.activate("second", time.Time{}) // until deactivated now
	e.advance(20 * time.Second)
	e.wantOperator(e.report("a", 0), 0, "second", time.Time{})
	second := e.clk.Now().Add(time.Second)
	e.activate("", second) // the Store takes any reason, the empty one too
	e.wantOperator(e.report("a", 0), 0, "", second)
	e.advance(time.Second)
	e.wantL1(e.report("a", 0), 0, false, allOne)
}

// operatorBesideAuto: L1's automatic emergency goes on underneath: entered and left by usage
// while the operator's is in force, and shown again once the operator's is gone.
func operatorBesideAuto(e *env) {
	e.withL1()
	e.wantL1(e.reportCost(960), 0.96, true, emergency) // automatic
	e.activate("operator", time.Time{})
	e.wantOperator(e.reportCost(0), 0.96, "operator", time.Time{}) // both: the operator's is shown
	e.deactivate()
	e.wantL1(e.reportCost(0), 0.96, true, emergency) // the automatic one is still there
	e.activate("operator again", time.Time{})
	e.at(2 * time.Second) // calm from here
	e.wantOperator(e.reportCost(0), 0, "operator again", time.Time{})
	e.at(12 * time.Second) // L1 leaves its emergency underneath
	e.wantOperator(e.reportCost(0), 0, "operator again", time.Time{})
	e.deactivate()
	e.wantL1(e.reportCost(0), 0, false, allOne)
	// The automatic one enters while the operator's is in force, and outlives it.
	e.activate("operator, ending", e.clk.Now().Add(3*time.Second))
	e.at(14 * time.Second)
	e.wantOperator(e.reportCost(970), 0.97, "operator, ending", Start.Add(15*time.Second))
	e.at(15 * time.Second)
	e.wantL1(e.reportCost(0), 0.97, true, emergency)
}

func operatorInvalid(e *env) {
	for _, em := range []store.Emergency{
		{Active: true, Reason: "before the epoch", Until: time.Unix(-5, 0)},
		{Active: true, Reason: "too far", Until: time.UnixMicro(1<<53 + 1)},
	} {
		if err := e.s.SetEmergency(context.Background(), e.cluster, em); err == nil {
			e.t.Fatalf("SetEmergency(%+v): no error", em)
		}
	}
	bad := e.cluster
	bad.Capacity = -1
	if err := e.s.SetEmergency(context.Background(), bad, store.Emergency{Active: true}); err == nil {
		e.t.Fatal("SetEmergency with capacity -1: no error")
	}
	e.wantL1(e.report("a", 0), 0, false, allOne) // nothing was stored
}
