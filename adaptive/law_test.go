package adaptive

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func genBounds(t *rapid.T) Bounds {
	lo := rapid.Float64Range(1, 1e6).Draw(t, "min")
	hi := lo * rapid.Float64Range(1, 100).Draw(t, "span")
	return Bounds{Min: lo, Max: hi}
}

func genSignals(t *rapid.T, label string) Signals {
	answers := rapid.Int64Range(0, 1e6).Draw(t, label+".answers")
	return Signals{
		Answers:   answers,
		Throttles: rapid.Int64Range(0, answers).Draw(t, label+".throttles"),
		Slow:      rapid.Int64Range(0, answers).Draw(t, label+".slow"),
		Queued:    rapid.Int64Range(0, answers).Draw(t, label+".queued"),
		Demand:    rapid.Float64Range(0, 1e9).Draw(t, label+".demand"),
	}
}

// genCeiling draws the ceiling of the last decrease: none, or one within or around the bounds.
func genCeiling(t *rapid.T, b Bounds) float64 {
	if rapid.Bool().Draw(t, "no ceiling") {
		return 0
	}
	return rapid.Float64Range(b.Min/2, b.Max*2).Draw(t, "ceiling")
}

// genSince draws the whole periods since the capacity last changed.
func genSince(t *rapid.T) int {
	return rapid.IntRange(0, 2*Plateau).Draw(t, "since")
}

// genPrev draws the previous period's step: a decrease, a hold or an increase of a streak.
func genPrev(t *rapid.T, label string) float64 {
	return rapid.SampledFrom([]float64{1, Drain, Floor, 0.5, 1 + Alpha, 1 + 2*Alpha, 1 + MaxStreak*Alpha, 1.01}).Draw(t, label)
}

// The learned capacity never leaves [Min, Max], whatever it starts from and whatever the signals.
func TestPropBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBounds(t)
		c := rapid.Float64Range(0, 1e9).Draw(t, "start")
		for i := range rapid.IntRange(1, 50).Draw(t, "periods") {
			c, _, _ = Next(b, c, genSignals(t, "s"+string(rune('a'+i%26))), genPrev(t, "prev"), genCeiling(t, b), genSince(t))
			if c < b.Min || c > b.Max || math.IsNaN(c) {
				t.Fatalf("capacity %v outside [%v, %v]", c, b.Min, b.Max)
			}
		}
	})
}

// Monotone in the signals: more throttles, slow or queued answers (of as many answers) never
// give a higher capacity; more demand never gives a lower one.
func TestPropMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBounds(t)
		c := rapid.Float64Range(b.Min, b.Max).Draw(t, "c")
		s := genSignals(t, "s")
		prev, ceiling, since := genPrev(t, "prev"), genCeiling(t, b), genSince(t)
		worse := s
		worse.Throttles = rapid.Int64Range(s.Throttles, s.Answers).Draw(t, "more throttles")
		worse.Slow = rapid.Int64Range(s.Slow, s.Answers).Draw(t, "more slow")
		worse.Queued = rapid.Int64Range(s.Queued, s.Answers).Draw(t, "more queued")
		more := s
		more.Demand = s.Demand + rapid.Float64Range(0, 1e9).Draw(t, "more demand")
		base, _, _ := Next(b, c, s, prev, ceiling, since)
		if w, _, _ := Next(b, c, worse, prev, ceiling, since); w > base {
			t.Fatalf("worse signals %+v gave %v, above %v for %+v", worse, w, base, s)
		}
		if m, _, _ := Next(b, c, more, prev, ceiling, since); m < base {
			t.Fatalf("more demand %+v gave %v, below %v for %+v", more, m, base, s)
		}
	})
}

// No probing dips: without an overload or queue signal the capacity never goes down; with one
// it never goes up; a queue trims one step at most, and one decrease cuts at most to Floor of
// the capacity.
func TestPropNoDipWithoutOverload(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBounds(t)
		c := rapid.Float64Range(b.Min, b.Max).Draw(t, "c")
		s := genSignals(t, "s")
		next, _, cause := Next(b, c, s, genPrev(t, "prev"), genCeiling(t, b), genSince(t))
		if Overloaded(s) == Hold && !Queueing(s) && next < c {
			t.Fatalf("healthy signals %+v lowered %v to %v (%v)", s, c, next, cause)
		}
		if Overloaded(s) == Hold && Queueing(s) && next < c*(1-Alpha)*(1-1e-12) {
			t.Fatalf("a queue %+v cut %v to %v, more than a step", s, c, next)
		}
		if (Overloaded(s) != Hold || Queueing(s)) && next > c {
			t.Fatalf("overload %+v raised %v to %v", s, c, next)
		}
		if next < c*Floor*(1-1e-12) {
			t.Fatalf("one period cut %v to %v, below Floor", c, next)
		}
	})
}

