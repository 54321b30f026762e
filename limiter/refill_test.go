package limiter

import (
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
)

// The background refill starts early enough that, at the app's rate, the local tokens outlast
// two Store round trips — but never above half the lease target.
func TestRefillPointFollowsStoreLatency(t *testing.T) {
	c := clock.NewManual()
	cfg := baseConfig()
	l := testLimiter(t, cfg, newStore(c), c, false)
	a := mustApp(t, l, "a")
	cfg = l.snap().cfg
	a.rateTgt.Store(int64(1000 * a.horizon(cfg).Seconds())) // 1000 tokens/s

	if got, want := a.refillPoint(500, cfg), int64(cfg.RefillThreshold*500); got != want {
		t.Fatalf("no latency measured: refill point %d, want the threshold share %d", got, want)
	}
	for range 50 {
		l.deg.observe(60*time.Millisecond, nil, false) // average converges to 60 ms
	}
	// 1000/s × 2 × ~60 ms ≈ 120 tokens: above the threshold share (100), below half the target.
	if got := a.refillPoint(500, cfg); got < 110 || got > 120 {
		t.Fatalf("refill point %d with 60 ms latency, want about 120", got)
	}
	if got := a.refillPoint(100, cfg); got != 50 {
		t.Fatalf("refill point %d, want it capped at half the target (50)", got)
	}
}
