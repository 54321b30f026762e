package storetest

import (
	"context"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Connection slots (LeaseSlots): holdings of live instances stay within the limit; a dead
// instance's holding is dropped once its heartbeat is older than InstanceTTL.

func slotCases() []testCase {
	return []testCase{
		{"SlotsWithinLimit", slotsWithinLimit},
		{"SlotsDeadInstanceReturns", slotsDeadInstanceReturns},
		{"SlotsScopesIndependent", slotsScopesIndependent},
		{"SlotsInUseKept", slotsInUseKept},
		{"ReportRejoined", reportRejoined},
		{"SlotsInvalid", slotsInvalid},
		{"SlotsKeptAfterSilence", slotsKeptAfterSilence},
		{"SlotsDroppedByLeavingReport", slotsDroppedByLeavingReport},
	}
}

// heard reports the instances for a little longer than InstanceTTL, as live instances do, so
// that the Store judges liveness by heartbeats alone (not in the TTL after a silence).
func (e *env) heard(instances ...string) {
	e.t.Helper()
	for range 2 {
		for _, i := range instances {
			e.report(i, 0)
		}
		e.advance(store.InstanceTTL/2 + time.Millisecond)
	}
	for _, i := range instances {
		e.report(i, 0)
	}
}

func (e *env) slots(instance, app string, want, limit int64) store.SlotLease {
	e.t.Helper()
	return e.slotsInUse(instance, app, want, 0, limit)
}

// slotsInUse is slots for an instance whose requests use inUse of its holding.
func (e *env) slotsInUse(instance, app string, want, inUse, limit int64) store.SlotLease {
	e.t.Helper()
	ss, ok := e.s.(interface {
		LeaseSlots(context.Context, store.SlotRequest) (store.SlotLease, error)
	})
	if !ok {
		e.t.Fatal("the Store does not lease connection slots")
	}
	l, err := ss.LeaseSlots(context.Background(), store.SlotRequest{
		Cluster: e.cluster.ID, App: app,
		Instance: instance, Want: want, Limit: limit, InUse: inUse,
	})
	if err != nil {
		e.t.Fatalf("LeaseSlots(%s, %q, want %d, in use %d, limit %d): %v", instance, app, want, inUse, limit, err)
	}
	return l
}

func (e *env) wantSlots(got store.SlotLease, held, others int64) {
	e.t.Helper()
	if got.Held != held || got.Others != others {
		e.t.Fatalf("slots %+v; want held %d, others %d", got, held, others)
	}
}

func slotsWithinLimit(e *env) {
	e.heard("i1", "i2")
	// The caller counts as live before its first heartbeat; to the others it is not live yet.
	e.wantSlots(e.slots("i3", e.app, 4, 10), 4, 0)
	e.wantSlots(e.slots("i1", e.app, 5, 10), 5, 0) // i3's holding is dropped
	e.report("i3", 0)
	e.wantSlots(e.slots("i3", e.app, 4, 10), 4, 5)
	e.wantSlots(e.slots("i1", e.app, 5, 10), 5, 4)
	e.wantSlots(e.slots("i2", e.app, 5, 10), 1, 9) // only what is left
	e.wantSlots(e.slots("i1", e.app, 2, 10), 2, 5) // giving back is always granted
	e.wantSlots(e.slots("i2", e.app, 5, 10), 4, 6)
	e.wantSlots(e.slots("i3", e.app, 0, 10), 0, 6) // all back
	e.wantSlots(e.slots("i1", e.app, 6, 10), 6, 4)
	// A lower limit (a reload) grants nothing more until the holdings fit again.
	e.wantSlots(e.slots("i2", e.app, 5, 5), 0, 6)
	e.wantSlots(e.slots("i1", e.app, 6, 5), 5, 0)
}

func slotsDeadInstanceReturns(e *env) {
	e.report("i1", 0)
	e.report("i2", 0)
	e.wantSlots(e.slots("i1", e.app, 8, 10), 8, 0)
	e.wantSlots(e.slots("i2", e.app, 8, 10), 2, 8)
	// i1 stops reporting; i2 goes on.
	e.clk.Advance(store.InstanceTTL)
	e.report("i2", 0)
	e.wantSlots(e.slots("i2", e.app, 8, 10), 2, 8) // i1 is still live at exactly the TTL
	e.clk.Advance(time.Millisecond)
	e.report("i2", 0)
	e.wantSlots(e.slots("i2", e.app, 8, 10), 8, 0)
}

// slotsInUseKept: slots in use cannot be recalled, so a holding never drops below them, even
// when a lower limit leaves them nothing; the others get nothing until they are given back.
// (Otherwise a gateway whose limit is lowered below its requests in flight would shrink its
// holding, and once the limit goes up again the others would take those slots too, putting the
// fleet above its limit.)
func slotsInUseKept(e *env) {
	e.report("i1", 0)
	e.report("i2", 0)
	e.wantSlots(e.slots("i1", e.app, 4, 10), 4, 0)
	e.wantSlots(e.slots("i2", e.app, 6, 10), 6, 4)
	e.wantSlots(e.slotsInUse("i1", e.app, 5, 4, 6), 4, 6) // limit lowered to 6: keeps its 4
	e.wantSlots(e.slots("i2", e.app, 6, 6), 2, 4)         // i2 shrinks to what is left
	e.wantSlots(e.slotsInUse("i1", e.app, 5, 5, 6), 5, 2) // over the limit while in use
	e.wantSlots(e.slots("i2", e.app, 6, 6), 1, 5)
	e.wantSlots(e.slotsInUse("i1", e.app, 1, 0, 6), 1, 1) // its requests ended: back within it
	e.wantSlots(e.slots("i2", e.app, 6, 6), 5, 1)
}

// reportRejoined: a report tells the instance when it was not live before it (its first report,
// a heartbeat older than InstanceTTL, or a Store that lost its data, which looks the same to
// the Store): its holdings are gone, and it must state them again.
func reportRejoined(e *env) {
	if !e.report("i1", 0).Rejoined {
		e.t.Fatal("first report: not rejoined")
	}
	if e.report("i1", 0).Rejoined {
		e.t.Fatal("second report: rejoined")
	}
	e.advance(store.InstanceTTL)
	if e.report("i1", 0).Rejoined {
		e.t.Fatal("a report exactly InstanceTTL after the last: rejoined")
	}
	e.advance(store.InstanceTTL + time.Millisecond)
	if !e.report("i1", 0).Rejoined {
		e.t.Fatal("a report more than InstanceTTL after the last: not rejoined")
	}
}

func slotsScopesIndependent(e *env) {
	e.report("i1", 0)
	e.report("i2", 0)
	e.wantSlots(e.slots("i1", "", 7, 10), 7, 0) // the cluster's scope
	e.wantSlots(e.slots("i2", e.app, 9, 10), 9, 0)
	e.wantSlots(e.slots("i2", "other", 10, 10), 10, 0)
	e.wantSlots(e.slots("i2", "", 7, 10), 3, 7)
}

func slotsInvalid(e *env) {
	ss := e.s.(interface {
		LeaseSlots(context.Context, store.SlotRequest) (store.SlotLease, error)
	})
	for _, r := range []store.SlotRequest{
		{Cluster: e.cluster.ID, App: e.app, Want: 1, Limit: 1},
		{Cluster: e.cluster.ID, App: e.app, Instance: "i1", Want: -1, Limit: 1},
		{Cluster: e.cluster.ID, App: e.app, Instance: "i1", Want: 1, Limit: -1},
		{Cluster: e.cluster.ID, App: e.app, Instance: "i1", Want: 1, Limit: 1, InUse: -1},
		{Cluster: e.cluster.ID, App: e.app, Instance: "i1", Want: 1, Limit: 1, InUse: 2},
	} {
		if _, err := ss.LeaseSlots(context.Background(), r); err == nil {
			e.t.Errorf("LeaseSlots(%+v) = nil error", r)
		}
	}
}

// slotsKeptAfterSilence: after a silence of the whole fleet longer than InstanceTTL (Redis away),
// every instance looks dead until its own next report; for one TTL after the Store hears the
// fleet again, the holdings of instances not heard yet still count. (Otherwise a gateway's grow
// right after a Redis failover would drop the others' holdings and be granted the slots their
// requests still use, putting the fleet far above its limit.)
func slotsKeptAfterSilence(e *env) {
	e.heard("i1", "i2")
	e.wantSlots(e.slotsInUse("i1", e.app, 8, 8, 10), 8, 0)
	e.advance(2 * store.InstanceTTL) // nobody reaches the Store
	// i2's requests reach the Store before its report does (a lease first, as after a failover
	// under load), then its report: i1, not heard yet, still holds its 8 for both.
	e.wantSlots(e.slots("i2", e.app, 8, 10), 2, 8)
	e.report("i2", 0)
	e.wantSlots(e.slots("i2", e.app, 8, 10), 2, 8)
	if !e.report("i1", 0).Rejoined {
		e.t.Fatal("i1's first report after the silence: not rejoined")
	}
	e.wantSlots(e.slotsInUse("i1", e.app, 8, 8, 10), 8, 2) // i1 states its holding again
	// i1 dies now: once the Store has heard the fleet for a TTL, its holding is dropped as usual.
	e.advance(store.InstanceTTL / 2)
	e.report("i2", 0)
	e.advance(store.InstanceTTL/2 + time.Millisecond)
	e.report("i2", 0)
	e.wantSlots(e.slots("i2", e.app, 8, 10), 8, 0)
}

// slotsDroppedByLeavingReport: a leaving report drops the instance's holdings of the cluster
// scope and of the apps it carries at once, also within a TTL of the fleet being heard again
// (when holdings of instances not heard count); a holding of a scope it does not carry counts
// as one of an instance that is not live.
func slotsDroppedByLeavingReport(e *env) {
	e.report("i1", 0)
	e.report("i2", 0)
	e.wantSlots(e.slots("i1", "", 6, 10), 6, 0)
	e.wantSlots(e.slots("i1", e.app, 6, 10), 6, 0)
	e.wantSlots(e.slots("i1", "other", 6, 10), 6, 0)
	e.wantSlots(e.slots("i2", e.app, 8, 10), 4, 6)
	e.reportOver("i1", 0, store.Report{Apps: []store.AppReport{{App: e.app}}, Leaving: true})
	e.wantSlots(e.slots("i2", "", 10, 10), 10, 0)
	e.wantSlots(e.slots("i2", e.app, 10, 10), 10, 0)
	// The fleet was first heard less than a TTL ago: a holding of an instance not live counts.
	e.wantSlots(e.slots("i2", "other", 10, 10), 4, 6)
	e.advance(store.InstanceTTL / 2)
	e.report("i2", 0)
	e.advance(store.InstanceTTL/2 + time.Millisecond)
	e.report("i2", 0)
	e.wantSlots(e.slots("i2", "other", 10, 10), 10, 0)
}
