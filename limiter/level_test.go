package limiter

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
)

// backToNormalWithin is the degrader's bound on the time from the Store getting fast (every
// call answered within fast) to the last call that may still find a latency level, for an
// average avg then: s₇ + levelHold (see degrader). The level is normal at the first call after.
func backToNormalWithin(avg, fast time.Duration) time.Duration {
	s7 := time.Duration(0)
	if excess := float64(avg - fast); excess > float64(7*time.Millisecond-fast) {
		s7 = time.Duration(float64(latencyDecay) * math.Log(excess/float64(7*time.Millisecond-fast)))
	}
	return s7 + levelHold
}

// quietGateway is one instance of a quiet fleet: a limiter whose only Store calls are its
// reports, made by the sync loop at the cadence of the level (it ticks every sync interval;
// the probe Store's delay advances the clock while a call is answered).
type quietGateway struct {
	t  *testing.T
	c  *clock.Manual
	ps *probeStore
	l  *Limiter
}

func newQuietGateway(t *testing.T) *quietGateway {
	c := clock.NewManual()
	ps := newProbe(c)
	return &quietGateway{t: t, c: c, ps: ps, l: testLimiter(t, baseConfig(), ps, c, false)}
}

// run ticks the sync loop for d; each makes it call until returns true.
func (g *quietGateway) run(d time.Duration, each func() bool) {
	for end := g.c.Now().Add(d); g.c.Now().Before(end); {
		g.c.Advance(g.l.snap().cfg.SyncInterval)
		g.l.tick(g.c.Now())
		if each != nil && !each() {
			return
		}
	}
}

// slowThenFast makes the Store slow by lat for 3 s, then fast again, and returns when it got
// fast and the latency average then. It checks the level lat sets.
func (g *quietGateway) slowThenFast(lat time.Duration, want Level) (fastAt time.Time, avg time.Duration) {
	g.t.Helper()
	g.run(2*time.Second, nil)
	g.ps.delay.Store(int64(lat))
	g.run(3*time.Second, nil)
	if g.l.Level() != want {
		g.t.Fatalf("+%v Store for 3 s: level %v (average %v), want %v", lat, g.l.Level(), g.l.Latency(), want)
	}
	g.ps.delay.Store(0)
	return g.c.Now(), g.l.Latency()
}

// A Store slow for 3 s, then fast: the level is back at normal within about 5 s however few
// the calls (the reports only: one a second at significant, two at mild), and stays there.
func TestLevelBackToNormalInTime(t *testing.T) {
	for _, tc := range []struct {
		lat  time.Duration
		want Level
	}{
		{20 * time.Millisecond, LevelMild},
		{200 * time.Millisecond, LevelSignificant},
		{900 * time.Millisecond, LevelSignificant}, // near the 1 s a background call may take
	} {
		t.Run(tc.lat.String(), func(t *testing.T) {
			g := newQuietGateway(t)
			fastAt, avg := g.slowThenFast(tc.lat, tc.want)
			reps := g.ps.reps.Load()
			var normalAt time.Time
			g.run(10*time.Second, func() bool {
				if g.l.Level() == LevelNormal {
					normalAt = g.c.Now()
				}
				return normalAt.IsZero()
			})
			took := normalAt.Sub(fastAt)
			bound := backToNormalWithin(avg, 0) + syncInterval(tc.want, 0)
			t.Logf("average %v when the Store got fast; normal %v later (bound %v) after %d reports",
				avg, took, bound, g.ps.reps.Load()-reps)
			if normalAt.IsZero() || took > bound || took > 5300*time.Millisecond {
				t.Fatalf("level %v %v after the Store got fast (average %v), want normal within %v",
					g.l.Level(), g.c.Now().Sub(fastAt), g.l.Latency(), min(bound, 5300*time.Millisecond))
			}
			if g.ps.leases.Load() != 0 {
				t.Fatalf("%d leases: the fleet is quiet, its reports are its only Store calls", g.ps.leases.Load())
			}
			g.run(time.Minute, func() bool {
				if g.l.Level() != LevelNormal {
					t.Fatalf("level %v %v after the Store got fast", g.l.Level(), g.c.Now().Sub(fastAt))
				}
				return true
			})
		})
	}
}

// One 10 ms answer during the recovery (at the mild threshold) does not restart the hold: the
// level is back at normal within the same bound.
func TestLevelBorderlineCallKeepsHold(t *testing.T) {
	for _, tc := range []struct {
		lat, after time.Duration // the 10 ms answer comes once the Store has been fast for after
		want       Level
	}{
		{20 * time.Millisecond, 500 * time.Millisecond, LevelMild},
		{20 * time.Millisecond, 1500 * time.Millisecond, LevelMild},
		{20 * time.Millisecond, 2500 * time.Millisecond, LevelMild},
		{200 * time.Millisecond, time.Second, LevelSignificant},
		{200 * time.Millisecond, 2 * time.Second, LevelSignificant},
		{200 * time.Millisecond, 3 * time.Second, LevelSignificant},
	} {
		t.Run(tc.lat.String()+"/"+tc.after.String(), func(t *testing.T) {
			g := newQuietGateway(t)
			fastAt, avg := g.slowThenFast(tc.lat, tc.want)
			var normalAt time.Time
			borderline := false
			g.run(10*time.Second, func() bool {
				switch {
				case g.l.Level() == LevelNormal:
					normalAt = g.c.Now()
				case !borderline && g.c.Now().Sub(fastAt) >= tc.after:
					borderline = true
					g.ps.delay.Store(int64(10 * time.Millisecond)) // the next report
					for reps := g.ps.reps.Load(); g.ps.reps.Load() == reps; {
						g.c.Advance(g.l.snap().cfg.SyncInterval)
						g.l.tick(g.c.Now())
					}
					g.ps.delay.Store(0)
				}
				return normalAt.IsZero()
			})
			took := normalAt.Sub(fastAt)
			bound := backToNormalWithin(avg, 0) + syncInterval(tc.want, 0)
			t.Logf("normal %v after the Store got fast (bound %v)", took, bound)
			if !borderline || normalAt.IsZero() || took > bound {
				t.Fatalf("a 10 ms answer during the recovery (sent: %v): level %v %v after the Store got fast, want normal within %v",
					borderline, g.l.Level(), g.c.Now().Sub(fastAt), bound)
			}
		})
	}
}

