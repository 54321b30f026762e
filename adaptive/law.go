package adaptive

import (
	"math"
	"time"
)

// Law constants (docs/adaptive.md).
const (
	// Period is the control period: the law runs once per period on its signals.
	Period = time.Second

	// Drain is the share of the ceiling (Ceiling) the capacity goes to on overload: low enough
	// that the queue the overload built drains within the held period that follows. The queue
	// is small: above the ceiling the capacity grows by one step of Alpha a period once the
	// backend's queue shows (Queued), so an overload is caught a step or two past the line.
	Drain = 0.85
	// DrainThrottled replaces Drain when the backend refused work (throttles): its queue is at
	// its bound then, and what it answered in the period still includes that queue, so the
	// ceiling overstates what it sustains.
	DrainThrottled = 0.7
	// Margin is the share of what a period showed the backend sustains that the ceiling keeps:
	// at the very figure it sustained, its queue only holds while the admissions come evenly,
	// and a burst of leases starts it growing.
	Margin = 0.95
	// Floor is the most one decrease cuts (c × Floor): a period in which nearly every answer
	// was a throttle says little of how much less the backend serves.
	Floor = 0.25

	// Alpha is the increase step: the k-th increase in a row raises the capacity by k × Alpha
	// of it (up to MaxStreak × Alpha), so that a long way up takes few periods while the first
	// steps after a decrease or a hold stay small.
	Alpha = 0.025
	// MaxStreak caps the increase at MaxStreak × Alpha of the capacity per period.
	MaxStreak = 6
	// DrainPeriods: for this many periods after a change below the ceiling, an overload while
	// the fleet still admits more than the capacity (its demand lags a decrease by a period or
	// two: leases already granted, L2's tokens) holds instead of cutting again; otherwise one
	// overload would cut several times while the fleet follows the first cut.
	DrainPeriods = 2
	// EmergencyPeriods: under a learned capacity, the automatic emergency (entered only while
	// the backend refuses work) ends this many periods after the last period with throttles
	// above ThrottleShare. The decrease that came with the throttles already protects the
	// backend; blocking the lower priorities longer only wastes what it serves.
	EmergencyPeriods = 2
	// Plateau is how many periods the capacity holds at the ceiling, where the backend last
	// coped, before probing above it, while the backend shows any queue (Queued): every probe
	// that crosses the line costs a decrease, so probing less often keeps the fleet near the
	// line for longer. A backend that answers without a queue at the ceiling has grown: no
	// reason to wait.
	Plateau = 5
	// QueueDivisor and QueueSpread: an answer slower than latency_target / QueueDivisor and
	// than QueueSpread × the backend's latency without a queue (QueueBase) shows the backend's queue forming (Queued); with
	// more than QueueShare of them (Queueing) the capacity is trimmed by Alpha. Admissions
	// that come unevenly queue a backend now and then well below its capacity; a quarter of
	// the answers is a queue that persists, and trimming then keeps the fleet just under the
	// rate where the backend's queue grows, before its latency reaches the target.
	QueueDivisor = 4
	QueueSpread  = 4
	QueueShare   = 0.25
	// BaseDrift is how much the latency base (QueueBase) may grow a period.
	BaseDrift = 1.05

	// ThrottleShare: more throttles than this share of a period's answers is overload.
	ThrottleShare = 0.01
	// SlowShare: more answers slower than the latency target than this share means the
	// period's p90 is above the target (the p90 is the latency 90 % of answers stay under).
	SlowShare = 0.1
	// WarmShare: more slow answers than this share, though not overload, hold the capacity:
	// the backend's queue is forming, and an increase would overshoot.
	WarmShare = 0.02
	// DemandShare: the period's admitted cost per second must reach this share of the current
	// capacity for an increase: a capacity nobody uses is not evidence that the backend
	// sustains more. The fleet hands out 0.85 of the capacity and admits less than it hands
	// out (leases, the window's edges), and less again while the capacity grows (the demand is
	// the last second's): measured at 0.7–0.85.
	DemandShare = 0.6
	// KeepUpShare: a streak of increases grows only while the demand keeps up with the
	// capacity, at this share of it or more; otherwise the step stays at Alpha, so that the
	// capacity does not run ahead of what the fleet admits, faster than the backend's answers
	// can show an overshoot.
	KeepUpShare = 0.75
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
	Queued    int64   // of which came slower than a QueueDivisor-th of it (Queued)
	Demand    float64 // admitted cost per second (L1's usage window)
}

