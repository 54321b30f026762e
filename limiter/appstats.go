package limiter

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Per-app statistics travel with the app's own Store calls: each lease carries the requests the
// app admitted since its last batch (LeaseRequest.Stats), and only an app that has not leased
// for Config.StatsInterval has its batch flushed on its own, in the next report. Redis work then
// grows with leases, that is with traffic, and not with apps × instances × report rate. Every
// batch has a Seq and the Store applies it once: a batch whose call failed is sent again, with
// the same Seq, by the app's next call. See docs/design.md, "Statistics".

// Config.StatsInterval is how long an app's statistics may wait for a lease to carry them before
// the report flushes them on their own. Its default, DefaultStatsInterval, is well above
// LeaseHorizon, so an app that keeps leasing never needs a flush: with 10 s, an app at 10
// requests/s (a lease every 30 to 60 s) would cost a flush per 100 requests, twice the Redis
// budget of 5 calls per 1000 requests; with 30 s the scale harness still measured one flush per
// lease. What a flush still costs is one call per request of an instance whose requests of the
// app come further apart than the interval (each leases its one token, and that lease cannot
// carry the request it admits): a longer interval trades fresher statistics in Redis for fewer
// calls (docs/performance.md, "Statistics flushes of sparse pairs").

// statsBatch is one app's statistics under one Seq.
type statsBatch struct {
	seq      uint64
	requests int64
	sent, at time.Time // when the call that the Store acknowledged it with was sent, and answered
}

// appStatsState is an App's statistics delivery (statsMu).
type appStatsState struct {
	pend    *statsBatch  // sent, not acknowledged: sent again with its Seq
	resend  bool         // the next report sends the app's statistics: the last call carrying pend failed, or the Store lost some
	acked   []statsBatch // acknowledged, not yet known to be on the Store's replicas; oldest first
	statsAt time.Time    // when a call last delivered (or had nothing to deliver)
}

// ackWindow is how long after the Store acknowledged a batch it is taken to be on the Store's
// replicas too (replication lag is milliseconds): an acknowledged batch is kept until a call
// sent at least this long after its acknowledgement finds the Store still has it. Until then a
// failover, however long it takes and however long the app then stays quiet, cannot lose it
// unseen: the app's next call tells (statsDelivered).
const ackWindow = 10 * time.Second

// seqMemory is how long after an instance's last numbered call for an app the Store surely
// still remembers its Seq there: the app's record lives store.RecordIdle(StatsInterval) after
// a call, and the Seq store.ReportSeqTTL. Batches kept longer are dropped unjudged: a Store
// that forgot the Seq answers 0 and would have them counted again, into a record made anew.
func (l *Limiter) seqMemory() time.Duration {
	return min(store.RecordIdle(l.snap().cfg.StatsInterval), store.ReportSeqTTL)
}

// statsTally numbers the Limiter's statistics batches and counts what their delivery did:
// batches flushed by reports, and requests whose statistics the Store lost and that were sent
// again. Its counters are atomics; the notice throttles the WARN of lost statistics.
type statsTally struct {
	seq     atomic.Uint64 // the last statistics Seq used (next)
	lost    atomic.Int64  // requests whose statistics the Store lost, not yet logged
	resent  atomic.Int64  // requests whose statistics were sent again
	flushes atomic.Int64  // per-app statistics batches carried by reports
	notice  notice        // the WARN of lost statistics
}

// next numbers a statistics batch: one counter per Limiter, so an app's Seqs increase
// whichever call carries them. It starts at the time in µs (see newLimiter).
func (s *statsTally) next() uint64 { return s.seq.Add(1) }

// takeStats returns the batch the app's next call carries: the unacknowledged one again, or the
// requests admitted since the last batch under a new Seq (a zero batch when there are none).
func (a *App) takeStats() statsBatch {
	a.statsMu.Lock()
	defer a.statsMu.Unlock()
	if a.st.pend != nil {
		return *a.st.pend
	}
	n := a.requests.Load() - a.sentReqs.Load()
	if n <= 0 {
		return statsBatch{}
	}
	b := statsBatch{seq: a.l.tally.next(), requests: n}
	a.sentReqs.Add(n)
	a.st.pend = &b
	return b
}

