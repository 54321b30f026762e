package limiter

import (
	"time"
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
// emergency after one round trip to the Store, not after a sync interval during which it
// would serve under its config alone. It does not wait for the report.
func (l *Limiter) SyncNow() {
	select {
	case l.kick <- struct{}{}:
	default: // one is pending
	}
}

// syncNow is the loop's side of SyncNow.
func (l *Limiter) syncNow() {
	l.syncer.mu.Lock()
	l.syncer.lastReport = time.Time{} // the report is due
	l.syncer.mu.Unlock()
	l.tick(l.clock.Now())
}

// tick does the periodic work that is due at now: the report (every sync interval of the
// current level; in fail-open it is the 1 s probe), the consumption rates and lease targets,
// lease expiry, isolated-app expiry, and the settlement of retired apps. Tests call it directly
// with a manual clock.
func (l *Limiter) tick(now time.Time) {
	l.syncer.mu.Lock()
	defer l.syncer.mu.Unlock()
	if l.closed.Load() {
		return
	}
	cfg := l.snap().cfg
	level := l.Level()
	// A timer firing a little early must not skip a whole interval.
	if now.Sub(l.syncer.lastReport) >= syncInterval(level, cfg.SyncInterval)-cfg.SyncInterval/2 {
		l.syncer.lastReport = now // the last attempt: in fail-open, the probe runs once a second
		if l.report(now, l.visited(), false, false) == nil {
			if e := l.lostEm.take(); e != nil {
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
		l.cat.retired.settle(now)
		l.active.dropQuiet()
	}
	l.expireIsolated(now, cfg)
}