// Under steady signals the capacity moves one way only and settles: after it stops moving it
// never moves again, and it stops within the periods a full sweep of [Min, Max] takes (held
// periods after decreases included).
func TestPropSteadySignalsSettle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBounds(t)
		c := rapid.Float64Range(b.Min, b.Max).Draw(t, "c")
		s := genSignals(t, "s")
		// the slowest ways: up by Alpha, with a plateau at the ceiling; down by trims of Alpha,
		// each followed by its held periods
		up := 2*int(math.Ceil(math.Log(b.Max/b.Min)/math.Log(1+Alpha))) + 2 + Plateau
		down := (DrainPeriods+1)*int(math.Ceil(math.Log(b.Max/b.Min)/-math.Log(1-Alpha))) + 2
		sweep := max(up, down)
		dir := 0.0
		prev, ceiling, since := 1.0, genCeiling(t, b), genSince(t)
		for i := range sweep + 10 {
			next, nextCeiling, _ := Next(b, c, s, prev, ceiling, since)
			prev, ceiling, since = next/c, nextCeiling, since+1
			if next != c {
				since = 1
			}
			if d := next - c; d != 0 {
				if dir != 0 && math.Signbit(d) != math.Signbit(dir) {
					t.Fatalf("period %d: direction changed under steady signals %+v", i, s)
				}
				if i >= sweep {
					t.Fatalf("period %d: still moving (%v → %v) after %d periods", i, c, next, sweep)
				}
				dir = d
			}
			c = next
		}
	})
}

// backendPeriod is the period's signals from a model backend that serves real cost/s under a
// fleet admitting capacity c (requests of cost 1, demand above it): what it cannot serve it
// throttles.
func backendPeriod(c, real float64) Signals {
	admitted := math.Round(c)
	s := Signals{Answers: int64(admitted), Demand: admitted}
	if admitted > real {
		s.Throttles = int64(admitted - math.Round(real))
	}
	return s
}

// A backend whose capacity steps (halved, doubled) is followed: the learned figure comes
// within Band(real) in at most FollowPeriods(from, real) periods and stays there (the sawtooth
// of probing around a fixed capacity is bounded by the band).
func TestPropStepFollowed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lo := rapid.Float64Range(100, 1e6).Draw(t, "min")
		b := Bounds{Min: lo, Max: lo * rapid.Float64Range(1, 100).Draw(t, "span")}
		real := rapid.Float64Range(b.Min, b.Max).Draw(t, "real")
		c := rapid.Float64Range(b.Min, b.Max).Draw(t, "start")
		n := FollowPeriods(c, real)
		bandLo, bandHi := Band(real)
		bandLo, bandHi = min(max(bandLo, b.Min), b.Max), min(max(bandHi, b.Min), b.Max)
		prev, ceiling, since := 1.0, 0.0, 1
		for i := range n + 50 {
			next, nextCeiling, _ := Next(b, c, backendPeriod(c, real), prev, ceiling, since)
			since++
			if next != c {
				since = 1
			}
			prev, c, ceiling = next/c, next, nextCeiling
			// one request of rounding in the model's counts
			if i+1 >= n && (c < bandLo*(1-1e-9)-2 || c > bandHi*(1+1e-9)+2) {
				t.Fatalf("period %d (follow bound %d): capacity %v, real %v, band [%v, %v]", i+1, n, c, real, bandLo, bandHi)
			}
		}
	})
}

// FollowPeriods states the step response: one period for a halving, 3 for a doubling.
func TestFollowPeriodsStated(t *testing.T) {
	if n := FollowPeriods(1000, 500); n != 1 {
		t.Errorf("halving followed in %d periods, want 1", n)
	}
	if n := FollowPeriods(1000, 2000); n != 3 {
		t.Errorf("doubling followed in %d periods, want 3", n)
	}
}