// A latency hovering around the mild threshold, on a host making 10 or 100 calls a second,
// does not flap the level for a minute, whether it starts at normal or at mild.
func TestLevelHoveringDoesNotFlap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		low, high time.Duration
		perSecond int
		fromMild  bool
	}{
		{"8-12ms/10/s", 8 * time.Millisecond, 12 * time.Millisecond, 10, false},
		{"8-12ms/10/s from mild", 8 * time.Millisecond, 12 * time.Millisecond, 10, true},
		{"8-12ms/100/s", 8 * time.Millisecond, 12 * time.Millisecond, 100, false},
		{"6-14ms/10/s", 6 * time.Millisecond, 14 * time.Millisecond, 10, false},
		{"6-14ms/10/s from mild", 6 * time.Millisecond, 14 * time.Millisecond, 10, true},
		{"5-20ms/100/s", 5 * time.Millisecond, 20 * time.Millisecond, 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clock.NewManual()
			cfg := baseConfig()
			logs := logTo(&cfg)
			l := testLimiter(t, cfg, newProbe(c), c, false)
			gap := time.Second / time.Duration(tc.perSecond)
			if tc.fromMild {
				for range 10 {
					l.deg.observe(30*time.Millisecond, nil, true)
					c.Advance(gap)
				}
				if l.Level() != LevelMild {
					t.Fatalf("a 30 ms Store: level %v, want mild", l.Level())
				}
			}
			changes, prev := 0, l.Level()
			for i := range 60 * tc.perSecond {
				lat := tc.low
				if i%2 == 1 {
					lat = tc.high
				}
				l.deg.observe(lat, nil, true)
				c.Advance(gap)
				if l.Level() != prev {
					changes++
					prev = l.Level()
				}
			}
			t.Logf("%d level changes, level %v, average %v", changes, l.Level(), l.Latency())
			if changes > 1 || logs.Len() > 1 {
				t.Fatalf("%d level changes and %d log lines in a minute of a latency hovering at 10 ms, want at most one of each",
					changes, logs.Len())
			}
		})
	}
}

// A Store that stays slow keeps its level.
func TestLevelSteadySlowStore(t *testing.T) {
	for _, tc := range []struct {
		lat  time.Duration
		want Level
	}{
		{50 * time.Millisecond, LevelMild},
		{150 * time.Millisecond, LevelSignificant},
	} {
		t.Run(tc.lat.String(), func(t *testing.T) {
			g := newQuietGateway(t)
			g.ps.delay.Store(int64(tc.lat))
			g.run(2*time.Second, nil)
			if g.l.Level() != tc.want {
				t.Fatalf("+%v Store: level %v (average %v), want %v", tc.lat, g.l.Level(), g.l.Latency(), tc.want)
			}
			g.run(time.Minute, func() bool {
				if g.l.Level() != tc.want {
					t.Fatalf("+%v Store: level %v (average %v), want %v", tc.lat, g.l.Level(), g.l.Latency(), tc.want)
				}
				return true
			})
		})
	}
}

// Whatever the Store did before (any latencies up to the 1 s a background call may take,
// failures, any spacing of the calls), once every call is answered within 1 ms the level is
// normal at every call made backToNormalWithin (at most 4.3 s) after the last slower one or
// later, however the calls are spaced.
func TestPropLevelBackToNormalInTime(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := clock.NewManual()
		l := testLimiter(t, baseConfig(), newProbe(c), c, false)
		ms := func(lo, hi int, label string) time.Duration {
			return time.Duration(rapid.IntRange(lo, hi).Draw(t, label)) * time.Millisecond
		}
		for range rapid.IntRange(0, 100).Draw(t, "history") {
			c.Advance(ms(0, 2000, "gap"))
			var err error
			if rapid.IntRange(0, 9).Draw(t, "fails") == 0 {
				err = errDown
			}
			lat := ms(0, 1000, "latency")
			if rapid.Bool().Draw(t, "spike") {
				lat = ms(0, 150, "latency")
			}
			l.deg.observe(lat, err, rapid.Bool().Draw(t, "probe"))
		}
		fastAt, avg := c.Now(), l.Latency()
		within := backToNormalWithin(max(avg, time.Millisecond), time.Millisecond)
		if within > 4300*time.Millisecond {
			t.Fatalf("bound %v for an average of %v, want at most 4.3 s", within, avg)
		}
		for c.Now().Sub(fastAt) < within+3*time.Second {
			c.Advance(ms(0, 1500, "fast gap"))
			probe := rapid.Bool().Draw(t, "fast probe") || l.Level() == LevelFailOpen
			l.deg.observe(ms(0, 1, "fast latency"), nil, probe)
			if since := c.Now().Sub(fastAt); since >= within && l.Level() != LevelNormal {
				t.Fatalf("level %v %v after the Store got fast (average %v then, %v now), want normal from %v on",
					l.Level(), since, avg, l.Latency(), within)
			}
		}
	})
}
