package limiter

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// An app idle for two minutes leaves the sync loop's list, and its next request puts it back;
// its statistics then reach the Store as before.
func TestQuietAppLeavesListAndComesBack(t *testing.T) {
	c := clock.NewManual()
	sl := &statsLedger{Store: newProbe(c), seqs: map[string]map[uint64]int64{}}
	l := testLimiter(t, baseConfig(), sl, c, false)
	a := mustApp(t, l, "a")
	ctx := context.Background()
	for range 5 {
		if !a.Take(ctx, 1, 0).Allowed {
			t.Fatal("rejected")
		}
	}
	for range 120 {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	if a.listed.Load() || len(l.visited()) != 0 {
		t.Fatalf("after two idle minutes: listed %v, %d apps visited", a.listed.Load(), len(l.visited()))
	}
	if tok, debt := a.Tokens(); tok != 0 || debt != 0 {
		t.Fatalf("a quiet app holds %d tokens, %d debt", tok, debt)
	}
	if got := sl.requests("a"); got != 5 {
		t.Fatalf("the Store was sent %d requests, want 5", got)
	}
	if !a.Take(ctx, 1, 0).Allowed || !a.listed.Load() {
		t.Fatalf("a request did not put the app back on the list")
	}
	c.Advance(DefaultStatsInterval + time.Second)
	l.tick(c.Now())
	c.Advance(time.Second)
	l.tick(c.Now())
	if got := sl.requests("a"); got != 6 {
		t.Fatalf("the Store was sent %d requests after the app came back, want 6", got)
	}
}

// statsLedger records the statistics batches the Store acknowledged, by app and Seq (the Store
// applies a Seq once). Unlike the Store's own counters it does not forget an app whose bucket
// expired while idle.
type statsLedger struct {
	store.Store
	mu   sync.Mutex
	seqs map[string]map[uint64]int64 // app → Seq → requests
}

func (s *statsLedger) add(app string, seq uint64, n int64) {
	if seq == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seqs[app] == nil {
		s.seqs[app] = map[uint64]int64{}
	}
	s.seqs[app][seq] = n
}

func (s *statsLedger) Lease(ctx context.Context, r store.LeaseRequest) (store.Lease, error) {
	res, err := s.Store.Lease(ctx, r)
	if err == nil {
		s.add(r.App, r.Stats.Seq, r.Stats.Requests)
	}
	return res, err
}

func (s *statsLedger) Return(ctx context.Context, r store.Return) error {
	err := s.Store.Return(ctx, r)
	if err == nil && r.Tokens > 0 {
		s.add(r.App, r.Stats.Seq, r.Stats.Requests)
	}
	return err
}

func (s *statsLedger) Report(ctx context.Context, r store.Report) (store.ClusterState, error) {
	st, err := s.Store.Report(ctx, r)
	if err == nil {
		for _, a := range r.Apps {
			s.add(a.App, a.Seq, a.Requests)
		}
	}
	return st, err
}

// requests is what the Store was sent for app, each Seq once.
func (s *statsLedger) requests(app string) (n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.seqs[app] {
		n += r
	}
	return n
}

// Property: the sync loop misses nothing by leaving quiet apps alone. After every tick an app
// off the list is quiet; over random traffic, idle periods, Store outages and Close, every
// admitted request reaches the Store's statistics exactly once, and every token the Store
// granted is spent, returned, dropped or held.
func TestPropQuietAppsMissNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := clock.NewManual()
		ps := newProbe(c)
		sl := &statsLedger{Store: ps, seqs: map[string]map[uint64]int64{}}
		cfg := baseConfig()
		cfg.UnknownApp = UnknownIsolated
		l := testLimiter(t, cfg, sl, c, false)
		ctx := context.Background()
		admitted := map[string]int64{}
		seen := map[*App]bool{}
		tick := func(d time.Duration) {
			c.Advance(d)
			l.tick(c.Now())
			if l.Level() == LevelFailOpen {
				return
			}
			for _, a := range l.apps() {
				if !a.listed.Load() && !a.quiet() {
					t.Fatalf("app %s is off the list with work left: rate %v, balance %d, consumed %d/%d sent, stats settled %v",
						a.id, a.rate, a.balance.Load(), a.consumed.Load(), a.costSent, a.statsSettled())
				}
			}
		}
		for range rapid.IntRange(1, 100).Draw(t, "n") {
			a, _ := l.App(rapid.SampledFrom([]string{"a", "p3", "u1", "u2"}).Draw(t, "app"))
			seen[a] = true
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				if a.Take(ctx, rapid.Int64Range(1, 50).Draw(t, "cost"), 0).Allowed {
					admitted[a.id]++
				}
			case 2:
				a.Refund(rapid.Int64Range(0, 20).Draw(t, "refund"))
			case 3: // an idle period
				for range rapid.IntRange(1, 20).Draw(t, "idle ticks") {
					tick(time.Duration(rapid.IntRange(1, 30).Draw(t, "idle s")) * time.Second)
				}
			case 4:
				ps.fail.Store(rapid.Bool().Draw(t, "fail"))
			case 5:
				tick(time.Duration(rapid.IntRange(1, 500).Draw(t, "ms")) * time.Millisecond)
			}
		}
		ps.fail.Store(false)
		c.Advance(2 * time.Second) // the probe ends fail-open
		l.tick(c.Now())
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for id, n := range admitted {
			if got := sl.requests(id); got != n {
				t.Fatalf("app %s: the Store was sent %d requests under distinct Seqs, %d were admitted", id, got, n)
			}
		}
		var leased, returned, dropped int64
		for a := range seen {
			if lhs, rhs := conserved(a); lhs != rhs {
				t.Fatalf("app %s: leased+minted %d != consumed+returned+dropped+held %d", a.id, lhs, rhs)
			}
			leased, returned, dropped = leased+a.leased.Load(), returned+a.returned.Load(), dropped+a.dropped.Load()
		}
		if ps.granted.Load() != leased || ps.returned.Load() != returned || ps.lost.Load() != dropped {
			t.Fatalf("store granted %d / got back %d / lost %d, apps leased %d / returned %d / dropped %d",
				ps.granted.Load(), ps.returned.Load(), ps.lost.Load(), leased, returned, dropped)
		}
	})
}

