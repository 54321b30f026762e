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
		Demand:    rapid.Float64Range(0, 1e9).Draw(t, label+".demand"),
	}
}

// The learned capacity never leaves [Min, Max], whatever it starts from and whatever the signals.
func TestPropBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBounds(t)
		c := rapid.Float64Range(0, 1e9).Draw(t, "start")
		for i := range rapid.IntRange(1, 50).Draw(t, "periods") {
			c, _ = Next(b, c, genSignals(t, "s"+string(rune('a'+i%26))), rapid.Bool().Draw(t, "after decrease"))
			if c < b.Min || c > b.Max || math.IsNaN(c) {
				t.Fatalf("capacity %v outside [%v, %v]", c, b.Min, b.Max)
			}
		}
	})
}

// Monotone in the signals: more throttles or more slow answers (of as many answers) never give
// a higher capacity; more demand never gives a lower one.
func TestPropMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBounds(t)
		c := rapid.Float64Range(b.Min, b.Max).Draw(t, "c")
		s := genSignals(t, "s")
		worse := s
		worse.Throttles = rapid.Int64Range(s.Throttles, s.Answers).Draw(t, "more throttles")
		worse.Slow = rapid.Int64Range(s.Slow, s.Answers).Draw(t, "more slow")
		more := s
		more.Demand = s.Demand + rapid.Float64Range(0, 1e9).Draw(t, "more demand")
		base, _ := Next(b, c, s, false)
		if w, _ := Next(b, c, worse, false); w > base {
			t.Fatalf("worse signals %+v gave %v, above %v for %+v", worse, w, base, s)
		}
		if m, _ := Next(b, c, more, false); m < base {
			t.Fatalf("more demand %+v gave %v, below %v for %+v", more, m, base, s)
		}
	})
}

// No probing dips: without an overload signal the capacity never goes down.
func TestPropNoDipWithoutOverload(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBounds(t)
		c := rapid.Float64Range(b.Min, b.Max).Draw(t, "c")
		s := genSignals(t, "s")
		next, cause := Next(b, c, s, rapid.Bool().Draw(t, "after decrease"))
		if Overloaded(s) == Hold && next < c {
			t.Fatalf("healthy signals %+v lowered %v to %v (%v)", s, c, next, cause)
		}
		if Overloaded(s) != Hold && next > c {
			t.Fatalf("overload %+v raised %v to %v", s, c, next)
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
		sweep := 2*int(math.Ceil(math.Log(b.Max/b.Min)/math.Log(1+Alpha))) + 2
		dir := 0.0
		after := false
		for i := range sweep + 10 {
			next, _ := Next(b, c, s, after)
			after = next < c
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

// A backend whose capacity steps (halved, doubled) is followed: throttling above its
// capacity, healthy with demand below it, the learned figure comes within
// [Beta × real, real × (1 + Alpha)] in at most FollowPeriods(from, real) periods and stays
// there (the oscillation of a sawtooth around a fixed capacity is bounded by one step each
// way).
func TestPropStepFollowed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBounds(t)
		real := rapid.Float64Range(b.Min, b.Max).Draw(t, "real")
		c := rapid.Float64Range(b.Min, b.Max).Draw(t, "start")
		n := FollowPeriods(c, real)
		after := false
		for i := range n + 50 {
			s := Signals{Answers: 1000, Demand: 2 * b.Max}
			if c > real {
				s.Throttles = 100
			}
			next, _ := Next(b, c, s, after)
			after, c = next < c, next
			if i+1 >= n && (c < math.Max(b.Min, Beta*real)*(1-1e-9) || c > real*(1+Alpha)*(1+1e-9)) {
				t.Fatalf("period %d (follow bound %d): capacity %v, real %v", i+1, n, c, real)
			}
		}
	})
}

// FollowPeriods states the step response: 7 periods for a halving, 10 for a doubling (to 80 %).
func TestFollowPeriodsStated(t *testing.T) {
	if n := FollowPeriods(1000, 500); n != 7 {
		t.Errorf("halving followed in %d periods, want 7", n)
	}
	if n := FollowPeriods(1000, 2000); n != 10 {
		t.Errorf("doubling followed in %d periods, want 10", n)
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
