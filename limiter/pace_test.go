package limiter

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// The pacer admits at its rate with a burst of its tolerance, whatever the takes ask: over any
// span, admitted cost ≤ rate × span + what the tolerance lets through; and it says how long
// until the next place.
func TestPacerSpacesTakes(t *testing.T) {
	p := &pacer{rate: 100, tolerance: int64(20 * time.Millisecond)}
	now := time.Unix(1000, 0).UnixNano()
	admitted := 0
	for range 1000 { // a take every millisecond for one second: ten times the rate
		if _, ok := p.admit(now, 1); ok {
			admitted++
		}
		now += int64(time.Millisecond)
	}
	// 100 in the second, plus the tolerance's two or three at the start
	if admitted < 100 || admitted > 103 {
		t.Fatalf("admitted %d in a second at 100/s", admitted)
	}
	wait, ok := p.admit(now, 1)
	if ok {
		now += int64(wait) // at most one more place is free; take it
		wait, ok = p.admit(now, 1)
	}
	if ok || wait <= 0 || wait > 10*time.Millisecond {
		t.Fatalf("a take right after the last place: admitted %v, wait %v; want a refusal for up to 10ms", ok, wait)
	}
	if _, ok := p.admit(now+int64(wait), 1); !ok {
		t.Fatalf("refused at the time it named")
	}
}

// Under a learned capacity, an app at its quota in a fleet spends its leases at its share of
// L2's refill: a lease's tokens go out on the schedule, the others are refused with
// app_exhausted and no remaining tokens; a static capacity does not pace.
func TestLeaseSpentEvenlyAtQuota(t *testing.T) {
	for _, adaptiveOn := range []bool{true, false} {
		c := clock.NewManual()
		cfg := baseConfig()
		if adaptiveOn {
			cfg = adaptiveConfig()
		}
		cfg.Apps = map[string]store.AppPolicy{"a": pol(100, 1000, 0)}
		l := testLimiter(t, cfg, newStore(c), c, false)
		a := mustApp(t, l, "a")
		st := *l.state.Load()
		st.LiveInstances, st.Capacity = 2, 1000
		if adaptiveOn {
			st.CapacitySource = store.CapacityAdaptive
		}
		l.state.Store(&st)
		req := store.LeaseRequest{Factor: 1, Want: 100}
		a.balance.Store(50)
		a.applyLease(req, store.Lease{Granted: 10}, c.Now()) // short: at the quota
		if adaptiveOn != (a.pacing.Load() != nil) {
			t.Fatalf("adaptive %v: pacing %v", adaptiveOn, a.pacing.Load() != nil)
		}
		admitted := 0
		for range 100 { // a take every millisecond for 100 ms
			d := a.Take(context.Background(), 1, 0)
			if d.Allowed {
				admitted++
			} else if d.Remaining != 0 || mapReason(&st, 0, store.ReasonAppExhausted) != d.Reason {
				t.Fatalf("paced refusal: %+v", d)
			}
			c.Advance(time.Millisecond)
		}
		// paced: 100 × 1.1 / 2 instances = 55/s, 5.5 in 100 ms plus the tolerance's burst
		if want := 60; adaptiveOn && (admitted < 5 || admitted > 8) || !adaptiveOn && admitted != want {
			t.Fatalf("adaptive %v: admitted %d of 60 local tokens in 100 ms", adaptiveOn, admitted)
		}
		// a whole lease while L2 is left with less than two leases keeps the pacing; with more,
		// the other instance does not take its share, and this one may
		a.applyLease(req, store.Lease{Granted: 100, Remaining: 150}, c.Now())
		if adaptiveOn != (a.pacing.Load() != nil) {
			t.Fatalf("adaptive %v: pacing %v after a whole lease with L2 low", adaptiveOn, a.pacing.Load() != nil)
		}
		a.applyLease(req, store.Lease{Granted: 100, Remaining: 200}, c.Now())
		if a.pacing.Load() != nil {
			t.Fatalf("pacing after a whole lease that left L2 two more")
		}
	}
}

