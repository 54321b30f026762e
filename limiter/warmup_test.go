package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
)

// TestWarmupBoundsColdAdmission: a cold app offered ten times its guaranteed rate is admitted,
// over its first warm-up, no more than the ramp's integral (g/3·W + (2g/3)·W/2 = 2gW/3) plus one
// lease, although its bucket is full; without a warm-up the full burst goes through at once.
func TestWarmupBoundsColdAdmission(t *testing.T) {
	const (
		g      = 100.0
		burst  = 1000.0
		warmup = 10 * time.Second
	)
	run := func(w time.Duration) (first, total int64) {
		c := clock.NewManual()
		cfg := baseConfig()
		p := pol(g, burst, 0)
		p.Warmup = w
		cfg.Apps["w"] = p
		l := testLimiter(t, cfg, newStore(c), c, false)
		a := mustApp(t, l, "w")
		start := c.Now()
		for c.Now().Sub(start) < warmup {
			for range 10 { // 1000 requests/s of cost 1
				if a.Take(context.Background(), 1, 0).Allowed {
					total++
				}
			}
			if c.Now().Sub(start) < time.Second {
				first = total
			}
			c.Advance(10 * time.Millisecond)
		}
		return first, total
	}

	first, total := run(warmup)
	integral := 2 * g * warmup.Seconds() / 3
	oneLease := min(float64(DefaultReserve), burst/2) // the largest lease target
	if float64(total) > integral+oneLease {
		t.Fatalf("cold app admitted %d in its warm-up; want <= %v (ramp integral %v + one lease %v)",
			total, integral+oneLease, integral, oneLease)
	}
	if float64(total) < integral/2 {
		t.Fatalf("cold app admitted only %d in its warm-up (ramp integral %v): starved", total, integral)
	}
	// The first second's allowance is g/3 + g/(3W) ≈ 36.7: not the burst.
	if first > int64(g/3+g/(3*warmup.Seconds()))+1 {
		t.Fatalf("cold app admitted %d in its first second; want about g/3", first)
	}

	firstOff, totalOff := run(0)
	if firstOff < int64(burst) || totalOff < int64(burst+g*(warmup.Seconds()-1)) {
		t.Fatalf("without warm-up: %d admitted in the first second, %d in %v; want the burst at once", firstOff, totalOff, warmup)
	}
	t.Logf("warm-up %v: admitted %d in the first second, %d in all (integral %.1f); without: %d, %d",
		warmup, first, total, integral, firstOff, totalOff)
}
