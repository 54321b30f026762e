package limiter

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Level is the degradation level set by the Store's latency and errors.
type Level uint32 // 32 bits: it is kept in an atomic.Uint32

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
	// Cluster master failing over), and every lease for that app fails again: the hold keeps
	// such rounds to one WARN and one INFO per episode.
	recoveryHold = 5 * time.Second
	// levelHold is how long the latency average must have stayed below a level's threshold
	// before the level goes down (it goes up at once), so that an average crossing a threshold
	// several times a second (a starved machine) does not log each crossing. It is counted from
	// the last call that found the average at or above the threshold, not from the last slow
	// call: one call slower than the others moves the average by a fraction of the difference
	// (latencyAlpha), and a call at the threshold cannot lift an average below it to it.
	levelHold = 3 * time.Second
	// slowHold is how long the level must stay normal before a slow-Store episode ends in the
	// log: a latency level that goes up and back down every few tens of seconds (a CPU-bound
	// host), each time past levelHold, is one episode, not a WARN and an INFO per round.
	slowHold = time.Minute
	// latencyAlpha is the weight of a call slower than the average: the average rises by a
	// fifth of the difference per call, so that the level follows a Store that got slower only
	// when it stays slow, not one slow answer.
	latencyAlpha = 0.2
	// latencyAlphaDown and latencyDecay weigh a call faster than the average: what the average
	// exceeds it by is kept at most (1 − latencyAlphaDown) × e^(−Δt/latencyDecay), Δt the time
	// since the previous call. The average falls at least by half per call (a busy host follows
	// a faster Store within a few calls) and at least by a factor e per latencyDecay of time
	// however rarely the Store is called (a quiet fleet at the significant level reports once a
	// second): see degrader for the bound this gives on the time back to normal.
	latencyAlphaDown = 0.5
	latencyDecay     = 250 * time.Millisecond
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

// levelFor maps a latency average to a level.
func levelFor(avg time.Duration) Level {
	switch {
	case avg > significantLatency:
		return LevelSignificant
	case avg >= mildLatency:
		return LevelMild
	}
	return LevelNormal
}

// nextLevel is the level after cur for a latency average, with hysteresis: a level is left
// downwards only once the average is below 70 % of its threshold (and, in observe, the
// threshold was last reached levelHold ago or more), so that an average hovering at a
// threshold does not flap the level.
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
	default:
		return 1
	}
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
	default: // LevelNormal
	}
	return max(d, base)
}

// degrader is the degradation level and what sets it: the average of the Store's call latency,
// the hold before the level goes down, and the slow-Store and fail_open episodes that the log
// reports. The level is an atomic so that takes read it without a lock; mu serialises every
// change of it and guards the rest.
//
// The level follows the Store's latency in time, not in calls. Once every call is answered
// within f < 7 ms from a time T on, the average at a call made s after T is at most
// f + (A − f)·e^(−s/latencyDecay), A the average at T (each call keeps at most e^(−Δt/latencyDecay)
// of the excess, and the Δt add up to s or more). It is therefore below a threshold θ from
// latencyDecay·ln((A − f)/(θ − f)) after T on, and below 70 % of the mild threshold, 7 ms, from
// s₇ = latencyDecay·ln((A − f)/(7 ms − f)) on. The first call made s₇ + levelHold after T or
// later finds the threshold of the current level last reached levelHold ago or more, and the
// average below 70 % of every threshold: the level goes straight to normal. For A up to 1 s
// (a background call's timeout) and f = 1 ms, s₇ is at most 1.3 s, so that call is made at
// most 4.3 s after T; the reports alone make one at least every second (the significant
// level's interval, or sync_interval when longer), whatever the traffic, so the level is
// normal within about 5 s of the Store getting fast. (In fail_open the first successful probe
// sets it to normal.) A slower call in between, x ≥ the average, raises the average by a fifth
// of x minus it, to below x: an answer at a threshold (10 ms) cannot lift an average below the
// threshold to it, and the hold runs on; restarting it from an average of 2 ms takes an answer
// of 42 ms or more.
type degrader struct {
	clock clock.Clock
	cfg   func() *Config // the configuration in force: logger, cluster id, failure mode
	live  func() int     // L1's live-instance count from the last report

	level   atomic.Uint32 // a Level; written under mu
	reached atomic.Bool   // a report has succeeded since New
	// Requests admitted (and their cost) and rejected without the Store: rescue and fail-open,
	// counted for the line that ends a fail_open episode.
	rescue struct{ reqs, cost, rejects atomic.Int64 }

	mu      sync.Mutex
	latency time.Duration // average of the Store's call latency (see average)
	at      time.Time     // when the last call that fed the average was answered
	// above is, per latency level (mild, significant), when a call last found the average high
	// enough for the level (levelFor): the level goes down only levelHold after.
	above   [LevelSignificant + 1]time.Time
	episode failEpisode // the current or last fail_open episode
	slow    slowEpisode // the current stretch of a slow Store, if any
}

