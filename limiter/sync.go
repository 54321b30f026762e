package limiter

import (
	"context"
	"math"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// loop is the sync loop: one per Limiter, ticking every SyncInterval.
func (l *Limiter) loop() {
	defer close(l.done)
	t := time.NewTimer(l.snap().cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.tick(l.clock.Now())
		case <-l.reload:
			l.refreshOverrides()
			continue
		case <-l.kick:
			l.syncNow()
			continue
		}
		t.Reset(l.snap().cfg.SyncInterval)
	}
}

// SyncNow makes the sync loop report and read the overrides now instead of at the end of its
// interval. A new instance calls it when it starts: it then enforces the fleet's overrides and
// emergency after one round trip to the Store, not after a sync interval (a restarted gateway
// served about 120 ms under its config alone, during an operator emergency too). It does not
// wait for the report.
func (l *Limiter) SyncNow() {
	select {
	case l.kick <- struct{}{}:
	default: // one is pending
	}
}

// syncNow is the loop's side of SyncNow.
func (l *Limiter) syncNow() {
	l.tickMu.Lock()
	l.lastReport = time.Time{} // the report is due
	l.tickMu.Unlock()
	l.tick(l.clock.Now())
}

// tick does the periodic work that is due at now: the report (every sync interval of the
// current level; in fail-open it is the 1 s probe), the consumption rates and lease targets,
// lease expiry, isolated-app expiry, and the settlement of retired apps. Tests call it directly
// with a manual clock.
func (l *Limiter) tick(now time.Time) {
	l.tickMu.Lock()
	defer l.tickMu.Unlock()
	if l.closed.Load() {
		return
	}
	cfg := l.snap().cfg
	level := l.Level()
	// A timer firing a little early must not skip a whole interval.
	if now.Sub(l.lastReport) >= syncInterval(level, cfg.SyncInterval)-cfg.SyncInterval/2 {
		l.lastReport = now // the last attempt: in fail-open, the probe runs once a second
		if l.report(now, l.visited(), false) == nil {
			if e := l.lostEmergency; e != nil {
				l.lostEmergency = nil
				l.restoreEmergency(*e)
			}
			l.watchOverrides()
			if l.outdated() {
				l.refreshOverrides()
			}
		}
	}
	apps := l.visited()
	l.updateRates(now, apps, cfg)
	if l.Level() != LevelFailOpen {
		l.expireLeases(now, apps, cfg)
		l.returnExcess(now, apps)
		l.repayDebts(apps)
		l.settleRetired(now)
		l.dropQuiet()
	}
	l.expireIsolated(now, cfg)
}

// clusterBatch is the admitted cost of one report Seq (L1's usage window): sent until a report
// carrying it succeeds, always with the same Seq, because a failed report may still have been
// applied (a timeout after the Store ran it) and the Store applies a Seq once (Report.Seq).
type clusterBatch struct {
	seq  uint64
	cost int64
	span time.Duration // since the previous batch was taken: how long the cost took (Report.CostSpan)
}

// report sends one cluster report (tickMu held): the heartbeat, the pending cost batch (again if
// the last report failed, otherwise the cost admitted since), the in-flight counts, and the
// statistics that are due (statsDue; every app's when all is set: Close). It applies L1's
// answer.
func (l *Limiter) report(now time.Time, apps []*App, all bool) error {
	s := l.snap()
	rep := store.Report{Cluster: s.cfg.Cluster, Instance: s.cfg.Instance, StatsInterval: s.cfg.StatsInterval}
	var inflight map[string]int64
	if src := s.cfg.Connections; src != nil {
		inflight, rep.InFlight = src.InFlight()
	}
	b := l.costBatch(now, apps)
	rep.Seq, rep.Cost, rep.CostSpan = b.seq, b.cost, b.span
	flushed := l.dueStats(&rep, now, apps, all)
	addInFlight(&rep, inflight, l.prevIn)
	away := l.Level() == LevelFailOpen
	st, sent, answered, err := l.sendReport(rep)
	if err != nil {
		for _, f := range flushed {
			f.a.statsFailed(f.b)
		}
		return err
	}
	l.statsReported(flushed, &st, sent, answered)
	l.pending = nil
	l.prevIn = nonZero(inflight)
	l.applyState(s, st, away)
	return nil
}

