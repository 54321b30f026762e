package limiter

import (
	"context"
	"testing"
	"time"
)

func TestDegradationLevels(t *testing.T) {
	c := newClock()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	report := func(n int) {
		for range n {
			c.Advance(2 * time.Second)
			l.tick(c.Now())
		}
	}
	report(3)
	if l.Level() != LevelNormal {
		t.Fatalf("fast store: level %v", l.Level())
	}
	ps.delay.Store(int64(30 * time.Millisecond))
	report(20)
	if l.Level() != LevelMild {
		t.Fatalf("30 ms store: level %v (avg %v), want mild", l.Level(), l.Latency())
	}
	a := mustApp(t, l, "a")
	st, s, p := l.state.Load(), l.snap(), a.pol.Load()
	if got := a.want(0, 0, p, st, s); got != 2*a.rateTgt.Load() {
		t.Fatalf("mild lease target %d, want twice %d", got, a.rateTgt.Load())
	}
	if got := syncInterval(l.Level(), s.cfg.SyncInterval); got != 500*time.Millisecond {
		t.Fatalf("mild sync interval %v", got)
	}
	ps.delay.Store(int64(300 * time.Millisecond))
	report(20)
	if l.Level() != LevelSignificant {
		t.Fatalf("300 ms store: level %v, want significant", l.Level())
	}
	ps.delay.Store(0)
	report(30)
	if l.Level() != LevelNormal {
		t.Fatalf("recovered store: level %v", l.Level())
	}
	ps.fail.Store(true)
	report(1)
	if l.Level() != LevelFailOpen {
		t.Fatalf("failing store: level %v", l.Level())
	}
	ps.fail.Store(false)
	// The probe runs once a second: not before.
	c.Advance(500 * time.Millisecond)
	l.tick(c.Now())
	if l.Level() != LevelFailOpen {
		t.Fatal("left fail-open before the probe interval")
	}
	c.Advance(600 * time.Millisecond)
	l.tick(c.Now())
	if l.Level() != LevelNormal {
		t.Fatalf("after a successful probe: level %v", l.Level())
	}
}

func TestFailModes(t *testing.T) {
	for _, mode := range []FailureMode{FailLocal, FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newClock()
			ps := newProbe(c)
			cfg := baseConfig()
			cfg.OnStoreFailure = mode
			cfg.RescueRatio = 0.5
			l := testLimiter(t, cfg, ps, c, false)
			ps.state.Store(&ClusterState{Factors: [4]float64{1, 1, 1, 1}, LiveInstances: 2})
			l.tick(c.Now().Add(time.Second))
			ps.fail.Store(true)
			a := mustApp(t, l, "a") // guaranteed 100, burst 1000
			first := a.Take(context.Background(), 1, 0)
			if l.Level() != LevelFailOpen {
				t.Fatalf("level %v after a failed lease", l.Level())
			}
			admitted := int64(0)
			if first.Allowed {
				admitted++
			}
			var last Decision
			for range 999 {
				if last = a.Take(context.Background(), 1, 0); last.Allowed {
					admitted++
				}
			}
			switch mode {
			case FailLocal:
				// Rescue burst: 1000 × 0.5 / 2 live instances.
				if admitted != 250 || last.Reason != ReasonAppExhausted {
					t.Fatalf("rescue admitted %d (last %+v), want 250", admitted, last)
				}
				c.Advance(time.Second) // rescue rate 100 × 0.5 / 2 = 25/s
				n := 0
				for a.Take(context.Background(), 1, 0).Allowed {
					n++
				}
				if n != 25 {
					t.Fatalf("rescue refill admitted %d in 1 s, want 25", n)
				}
			case FailOpen:
				if admitted != 1000 {
					t.Fatalf("fail open admitted %d of 1000", admitted)
				}
			case FailClosed:
				if admitted != 0 || last.Reason != ReasonRedisUnavailable {
					t.Fatalf("fail closed admitted %d, last %+v", admitted, last)
				}
			}
			if calls := ps.leases.Load(); calls != 1 {
				t.Fatalf("%d leases while the Store is down, want only the failed one", calls)
			}
			if lhs, rhs := conserved(a); lhs != rhs {
				t.Fatalf("conservation: %d != %d", lhs, rhs)
			}
		})
	}
}

func TestStatsBacklogSentOnceAfterRecovery(t *testing.T) {
	c := newClock()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	var admitted, cost int64
	take := func(n int) {
		for range n {
			if a.Take(context.Background(), 2, 0).Allowed {
				admitted++
				cost += 2
			}
		}
	}
	take(5)
	c.Advance(time.Second)
	l.tick(c.Now())
	if !hasApp(ps.lastReport.Load(), "a", 5, 10) {
		t.Fatalf("first report %+v", ps.lastReport.Load())
	}
	admitted, cost = 0, 0
	ps.fail.Store(true)
	for range 5 {
		take(20)
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	if l.Level() != LevelFailOpen || admitted == 0 {
		t.Fatalf("level %v, admitted %d during the outage", l.Level(), admitted)
	}
	ps.fail.Store(false)
	c.Advance(time.Second)
	l.tick(c.Now())
	if l.Level() == LevelFailOpen {
		t.Fatal("still failed after the probe")
	}
	if !hasApp(ps.lastReport.Load(), "a", admitted, cost) {
		t.Fatalf("backlog report %+v, want %d requests / %d cost", ps.lastReport.Load(), admitted, cost)
	}
	c.Advance(time.Second)
	l.tick(c.Now())
	for _, r := range ps.lastReport.Load().Apps {
		if r.App == "a" && (r.Requests != 0 || r.Cost != 0) {
			t.Fatalf("backlog sent twice: %+v", r)
		}
	}
}

func TestHangingStoreNeverHangsTake(t *testing.T) {
	c := newClock()
	ps := newProbe(c)
	ps.block = make(chan struct{}) // never released: the Store only answers when its ctx ends
	cfg := baseConfig()
	cfg.StoreTimeout = 5 * time.Millisecond
	l := testLimiter(t, cfg, ps, c, true)
	d := mustApp(t, l, "a").Take(context.Background(), 1, 0)
	if !d.Allowed { // FailLocal rescue admits within the rescue burst
		t.Fatalf("take against a hanging store: %+v", d)
	}
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v after a timeout", l.Level())
	}
}

type panicStore struct{ Store }

func (panicStore) Lease(context.Context, LeaseRequest) (Lease, error) { panic("boom") }

func TestStorePanicBecomesFailure(t *testing.T) {
	c := newClock()
	cfg := baseConfig()
	cfg.OnStoreFailure = FailClosed
	l := testLimiter(t, cfg, panicStore{newStore(c)}, c, false)
	if d := mustApp(t, l, "a").Take(context.Background(), 1, 0); d.Reason != ReasonRedisUnavailable {
		t.Fatalf("take against a panicking store: %+v", d)
	}
}

func TestCallerDeadlineIsNotAStoreFailure(t *testing.T) {
	c := newClock()
	ps := newProbe(c)
	ps.block = make(chan struct{})
	defer close(ps.block)
	cfg := baseConfig()
	cfg.StoreTimeout = time.Minute
	l := testLimiter(t, cfg, ps, c, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if d := mustApp(t, l, "a").Take(ctx, 1, 0); d.Allowed {
		t.Fatalf("take with an expired caller = %+v", d)
	}
	if l.Level() == LevelFailOpen {
		t.Fatal("the caller's own deadline switched the limiter to fail-open")
	}
}
