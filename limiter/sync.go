package limiter

import (
	"context"
	"math"
	"time"

	"go.uber.org/zap"
)

// loop is the sync loop: one per Limiter, ticking every SyncInterval, or early when an app's
// admitted requests since its last report reach SyncBatch.
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
			l.tickForced(l.clock.Now(), true)
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		t.Reset(l.snap().cfg.SyncInterval)
	}
}

// tick does the periodic work that is due at now: the report (every sync interval of the
// current level; in fail-open it is the 1 s probe; early after SyncBatch requests), the
// consumption rates and lease targets, lease expiry, isolated-app expiry, and the settlement of
// retired apps. Tests call it directly with a manual clock.
func (l *Limiter) tick(now time.Time) {
	force := false
	select {
	case <-l.kick:
		force = true
	default:
	}
	l.tickForced(now, force)
}

func (l *Limiter) tickForced(now time.Time, force bool) {
	l.tickMu.Lock()
	defer l.tickMu.Unlock()
	if l.closed.Load() {
		return
	}
	cfg := l.snap().cfg
	level := l.Level()
	if level == LevelFailOpen {
		force = false // the probe runs once a second, however busy the apps are
	}
	// A timer firing a little early must not skip a whole interval.
	if force || now.Sub(l.lastReport) >= syncInterval(level, cfg.SyncInterval)-cfg.SyncInterval/2 {
		l.lastReport = now // the last attempt: in fail-open, the probe runs once a second
		if l.report(now) == nil {
			l.watchOverrides()
			if l.outdated() {
				l.refreshOverrides()
			}
		}
	}
	apps := l.apps()
	l.updateRates(now, apps, cfg)
	if l.Level() != LevelFailOpen {
		l.expireLeases(now, apps, cfg)
		l.returnExcess(now, apps)
		l.settleRetired(now)
	}
	l.expireIsolated(now, cfg)
}

// reportBatch is the statistics of one report Seq: sent until a report carrying them succeeds,
// always with the same Seq, because a failed report may still have been applied (a timeout
// after the Store ran it) and the Store applies a Seq once (Report.Seq).
type reportBatch struct {
	seq  uint64
	apps []AppReport // Requests and Cost; in-flight counts are added fresh at each attempt
}

// report sends the pending batch again if the last report failed, otherwise a new batch of
// every app's statistics since the last batch, plus the in-flight counts (tickMu held). Figures
// admitted while a batch is pending wait for the next one.
func (l *Limiter) report(now time.Time) error {
	s := l.snap()
	var inflight map[string]int64
	rep := Report{Cluster: s.cfg.Cluster, Instance: s.cfg.Instance}
	if src := s.cfg.Connections; src != nil {
		inflight, rep.InFlight = src.InFlight()
	}
	if l.pending == nil {
		l.pending = l.newBatch()
	}
	rep.Seq = l.pending.seq
	seen := make(map[string]bool, len(l.pending.apps)+len(inflight))
	for _, a := range l.pending.apps {
		a.InFlight = inflight[a.App]
		seen[a.App] = true
		rep.Apps = append(rep.Apps, a)
	}
	// In-flight counts of the other ids (including ids without a bucket of their own: shared
	// unknown apps), and of ids that dropped to zero since the last report, so the Store
	// forgets their old count.
	for id, n := range inflight {
		if !seen[id] {
			seen[id] = true
			rep.Apps = append(rep.Apps, AppReport{App: id, InFlight: n})
		}
	}
	for id := range l.prevIn {
		if !seen[id] {
			seen[id] = true
			rep.Apps = append(rep.Apps, AppReport{App: id})
		}
	}
	// Apps of recently acknowledged batches, so that the Store's answer (PrevSeq) shows
	// whether it still has them.
	for id, m := range l.ackedApps {
		if now.Sub(m.at) >= ackWindow {
			delete(l.ackedApps, id)
		} else if !seen[id] {
			seen[id] = true
			rep.Apps = append(rep.Apps, AppReport{App: id})
		}
	}
	start := l.clock.Now()
	var st ClusterState
	err := l.callStore(func(ctx context.Context) (err error) {
		st, err = l.store.Report(ctx, rep)
		return err
	})
	l.observe(l.clock.Now().Sub(start), err, true)
	if err != nil {
		return err
	}
	l.resendLost(now, st.PrevSeq)
	if len(l.pending.apps) > 0 {
		l.acked = append(l.acked, ackedBatch{seq: l.pending.seq, at: now, apps: l.pending.apps})
		if l.ackedApps == nil {
			l.ackedApps = make(map[string]ackMark)
		}
		for _, a := range l.pending.apps {
			l.ackedApps[a.App] = ackMark{seq: l.pending.seq, at: now}
		}
	}
	l.pending = nil
	prev := make(map[string]bool, len(inflight))
	for id, n := range inflight {
		if n != 0 {
			prev[id] = true
		}
	}
	l.prevIn = prev
	st.LiveInstances = max(st.LiveInstances, 1)
	l.storeVersion.Store(st.ConfigVersion)
	prevLive := l.state.Load().LiveInstances
	l.state.Store(&st)
	if first := !l.reached.Swap(true); (first || st.LiveInstances != prevLive) && s.cfg.OnLiveInstances != nil {
		s.cfg.OnLiveInstances(st.LiveInstances)
	}
	if src := s.cfg.Connections; src != nil {
		src.SetRemote(st.RemoteInFlight, st.RemoteClusterInFlight)
	}
	return nil
}

