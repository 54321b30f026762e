package limiter

import "time"

// Level is the degradation level set by the Store's latency and errors (DESIGN §8).
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
	latencyAlpha       = 0.2 // weight of one observation in the latency moving average
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
// in-flight lease answering late cannot flap the level.
func (l *Limiter) observe(latency time.Duration, err error, probe bool) {
	l.levelMu.Lock()
	defer l.levelMu.Unlock()
	if err != nil {
		l.setFailed()
		return
	}
	cur := Level(l.level.Load())
	if cur == LevelFailOpen {
		if !probe {
			return
		}
		l.latency = latency // a fresh start: the old average described a Store that then failed
	} else {
		l.latency = time.Duration(latencyAlpha*float64(latency) + (1-latencyAlpha)*float64(l.latency))
	}
	l.level.Store(uint32(levelFor(l.latency)))
}

// setFailed switches to fail-open (levelMu held). Only a Store call that failed gets here: a
// request that stops waiting for a lease still in flight does not (see App.creditTake).
func (l *Limiter) setFailed() {
	l.level.Store(uint32(LevelFailOpen))
}

// Level returns the current degradation level.
func (l *Limiter) Level() Level { return Level(l.level.Load()) }

// Latency returns the moving average of the Store's call latency.
func (l *Limiter) Latency() time.Duration {
	l.levelMu.Lock()
	defer l.levelMu.Unlock()
	return l.latency
}