// Apps going quiet and coming back while requests race with the sync loop (real background
// leases, ticks seconds apart so that apps go quiet between bursts): no race, every admitted
// request's statistics reach the Store once, and tokens are conserved. Bursts start in the
// busy phases and run alongside the ticks that follow; the end of each idle phase waits for
// them, then checks that an app off the list has no work left.
//
// The clock does not move while a lease is in flight: a real Store call ends within its
// timeout, while a lease goroutine left waiting here saw a minute pass between the Store's
// answer and its own, so that the app's Store record (60 s) expired before the next call and
// the lease's batch looked lost. The checks wait for the leases still in flight after Close:
// such a lease gives its grant back, and a grant on its way back is neither held nor returned.
func TestConcurrentQuietAndBack(t *testing.T) {
	c := clock.NewManual()
	sl := &statsLedger{Store: newProbe(c), seqs: map[string]map[uint64]int64{}}
	cfg := baseConfig()
	cfg.StoreTimeout = time.Minute // no waiter gives up: the outcome must not depend on timing
	l := testLimiter(t, cfg, sl, c, true)
	var leases sync.WaitGroup
	var inFlight sync.RWMutex // leases hold it for reading, the clock moves under the write lock
	l.spawn = func(f func()) {
		leases.Go(func() {
			inFlight.RLock()
			defer inFlight.RUnlock()
			f()
		})
	}
	ids := []string{"a", "p3"}
	var admitted [2]atomic.Int64
	var bursts sync.WaitGroup
	rng := rand.New(rand.NewPCG(3, 11))
	quiet := 0
	for i := range 400 {
		if i%50 < 5 { // five busy ticks, then 45 × 3 s idle
			for range 3 {
				app, n := rng.IntN(len(ids)), rng.IntN(20)
				bursts.Go(func() {
					a := mustApp(t, l, ids[app])
					for range n {
						if a.Take(context.Background(), 1, 0).Allowed {
							admitted[app].Add(1)
						}
					}
				})
			}
		}
		inFlight.Lock()
		c.Advance(3 * time.Second)
		inFlight.Unlock()
		l.tick(c.Now())
		if i%50 == 49 { // the end of an idle phase: an app off the list has no work left
			bursts.Wait()
			for _, id := range ids {
				if a := mustApp(t, l, id); !a.listed.Load() && !a.quiet() {
					t.Fatalf("tick %d: app %s is off the list with work left", i, id)
				}
			}
		}
		for _, id := range ids {
			if !mustApp(t, l, id).listed.Load() {
				quiet++
			}
		}
	}
	bursts.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leases.Wait()
	for i, id := range ids {
		a := mustApp(t, l, id)
		if lhs, rhs := conserved(a); lhs != rhs {
			t.Errorf("app %s: leased+minted %d != consumed+returned+dropped+held %d", id, lhs, rhs)
		}
		if got, want := sl.requests(id), admitted[i].Load(); got != want {
			t.Errorf("app %s: the Store was sent %d requests, %d were admitted", id, got, want)
		}
	}
	t.Logf("%d and %d requests admitted; apps found off the list after %d of %d ticks",
		admitted[0].Load(), admitted[1].Load(), quiet, 2*400)
}

// TestFinalStatisticsReachTheRecord: an app that stops at its quota has nothing to return, so
// the statistics of its requests after its last lease wait StatsInterval for a report to flush
// them. The Store's record of the app must still be there then. Black-box, with the record's
// 60 s lifetime equal to the default interval, the flush landed after the record expired and
// made it anew: Redis counted 19 requests of an app that had 9 933.
func TestFinalStatisticsReachTheRecord(t *testing.T) {
	c := clock.NewManual()
	ms := memstore.New(c)
	l := testLimiter(t, baseConfig(), ms, c, false)
	a := mustApp(t, l, "a")
	admitted := int64(0)
	for range 2000 { // its burst (1000) and more: the last lease is refused
		if admit(a, 1).Allowed {
			admitted++
		}
	}
	if tok, _ := a.Tokens(); tok != 0 || admitted == 0 {
		t.Fatalf("%d admitted, %d tokens left; want the burst spent", admitted, tok)
	}
	for end := c.Now().Add(l.snap().cfg.StatsInterval + 5*time.Second); c.Now().Before(end); {
		c.Advance(100 * time.Millisecond)
		l.tick(c.Now())
	}
	if !a.statsSettled() {
		t.Fatal("the statistics were not flushed after StatsInterval")
	}
	if st, ok := ms.AppState("c1", "a"); !ok || st.Requests != admitted {
		t.Fatalf("the Store's record: %+v (present %v); want all %d requests", st, ok, admitted)
	}
}