// ackWindow is how long the statistics of an acknowledged report are kept in case the Store
// loses them: longer than a failover takes to be noticed (Sentinel, Redis Cluster), while
// replication lag is milliseconds.
const ackWindow = 10 * time.Second

// ackedBatch is a report batch the Store acknowledged, kept for ackWindow.
type ackedBatch struct {
	seq  uint64
	at   time.Time
	apps []AppReport
}

// ackMark is an app's latest acknowledged batch with figures.
type ackMark struct {
	seq uint64
	at  time.Time
}

// resendLost compares the Seqs the Store had applied (prev, per app) with the batches it
// acknowledged: figures of a batch above an app's prev were lost (a failover to a replica that
// had not received them) and go into the next batch again. Batches older than ackWindow are
// forgotten (tickMu held). Without a loss it costs one map lookup per app of the report.
func (l *Limiter) resendLost(now time.Time, prev map[string]uint64) {
	n := 0
	for n < len(l.acked) && now.Sub(l.acked[n].at) >= ackWindow {
		n++
	}
	l.acked = l.acked[n:]
	loss := false
	for id, p := range prev {
		if m, ok := l.ackedApps[id]; ok && p < m.seq {
			loss = true
			break
		}
	}
	if !loss {
		return
	}
	var byID map[string]*App
	var lost, batches int64
	for i := range l.acked {
		b := &l.acked[i]
		hit := false
		for j := range b.apps {
			a := &b.apps[j]
			p, ok := prev[a.App]
			if !ok || p >= b.seq || (a.Requests == 0 && a.Cost == 0) {
				continue
			}
			if byID == nil {
				byID = make(map[string]*App)
				for _, app := range l.apps() {
					byID[app.id] = app
				}
			}
			if app := byID[a.App]; app != nil {
				app.sentReqs.Add(-a.Requests) // the next batch carries them again
				app.sentCost -= a.Cost
				lost += a.Requests
				hit = true
			}
			a.Requests, a.Cost = 0, 0
		}
		if hit {
			batches++
		}
	}
	if lost > 0 {
		l.resent.Add(lost)
		if log := l.logger(); log != nil {
			log.Warn("rate_limit: the Store lost statistics it had acknowledged (a failover to a "+
				"replica that had not received them); sending them again",
				zap.String("cluster", l.snap().cfg.Cluster.ID),
				zap.Int64("requests", lost), zap.Int64("batches", batches))
		}
	}
}

// newBatch takes every app's statistics since the last batch under the next Seq (tickMu held).
// Refund lowers the pending cost; a negative balance waits for later consumption.
func (l *Limiter) newBatch() *reportBatch {
	l.seq++
	b := &reportBatch{seq: l.seq}
	for _, a := range l.apps() {
		req := a.requests.Load() - a.sentReqs.Load()
		cost := max(a.consumed.Load()-a.sentCost, 0)
		if req == 0 && cost == 0 {
			continue
		}
		a.sentReqs.Add(req)
		a.sentCost += cost
		b.apps = append(b.apps, AppReport{App: a.id, Requests: req, Cost: cost})
	}
	return b
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
		a.rateTgt.Store(int64(math.Ceil(a.rate * a.horizon(cfg).Seconds())))
		t := a.want(0, 0, a.pol.Load(), st, s)
		a.refillAt.Store(a.refillPoint(t, cfg))
	}
}

// expireLeases returns tokens leased longer than LeaseTTL ago and still unspent. The
// approximation: one lease time per app (the last grant); when it is older than LeaseTTL, all
// tokens above the app's current rate-based target go back to L2,
// and the kept tokens start a new TTL.
func (l *Limiter) expireLeases(now time.Time, apps []*App, cfg Config) {
	for _, a := range apps {
		if a.balance.Load() <= 0 || now.UnixNano()-a.lastLease.Load() < int64(cfg.LeaseTTL) {
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

// expireIsolated retires isolated buckets idle longer than IsolatedTTL.
func (l *Limiter) expireIsolated(now time.Time, cfg Config) {
	var gone []*App
	l.isoMu.Lock()
	for id, a := range l.isolated {
		if now.UnixNano()-a.lastUse.Load() > int64(cfg.IsolatedTTL) {
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
		a.mu.Lock()
		busy := a.call != nil
		a.mu.Unlock()
		settled := a.balance.Load() <= 0 && !busy &&
			a.requests.Load() == a.sentReqs.Load() && a.consumed.Load() <= a.sentCost
		if !settled || now.Sub(a.retiredAt) < time.Minute {
			keep = append(keep, a)
		}
	}
	l.mu.Lock()
	// Apps retired while we worked are appended after the ones we looked at.
	l.retired = append(keep, l.retired[len(retired):]...)
	l.mu.Unlock()
}
