package memstore

import (
	"math"

	"github.com/tierbucket/caddy-tierbucket/adaptive"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// memLedger is one cluster's L1 ledger plus its per-instance records (the Store semantics' "L1
// cluster ledger"; Redis: the :l1, :nodes and :conn keys). Times are µs since the Unix epoch.
type memLedger struct {
	// heardSince is when the fleet was heard again after a silence longer than InstanceTTL
	// (Redis: heard_since in the :l1 hash); 0 before the first report.
	heardSince int64

	win       [usageSlots]float64 // cost reported per 100 ms slot, ring indexed by ring(slot)
	winSlot   int64               // the latest slot win counts (valid when winSet)
	winSet    bool
	ctl       memController // the adaptive capacity's controller (adaptive.go)
	emergency bool
	reason    string
	calmSince int64 // 0: not calm

	// The operator emergency (Store.SetEmergency; Redis: op_active, op_reason, op_until_us in
	// the :l1 hash), kept beside the automatic one.
	opActive bool
	opReason string
	opUntil  int64 // µs; 0: until deactivated

	// The borrow pool (LeaseRequest.Unallocated; Redis: fields pool, pool_ts and
	// "borrowed:<app>" of the :l1 hash) and L1's per-app borrow records (absent = 0).
	hasPool  bool
	pool     float64
	poolTS   int64
	borrowed map[string]float64

	// Connection slot holdings by scope ("" = the cluster) and instance (LeaseSlots).
	slots map[string]map[string]int64

	seqs    memSeqs                           // instance → last applied report Seq
	nodes   map[string]int64                  // instance → last heartbeat
	conn    map[string]int64                  // instance → cluster in-flight
	appConn map[string]map[string]memInFlight // app → instance → in-flight
}

// memInFlight is one instance's in-flight count for one app, with the time of the last report
// that carried the app (Redis: "count:heartbeat_us" in the app's conn hash, whose slot cannot
// see the cluster's live-instance set).
type memInFlight struct {
	n  int64
	hb int64
}

func (m *Store) ledger(cluster string) *memLedger {
	l := m.clusters[cluster]
	if l == nil {
		l = &memLedger{
			nodes:   make(map[string]int64),
			conn:    make(map[string]int64),
			appConn: make(map[string]map[string]memInFlight),
		}
		m.clusters[cluster] = l
	}
	return l
}

// heartbeat is Report step 1: nodes[instance] = now; instances whose last heartbeat is more than
// InstanceTTL old (now - nodes[i] > InstanceTTL) are removed with all their in-flight counts.
// It returns the number of live instances, this one included, and whether this instance was not
// live before (ClusterState.Rejoined).
func (l *memLedger) heartbeat(instance string, now int64) (int, bool) {
	ttl := store.InstanceTTL.Microseconds()
	prev, ok := l.nodes[instance]
	rejoined := !ok || now-prev > ttl
	if !l.heard(now) {
		l.heardSince = now // the fleet is heard again after a silence (LeaseSlots)
	}
	l.nodes[instance] = now
	for i, t := range l.nodes {
		if now-t > ttl {
			l.removeInstance(i)
		}
	}
	return len(l.nodes), rejoined
}

// heard reports whether some instance's heartbeat is at most InstanceTTL old.
func (l *memLedger) heard(now int64) bool {
	for _, t := range l.nodes {
		if now-t <= store.InstanceTTL.Microseconds() {
			return true
		}
	}
	return false
}

func (l *memLedger) removeInstance(instance string) {
	delete(l.nodes, instance)
	delete(l.conn, instance)
	for app, counts := range l.appConn {
		delete(counts, instance)
		if len(counts) == 0 {
			delete(l.appConn, app)
		}
	}
}

// leave is Report step 7, for a report with Leaving: the instance is removed from the live set
// as if its heartbeat had expired, with its cluster in-flight count, and its in-flight count
// and slot holding of each app the report carries, and its holding of the cluster scope
// (Redis: report_cluster.lua and report_app.lua, which see only the apps of the report). Its
// report Seqs stay.
func (l *memLedger) leave(rep store.Report) {
	delete(l.nodes, rep.Instance)
	delete(l.conn, rep.Instance)
	l.dropHolding("", rep.Instance)
	for _, a := range rep.Apps {
		if counts := l.appConn[a.App]; counts != nil {
			delete(counts, rep.Instance)
			if len(counts) == 0 {
				delete(l.appConn, a.App)
			}
		}
		l.dropHolding(a.App, rep.Instance)
	}
}

// dropHolding removes the instance's holding of one scope's connection slots ("" = the
// cluster's).
func (l *memLedger) dropHolding(scope, instance string) {
	held := l.slots[scope]
	if held == nil {
		return
	}
	delete(held, instance)
	if len(held) == 0 {
		delete(l.slots, scope)
	}
}

// recordInFlight is Report step 2: it stores the instance's counts (the cluster's, and the
// app's for each app in the report) and sums the other live instances' counts.
//
// Liveness of an app's entry: the Store semantics say "live instances"; the Redis store can only
// see, in the app's slot, when the instance last reported that app, so both stores count an
// (app, instance) entry while now - (last report carrying the app) <= InstanceTTL and delete it
// after. For an instance that carries every app with a non-zero count in every report (the
// limiter does) this is the same as the instance's heartbeat; an app the instance stops
// reporting drops out after InstanceTTL instead of keeping its last count forever.
//
// The per-app map holds the apps of the report whose remote sum is not 0, and is nil if there
// are none.
func (l *memLedger) recordInFlight(rep store.Report, now int64) (cluster int64, apps map[string]int64) {
	l.conn[rep.Instance] = rep.InFlight
	for _, a := range rep.Apps {
		counts := l.appConn[a.App]
		if counts == nil {
			counts = make(map[string]memInFlight)
			l.appConn[a.App] = counts
		}
		counts[rep.Instance] = memInFlight{n: a.InFlight, hb: now}
	}
	// After heartbeat, every instance left in conn is live.
	for i, n := range l.conn {
		if i != rep.Instance {
			cluster += n
		}
	}
	ttl := store.InstanceTTL.Microseconds()
	for _, a := range rep.Apps {
		var sum int64
		for i, c := range l.appConn[a.App] {
			switch {
			case now-c.hb > ttl:
				delete(l.appConn[a.App], i)
			case i != rep.Instance:
				sum += c.n
			}
		}
		if sum != 0 {
			if apps == nil {
				apps = make(map[string]int64)
			}
			apps[a.App] = sum
		}
	}
	return cluster, apps
}

// pruneInFlight drops app entries that no report has carried for longer than InstanceTTL
// (recordInFlight drops them too, but only for the apps of the report at hand).
func (l *memLedger) pruneInFlight(now int64) {
	ttl := store.InstanceTTL.Microseconds()
	for app, counts := range l.appConn {
		for i, c := range counts {
			if now-c.hb > ttl {
				delete(counts, i)
			}
		}
		if len(counts) == 0 {
			delete(l.appConn, app)
		}
	}
}

// usageSlots is the number of 100 ms slots the usage window keeps: ten complete ones and the
// current one.
const usageSlots = 11

// usageSlot is the length of one slot of the usage window, in µs.
const usageSlot = 100_000

// addUsage is Report step 3: it adds cost, admitted over the span (µs) before now, to the usage
// window and returns the cost of the last second (u times the capacity). The window is kept in 100 ms
// slots (Redis: fields w_slot and w0…w10); a report's cost is spread evenly over its span (all
// at now without one), and u is the larger of two one-second spans: the last ten complete
// slots, exact for cost spread over real time, and the last nine with the current one, which
// counts a report at once. See docs/design.md, "L1 usage", for why: the two-bucket estimate it
// replaces, win_prev × (1 − f) + win_cur, counted cost bunched at the start of each second up
// to twice (an automatic emergency at 79 % of capacity), and cost placed whole at its report's
// time still read bunched or unevenly reported cost up to 1.2 times.
func (l *memLedger) addUsage(cost, span int64, now int64) float64 {
	slot := now / usageSlot // floor: times are after the epoch
	switch {
	case !l.winSet || slot-l.winSlot >= usageSlots:
		l.win = [usageSlots]float64{}
		l.winSlot, l.winSet = slot, true
	case slot > l.winSlot:
		for s := l.winSlot + 1; s <= slot; s++ {
			l.win[ring(s)] = 0
		}
		l.winSlot = slot
	}
	slot = l.winSlot
	at := max(now, slot*usageSlot) // a clock that went back counts in the latest slot
	c := float64(cost)
	if span <= 0 {
		l.win[ring(slot)] += c
	} else {
		from := at - span
		for s := max(from/usageSlot, slot-10); s <= slot; s++ {
			lo, hi := max(from, s*usageSlot), min(at, (s+1)*usageSlot)
			if hi > lo {
				l.win[ring(s)] += c * float64(hi-lo) / float64(span)
			}
		}
	}
	var complete, current float64
	for s := slot - 10; s <= slot-1; s++ {
		complete += l.win[ring(s)]
	}
	for s := slot - 9; s <= slot; s++ {
		current += l.win[ring(s)]
	}
	return max(complete, current)
}

// ring is slot's index in the window's ring (times, and so slots, are after the epoch).
func ring(slot int64) int64 { return slot % usageSlots }

// updateEmergency is Report step 5: u >= thr enters (or stays in) the automatic emergency; an
// automatic emergency is left at the first report at least 10 s after u fell below thr - 0.1
// and stayed there (any report with u >= thr - 0.1 restarts the count). On leaving, the reason
// is cleared.
//
// Under a learned capacity (learned; refusing is then whether the last control period showed
// the backend refusing work with throttles) a usage at the threshold enters it only with a
// refusing backend: a fleet using the whole capacity it learned is where it should be, a
// burst of borrowing alone is not an emergency, and a backend that is only slow is answered by
// the decrease of the capacity. It is left adaptive.EmergencyPeriods control periods after
// the backend stopped refusing: a learned capacity keeps the fleet near the overload line on
// purpose, and a decrease lands its usage near the threshold, so the usage would hold the
// emergency, and its lower priorities blocked, long after the backend recovered; and the
// decrease that came with the throttles already protects the backend.
func (l *memLedger) updateEmergency(u, thr float64, now int64, learned, refusing bool) {
	calm := int64(10 * 1e6) // µs
	if learned {
		calm = adaptive.EmergencyPeriods * adaptive.Period.Microseconds()
	}
	switch {
	case u >= thr && refusing:
		l.emergency, l.reason, l.calmSince = true, "auto", 0
	case l.emergency && l.reason == "auto":
		switch {
		case (learned && refusing) || (!learned && u >= thr-0.1):
			l.calmSince = 0
		case l.calmSince == 0:
			l.calmSince = now
		case now-l.calmSince >= calm:
			l.emergency, l.reason, l.calmSince = false, "", 0
		}
	}
}

// setOperator is SetEmergency: an active emergency whose end is not after now is not set (the
// operator emergency is cleared, as by an inactive one).
func (l *memLedger) setOperator(e store.Emergency, now int64) {
	var until int64
	if e.Active && !e.Until.IsZero() {
		until = e.Until.UnixMicro()
	}
	if !e.Active || (until != 0 && until <= now) {
		l.opActive, l.opReason, l.opUntil = false, "", 0
		return
	}
	l.opActive, l.opReason, l.opUntil = true, e.Reason, until
}

// operator is Report step 5b: it clears an operator emergency that has ended (now >= until)
// and reports whether one is in force.
func (l *memLedger) operator(now int64) bool {
	if l.opActive && l.opUntil != 0 && now >= l.opUntil {
		l.opActive, l.opReason, l.opUntil = false, "", 0
	}
	return l.opActive
}

// Factors returns L1's refill factor per priority :
// the emergency ratios in an emergency; otherwise 1 for every priority without L1 (Capacity 0)
// or below u = 0.9; otherwise the overload formula
//
//	factor(p) = clamp(1 - (u - 0.9) / (thr - 0.9) * p / 3, 0, 1)
//
// evaluated left to right in that order. Emergency wins over Capacity 0 so that an emergency set
// by an operator applies even without L1; the Store never sets one automatically without L1.
// No defaults are applied: c must be a complete policy.
func Factors(c store.ClusterPolicy, usage float64, emergency bool) [store.MaxPriority + 1]float64 {
	var f [store.MaxPriority + 1]float64
	for p := range f {
		switch {
		case emergency:
			f[p] = c.EmergencyRatios[p]
		case c.Capacity <= 0 || usage < 0.9:
			f[p] = 1
		default:
			v := 1 - (usage-0.9)/(c.EmergencyThreshold-0.9)*float64(p)/3
			f[p] = min(max(v, 0), 1)
		}
	}
	return f
}

// memSeq is an instance's last applied report Seq and the time of its last numbered report.
type memSeq struct {
	seq uint64
	at  int64
}

// memSeqs are the last applied report Seqs of one record (a cluster ledger or an app record),
// per instance (Redis: "seq:<instance>" = "<seq>:<at µs>" fields of the record's hash).
type memSeqs map[string]memSeq

// apply drops the Seqs of instances whose last numbered report is more than ReportSeqTTL old,
// then reports whether the figures of the instance's report seq are to be applied: always for
// seq 0 (unnumbered: nothing is kept), otherwise when seq is above the one kept, which it
// then replaces; and the Seq kept before (0: none). A numbered report renews the instance's
// entry.
func (s *memSeqs) apply(instance string, seq uint64, now int64) (fresh bool, prev uint64) {
	ttl := store.ReportSeqTTL.Microseconds()
	for i, r := range *s {
		if now-r.at > ttl {
			delete(*s, i)
		}
	}
	if seq == 0 {
		return true, 0
	}
	if *s == nil {
		*s = make(memSeqs)
	}
	r, ok := (*s)[instance]
	prev = r.seq
	fresh = !ok || seq > r.seq
	if fresh {
		r.seq = seq
	}
	r.at = now
	(*s)[instance] = r
	return fresh, prev
}

// borrow is the cluster's part of a borrow (LeaseRequest.Unallocated): short tokens for app,
// whose bucket says it has borrowed appBorrowed (max_borrow, rate = unallocated tokens/s).
//
//	record[app] = appBorrowed                      (reconciliation)
//	no pool: pool = rate, pool_ts = now
//	else: pool = min(rate, pool + max(0, now - pool_ts) / 1e6 * rate); pool_ts = max(pool_ts, now)
//	max_borrow - appBorrowed < short → 0, borrow_limit_exceeded
//	pool < short → 0, cluster_exhausted
//	else pool = pool - short, record[app] = record[app] + short → short
//
// A record of 0 is deleted.
func (l *memLedger) borrow(app string, appBorrowed, maxBorrow, rate float64, short, now int64) (int64, store.Reason) {
	rec := appBorrowed
	if !l.hasPool {
		l.hasPool, l.pool, l.poolTS = true, rate, now
	} else {
		l.pool = math.Min(rate, l.pool+float64(max(0, now-l.poolTS))/1e6*rate)
		l.poolTS = max(l.poolTS, now)
	}
	b := float64(short)
	var got int64
	var reason store.Reason
	switch {
	case maxBorrow-appBorrowed < b:
		reason = store.ReasonBorrowLimitExceeded
	case l.pool < b:
		reason = store.ReasonClusterExhausted
	default:
		l.pool = l.pool - b
		rec = rec + b
		got = short
	}
	if rec == 0 {
		delete(l.borrowed, app)
	} else {
		if l.borrowed == nil {
			l.borrowed = make(map[string]float64)
		}
		l.borrowed[app] = rec
	}
	return got, reason
}
