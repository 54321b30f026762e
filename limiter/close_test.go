package limiter

import (
	"context"
	"sync"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
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

// countsSource is an InFlightSource with fixed counts that records the remote ones it is given.
type countsSource struct {
	apps    map[string]int64
	cluster int64

	mu            sync.Mutex
	remote        map[string]int64
	remoteCluster int64
}

func (s *countsSource) InFlight() (map[string]int64, int64) { return s.apps, s.cluster }
func (s *countsSource) Rejoined()                           {}
func (s *countsSource) SetRemote(apps map[string]int64, cluster int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remote, s.remoteCluster = apps, cluster
}

func (s *countsSource) remoteCounts() (map[string]int64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.remote, s.remoteCluster
}

// Close's last report leaves the fleet: the next report of the instance that stays counts one
// live instance and none of the leaver's requests in flight, one sync interval later rather
// than InstanceTTL later (its shares and rescue limits are for the fleet that is there).
func TestCloseLeavesTheFleet(t *testing.T) {
	c := clock.NewManual()
	ms := memstore.New(c)
	ps := newProbe(c)
	ps.Store = ms
	cfg := baseConfig()
	leaverSrc := &countsSource{apps: map[string]int64{"a": 2}, cluster: 3}
	cfg.Connections = leaverSrc
	leaver := testLimiter(t, cfg, ps, c, false)
	cfg = baseConfig()
	cfg.Instance = "i2"
	src := &countsSource{apps: map[string]int64{"a": 0}}
	cfg.Connections = src
	stays := testLimiter(t, cfg, ms, c, false)
	t.Cleanup(func() { _ = stays.Close() })

	interval := stays.snap().cfg.SyncInterval
	c.Advance(interval)
	leaver.tick(c.Now())
	stays.tick(c.Now())
	if n := stays.State().LiveInstances; n != 2 {
		t.Fatalf("two instances reporting: live %d, want 2", n)
	}
	if apps, cluster := src.remoteCounts(); cluster != 3 || apps["a"] != 2 {
		t.Fatalf("remote in flight %v, cluster %d; want the leaver's a: 2, cluster 3", apps, cluster)
	}
	// Cost admitted since the last report: the leaving report carries it.
	if d := admit(mustApp(t, leaver, "a"), 1); !d.Allowed {
		t.Fatal("rejected")
	}
	reps := ps.reps.Load()
	if err := leaver.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ps.reps.Load() - reps; n != 1 {
		t.Fatalf("Close sent %d reports, want 1", n)
	}
	c.Advance(interval)
	stays.tick(c.Now())
	if n := stays.State().LiveInstances; n != 1 {
		t.Fatalf("one sync interval after the other instance closed: live %d, want 1", n)
	}
	if apps, cluster := src.remoteCounts(); cluster != 0 || apps["a"] != 0 {
		t.Fatalf("remote in flight %v, cluster %d after the other instance closed; want none", apps, cluster)
	}
	if last := ps.lastReport.Load(); !last.Leaving || last.Cost != 1 {
		t.Fatalf("Close's report %+v; want Leaving, with the cost of 1 admitted since", *last)
	}
}