// On overload the capacity goes, in one step, below what the backend served (Drain of the
// Ceiling: Margin of the healthy figure before the period times the share of answers served), and that
// figure becomes the ceiling; increases in a row grow by Alpha each, stop at the ceiling from
// below and start again from one step at it; a hold or a decrease starts the streak again;
// slow answers above WarmShare hold.
func TestNextSteps(t *testing.T) {
	b := Bounds{Min: 10, Max: 10000}
	// 850 answers, 400 of them throttles
	s := Signals{Answers: 850, Throttles: 400, Demand: 850}
	got, ceiling, cause := Next(b, 1000, s, 1, 0, Plateau)
	if cause != Throttled || math.Abs(ceiling-1000*450.0/850*Margin) > 1e-9 || math.Abs(got-DrainThrottled*ceiling) > 1e-9 {
		t.Errorf("throttled: %v, ceiling %v (%v); want %v and DrainThrottled of it", got, ceiling, cause, 1000*450.0/850*Margin)
	}
	// slow right after an increase by 10 %: the ceiling is the figure before it
	slow := Signals{Answers: 100, Slow: 50, Demand: 100}
	if got, ceiling, cause := Next(b, 1100, slow, 1.1, 0, Plateau); cause != Slow || math.Abs(ceiling-1000*Margin) > 1e-9 || math.Abs(got-Drain*1000*Margin) > 1e-9 {
		t.Errorf("slow after an increase: %v, ceiling %v (%v); want Drain of it and Margin of 1000", got, ceiling, cause)
	}
	if got, _, _ := Next(b, 1000, s, Drain, 0, Plateau); got != 1000 {
		t.Errorf("after a decrease: %v, want a held period", got)
	}
	healthy := Signals{Answers: 800, Demand: 800}
	c, prev := 1000.0, 1.0
	for k := 1; k <= MaxStreak+2; k++ {
		next, _, cause := Next(b, c, healthy, prev, 0, Plateau)
		want := c * (1 + float64(min(k, MaxStreak))*Alpha)
		if cause != Increase || math.Abs(next-want) > 1e-9*want {
			t.Fatalf("increase %d: %v → %v (%v), want %v", k, c, next, cause, want)
		}
		healthy.Demand = 0.85 * next
		prev, c = next/c, next
	}
	if next, _, _ := Next(b, c, Signals{Answers: 10, Demand: 0}, prev, 0, Plateau); next != c {
		t.Fatalf("no demand: %v → %v, want a hold", c, next)
	}
	if next, _, _ := Next(b, c, healthy, 1, 0, Plateau); next != c*(1+Alpha) {
		t.Fatalf("after a hold: %v → %v, want the first step of a streak", c, next)
	}
	warm := healthy
	warm.Slow = healthy.Answers/10 - 1 // under 10 %: not overload, but above WarmShare
	if next, _, cause := Next(b, c, warm, prev, 0, Plateau); next != c || cause != Hold {
		t.Fatalf("slow answers at %d of %d: %v → %v (%v), want a hold", warm.Slow, warm.Answers, c, next, cause)
	}
	// below the ceiling, the streak stops at it; at it, it starts again from one step
	healthy.Demand = 1000
	if next, _, _ := Next(b, 1000, healthy, 1+3*Alpha, 1010, Plateau); next != 1010 {
		t.Fatalf("below the ceiling: 1000 → %v, want the ceiling 1010", next)
	}
	if next, _, _ := Next(b, 1010, healthy, 1.01, 1010, Plateau); next != 1010*(1+Alpha) {
		t.Fatalf("at the ceiling: 1010 → %v, want one step", next)
	}
	// at the ceiling for fewer than Plateau periods, with a queue showing: hold; without one, go on
	near := healthy
	near.Queued = 1
	for since := range Plateau {
		if next, _, cause := Next(b, 1010, near, 1, 1010, since); next != 1010 || cause != Hold {
			t.Fatalf("%d periods at the ceiling: 1010 → %v (%v), want a hold", since, next, cause)
		}
	}
	if next, _, _ := Next(b, 1010, healthy, 1, 1010, 1); next != 1010*(1+Alpha) {
		t.Fatalf("at the ceiling without a queue: 1010 → %v, want one step", next)
	}
	// above the ceiling: one step with any answer showing a queue; a queue that persists
	// (Queueing) trims
	queued := healthy
	queued.Demand = 1200
	if next, _, _ := Next(b, 1200, queued, 1+2*Alpha, 1010, 1); next != 1200*(1+3*Alpha) {
		t.Fatalf("no queue, well above the ceiling: 1200 → %v, want the streak's third step", next)
	}
	queued.Queued = 1 // any answer showing a queue: one step
	if next, _, _ := Next(b, 1200, queued, 1+2*Alpha, 1010, 1); next != 1200*(1+Alpha) {
		t.Fatalf("a queue at %d of %d answers above the ceiling: 1200 → %v, want one step", queued.Queued, queued.Answers, next)
	}
	if next, _, _ := Next(b, 900, queued, 1+2*Alpha, 1010, 1); next != 900*(1+3*Alpha) {
		t.Fatalf("a queue at 1 of %d answers below the ceiling: 900 → %v, want the streak's third step", queued.Answers, next)
	}
	queued.Queued = queued.Answers/4 + 1
	if next, _, cause := Next(b, 1100, queued, 1+2*Alpha, 1010, 1); next != 1100*(1-Alpha) || cause != Queue {
		t.Fatalf("a queue at %d of %d answers: 1100 → %v (%v), want a trim by one step", queued.Queued, queued.Answers, next, cause)
	}
	// an overload right after a decrease, while the fleet still admits above the new figure,
	// holds; once it admits within it, the overload cuts
	over := Signals{Answers: 100, Slow: 50, Demand: 900}
	if next, _, cause := Next(b, 850, over, 1, 1000, DrainPeriods); next != 850 || cause != Hold {
		t.Fatalf("overload with the demand above the cut: 850 → %v (%v), want a hold", next, cause)
	}
	over.Demand = 850
	if next, _, cause := Next(b, 850, over, 1, 1000, DrainPeriods); next >= 850 || cause != Slow {
		t.Fatalf("overload with the demand within the cut: 850 → %v (%v), want a decrease", next, cause)
	}
}

