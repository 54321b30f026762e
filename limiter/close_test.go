package limiter

import (
	"context"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/clock"
)

// Close does not call a Store it knows to be away (fail_open): a call would wait for a new
// connection's handshake, bounded by the client's socket timeout rather than the Store timeout,
// and a reload away from a frozen Redis took 1.5 s.
func TestCloseInFailOpenAsksNothing(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	if !a.Take(context.Background(), 1, 0).Allowed {
		t.Fatal("rejected")
	}
	ps.fail.Store(true)
	c.Advance(l.snap().cfg.SyncInterval)
	l.tick(c.Now())
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v after a failed report, want fail_open", l.Level())
	}
	calls := ps.leases.Load() + ps.returns.Load() + ps.reps.Load()
	if err := l.Close(); err == nil {
		t.Fatal("Close in fail_open: nil error, want what was not returned")
	}
	if n := ps.leases.Load() + ps.returns.Load() + ps.reps.Load() - calls; n != 0 {
		t.Fatalf("Close in fail_open made %d Store calls, want none", n)
	}
}
