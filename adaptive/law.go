package adaptive

import (
	"math"
	"time"
)

// Law constants. Beta is the multiplicative decrease, Alpha the additive increase as a share
// of the current figure, Period the control period.
const (
	Beta   = 0.8
	Alpha  = 0.05
	Period = time.Second

	// ThrottleShare: more throttles than this share of a period's answers is overload.
	ThrottleShare = 0.01
	// SlowShare: more answers slower than the latency target than this share means the
	// period's p90 is above the target (the p90 is the latency 90 % of answers stay under).
	SlowShare = 0.1
	// DemandShare: the period's admitted cost per second must reach this share of the current
	// capacity for an increase: a capacity nobody uses is not evidence that the backend
	// sustains more. The fleet hands a learned capacity out up to 0.85 of it, and what it
	// admits runs under what it hands out (leases, the lower priorities' overload factors, the
	// window's edges): measured at 0.77–0.8 of the capacity with every tenant at its share.
	DemandShare = 0.75
)

// Bounds are the operator's limits of the learned capacity (cost tokens/s): Min <= Max.
type Bounds struct {
	Min, Max float64
}

// Signals are what the fleet saw of the backend in one control period.
type Signals struct {
	Answers   int64   // backend answers to admitted requests
	Throttles int64   // of which a throttle status (throttle_status)
	Slow      int64   // of which came slower than latency_target (time to response headers)
	Demand    float64 // admitted cost per second (L1's usage window)
}

// Cause is why the law moved (or held) the capacity.
type Cause uint8

const (
	Hold      Cause = iota // no reason to move
	Throttled              // throttles above ThrottleShare of the answers: decrease
	Slow                   // p90 above the latency target: decrease
	Increase               // demand at the capacity and healthy signals: increase
)

// String names the cause as logs and the admin API show it.
func (c Cause) String() string {
	switch c {
	case Throttled:
		return "throttles"
	case Slow:
		return "latency"
	case Increase:
		return "demand"
	case Hold:
	}
	return "hold"
}

// Decrease reports whether the cause lowers the capacity.
func (c Cause) Decrease() bool { return c == Throttled || c == Slow }

// Overloaded says whether the period's signals show an overloaded backend, and why: throttles
// first (the backend refusing work), then latency (the backend queueing it).
func Overloaded(s Signals) Cause {
	switch {
	case s.Answers <= 0:
		return Hold
	case float64(s.Throttles) > ThrottleShare*float64(s.Answers):
		return Throttled
	case float64(s.Slow) > SlowShare*float64(s.Answers):
		return Slow
	}
	return Hold
}

// Next is the capacity after one control period that ended at capacity c with signals s:
//
//	the period follows a decrease        → c
//	overloaded (Overloaded)              → max(Min, c × Beta)
//	else demand >= DemandShare × c       → min(Max, c + Alpha × c)
//	else                                 → c
//
// always within [Min, Max] (a c outside is brought inside first). It never lowers the capacity
// without an overload signal: no probing dips. The period after a decrease holds: its answers
// are still those of requests admitted at the higher figure (and of the backend's queue they
// built), and a second decrease on them would undershoot.
func Next(b Bounds, c float64, s Signals, afterDecrease bool) (float64, Cause) {
	c = min(max(c, b.Min), b.Max)
	if afterDecrease {
		return c, Hold
	}
	if cause := Overloaded(s); cause != Hold {
		return max(b.Min, c*Beta), cause
	}
	if s.Answers > 0 && s.Demand >= DemandShare*c && c < b.Max {
		return min(b.Max, c+Alpha*c), Increase
	}
	return c, Hold
}

// FollowPeriods is how many control periods the law takes, from capacity c, to come within
// one step of a backend that sustains real (throttling above it, healthy with demand below):
// n = ceil(log_{1/Beta}(c / real)) decreases, each but the last followed by a held period,
// down; ceil(log_{1+Alpha}(real × Beta / c)) up; 0 when c is there.
func FollowPeriods(c, real float64) int {
	switch {
	case c > real:
		return 2*int(math.Ceil(math.Log(c/real)/math.Log(1/Beta))) - 1
	case c < real*Beta:
		return int(math.Ceil(math.Log(real*Beta/c) / math.Log(1+Alpha)))
	}
	return 0
}
