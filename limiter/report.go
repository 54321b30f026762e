package limiter

import (
	"context"
	"sync"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// syncer is the sync loop's own state: when it last reported and measured rates, the report
// Seqs, the cost batch awaiting its acknowledgement, and the ids whose in-flight counts the
// Store holds. mu serialises tick, report and Close, and guards everything here.
type syncer struct {
	mu         sync.Mutex
	lastReport time.Time       // the last report attempt
	lastRate   time.Time       // the last update of the consumption rates
	prevIn     map[string]bool // ids with requests in flight at the last report
	seq        uint64          // the last report Seq used
	reported   bool            // a report was sent: the Store may count this instance live
	pending    *clusterBatch   // the cost batch whose report has not succeeded yet
	costSince  time.Time       // when the last cost batch was taken
	unwatch    func()          // stops the Store's Watch, once the loop started it
}

// clusterBatch is the admitted cost of one report Seq (L1's usage window): sent until a report
// carrying it succeeds, always with the same Seq, because a failed report may still have been
// applied (a timeout after the Store ran it) and the Store applies a Seq once (Report.Seq).
type clusterBatch struct {
	seq     uint64
	cost    int64
	span    time.Duration // since the previous batch was taken: how long the cost took (Report.CostSpan)
	signals store.Signals // the backend's answers since the previous batch (Report.Signals)
}

// report sends one cluster report (syncer.mu held): the heartbeat, the pending cost batch (again if
// the last report failed, otherwise the cost admitted since), the in-flight counts, and the
// statistics that are due (statsDue; every app's when all is set: Close). It applies L1's
// answer. leaving makes it the instance's last report (Close): the Store takes the instance
// out of the live set once it is applied (store.Report.Leaving).
func (l *Limiter) report(now time.Time, apps []*App, all, leaving bool) error {
	s := l.snap()
	rep := store.Report{Cluster: s.cfg.Cluster, Instance: s.cfg.Instance, StatsInterval: s.cfg.StatsInterval, Leaving: leaving}
	var inflight map[string]int64
	if src := s.cfg.Connections; src != nil {
		inflight, rep.InFlight = src.InFlight()
	}
	b := l.syncer.costBatch(now, apps, l.Level() == LevelFailOpen)
	rep.Seq, rep.Cost, rep.CostSpan, rep.Signals = b.seq, b.cost, b.span, b.signals
	flushed := l.dueStats(&rep, now, apps, all)
	addInFlight(&rep, inflight, l.syncer.prevIn)
	away := l.Level() == LevelFailOpen
	l.syncer.reported = true
	st, sent, answered, err := l.sendReport(rep)
	if err != nil {
		for _, f := range flushed {
			f.a.statsFailed(f.b)
		}
		return err
	}
	l.statsReported(flushed, &st, sent, answered)
	l.syncer.pending, l.syncer.prevIn = nil, nonZero(inflight)
	l.applyState(s, st, away && !leaving, leaving)
	return nil
}

// costBatch returns the cost batch the report carries (y.mu held): the pending one again
// while its report has not succeeded, otherwise a new one with the cost settled since the last,
// under the next Seq. failOpen says the Store is away.
func (y *syncer) costBatch(now time.Time, apps []*App, failOpen bool) *clusterBatch {
	if y.pending != nil || failOpen {
		// The cost settled while the Store is away (a batch not acknowledged, or fail-open's
		// probe) stays out of L1's usage window. Sent after the outage in one report, an
		// outage's worth of cost would count as one interval's and push the cluster into its
		// automatic emergency after every failover. L1's usage is a rate, not an account:
		// only the statistics are exactly once.
		for _, a := range apps {
			a.costSent = a.settledCost.Load()
			a.takeSignals(nil, true) // signals of an outage would fall in one period after it
		}
	}
	if y.pending != nil && failOpen {
		// For the same reason, the batch that failed as the outage began is given up, its Seq
		// with it (the Store may have applied it; if not, L1 misses a rate's worth, not an
		// account's): delivered after the outage it would land in the interval after it, on
		// top of the burst every app leases then.
		y.pending = nil
	}
	if y.pending == nil {
		y.seq++
		b := &clusterBatch{seq: y.seq}
		if !y.costSince.IsZero() {
			b.span = now.Sub(y.costSince)
		}
		y.costSince = now
		for _, a := range apps {
			c := a.settledCost.Load() - a.costSent
			a.costSent += c
			b.cost += c
			a.takeSignals(&b.signals, false)
		}
		y.pending = b
	}
	return y.pending
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
	retired := l.cat.retired.set()
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
	err = l.callStore(context.Background(), func(ctx context.Context) (err error) {
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
	l.tally.flushes.Add(int64(len(flushed)))
	l.tally.logLost(l.clock.Now(), l.logger(), l.snap().cfg.Cluster.ID)
}

// applyState makes L1's answer the state in force (syncer.mu held): an operator emergency the
// Store lost is still enforced, the overrides' version is recorded, the live-instance count
// and the other instances' connections are passed on. away says the report was fail_open's
// probe; leaving, that it was the instance's last (its slots are not leased again: it has
// left).
func (l *Limiter) applyState(s *snapshot, st store.ClusterState, away, leaving bool) {
	st.LiveInstances = max(st.LiveInstances, 1)
	prev := l.state.Load()
	l.lostEm.keep(st.ConfigVersion < l.ovr.storeVersion.Load(), prev, &st)
	l.ovr.storeVersion.Store(st.ConfigVersion)
	l.state.Store(&st)
	l.logEmergency(prev, &st)
	l.followCapacity(prev, &st)
	if first := !l.deg.reached.Swap(true); (first || st.LiveInstances != prev.LiveInstances) && s.cfg.OnLiveInstances != nil {
		s.cfg.OnLiveInstances(st.LiveInstances)
	}
	if src := s.cfg.Connections; src != nil {
		src.SetRemote(st.RemoteInFlight, st.RemoteClusterInFlight)
		// Back from fail_open, the slots are stated again even when the Store does not say this
		// instance rejoined: a report that timed out but ran later (a Redis frozen, then
		// thawed) refreshed the heartbeat, while the others' leases may have dropped the
		// holdings before it.
		if (st.Rejoined || away) && !leaving {
			src.Rejoined()
		}
	}
}
