package limiter

import (
	"sync/atomic"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/internal/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
)

// rejoinProbe is an InFlightSource that counts the Rejoined calls.
type rejoinProbe struct{ rejoined atomic.Int64 }

func (p *rejoinProbe) InFlight() (map[string]int64, int64) { return nil, 0 }
func (p *rejoinProbe) SetRemote(map[string]int64, int64)   {}
func (p *rejoinProbe) Rejoined()                           { p.rejoined.Add(1) }

// A report the Store answers with Rejoined (the first, and the first after the Store lost its
// data) is passed on to the connection counts, which lease their slots again; the others not.
func TestReportPassesRejoinedOn(t *testing.T) {
	c := clock.NewManual()
	shared := memstore.New(c)
	probe := &rejoinProbe{}
	cfg := baseConfig()
	cfg.Connections = probe
	l := testLimiter(t, cfg, shared, c, false)
	defer l.Close()
	c.Advance(l.snap().cfg.SyncInterval)
	l.tick(c.Now())
	if n := probe.rejoined.Load(); n != 1 {
		t.Fatalf("after the first report: %d Rejoined calls, want 1", n)
	}
	c.Advance(l.snap().cfg.SyncInterval)
	l.tick(c.Now())
	if n := probe.rejoined.Load(); n != 1 {
		t.Fatalf("after the second report: %d Rejoined calls, want still 1", n)
	}
}