// costBatch returns the cost batch the report carries (tickMu held): the pending one again
// while its report has not succeeded, otherwise a new one with the cost settled since the last,
// under the next Seq.
func (l *Limiter) costBatch(now time.Time, apps []*App) *clusterBatch {
	failOpen := l.Level() == LevelFailOpen
	if l.pending != nil || failOpen {
		// The cost settled while the Store is away (a batch not acknowledged, or fail-open's
		// probe) stays out of L1's usage window. Sent after the outage in one report, an
		// outage's worth of cost would count as one interval's and push the cluster into its
		// automatic emergency after every failover. L1's usage is a rate, not an account:
		// only the statistics are exactly once.
		for _, a := range apps {
			a.costSent = a.settledCost.Load()
		}
	}
	if l.pending != nil && failOpen {
		// For the same reason, the batch that failed as the outage began is given up, its Seq
		// with it (the Store may have applied it; if not, L1 misses a rate's worth, not an
		// account's): delivered after the outage it would land in the interval after it, on
		// top of the burst every app leases then.
		l.pending = nil
	}
	if l.pending == nil {
		l.seq++
		b := &clusterBatch{seq: l.seq}
		if !l.costSince.IsZero() {
			b.span = now.Sub(l.costSince)
		}
		l.costSince = now
		for _, a := range apps {
			c := a.settledCost.Load() - a.costSent
			a.costSent += c
			b.cost += c
		}
		l.pending = b
	}
	return l.pending
}

// flush is one app's statistics batch carried by a report.
type flush struct {
	a *App
	b statsBatch
}

// dueStats adds to rep the statistics of the apps whose flush is due (every app's with all,
// and a retired app's always) and returns the batches taken.
func (l *Limiter) dueStats(rep *store.Report, now time.Time, apps []*App, all bool) []flush {
	var flushed []flush
	retired := l.retiredApps()
	for _, a := range apps {
		if !a.statsDue(now, all || retired[a]) {
			continue
		}
		if b := a.takeStats(); b.seq != 0 {
			flushed = append(flushed, flush{a, b})
			rep.Apps = append(rep.Apps, store.AppReport{App: a.id, Requests: b.requests, Seq: b.seq})
		}
	}
	return flushed
}

// addInFlight adds to rep the in-flight count of every id with requests in flight (including
// ids without a bucket of their own: shared unknown apps), and a zero count for each id of prev
// (those with requests in flight at the last report) that has none now, so that the Store
// forgets its old count.
func addInFlight(rep *store.Report, inflight map[string]int64, prev map[string]bool) {
	seen := make(map[string]int, len(inflight))
	for i, r := range rep.Apps {
		seen[r.App] = i
	}
	for id, n := range inflight {
		if i, ok := seen[id]; ok {
			rep.Apps[i].InFlight = n
		} else {
			seen[id] = len(rep.Apps)
			rep.Apps = append(rep.Apps, store.AppReport{App: id, InFlight: n})
		}
	}
	for id := range prev {
		if _, ok := seen[id]; !ok {
			seen[id] = len(rep.Apps)
			rep.Apps = append(rep.Apps, store.AppReport{App: id})
		}
	}
}

// nonZero is the set of ids with requests in flight.
func nonZero(inflight map[string]int64) map[string]bool {
	ids := make(map[string]bool, len(inflight))
	for id, n := range inflight {
		if n != 0 {
			ids[id] = true
		}
	}
	return ids
}

// sendReport makes the Store call, feeds its latency and outcome to the degradation level, and
// returns L1's answer with when the call was sent and answered.
func (l *Limiter) sendReport(rep store.Report) (st store.ClusterState, sent, answered time.Time, err error) {
	sent = l.clock.Now()
	err = l.callStore(func(ctx context.Context) (err error) {
		st, err = l.store.Report(ctx, rep)
		return err
	})
	answered = l.clock.Now()
	l.deg.observe(answered.Sub(sent), err, true)
	return st, sent, answered, err
}