// QueueBase is the backend's latency without a queue as the law tracks it, in ns: the lower of
// the period's fastest answers (its p2, the upper bound of the sketch bucket that holds it)
// and the last base grown by BaseDrift, so that it follows a backend that became slower
// within tens of periods, while a queue that persists for a few periods (every answer slower,
// the p2 too) does not lift it. 0 (none yet) and an empty sketch: the p2, or the base grown.
func QueueBase(s *Sketch, base float64) float64 {
	if s.Count() == 0 {
		return base * BaseDrift
	}
	p2 := float64(s.quantile(2))
	if base <= 0 {
		return p2
	}
	return min(base*BaseDrift, p2)
}

// Queued is how many of the latencies in s show the backend queueing: those above both
// target / QueueDivisor and QueueSpread times base (QueueBase), as far as the sketch tells: the
// buckets that reach above both (a bucket spans a factor of two, and a queue that shows only
// in the next one up is seen a period late, past the backend's line). The second bound keeps a
// backend whose every answer is slow, though healthy, from looking queued; the first, a fast
// backend's ordinary spread. Both stores add the same buckets, so they count the same.
func Queued(s *Sketch, target time.Duration, base float64) int64 {
	from := max(float64(target/QueueDivisor), QueueSpread*base)
	var n int64
	for i, c := range s {
		if float64(UpperBound(i)) > from {
			n += c
		}
	}
	return n
}

// Cause is why the law moved (or held) the capacity.
type Cause uint8

const (
	Hold      Cause = iota // no reason to move
	Throttled              // throttles above ThrottleShare of the answers: decrease
	Slow                   // p90 above the latency target: decrease
	Increase               // demand at the capacity and healthy signals: increase
	Queue                  // a queue that persists (Queueing): a trim by Alpha
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
	case Queue:
		return "queue"
	case Hold:
	}
	return "hold"
}

// DrainOf is the share of the ceiling a decrease of this cause lands at: DrainThrottled for
// throttles, else Drain.
func DrainOf(c Cause) float64 {
	if c == Throttled {
		return DrainThrottled
	}
	return Drain
}

// Queueing says whether more than QueueShare of the period's answers show the backend's queue
// (Queued): a queue that persists, before it reaches the latency target.
func Queueing(s Signals) bool { return float64(s.Queued) > QueueShare*float64(s.Answers) }

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

// Ceiling is the capacity the period's signals show the backend sustains, as the law
// remembers it on a decrease: the capacity that was healthy before the period (c ÷ prev after
// an increase, else c) times the share of the answers that were not throttles (the fleet
// admits in proportion to the capacity, and the backend served that share of it), times
// Margin.
func Ceiling(c float64, s Signals, prev float64) float64 {
	served := 1.0
	if s.Answers > 0 {
		served = float64(s.Answers-min(max(s.Throttles, 0), s.Answers)) / float64(s.Answers)
	}
	return c * served / max(prev, 1) * Margin
}