// statsFailed records that a call carrying b failed. The Store may have applied it all the same
// (a timeout after Redis ran the script), and it remembers the Seq only as long as the app's
// record lives, store.RecordIdle after that call: the batch goes out again with the next report,
// not after StatsInterval, which may be longer (a batch sent again after the record expired
// would be counted twice).
func (a *App) statsFailed(b statsBatch) {
	a.statsMu.Lock()
	defer a.statsMu.Unlock()
	if b.seq != 0 && a.st.pend != nil && a.st.pend.seq == b.seq {
		a.st.resend = true
	}
}

// statsDelivered records that a call carrying b, sent at sent, succeeded at now; prev is the
// Store's answer (the Seq it had applied before). A batch acknowledged before the call was sent
// whose Seq is above prev was lost by the Store (a failover to a replica that had not received
// it): its requests go into the next batch again. A batch acknowledged after the call was sent
// says nothing: the call may have run first (a report held up by another app's slow shard,
// answering after the app's next leases), and counting it lost would count it twice. Nor does
// one acknowledged at the very time the call was sent: a clock that did not move between the
// two readings cannot order them (Windows' advances with the timer interrupt, every 0.5 to
// 15.6 ms, and a lease of the in-process Store takes microseconds), and a later call judges it.
// A batch the Store still has ackWindow after acknowledging it is on its replicas: no longer
// kept. Batches older than the Store's memory of the Seq (seqMemory) are dropped unjudged.
func (a *App) statsDelivered(b statsBatch, prev uint64, sent, now time.Time) {
	a.statsMu.Lock()
	defer a.statsMu.Unlock()
	a.st.statsAt = now
	if b.seq == 0 {
		return
	}
	if n := len(a.st.acked); n > 0 && now.Sub(a.st.acked[n-1].sent) >= a.l.seqMemory() {
		a.st.acked = a.st.acked[:0]
	}
	kept, lost := a.st.acked[:0], false
	for _, old := range a.st.acked {
		switch {
		case old.seq > prev && old.seq != b.seq && old.at.Before(sent):
			a.sentReqs.Add(-old.requests) // lost: the next batch carries them again
			a.l.tally.lost.Add(old.requests)
			lost = true
		case old.seq <= prev && sent.Sub(old.at) >= ackWindow:
			// on the replicas too
		default:
			kept = append(kept, old)
		}
	}
	a.st.acked = kept
	if a.st.pend != nil && a.st.pend.seq == b.seq {
		a.st.pend, a.st.resend = nil, false
		b.sent, b.at = sent, now
		a.st.acked = append(a.st.acked, b)
	}
	if lost {
		a.st.resend = true // not after StatsInterval: the app may have gone quiet
	}
}

// statsDue reports whether the report must flush the app's statistics: some are unsent, and the
// last call carrying them failed or showed the Store lost some, or no call carried them for
// Config.StatsInterval, or SyncBatch of them wait (or all is set: Close, a retired app).
func (a *App) statsDue(now time.Time, all bool) bool {
	a.statsMu.Lock()
	defer a.statsMu.Unlock()
	unsent := a.requests.Load() - a.sentReqs.Load()
	if a.st.pend == nil && unsent <= 0 {
		return false
	}
	cfg := &a.l.snap().cfg
	return all || a.st.resend || now.Sub(a.st.statsAt) >= cfg.StatsInterval || unsent >= cfg.SyncBatch
}

// statsSettled reports whether every admitted request's statistics were acknowledged.
func (a *App) statsSettled() bool {
	a.statsMu.Lock()
	defer a.statsMu.Unlock()
	return a.st.pend == nil && a.requests.Load() == a.sentReqs.Load()
}

// logLost counts the statistics the Store lost as sent again, and logs them: at most once per
// noticeEvery, with the counts since the last line.
func (s *statsTally) logLost(now time.Time, log *zap.Logger, cluster string) {
	n := s.lost.Swap(0)
	if n == 0 {
		return
	}
	s.resent.Add(n)
	times, requests, ok := s.notice.due(now, n)
	if log != nil && ok {
		log.Warn("rate_limit: the Store lost statistics it had acknowledged ("+lossCauses+"); sending them again",
			zap.String("cluster", cluster), zap.Int64("requests", requests), zap.Int64("times", times))
	}
}