// Pacing does not cap an instance at its share when the others leave theirs: with an app's
// traffic on one of two live instances, that instance admits about the app's whole rate.
func TestPacingLeavesAnIdleShareToTheBusyInstance(t *testing.T) {
	c := clock.NewManual()
	ms := memstore.New(c)
	p := pol(100, 3000, 0) // 30 s of burst: L2 takes long to fill half of it
	var lims []*Limiter
	for i := range 2 {
		cfg := adaptiveConfig()
		cfg.Apps = map[string]store.AppPolicy{"app": p}
		cfg.Instance = fmt.Sprintf("i%d", i)
		lims = append(lims, testLimiter(t, cfg, &probeStore{Store: ms, clock: c}, c, false))
	}
	busy := mustApp(t, lims[0], "app")
	var admitted int64
	for ms := range 20_000 { // 20 s, a take of cost 1 every ms on instance 0 only
		c.Advance(time.Millisecond)
		if ms%100 == 0 {
			for _, l := range lims {
				l.tick(c.Now())
			}
		}
		if busy.Take(context.Background(), 1, 0).Allowed && ms >= 10_000 {
			admitted++
		}
	}
	// the last 10 s, after the 3000-token burst is spent: the app's rate, 100/s
	if admitted < 900 {
		t.Fatalf("the busy instance admitted %d in 10 s; want about the app's 1000, not its half share", admitted)
	}
}

// A pacer follows L1's share for the app at every tick, not only at the next lease: a pacer
// left at a low rate would spend its lease slowly and put off the lease that brings the new one.
func TestPacerFollowsTheShareBetweenLeases(t *testing.T) {
	c := clock.NewManual()
	cfg := adaptiveConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(100, 1000, 3), "b": pol(800, 1000, 0)}
	ps := &probeStore{Store: newStore(c), clock: c} // L1's answers are the test's st
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "a")
	st := *l.state.Load()
	st.LiveInstances, st.CapacitySource, st.Capacity = 2, store.CapacityAdaptive, 900 // P3 gets 0.85 × 900 − 800 = −35: nothing
	l.state.Store(&st)
	a.applyLease(store.LeaseRequest{Factor: 0.1, Want: 100}, store.Lease{Granted: 10}, c.Now())
	if p := a.pacing.Load(); p == nil || p.rate != 100*0.1/2*paceHeadroom {
		t.Fatalf("pacer after the lease: %+v", p)
	}
	st.Capacity = 2000 // 0.85 × 2000 − 800 = 900: all of a's guaranteed and more
	ps.state.Store(&st)
	admit(a, 1)
	c.Advance(100 * time.Millisecond)
	l.tick(c.Now())
	want := 100 * l.snap().adaptiveFactor(&st, a.Policy()) / 2 * paceHeadroom
	if p := a.pacing.Load(); p == nil || p.rate != want || want <= 100*0.1/2*paceHeadroom {
		t.Fatalf("pacer after a tick with a larger share: %+v, want rate %v", p, want)
	}
}

// heldLease answers every Lease with res once release is closed, and counts the calls.
type heldLease struct {
	store.Store
	release chan struct{}
	res     store.Lease
	calls   atomic.Int64
}

func (h *heldLease) Lease(ctx context.Context, _ store.LeaseRequest) (store.Lease, error) {
	h.calls.Add(1)
	select {
	case <-h.release:
		return h.res, nil
	case <-ctx.Done():
		return store.Lease{}, ctx.Err()
	}
}

// The requests that waited for the lease that puts their app on a pace take their places in
// the schedule too: they do not all go out at once when it lands.
func TestWaitersOfTheLeaseThatStartsPacingArePaced(t *testing.T) {
	c := clock.NewManual()
	cfg := adaptiveConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(100, 1000, 0)}
	cfg.StoreTimeout = time.Hour // the waiters wait for the lease, however long the test takes
	hs := &heldLease{Store: newStore(c), release: make(chan struct{}), res: store.Lease{Granted: 20}}
	l := testLimiter(t, cfg, hs, c, false)
	a := mustApp(t, l, "a")
	st := *l.state.Load()
	st.LiveInstances, st.CapacitySource, st.Capacity = 2, store.CapacityAdaptive, 1000
	l.state.Store(&st)
	const waiters = 20
	results := make(chan Decision, waiters)
	for range waiters {
		go func() { results <- a.Take(context.Background(), 1, 0) }()
	}
	for a.waiting.Load() < waiters { // every request waits on the one lease in flight
		runtime.Gosched()
	}
	close(hs.release) // 20 tokens, fewer than the lease asked for: at the quota, paced
	admitted := 0
	for range waiters {
		if d := <-results; d.Allowed {
			admitted++
		} else if d.Remaining != 0 {
			t.Fatalf("a paced refusal shows %d remaining", d.Remaining)
		}
	}
	if a.pacing.Load() == nil || hs.calls.Load() != 1 {
		t.Fatalf("pacing %v after %d leases", a.pacing.Load() != nil, hs.calls.Load())
	}
	// 100/s × 1.1 / 2 instances = 55/s, with a tolerance of 2/55 s: three places at once
	if admitted < 1 || admitted > 4 {
		t.Fatalf("%d of %d waiters admitted at once when the lease landed; want the pace's few", admitted, waiters)
	}
}