// Next is the capacity after one control period that ended at capacity c with signals s;
// prev is the previous period's step (its next ÷ its c; 1 when it held or is unknown),
// ceiling the Ceiling of the last decrease (0: none) and since the whole periods since the
// capacity last changed. It returns the next capacity, the next ceiling and why:
//
//	prev < 1 (the period follows a decrease)  → c
//	overloaded or Queueing, below the ceiling, at most DrainPeriods after a change, and
//	the demand above c (by more than ThrottleShare) → c
//	overloaded (Overloaded)                   → max(Min, c × Floor, Drain × Ceiling)
//	                                            (DrainThrottled on throttles);
//	                                            the ceiling becomes Ceiling
//	Queueing                                  → max(Min, c × (1 − Alpha))
//	slow answers above WarmShare              → c
//	at the ceiling for under Plateau periods,
//	with any Queued                           → c
//	else demand >= DemandShare × c            → c × (1 + k × Alpha), k the increases in a row
//	                                            (1 while the demand is under KeepUpShare × c,
//	                                            and above the ceiling with any Queued),
//	                                            but not past the ceiling from below (k starts
//	                                            again at it)
//	else                                      → c
//
// always within [Min, Max] (a c outside is brought inside first). On overload the capacity
// goes below what the backend sustained, in one step, so that the queue the overload built
// drains, and comes back to the ceiling with the next increases; it holds there for Plateau
// periods, then probes above it again from one step of Alpha, in single steps while any
// answer shows a queue. Wherever the backend's answers
// show a queue that persists, it trims the capacity by one step: the fleet then admits about
// what the backend serves, before the queue reaches the latency target. It never lowers the
// capacity without an overload or queue signal: no probing dips. The period after a decrease
// holds: its answers are still those of requests admitted at the higher figure (and of the
// backend's queue they built).
func Next(b Bounds, c float64, s Signals, prev, ceiling float64, since int) (float64, float64, Cause) {
	c = min(max(c, b.Min), b.Max)
	if prev < 1 {
		return c, ceiling, Hold
	}
	cause := Overloaded(s)
	if (cause != Hold || Queueing(s)) && c < ceiling && since <= DrainPeriods && s.Demand > c*(1+ThrottleShare) {
		// the fleet still admits above the figure of the last decrease: the backend's queue
		// is that overload's, and it drains once the admissions follow
		return c, ceiling, Hold
	}
	if cause != Hold {
		ceiling = Ceiling(c, s, prev)
		return max(b.Min, c*Floor, DrainOf(cause)*ceiling), ceiling, cause
	}
	if Queueing(s) {
		return max(b.Min, c*(1-Alpha)), ceiling, Queue
	}
	if float64(s.Slow) > WarmShare*float64(s.Answers) || s.Answers <= 0 || s.Demand < DemandShare*c || c >= b.Max {
		return c, ceiling, Hold
	}
	if c == ceiling && since < Plateau && s.Queued > 0 {
		return c, ceiling, Hold
	}
	k := Streak(prev)
	if c == ceiling || s.Demand < KeepUpShare*c || c > ceiling && s.Queued > 0 {
		// at the ceiling, with the demand behind the capacity, or above the ceiling with any
		// answer showing a queue: one step, since the overshoot an overload is caught at is
		// the last step
		k = 0
	}
	next := c * (1 + float64(k+1)*Alpha)
	if c < ceiling {
		next = min(next, ceiling)
	}
	return min(b.Max, next), ceiling, Increase
}

// Streak is how many increases in a row the previous period's step prev ends (0 for a hold or
// a decrease; an increase clipped at Max counts as at least one), at most MaxStreak − 1 so
// that the next step is at most MaxStreak × Alpha.
func Streak(prev float64) int {
	if !(prev > 1) {
		return 0
	}
	k := int(math.Floor((prev-1)/Alpha + 0.5))
	return min(max(k, 1), MaxStreak-1)
}

// Band is where the law keeps the capacity around a backend that sustains real under a fleet
// admitting a constant share of the capacity (real is the capacity at which it admits what
// the backend sustains), once it has followed it: from Drain × Margin below the last healthy
// figure, which is at worst one increase of the longest streak below real, to one such
// increase above the highest figure that still looks healthy (throttles up to ThrottleShare
// of the answers are not overload).
func Band(real float64) (lo, hi float64) {
	step := 1 + MaxStreak*Alpha
	return DrainThrottled * Margin * real / step, real / (1 - ThrottleShare) * step
}

// FollowPeriods is how many control periods the law takes, from capacity c, to come within
// Band(real) of a backend that sustains real (in capacity terms, as for Band; throttling what
// it cannot serve, healthy below): down, one decrease (more, each after a held period, while
// one decrease by Floor is not enough); up, the increases in a row (k × Alpha each)
// until c reaches the band.
func FollowPeriods(c, real float64) int {
	lo, hi := Band(real)
	n := 0
	for c > hi {
		c = max(c*Floor, DrainThrottled*Margin*real)
		n += 2
	}
	if n > 0 {
		return n - 1 // no held period after the last decrease
	}
	for c < lo {
		n++
		c *= 1 + float64(min(n, MaxStreak))*Alpha
	}
	return n
}
