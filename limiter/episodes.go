package limiter

import (
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// slowEpisode is one stretch of a slow Store (the mild and significant levels, and the normal
// level for less than slowHold in between), for the lines that begin and end it.
type slowEpisode struct {
	start       time.Time // zero: no episode
	worst       Level     // the highest latency level of the episode
	changes     int64     // level changes after the one that began it
	normalSince time.Time // when the level was last seen normal in it, after being slow; zero while slow
}

// levelChanged records a change between the latency levels (d.mu held): the first one up
// begins a slow episode with a WARN, and so does each new worst level in it; the others are
// counted for the line that ends it (endSlow).
func (d *degrader) levelChanged(from, to Level) {
	ep := &d.slow
	if ep.start.IsZero() {
		*ep = slowEpisode{start: d.clock.Now(), worst: to}
		d.logSlow(from, to)
		return
	}
	ep.changes++
	if to > ep.worst {
		ep.worst = to
		d.logSlow(from, to)
	}
}

// endSlow ends the slow episode in the log once the level has been normal for slowHold
// (d.mu held). The fail_open path sets the level without levelChanged: the hold starts
// when a call finds it normal.
func (d *degrader) endSlow() {
	ep := &d.slow
	if ep.start.IsZero() {
		return
	}
	now := d.clock.Now()
	switch {
	case Level(d.level.Load()) != LevelNormal:
		ep.normalSince = time.Time{}
		return
	case ep.normalSince.IsZero():
		ep.normalSince = now
		return
	case now.Sub(ep.normalSince) < slowHold:
		return
	}
	ended := *ep
	*ep = slowEpisode{}
	log := d.cfg().Logger
	if log == nil {
		return
	}
	log.Info("rate_limit: Store latency back to normal",
		zap.String("cluster", d.cfg().Cluster.ID),
		zap.Duration("duration", ended.normalSince.Sub(ended.start)),
		zap.String("worst_level", ended.worst.String()),
		zap.Int64("level_changes", ended.changes),
		zap.Duration("store_latency", d.latency),
		zap.String("degradation_level", LevelNormal.String()))
}

// failEpisode is one stretch of fail_open, for the log line that ends it.
type failEpisode struct {
	start            time.Time
	left             time.Time // when fail_open was last left, until the end is logged; zero otherwise
	relapses         int64     // failures within recoveryHold of leaving, which resumed the episode
	errs             int64     // failed Store calls, the first included
	reqs, cost       int64     // d.rescue.reqs / d.rescue.cost when it began
	rejected         int64     // d.rescue.rejects when it began
	assumedAlone     bool      // the rescue buckets assumed this instance is alone
	assumedInstances int
	permanent        bool // a permanent error (PermanentError) was logged in this episode
}

// enterFailOpen switches to fail-open after a failed Store call (d.mu held) and logs it once.
func (d *degrader) enterFailOpen(err error) {
	d.level.Store(uint32(LevelFailOpen))
	live := d.live()
	d.episode = failEpisode{
		start:            d.clock.Now(),
		errs:             1,
		reqs:             d.rescue.reqs.Load(),
		cost:             d.rescue.cost.Load(),
		rejected:         d.rescue.rejects.Load(),
		assumedAlone:     !d.reached.Load() && d.cfg().KnownInstances == 0,
		assumedInstances: live,
	}
	log := d.cfg().Logger
	if log == nil {
		return
	}
	cfg := d.cfg()
	fields := []zap.Field{
		zap.String("cluster", cfg.Cluster.ID),
		zap.Error(err),
		zap.String("on_redis_failure", cfg.OnStoreFailure.String()),
	}
	if cfg.OnStoreFailure == FailLocal {
		fields = append(fields, zap.Int("rescue_live_instances", live))
	}
	if p, ok := store.AsPermanent(err); ok {
		d.episode.permanent = true
		d.logPermanent(p)
	} else {
		log.Warn("rate_limit: Store unavailable, entering fail_open", fields...)
	}
	if d.episode.assumedAlone && cfg.OnStoreFailure == FailLocal {
		log.Warn("rate_limit: this instance never had an answer from the Store and knows no live-instance "+
			"count: its rescue buckets allow each app's full guaranteed rate, so a fleet of N such "+
			"instances may admit up to N times an app's quota until the Store answers",
			zap.String("cluster", cfg.Cluster.ID))
	}
}

// logPermanent logs a permanent Store error (d.mu held), once per fail_open episode: a
// configuration error (credentials, permissions, certificates) that only an operator can fix.
// The limiter keeps probing, so the fix is noticed and logged like any recovery.
func (d *degrader) logPermanent(p store.PermanentError) {
	log := d.cfg().Logger
	if log == nil {
		return
	}
	cfg := d.cfg()
	log.Error("rate_limit: the Store refuses this instance's configuration, entering fail_open until it is fixed",
		zap.String("cluster", cfg.Cluster.ID),
		zap.String("cause", p.Error()),
		zap.String("remedy", p.Remedy()),
		zap.String("on_redis_failure", cfg.OnStoreFailure.String()))
}

// endEpisode logs the end of a fail_open episode that was left recoveryHold ago without a
// failure since (or at once with now set: Close) (d.mu held).
func (d *degrader) endEpisode(now bool) {
	ep := d.episode
	if ep.left.IsZero() || (!now && d.clock.Now().Sub(ep.left) < recoveryHold) {
		return
	}
	d.episode.left = time.Time{}
	log := d.cfg().Logger
	if log == nil {
		return
	}
	log.Info("rate_limit: Store recovered, leaving fail_open",
		zap.String("cluster", d.cfg().Cluster.ID),
		zap.Duration("duration", ep.left.Sub(ep.start)),
		zap.Int64("failed_store_calls", ep.errs),
		zap.Int64("relapses", ep.relapses),
		zap.Int64("admitted_without_store", d.rescue.reqs.Load()-ep.reqs),
		zap.Int64("admitted_cost_without_store", d.rescue.cost.Load()-ep.cost),
		zap.Int64("rejected_by_rescue", d.rescue.rejects.Load()-ep.rejected),
		zap.String("degradation_level", Level(d.level.Load()).String()))
}

// logSlow logs a rise of the latency level (d.mu held).
func (d *degrader) logSlow(from, to Level) {
	log := d.cfg().Logger
	if log == nil {
		return
	}
	log.Warn("rate_limit: Store slow, leasing in larger batches",
		zap.String("cluster", d.cfg().Cluster.ID),
		zap.String("from", from.String()),
		zap.String("degradation_level", to.String()),
		zap.Duration("store_latency", d.latency),
		zap.Int64("lease_multiplier", leaseMultiplier(to)))
}