// statsReported records the delivery of the flushed batches by a report that succeeded, and
// logs the statistics it showed the Store lost.
func (l *Limiter) statsReported(flushed []flush, st *store.ClusterState, sent, answered time.Time) {
	for _, f := range flushed {
		f.a.statsDelivered(f.b, st.PrevSeq[f.a.id], sent, answered)
	}
	l.flushes.Add(int64(len(flushed)))
	l.logLost()
}

// applyState makes L1's answer the state in force (tickMu held): an operator emergency the
// Store lost is still enforced, the overrides' version is recorded, the live-instance count
// and the other instances' connections are passed on. away says the report was fail_open's
// probe.
func (l *Limiter) applyState(s *snapshot, st store.ClusterState, away bool) {
	st.LiveInstances = max(st.LiveInstances, 1)
	prev := l.state.Load()
	l.keepLostEmergency(prev, &st)
	l.storeVersion.Store(st.ConfigVersion)
	l.state.Store(&st)
	l.logEmergency(prev, &st)
	if first := !l.deg.reached.Swap(true); (first || st.LiveInstances != prev.LiveInstances) && s.cfg.OnLiveInstances != nil {
		s.cfg.OnLiveInstances(st.LiveInstances)
	}
	if src := s.cfg.Connections; src != nil {
		src.SetRemote(st.RemoteInFlight, st.RemoteClusterInFlight)
		// Back from fail_open, the slots are stated again even when the Store does not say this
		// instance rejoined: a report that timed out but ran later (a Redis frozen, then
		// thawed) refreshed the heartbeat, while the others' leases may have dropped the
		// holdings before it.
		if st.Rejoined || away {
			src.Rejoined()
		}
	}
}

// keepLostEmergency notices that the Store lost the operator emergency in force (tickMu held)
// and keeps enforcing it in st until the sync loop has set it again (restoreEmergency). The
// overrides' version only grows while the Store keeps its data: a lower one means it lost them
// (reloadOverrides writes them back), and the operator emergency with them. The Watch may have
// seen the loss first (refreshOverrides set lostEmergency and wrote the overrides back, so the
// version no longer shows it).
func (l *Limiter) keepLostEmergency(prev, st *store.ClusterState) {
	lost := st.ConfigVersion < l.storeVersion.Load() || l.lostEmergency != nil
	switch {
	case st.Emergency:
		l.lostEmergency = nil // the Store has an emergency: nothing to restore
	case lost && prev.Emergency && prev.EmergencySource == store.EmergencySourceOperator:
		l.lostEmergency = &store.Emergency{Active: true, Reason: prev.EmergencyReason, Until: prev.EmergencyUntil}
		// Enforced meanwhile as before: the emptied Store's answer would lift it until the
		// next report.
		st.Emergency, st.EmergencySource, st.EmergencyReason, st.EmergencyUntil =
			true, prev.EmergencySource, prev.EmergencyReason, prev.EmergencyUntil
		st.Factors = prev.Factors
	default:
		l.lostEmergency = nil // no operator emergency to restore (it ended meanwhile)
	}
}

// repayDebts starts a background lease for every app in local debt that has none in flight
// (refill: not while the Store refused it recently): the debt is paid as L2 refills, whether
// requests come or not. Paid only by the leases of later requests, the debt of one large upload
// outlived any idle period (L2 holds at most a burst, so the refill of the idle time was lost)
// and the app's first requests after it were refused.
func (l *Limiter) repayDebts(apps []*App) {
	for _, a := range apps {
		if a.balance.Load() < 0 {
			a.refill()
		}
	}
}

// retiredApps is the set of apps a reload removed (their statistics are flushed at once).
func (l *Limiter) retiredApps() map[*App]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.retired) == 0 {
		return nil
	}
	m := make(map[*App]bool, len(l.retired))
	for _, a := range l.retired {
		m[a] = true
	}
	return m
}

// rateTau is the time constant of the consumption-rate moving average.
const rateTau = time.Second

