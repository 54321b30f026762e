package limiter

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Pacing (docs/adaptive.md, "Even admissions"): under a learned capacity, an instance whose
// app is at its quota in a fleet spends its leased tokens no faster than its share of what L2
// refills (a little above it), instead of at the rate requests come. Without it, a lease of a
// few hundred milliseconds of the share goes out at the offered rate, and the backend sees the
// fleet's leases as bursts: a queue that grows with every lease, which the learned capacity
// reads as overload. A static capacity protects no backend's queue, so it does not pace.

const (
	// paceHeadroom is how far above its share of L2's refill an instance spends: enough that
	// the tokens of one lease are spent before the next arrives, so that pacing never leaves
	// leased tokens unused.
	paceHeadroom = 1.1
	// paceTolerance is how far ahead of the even schedule a take may be: the burst pacing
	// lets through (at least two tokens' worth).
	paceTolerance = 20 * time.Millisecond
)

// pacer spaces one instance's takes of an app at rate tokens per second (GCRA: a take of cost
// c is admitted when the schedule tat is at most tolerance ahead of now, and moves it on by
// c / rate).
type pacer struct {
	rate      float64 // tokens per second
	tolerance int64   // ns
	tat       atomic.Int64
}

// admit takes a place of cost in the schedule at now (unix ns), or says how long until there
// is one.
func (p *pacer) admit(now, cost int64) (time.Duration, bool) {
	step := int64(float64(cost) / p.rate * 1e9)
	for {
		tat := p.tat.Load()
		if ahead := tat - now; ahead > p.tolerance {
			return time.Duration(ahead - p.tolerance), false
		}
		if p.tat.CompareAndSwap(tat, max(tat, now)+step) {
			return 0, true
		}
	}
}

// paceTake takes a place of cost in the app's schedule, or returns the refusal: as at the
// quota, with no remaining tokens shown (the leased ones are spoken for: they go out on the
// schedule) and the time until its place.
func (a *App) paceTake(pc *pacer, cost int64, p *appPolicy, st *store.ClusterState) (Decision, bool) {
	wait, ok := pc.admit(a.l.clock.Now().UnixNano(), cost)
	if ok {
		return Decision{}, true
	}
	d := a.reject(p, st, store.ReasonAppExhausted, wait)
	d.Remaining = 0
	return d, false
}

// pace sets or clears the app's pacer after a lease: on under a learned capacity while the
// app is at its quota in a fleet (contested), at paceHeadroom × its share of L2's refill
// (the refill factor the lease asked for), carrying the schedule over from the last pacer.
// It stays on through a lease that came back whole while L2 is left with less than two such
// leases: paced, an instance leaves L2 the tokens of the pause between its leases, and one
// whole grant does not mean the app is under its quota; spent at the offered rate, that grant
// would be the very burst pacing is for. More than that left in L2 is a share the other
// instances do not take (traffic that comes to this instance alone): pacing ends, so that
// this instance may use it.
func (a *App) pace(req store.LeaseRequest, res store.Lease, contested bool, live int) {
	if !paced(live) || !contested && (a.pacing.Load() == nil || res.Remaining >= 2*req.Want) {
		a.pacing.Store(nil)
		return
	}
	a.setPace(a.l.state.Load(), req.Factor, live)
}

// repace keeps a pacer's rate on the refill factor L1's state st gives the app now (the sync
// loop's, every tick): between leases L1's share for the app may grow, and a pacer left at the
// old rate would spend the lease slowly and put off the next one, which brings the new rate.
func (a *App) repace(st *store.ClusterState, s *snapshot) {
	if a.pacing.Load() == nil {
		return
	}
	a.setPace(st, s.adaptiveFactor(st, a.pol.Load().AppPolicy), st.LiveInstances)
}

// setPace puts in force a pace of paceHeadroom × the app's share of L2's refill at factor
// among live instances, carrying the schedule over from the last pacer (a rate within 1 % of
// the one in force changes nothing); without a learned capacity in st, or with no refill, it
// ends the pace.
func (a *App) setPace(st *store.ClusterState, factor float64, live int) {
	rate := a.pol.Load().Guaranteed * factor / float64(max(live, 1)) * paceHeadroom
	if st.CapacitySource != store.CapacityAdaptive || !(rate > 0) || math.IsInf(rate, 0) {
		a.pacing.Store(nil)
		return
	}
	old := a.pacing.Load()
	if old != nil && math.Abs(old.rate-rate) <= 0.01*old.rate {
		return
	}
	next := &pacer{rate: rate, tolerance: int64(max(paceTolerance, time.Duration(2/rate*1e9)))}
	if old != nil {
		next.tat.Store(old.tat.Load())
	}
	a.pacing.Store(next)
}
