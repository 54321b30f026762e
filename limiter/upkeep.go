package limiter

import (
	"math"
	"time"
)

// repayDebts starts a background lease for every app in local debt that has none in flight
// (refill: not while the Store refused it recently): the debt is paid as L2 refills, whether
// requests come or not. Paid only by the leases of later requests, the debt of one large upload
// would outlive any idle period (L2 holds at most a burst, so the refill of the idle time is
// lost) and the app's first requests after it would be refused.
func (l *Limiter) repayDebts(apps []*App) {
	for _, a := range apps {
		if a.balance.Load() < 0 {
			a.refill()
		}
	}
}

// rateTau is the time constant of the consumption-rate moving average.
const rateTau = time.Second

// updateRates refreshes each app's consumption rate, its rate-based lease target (rate ×
// horizon), the balance below which a background refill starts, and its pacer's rate.
func (l *Limiter) updateRates(now time.Time, apps []*App, cfg Config) {
	dt := now.Sub(l.syncer.lastRate)
	if dt <= 0 {
		return
	}
	l.syncer.lastRate = now
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
		a.repace(st, s)
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

// expireIsolated retires the isolated buckets idle longer than IsolatedTTL whose statistics
// are delivered or due, and settles them at once unless the Store is away.
func (l *Limiter) expireIsolated(now time.Time, cfg Config) {
	gone := l.cat.isolated.expire(now, cfg.IsolatedTTL)
	if len(gone) == 0 {
		return
	}
	l.cat.retired.add(now, gone)
	if l.Level() != LevelFailOpen {
		l.cat.retired.settle(now)
	}
}
