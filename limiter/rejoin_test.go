package limiter

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// rejoinProbe is an InFlightSource that counts the Rejoined calls.
type rejoinProbe struct{ rejoined atomic.Int64 }

func (p *rejoinProbe) InFlight() (map[string]int64, int64) { return nil, 0 }
func (p *rejoinProbe) SetRemote(map[string]int64, int64)   {}
func (p *rejoinProbe) Rejoined()                           { p.rejoined.Add(1) }

// reportedOnce is a limiter on st whose connection counts are a rejoinProbe, after its first
// report, which the Store answers with Rejoined.
func reportedOnce(t *testing.T, c *clock.Manual, st store.Store) (*Limiter, *rejoinProbe) {
	t.Helper()
	probe := &rejoinProbe{}
	cfg := baseConfig()
	cfg.Connections = probe
	l := testLimiter(t, cfg, st, c, false)
	t.Cleanup(func() { _ = l.Close() })
	c.Advance(l.snap().cfg.SyncInterval)
	l.tick(c.Now())
	if n := probe.rejoined.Load(); n != 1 {
		t.Fatalf("after the first report: %d Rejoined calls, want 1", n)
	}
	return l, probe
}

// A report the Store answers with Rejoined (the first, and the first after the Store lost its
// data) is passed on to the connection counts, which lease their slots again; the others not.
func TestReportPassesRejoinedOn(t *testing.T) {
	c := clock.NewManual()
	l, probe := reportedOnce(t, c, memstore.New(c))
	c.Advance(l.snap().cfg.SyncInterval)
	l.tick(c.Now())
	if n := probe.rejoined.Load(); n != 1 {
		t.Fatalf("after the second report: %d Rejoined calls, want still 1", n)
	}
}

// lateReportStore applies every report but answers with an error while late is set: a Redis
// that was frozen runs the reports it received when it thaws, after their callers gave up.
type lateReportStore struct {
	store.Store
	late atomic.Bool
}

func (s *lateReportStore) Report(ctx context.Context, r store.Report) (store.ClusterState, error) {
	st, err := s.Store.Report(ctx, r)
	if s.late.Load() {
		return store.ClusterState{}, errDown
	}
	return st, err
}

// Leaving fail_open states the connection slots again even when the Store does not say the
// instance rejoined: a report that timed out but ran later refreshed the heartbeat, so the
// first report after the outage finds it fresh, while the other instances' leases may have
// dropped the holdings meanwhile (black-box: a gateway's holding missing from Redis for as
// long as the load lasted after a 20 s freeze).
func TestLeavingFailOpenRestatesSlots(t *testing.T) {
	c := clock.NewManual()
	ls := &lateReportStore{Store: memstore.New(c)}
	l, probe := reportedOnce(t, c, ls)
	ls.late.Store(true)
	for range 3 {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v while the reports fail, want fail_open", l.Level())
	}
	ls.late.Store(false)
	c.Advance(time.Second)
	l.tick(c.Now())
	if l.Level() == LevelFailOpen {
		t.Fatal("still in fail_open after a report succeeded")
	}
	if n := probe.rejoined.Load(); n != 2 {
		t.Fatalf("after leaving fail_open: %d Rejoined calls, want 2 (the slots stated again)", n)
	}
}