// get returns the current level.
func (d *degrader) get() Level { return Level(d.level.Load()) }

// avgLatency returns the average of the Store's call latency.
func (d *degrader) avgLatency() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.latency
}

// closing ends in the log a recovery that is still within its hold (Close).
func (d *degrader) closing() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endEpisode(true)
}

// observe records one Store call: its latency feeds the average, an error (or timeout)
// switches to fail-open. Only a successful report (the probe) leaves fail-open, so that an
// in-flight lease answering late cannot flap the level. A latency level is entered as soon as
// the average reaches its threshold, and left at the first call that finds the average below
// 70 % of it and the threshold last reached levelHold ago or more, straight to the level the
// average fits with the same margin (nextLevel). A slow Store is logged when it begins (and at
// each new worst level) and once the level has been normal for slowHold; a fail_open episode
// when it begins and once it has ended for recoveryHold.
func (d *degrader) observe(latency time.Duration, err error, probe bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := Level(d.level.Load())
	if err != nil {
		if cur != LevelFailOpen {
			d.endEpisode(false) // a recovery that held ends in the log before a new episode
			if !d.episode.left.IsZero() {
				// Failing again within recoveryHold of leaving: the same episode goes on.
				d.level.Store(uint32(LevelFailOpen))
				d.episode.left = time.Time{}
				d.episode.relapses++
				cur = LevelFailOpen
			}
		}
		if cur == LevelFailOpen {
			d.episode.errs++ // counted, not logged one by one
			if p, ok := store.AsPermanent(err); ok && !d.episode.permanent {
				// The episode began as a fault; now the Store refuses the configuration.
				d.episode.permanent = true
				d.logPermanent(p)
			}
			return
		}
		d.enterFailOpen(err)
		return
	}
	now := d.clock.Now()
	if cur == LevelFailOpen {
		if !probe {
			return
		}
		// A fresh start: the old average described a Store that then failed, and the probe's
		// own latency often measures the fault (a probe sent to a frozen server is answered
		// when it thaws). A Store that is still slow raises the average within a call or two.
		d.latency = min(latency, mildLatency/2)
		d.at = now
		d.above = [LevelSignificant + 1]time.Time{}
		d.level.Store(uint32(levelFor(d.latency)))
		d.episode.left = now
		return
	}
	d.endEpisode(false)
	d.latency = d.average(latency, now)
	next := levelFor(d.latency)
	for v := LevelMild; v <= next; v++ {
		d.above[v] = now
	}
	if next < cur {
		next = cur
		if now.Sub(d.above[cur]) >= levelHold {
			next = nextLevel(d.latency, cur)
		}
	}
	if next != cur {
		d.level.Store(uint32(next))
		d.levelChanged(cur, next)
	}
	d.endSlow()
}

// average returns the latency average after a call answered at now in latency, and notes now
// (d.mu held). A call slower than the average raises it by latencyAlpha of the difference. A
// faster one keeps (1 − latencyAlphaDown)·e^(−Δt/latencyDecay) of what the average exceeds it
// by, Δt the time since the previous call: however few the calls, an excess fades by a factor
// e per latencyDecay.
func (d *degrader) average(latency time.Duration, now time.Time) time.Duration {
	dt := max(now.Sub(d.at), 0) // never negative, should the clock be set back
	d.at = now
	if latency >= d.latency {
		return d.latency + time.Duration(latencyAlpha*float64(latency-d.latency))
	}
	keep := (1 - latencyAlphaDown) * math.Exp(-float64(dt)/float64(latencyDecay))
	return latency + time.Duration(keep*float64(d.latency-latency))
}

// logger is the configuration's logger (nil logs nothing).
func (l *Limiter) logger() *zap.Logger { return l.snap().cfg.Logger }

// Level returns the current degradation level.
func (l *Limiter) Level() Level { return l.deg.get() }

// Latency returns the average of the Store's call latency (see degrader).
func (l *Limiter) Latency() time.Duration { return l.deg.avgLatency() }

// StoreFailed records a failed call to the Store made outside the limiter (the start-up probe
// of the Store's configuration): like a failed report, it enters fail_open, and a permanent
// error is logged at ERROR once for the episode. Only a successful probe of the limiter's own
// leaves fail_open.
func (l *Limiter) StoreFailed(err error) {
	if err == nil {
		return
	}
	l.deg.observe(0, err, false)
}