// Queued counts the buckets that reach above a quarter of the target and four times the
// period's p2, as both stores do.
func TestQueued(t *testing.T) {
	var s Sketch
	s[Bucket(200*time.Microsecond)] = 100 // [128, 256) µs: the p2
	s[Bucket(10*time.Millisecond)] = 5    // [8.2, 16.4) ms
	s[Bucket(20*time.Millisecond)] = 7    // [16.4, 32.8) ms
	s[Bucket(40*time.Millisecond)] = 11   // [32.8, 65.5) ms
	s[Bucket(3*time.Second)] = 13
	for _, c := range []struct {
		target time.Duration
		want   int64
	}{{100 * time.Millisecond, 31}, {64 * time.Millisecond, 36}, {8 * time.Second, 13}, {10 * time.Second, 0}, {0, 36}} {
		if got := Queued(&s, c.target, QueueBase(&s, 0)); got != c.want {
			t.Errorf("Queued(target %v) = %d, want %d", c.target, got, c.want)
		}
	}
	// a backend whose every answer takes 70–90 ms is slow, not queueing
	var slow Sketch
	slow[Bucket(70*time.Millisecond)] = 90
	slow[Bucket(90*time.Millisecond)] += 10
	if got := Queued(&slow, 100*time.Millisecond, QueueBase(&slow, 0)); got != 0 {
		t.Errorf("Queued of answers all near 80ms = %d, want 0", got)
	}
	// a fast backend whose queue persists: every answer is slower, its p2 too, but the base
	// it had before the queue keeps the queue visible; it follows a slower backend in time
	base := QueueBase(&s, 0) // 256µs
	if got := Queued(&slow, 100*time.Millisecond, QueueBase(&slow, base)); got != 100 {
		t.Errorf("Queued of a persistent queue over a 256µs base = %d, want all 100", got)
	}
	for range 200 {
		base = QueueBase(&slow, base)
	}
	if base != float64(UpperBound(Bucket(70*time.Millisecond))) {
		t.Errorf("base after 200 periods of 70–90ms answers: %v, want their p2's bucket", time.Duration(base))
	}
	if got := QueueBase(&Sketch{}, 1000); got != 1000*BaseDrift {
		t.Errorf("an empty period: base %v, want the last one grown", got)
	}
}

func TestSketchP90(t *testing.T) {
	var s Sketch
	for range 89 {
		s[Bucket(time.Millisecond)]++
	}
	for range 11 {
		s[Bucket(300*time.Millisecond)]++
	}
	if p := s.P90(); p < 300*time.Millisecond || p > 600*time.Millisecond {
		t.Errorf("p90 %v, want the bucket of 300ms", p)
	}
	s[Bucket(time.Millisecond)] += 10 // 99 of 110 fast: p90 is fast
	if p := s.P90(); p < time.Millisecond || p > 2*time.Millisecond {
		t.Errorf("p90 %v, want the bucket of 1ms", p)
	}
	for _, d := range []time.Duration{0, time.Microsecond, time.Millisecond, time.Second, time.Hour} {
		i := Bucket(d)
		if i < 0 || i >= SketchBuckets || (i < SketchBuckets-1 && d >= UpperBound(i)) || (i > 0 && d < UpperBound(i-1)) {
			t.Errorf("latency %v in bucket %d [%v, %v)", d, i, UpperBound(i-1), UpperBound(i))
		}
	}
}