// updateRates refreshes each app's consumption rate, its rate-based lease target (rate ×
// horizon) and the balance below which a background refill starts.
func (l *Limiter) updateRates(now time.Time, apps []*App, cfg Config) {
	dt := now.Sub(l.lastRate)
	if dt <= 0 {
		return
	}
	l.lastRate = now
	alpha := 1 - math.Exp(-float64(dt)/float64(rateTau))
	st := l.state.Load()
	s := l.snap()
	for _, a := range apps {
		c := a.consumed.Load()
		inst := float64(c-a.lastCons.Load()) / dt.Seconds()
		a.lastCons.Store(c)
		a.rate = max(alpha*inst+(1-alpha)*a.rate, 0)
		if inst == 0 && a.rate < idleRate {
			a.rate = 0
		}
		a.rateTgt.Store(int64(math.Ceil(a.rate * a.horizon(cfg).Seconds())))
		t := a.want(0, 0, a.pol.Load(), st, s)
		a.refillAt.Store(a.refillPoint(t, cfg))
	}
}

// expireLeases returns the unspent tokens of apps that stopped using them: the last lease is
// older than LeaseTTL and the app is idle (its rate would not spend one token in LeaseTTL). An
// app that is still spending keeps its lease, which lasts about LeaseHorizon at its rate (a
// lease returned while being spent would only be leased again). Tokens above the app's current
// target go back; the kept ones start a new TTL.
func (l *Limiter) expireLeases(now time.Time, apps []*App, cfg Config) {
	for _, a := range apps {
		if a.balance.Load() <= 0 || now.UnixNano()-a.lastLease.Load() < int64(cfg.LeaseTTL) ||
			a.rate*cfg.LeaseTTL.Seconds() >= 1 {
			continue
		}
		_ = a.returnTokens(now, a.rateTgt.Load())
	}
}

// returnExcess gives L2 back the local tokens above an app's fairness cap (burst / (2 × live
// instances)): tokens a settlement refunded (a declared body that was never read), or a lease
// from when fewer instances were live. Local tokens are outside L2's burst bound; keeping no
// more than the cap locally keeps an app's tokens, local and L2 together, close to its burst.
func (l *Limiter) returnExcess(now time.Time, apps []*App) {
	live := int64(max(l.state.Load().LiveInstances, 1))
	for _, a := range apps {
		p := a.pol.Load()
		limit := max(int64(p.Burst/float64(2*live)), 1)
		if a.balance.Load() > limit {
			_ = a.returnTokens(now, limit)
		}
	}
}

// expireIsolated retires isolated buckets idle longer than IsolatedTTL whose statistics are
// delivered or due. A retired app's statistics are flushed at once: retired while they may
// still wait, an isolated tenant's would cost a flush of their own a minute after its last
// request whatever the StatsInterval (600 flushes in a black-box run with stats_interval 10m).
func (l *Limiter) expireIsolated(now time.Time, cfg Config) {
	var gone []*App
	l.isoMu.Lock()
	for id, a := range l.isolated {
		idle := now.UnixNano()-a.lastUse.Load() > int64(cfg.IsolatedTTL)
		if idle && (a.statsSettled() || a.statsDue(now, false)) {
			delete(l.isolated, id)
			a.retiredAt = now
			gone = append(gone, a)
		}
	}
	l.isoMu.Unlock()
	if len(gone) == 0 {
		return
	}
	l.mu.Lock()
	l.retired = append(l.retired, gone...)
	l.mu.Unlock()
	if l.Level() != LevelFailOpen {
		l.settleRetired(now)
	}
}

// settleRetired returns the tokens of removed apps and forgets those with nothing left to
// return or report. A take still holding a removed app (a request in flight during a reload)
// may lease again; its tokens are returned here on a later tick.
func (l *Limiter) settleRetired(now time.Time) {
	l.mu.Lock()
	retired := append([]*App(nil), l.retired...)
	l.mu.Unlock()
	var keep []*App
	for _, a := range retired {
		_ = a.returnTokens(now, 0)
		if !a.settled() || now.Sub(a.retiredAt) < time.Minute {
			keep = append(keep, a)
		}
	}
	l.mu.Lock()
	// Apps retired while we worked are appended after the ones we looked at.
	l.retired = append(keep, l.retired[len(retired):]...)
	l.mu.Unlock()
}
