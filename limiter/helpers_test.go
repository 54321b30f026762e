package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

var errDown = errors.New("store down")

// probeStore wraps a Store: it counts calls, and fails, slows (by advancing the manual clock)
// or blocks on demand.
type probeStore struct {
	store.Store
	clock                 *clock.Manual
	leases, returns, reps atomic.Int64
	fail                  atomic.Bool
	permanent             atomic.Bool   // with fail: the error is errRefused (a PermanentError)
	delay                 atomic.Int64  // manual-clock latency added to every call
	block                 chan struct{} // when non-nil, Lease waits on it
	entered               chan struct{} // when non-nil, Lease signals it (non-blocking)
	lastReport            atomic.Pointer[store.Report]
	lastReturn            atomic.Pointer[store.Return]       // the last Return that succeeded
	state                 atomic.Pointer[store.ClusterState] // overrides the Report reply
	returned, granted     atomic.Int64
	lost                  atomic.Int64 // tokens of Returns that failed
}

func (p *probeStore) before() error {
	if d := p.delay.Load(); d > 0 {
		p.clock.Advance(time.Duration(d))
	}
	if p.fail.Load() {
		if p.permanent.Load() {
			return fmt.Errorf("wrapped: %w", errRefused)
		}
		return errDown
	}
	return nil
}

// errRefused is a permanent Store error, as a Store that refuses the credentials returns.
var errRefused = refusedError{}

type refusedError struct{}

func (refusedError) Error() string   { return "WRONGPASS invalid username-password pair" }
func (refusedError) Permanent() bool { return true }
func (refusedError) Remedy() string  { return "fix the password" }

func (p *probeStore) Lease(ctx context.Context, r store.LeaseRequest) (store.Lease, error) {
	p.leases.Add(1)
	if p.entered != nil {
		select {
		case p.entered <- struct{}{}:
		default:
		}
	}
	if p.block != nil {
		select {
		case <-p.block:
		case <-ctx.Done():
			return store.Lease{}, ctx.Err()
		}
	}
	if err := p.before(); err != nil {
		return store.Lease{}, err
	}
	l, err := p.Store.Lease(ctx, r)
	p.granted.Add(l.Granted)
	return l, err
}

func (p *probeStore) Return(ctx context.Context, r store.Return) error {
	p.returns.Add(1)
	if err := p.before(); err != nil {
		p.lost.Add(max(r.Tokens, 0))
		return err
	}
	err := p.Store.Return(ctx, r)
	if err == nil && r.Tokens > 0 {
		p.returned.Add(r.Tokens)
		p.lastReturn.Store(&r)
	}
	return err
}

func (p *probeStore) Report(ctx context.Context, r store.Report) (store.ClusterState, error) {
	p.reps.Add(1)
	if err := p.before(); err != nil {
		return store.ClusterState{}, err
	}
	st, err := p.Store.Report(ctx, r)
	if err == nil {
		p.lastReport.Store(&r)
		if o := p.state.Load(); o != nil {
			st = *o
		}
	}
	return st, err
}

// tb is what the helpers need from *testing.T, *testing.B and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// testLimiter builds a Limiter without its loop; leases run inline (deterministic) unless
// async is set.
func testLimiter(t tb, cfg Config, st store.Store, c *clock.Manual, async bool) *Limiter {
	t.Helper()
	if cfg.Instance == "" {
		cfg.Instance = "i1"
	}
	l, err := newLimiter(cfg, st, c)
	if err != nil {
		t.Fatal(err)
	}
	if !async {
		l.spawn = func(f func()) { f() }
	}
	return l
}

func pol(g, b float64, prio int) store.AppPolicy {
	return store.AppPolicy{Guaranteed: g, Burst: b, Priority: prio}
}

func baseConfig() Config {
	return Config{
		Cluster: store.ClusterPolicy{ID: "c1"},
		Apps:    map[string]store.AppPolicy{"a": pol(100, 1000, 0), "p3": pol(100, 1000, 3)},
		Default: pol(10, 100, 2),
		Reserve: 30, // the first lease of "a": 100/s for three sync intervals
	}
}

func mustApp(t tb, l *Limiter, id string) *App {
	t.Helper()
	a, r := l.App(id)
	if a == nil {
		t.Fatalf("App(%q): %v", id, r)
	}
	return a
}

// conserved checks property 7 on one app: leased + minted = consumed + returned + dropped +
// held.
func conserved(a *App) (lhs, rhs int64) {
	return a.leased.Load() + a.minted.Load(),
		a.consumed.Load() + a.returned.Load() + a.dropped.Load() + a.balance.Load()
}

// admit is a request that costs what Take charged, as the handler makes it: Take, then, when
// admitted, Settle (which feeds L1's usage window).
func admit(a *App, cost int64) Decision {
	d := a.Take(context.Background(), cost, 0)
	if d.Allowed {
		a.Settle(d, cost, cost)
	}
	return d
}
