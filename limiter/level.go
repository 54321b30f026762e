package limiter

import (
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Level is the degradation level set by the Store's latency and errors.
type Level uint8

// The degradation levels.
const (
	LevelNormal      Level = iota // Store latency (moving average) < 10 ms
	LevelMild                     // 10–100 ms: lease target ×2, sync every 500 ms
	LevelSignificant              // > 100 ms: lease target ×5, sync every 1 s
	LevelFailOpen                 // Store errors or timeouts: rescue mode, probe every 1 s
)

// Latency thresholds of the levels and the degraded intervals.
const (
	mildLatency        = 10 * time.Millisecond
	significantLatency = 100 * time.Millisecond
	mildSync           = 500 * time.Millisecond
	significantSync    = time.Second
	probeInterval      = time.Second
	// recoveryHold is how long the Store must answer without a failure after fail_open is
	// left before the episode ends in the log. A failure sooner resumes the same episode: the
	// probe (the cluster report) can succeed while the slot of some app is still down (a Redis
	// Cluster master failing over), and every lease for that app fails again. Without the hold
	// each such round logged a WARN and an INFO, about once a second.
	recoveryHold = 5 * time.Second
	// levelHold is how long the latency average must stay low enough for a lower level before
	// the level goes down (it goes up at once). On a starved machine the average crossed the
	// thresholds several times a second, and each change logged a WARN or an INFO.
	levelHold = 5 * time.Second
	// slowHold is how long the level must stay normal before a slow-Store episode ends in the
	// log. On a CPU-bound host the latency level went up and back down every 20–30 s, each time
	// past levelHold, and every round logged a WARN and an INFO.
	slowHold     = time.Minute
	latencyAlpha = 0.2 // weight of one observation in the latency moving average
	// latencyAlphaDown is the weight of an observation below the average: the level follows a
	// Store that got faster within a few calls (at the significant level a report is made
	// once a second), and one that got slower only when it stays slow.
	latencyAlphaDown = 0.5
)

// String returns the level's name as used in metrics and the admin API.
func (v Level) String() string {
	switch v {
	case LevelNormal:
		return "normal"
	case LevelMild:
		return "mild"
	case LevelSignificant:
		return "significant"
	case LevelFailOpen:
		return "fail_open"
	}
	return "unknown"
}

// levelFor maps a latency moving average to a level.
func levelFor(avg time.Duration) Level {
	switch {
	case avg > significantLatency:
		return LevelSignificant
	case avg >= mildLatency:
		return LevelMild
	}
	return LevelNormal
}

// nextLevel is the level after cur for a latency moving average, with hysteresis: a level is
// left downwards only once the average is below 70 % of its threshold (and, in observe, has
// stayed there for levelHold). An average hovering at a threshold flapped the level, and each
// flap logged a WARN and an INFO microseconds apart.
func nextLevel(avg time.Duration, cur Level) Level {
	if next := levelFor(avg); next >= cur {
		return next
	}
	return levelFor(avg * 10 / 7)
}

// leaseMultiplier is how much larger leases get at a level (fewer Store calls when it is slow).
func leaseMultiplier(v Level) int64 {
	switch v {
	case LevelMild:
		return 2
	case LevelSignificant:
		return 5
	}
	return 1
}

// syncInterval is the report interval at a level; in fail-open the report is the probe.
func syncInterval(v Level, base time.Duration) time.Duration {
	var d time.Duration
	switch v {
	case LevelMild:
		d = mildSync
	case LevelSignificant:
		d = significantSync
	case LevelFailOpen:
		return probeInterval
	}
	return max(d, base)
}

// observe records one Store call: its latency feeds the moving average, an error (or timeout)
// switches to fail-open. Only a successful report (the probe) leaves fail-open, so that an
// in-flight lease answering late cannot flap the level. A slow Store is logged when it begins
// (and at each new worst level) and once the level has been normal for slowHold; a fail_open
// episode when it begins and once it has ended for recoveryHold.
func (l *Limiter) observe(latency time.Duration, err error, probe bool) {
	l.levelMu.Lock()
	defer l.levelMu.Unlock()
	cur := Level(l.level.Load())
	if err != nil {
		if cur != LevelFailOpen {
			l.endEpisode(false) // a recovery that held ends in the log before a new episode
			if !l.episode.left.IsZero() {
				// Failing again within recoveryHold of leaving: the same episode goes on.
				l.level.Store(uint32(LevelFailOpen))
				l.episode.left = time.Time{}
				l.episode.relapses++
				cur = LevelFailOpen
			}
		}
		if cur == LevelFailOpen {
			l.episode.errs++ // counted, not logged one by one
			if p, ok := store.AsPermanent(err); ok && !l.episode.permanent {
				// The episode began as a fault; now the Store refuses the configuration.
				l.episode.permanent = true
				l.logPermanent(p)
			}
			return
		}
		l.enterFailOpen(err)
		return
	}
	if cur == LevelFailOpen {
		if !probe {
			return
		}
		// A fresh start: the old average described a Store that then failed, and the probe's
		// own latency often measures the fault (a probe sent to a frozen server is answered
		// when it thaws). A Store that is still slow raises the average within a call or two.
		l.latency = min(latency, mildLatency/2)
		l.fasterSince = time.Time{}
		next := levelFor(l.latency)
		l.level.Store(uint32(next))
		l.episode.left = l.clock.Now()
		return
	}
	l.endEpisode(false)
	alpha := latencyAlpha
	if latency < l.latency {
		alpha = latencyAlphaDown
	}
	l.latency = time.Duration(alpha*float64(latency) + (1-alpha)*float64(l.latency))
	next := nextLevel(l.latency, cur)
	switch {
	case next >= cur:
		l.fasterSince = time.Time{} // not faster: a hold starts again when it is
	case l.fasterSince.IsZero():
		l.fasterSince = l.clock.Now()
		next = cur
	case l.clock.Now().Sub(l.fasterSince) < levelHold:
		next = cur
	default:
		l.fasterSince = time.Time{} // held: down, and a lower level takes its own hold
	}
	if next != cur {
		l.level.Store(uint32(next))
		l.levelChanged(cur, next)
	}
	l.endSlow()
}

// slowEpisode is one stretch of a slow Store (the mild and significant levels, and the normal
// level for less than slowHold in between), for the lines that begin and end it.
type slowEpisode struct {
	start       time.Time // zero: no episode
	worst       Level     // the highest latency level of the episode
	changes     int64     // level changes after the one that began it
	normalSince time.Time // when the level was last seen normal in it, after being slow; zero while slow
}

// levelChanged records a change between the latency levels (levelMu held): the first one up
// begins a slow episode with a WARN, and so does each new worst level in it; the others are
// counted for the line that ends it (endSlow).
func (l *Limiter) levelChanged(from, to Level) {
	ep := &l.slow
	if ep.start.IsZero() {
		*ep = slowEpisode{start: l.clock.Now(), worst: to}
		l.logSlow(from, to)
		return
	}
	ep.changes++
	if to > ep.worst {
		ep.worst = to
		l.logSlow(from, to)
	}
}

// endSlow ends the slow episode in the log once the level has been normal for slowHold
// (levelMu held). The fail_open path sets the level without levelChanged: the hold starts
// when a call finds it normal.
func (l *Limiter) endSlow() {
	ep := &l.slow
	if ep.start.IsZero() {
		return
	}
	now := l.clock.Now()
	switch {
	case Level(l.level.Load()) != LevelNormal:
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
	log := l.logger()
	if log == nil {
		return
	}
	log.Info("rate_limit: Store latency back to normal",
		zap.String("cluster", l.snap().cfg.Cluster.ID),
		zap.Duration("duration", ended.normalSince.Sub(ended.start)),
		zap.String("worst_level", ended.worst.String()),
		zap.Int64("level_changes", ended.changes),
		zap.Duration("store_latency", l.latency),
		zap.String("degradation_level", LevelNormal.String()))
}

// failEpisode is one stretch of fail_open, for the log line that ends it.
type failEpisode struct {
	start            time.Time
	left             time.Time // when fail_open was last left, until the end is logged; zero otherwise
	relapses         int64     // failures within recoveryHold of leaving, which resumed the episode
	errs             int64     // failed Store calls, the first included
	reqs, cost       int64     // l.rescuedReqs / l.rescuedCost when it began
	rejected         int64     // l.rescueRejects when it began
	assumedAlone     bool      // the rescue buckets assumed this instance is alone
	assumedInstances int
	permanent        bool // a permanent error (PermanentError) was logged in this episode
}

// enterFailOpen switches to fail-open after a failed Store call (levelMu held) and logs it once.
func (l *Limiter) enterFailOpen(err error) {
	l.level.Store(uint32(LevelFailOpen))
	st := l.state.Load()
	l.episode = failEpisode{
		start:            l.clock.Now(),
		errs:             1,
		reqs:             l.rescuedReqs.Load(),
		cost:             l.rescuedCost.Load(),
		rejected:         l.rescueRejects.Load(),
		assumedAlone:     !l.reached.Load() && l.snap().cfg.KnownInstances == 0,
		assumedInstances: st.LiveInstances,
	}
	log := l.logger()
	if log == nil {
		return
	}
	cfg := l.snap().cfg
	fields := []zap.Field{
		zap.String("cluster", cfg.Cluster.ID),
		zap.Error(err),
		zap.String("on_redis_failure", cfg.OnStoreFailure.String()),
	}
	if cfg.OnStoreFailure == FailLocal {
		fields = append(fields, zap.Int("rescue_live_instances", st.LiveInstances))
	}
	if p, ok := store.AsPermanent(err); ok {
		l.episode.permanent = true
		l.logPermanent(p)
	} else {
		log.Warn("rate_limit: Store unavailable, entering fail_open", fields...)
	}
	if l.episode.assumedAlone && cfg.OnStoreFailure == FailLocal {
		log.Warn("rate_limit: this instance never had an answer from the Store and knows no live-instance "+
			"count: its rescue buckets allow each app's full guaranteed rate, so a fleet of N such "+
			"instances may admit up to N times an app's quota until the Store answers",
			zap.String("cluster", cfg.Cluster.ID))
	}
}

// logPermanent logs a permanent Store error (levelMu held), once per fail_open episode: a
// configuration error (credentials, permissions, certificates) that only an operator can fix.
// The limiter keeps probing, so the fix is noticed and logged like any recovery.
func (l *Limiter) logPermanent(p store.PermanentError) {
	log := l.logger()
	if log == nil {
		return
	}
	cfg := l.snap().cfg
	log.Error("rate_limit: the Store refuses this instance's configuration, entering fail_open until it is fixed",
		zap.String("cluster", cfg.Cluster.ID),
		zap.String("cause", p.Error()),
		zap.String("remedy", p.Remedy()),
		zap.String("on_redis_failure", cfg.OnStoreFailure.String()))
}

// endEpisode logs the end of a fail_open episode that was left recoveryHold ago without a
// failure since (or at once with now set: Close) (levelMu held).
func (l *Limiter) endEpisode(now bool) {
	ep := l.episode
	if ep.left.IsZero() || (!now && l.clock.Now().Sub(ep.left) < recoveryHold) {
		return
	}
	l.episode.left = time.Time{}
	log := l.logger()
	if log == nil {
		return
	}
	log.Info("rate_limit: Store recovered, leaving fail_open",
		zap.String("cluster", l.snap().cfg.Cluster.ID),
		zap.Duration("duration", ep.left.Sub(ep.start)),
		zap.Int64("failed_store_calls", ep.errs),
		zap.Int64("relapses", ep.relapses),
		zap.Int64("admitted_without_store", l.rescuedReqs.Load()-ep.reqs),
		zap.Int64("admitted_cost_without_store", l.rescuedCost.Load()-ep.cost),
		zap.Int64("rejected_by_rescue", l.rescueRejects.Load()-ep.rejected),
		zap.String("degradation_level", Level(l.level.Load()).String()))
}

// logSlow logs a rise of the latency level (levelMu held).
func (l *Limiter) logSlow(from, to Level) {
	log := l.logger()
	if log == nil {
		return
	}
	log.Warn("rate_limit: Store slow, leasing in larger batches",
		zap.String("cluster", l.snap().cfg.Cluster.ID),
		zap.String("from", from.String()),
		zap.String("degradation_level", to.String()),
		zap.Duration("store_latency", l.latency),
		zap.Int64("lease_multiplier", leaseMultiplier(to)))
}

func (l *Limiter) logger() *zap.Logger { return l.snap().cfg.Logger }

// Level returns the current degradation level.
func (l *Limiter) Level() Level { return Level(l.level.Load()) }

// Latency returns the moving average of the Store's call latency.
func (l *Limiter) Latency() time.Duration {
	l.levelMu.Lock()
	defer l.levelMu.Unlock()
	return l.latency
}

// StoreFailed records a failed call to the Store made outside the limiter (the start-up probe
// of the Store's configuration): like a failed report, it enters fail_open, and a permanent
// error is logged at ERROR once for the episode. Only a successful probe of the limiter's own
// leaves fail_open.
func (l *Limiter) StoreFailed(err error) {
	if err == nil {
		return
	}
	l.observe(0, err, false)
}
