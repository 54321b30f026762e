package limiter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func TestDegradationLevels(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, ps, c, false)
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
	a.rateTgt.Store(50) // an app leasing 50 tokens at its rate (its burst caps leases at 500)
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
	report(4) // the recovery holds: its end is logged
	// The degradation level is its own field: a field named "level" would be a second "level"
	// key in Caddy's JSON lines, and a JSON reader keeps the last one (found black-box: the
	// recovery INFO read as level "normal").
	var named int
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if f.Key == "level" {
				t.Errorf("%q has a field named level", e.Message)
			}
			if f.Key == "degradation_level" {
				named++
			}
		}
	}
	if named < 3 { // slow, slower, recovered (a slow episode's end: TestSlowStoreIsOneEpisode)
		t.Errorf("%d lines carry degradation_level, want the level changes and the recovery", named)
	}
}

func TestFailModes(t *testing.T) {
	for _, mode := range []FailureMode{FailLocal, FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			c := clock.NewManual()
			ps := newProbe(c)
			cfg := baseConfig()
			cfg.OnStoreFailure = mode
			cfg.RescueRatio = 0.5
			l := testLimiter(t, cfg, ps, c, false)
			ps.state.Store(&store.ClusterState{Factors: [4]float64{1, 1, 1, 1}, LiveInstances: 2})
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
				if admitted != 250 || last.Reason != store.ReasonAppExhausted {
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
				if admitted != 0 || last.Reason != store.ReasonRedisUnavailable {
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
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.SyncBatch = 1 // every report flushes the app's statistics
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "a")
	var admitted, cost int64
	take := func(n int) {
		for range n {
			if admit(a, 2).Allowed {
				admitted++
				cost += 2
			}
		}
	}
	take(5)
	c.Advance(time.Second)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); !hasApp(rep, "a", 5) || rep.Cost != 10 {
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
	// The probe sent the batch of the first failed report again (with its Seq), and the
	// statistics batch the failed calls had taken; the next report sends the rest of the
	// statistics, and nothing is sent twice. The cost settled during the outage stays out of
	// L1's usage window: sent at once, an outage's cost would look like one interval's, and put
	// the cluster into its automatic emergency.
	first := ps.lastReport.Load()
	if first.Cost != 0 {
		t.Fatalf("first report after the outage %+v, want no cost", first)
	}
	c.Advance(time.Second)
	l.tick(c.Now())
	rep := ps.lastReport.Load()
	if rep.Seq <= first.Seq || rep.Cost != 0 || requestsOf(first, "a")+requestsOf(rep, "a") != admitted {
		t.Fatalf("backlog report %+v after %+v, want %d requests in both and no cost (%d settled during the outage)",
			rep, first, admitted, cost-40)
	}
	c.Advance(time.Second)
	l.tick(c.Now())
	if n := requestsOf(ps.lastReport.Load(), "a"); n != 0 {
		t.Fatalf("backlog sent twice: %d requests", n)
	}
	if got := storedRequests(t, ps, "a"); got != 5+admitted {
		t.Fatalf("store counted %d requests, want %d", got, 5+admitted)
	}
}

// requestsOf is the requests rep carries for app.
func requestsOf(rep *store.Report, app string) (n int64) {
	for _, a := range rep.Apps {
		if a.App == app {
			n += a.Requests
		}
	}
	return n
}

// storedRequests is the requests the probe's memory store counted for an app.
func storedRequests(t *testing.T, ps *probeStore, app string) int64 {
	t.Helper()
	n, err := ps.Store.(*memstore.Store).AppRequests(context.Background(), "c1", app)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ackLostStore applies every Report, then fails it while ackLost is set: the reply was lost
// (a timeout after Redis ran the script). It keeps the requests of app "a" per statistics Seq
// (from reports and leases) and the cost per report Seq, and notes a Seq sent again with other
// figures.
type ackLostStore struct {
	store.Store
	ackLost   atomic.Bool
	mu        sync.Mutex
	reqBySeq  map[uint64]int64 // statistics Seq → requests of app "a"
	costBySeq map[uint64]int64 // report Seq → cost
	mismatch  string
}

func (s *ackLostStore) note(m map[uint64]int64, what string, seq uint64, v int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := m[seq]; ok && old != v {
		s.mismatch = fmt.Sprintf("%s seq %d sent with %d, then with %d", what, seq, old, v)
	}
	m[seq] = v
}

func (s *ackLostStore) Lease(ctx context.Context, r store.LeaseRequest) (store.Lease, error) {
	if r.App == "a" && r.Stats.Seq != 0 {
		s.note(s.reqBySeq, "requests", r.Stats.Seq, r.Stats.Requests)
	}
	return s.Store.Lease(ctx, r)
}

func (s *ackLostStore) Return(ctx context.Context, r store.Return) error {
	if r.App == "a" && r.Stats.Seq != 0 && r.Tokens > 0 {
		s.note(s.reqBySeq, "requests", r.Stats.Seq, r.Stats.Requests)
	}
	return s.Store.Return(ctx, r)
}

func (s *ackLostStore) Report(ctx context.Context, r store.Report) (store.ClusterState, error) {
	for _, a := range r.Apps {
		if a.App == "a" && a.Seq != 0 {
			s.note(s.reqBySeq, "requests", a.Seq, a.Requests)
		}
	}
	s.note(s.costBySeq, "cost", r.Seq, r.Cost)
	st, err := s.Store.Report(ctx, r)
	if err == nil && s.ackLost.Load() {
		return store.ClusterState{}, context.DeadlineExceeded
	}
	return st, err
}

// Reports whose reply is lost are sent again with the same Seq and the same figures, and the
// Store counts every request exactly once (a resend used to count them twice).
func TestReportAckLostCountsOnce(t *testing.T) {
	c := clock.NewManual()
	ms := memstore.New(c)
	st := &ackLostStore{Store: ms, reqBySeq: map[uint64]int64{}, costBySeq: map[uint64]int64{}}
	cfg := baseConfig()
	cfg.SyncBatch = 1 // every report flushes the app's statistics
	l := testLimiter(t, cfg, st, c, false)
	a := mustApp(t, l, "a")
	var admitted, cost int64
	take := func(n int) {
		for range n {
			if admit(a, 3).Allowed {
				admitted++
				cost += 3
			}
		}
	}
	take(10)
	c.Advance(time.Second)
	l.tick(c.Now()) // acknowledged
	st.ackLost.Store(true)
	var wantCost int64 // the acknowledged batch and the pending one (the cost settled while it is pending stays out)
	for i := range 4 { // applied, reply lost, sent again
		take(10)
		if i == 0 {
			wantCost = cost
		}
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v after lost replies, want fail-open", l.Level())
	}
	st.ackLost.Store(false)
	for range 3 {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	if l.Level() == LevelFailOpen {
		t.Fatal("still failed after recovery")
	}
	if got, _ := ms.AppRequests(context.Background(), "c1", "a"); got != admitted {
		t.Fatalf("store counted %d requests, %d were admitted", got, admitted)
	}
	var sumReq, sumCost int64
	for _, n := range st.reqBySeq {
		sumReq += n
	}
	for _, n := range st.costBySeq {
		sumCost += n
	}
	if st.mismatch != "" || sumReq != admitted || sumCost != wantCost {
		t.Fatalf("figures per Seq sum to %d requests / %d cost, want %d / %d; %s", sumReq, sumCost, admitted, wantCost, st.mismatch)
	}
}

// returnLostStore applies every Return, then fails it while lost is set: the reply was lost.
type returnLostStore struct {
	store.Store
	lost atomic.Bool
}

func (s *returnLostStore) Return(ctx context.Context, r store.Return) error {
	err := s.Store.Return(ctx, r)
	if err == nil && s.lost.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// A Return whose outcome is unknown drops its tokens locally: when it was applied after all,
// the tokens exist once (in L2), never twice.
func TestReturnLostDropsTokens(t *testing.T) {
	c := clock.NewManual()
	ms := memstore.New(c)
	st := &returnLostStore{Store: ms}
	l := testLimiter(t, baseConfig(), st, c, false)
	a := mustApp(t, l, "a")
	if d := a.Take(context.Background(), 7, 0); !d.Allowed {
		t.Fatalf("take: %+v", d)
	}
	held, _ := a.Tokens()
	if held == 0 {
		t.Fatal("no tokens leased")
	}
	st.lost.Store(true)
	if err := l.Close(); err == nil {
		t.Fatal("Close: no error from the failed Return")
	}
	if tok, _ := a.Tokens(); tok != 0 || a.dropped.Load() != held {
		t.Fatalf("after a lost Return: %d tokens held, %d dropped; want 0 and %d", tok, a.dropped.Load(), held)
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("leased+minted %d != consumed+returned+dropped+held %d", lhs, rhs)
	}
	// The Store got them back: L2 misses only the 7 consumed tokens (no time has passed).
	if s, _ := ms.AppState("c1", "a"); s.Tokens != 1000-7 {
		t.Fatalf("L2 holds %v tokens, want %d", s.Tokens, 1000-7)
	}
}

// A call's answer judges only the batches acknowledged before the call was sent. A report held
// up by another app's frozen shard answered after this app's next leases had delivered a newer
// batch; its older PrevSeq made that batch look lost, and its requests were counted twice
// (Redis counted 8 more than the clients saw, in e2e's partial-outage row).
func TestLateAnswerDoesNotResendNewerBatch(t *testing.T) {
	c := clock.NewManual()
	l := testLimiter(t, baseConfig(), newProbe(c), c, false)
	a := mustApp(t, l, "a")
	tick := func() time.Time { c.Advance(time.Millisecond); return c.Now() }

	a.requests.Add(5)
	first := a.takeStats() // the report carries it and waits on the frozen shard
	reportSent := tick()
	lease := a.takeStats() // a lease carries the same batch again, and is answered at once
	if lease.seq != first.seq {
		t.Fatalf("the lease carries seq %d, want the pending %d", lease.seq, first.seq)
	}
	a.statsDelivered(lease, first.seq-1, tick(), tick())
	a.requests.Add(3)
	second := a.takeStats() // the next lease delivers a newer batch
	a.statsDelivered(second, first.seq, tick(), tick())
	// The report's answer: the Store had applied the first batch when its part ran.
	a.statsDelivered(first, first.seq, reportSent, tick())

	if unsent := a.requests.Load() - a.sentReqs.Load(); unsent != 0 || l.tally.lost.Load() != 0 {
		t.Fatalf("after the late answer: %d requests to send again, %d counted lost; want 0 and 0", unsent, l.tally.lost.Load())
	}
	// A batch acknowledged before a call was sent, above the call's PrevSeq, is lost for real.
	a.requests.Add(1)
	third := a.takeStats()
	a.statsDelivered(third, first.seq, tick(), tick())
	if l.tally.lost.Load() != second.requests {
		t.Fatalf("a Store that forgot the second batch: %d requests counted lost, want %d", l.tally.lost.Load(), second.requests)
	}
}

// A batch acknowledged at the very time a call was sent is not judged by that call's answer:
// the clock did not move between the two readings, so they cannot be ordered. A report flushing
// the app ran in the Store before the app's next two leases, which were answered at the same
// clock reading (a coarse clock, the manual one of TestConcurrentQuietAndBack); its older
// PrevSeq made the second lease's batch look lost, and its requests were counted twice (1 to
// 2 % of runs of that test). A call sent later still finds a real loss.
func TestAnswerDoesNotJudgeBatchAckedAtItsSendTime(t *testing.T) {
	c := clock.NewManual()
	l := testLimiter(t, baseConfig(), newProbe(c), c, false)
	a := mustApp(t, l, "a")
	now := c.Now() // the clock does not move until the report's answer

	a.requests.Add(5)
	first := a.takeStats() // the report carries it; its part runs in the Store first
	lease := a.takeStats() // the next lease carries the same batch again
	a.statsDelivered(lease, first.seq, now, now)
	a.requests.Add(3)
	second := a.takeStats() // the lease after it delivers a newer batch
	a.statsDelivered(second, first.seq, now, now)
	a.statsDelivered(first, first.seq-1, now, now) // the report's answer
	if unsent := a.requests.Load() - a.sentReqs.Load(); unsent != 0 || l.tally.lost.Load() != 0 {
		t.Fatalf("after the report's answer: %d requests to send again, %d counted lost; want 0 and 0", unsent, l.tally.lost.Load())
	}
	// Once the clock has moved, a call whose PrevSeq is below the second batch finds it lost.
	c.Advance(time.Millisecond)
	a.requests.Add(1)
	third := a.takeStats()
	a.statsDelivered(third, first.seq, c.Now(), c.Now())
	if l.tally.lost.Load() != second.requests {
		t.Fatalf("a Store that forgot the second batch: %d requests counted lost, want %d", l.tally.lost.Load(), second.requests)
	}
}

// The cost batch whose report failed as an outage began is not delivered after it: it would
// land in L1's interval after the outage, on top of the burst every app leases then, and tip
// the cluster into its automatic emergency (e2e TestRedisFailure, 2 runs in 4 before).
func TestCostBatchOfOutageStartNotDeliveredAfter(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	for range 10 {
		admit(a, 3)
	}
	ps.fail.Store(true) // the report carrying the 30 fails: the outage begins
	c.Advance(200 * time.Millisecond)
	l.tick(c.Now())
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v, want fail_open", l.Level())
	}
	ps.fail.Store(false)
	c.Advance(1100 * time.Millisecond)
	l.tick(c.Now()) // the probe
	if l.Level() == LevelFailOpen {
		t.Fatal("still in fail_open after the Store came back")
	}
	if rep := ps.lastReport.Load(); rep == nil || rep.Cost != 0 {
		t.Fatalf("the probe that ended the outage carried cost %+v, want 0 (the batch of its start given up)", rep)
	}
}

// TestSlowStoreIsOneEpisode: a Store whose latency level goes up and back down every half
// minute (a CPU-bound host) logs one WARN when it gets slow, one more only when it gets slower
// than before, and one INFO, with the count of changes, once it has been normal for slowHold.
func TestSlowStoreIsOneEpisode(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, ps, c, false)
	calls := func(lat, d time.Duration) {
		for end := c.Now().Add(d); c.Now().Before(end); c.Advance(100 * time.Millisecond) {
			l.deg.observe(lat, nil, true)
		}
	}
	for range 4 { // 20 s slow, 20 s fast, four times: the level goes up and down each time
		calls(30*time.Millisecond, 20*time.Second)
		if l.Level() != LevelMild {
			t.Fatalf("a 30 ms Store: level %v, want mild", l.Level())
		}
		calls(time.Millisecond, 20*time.Second)
		if l.Level() != LevelNormal {
			t.Fatalf("a 1 ms Store: level %v, want normal", l.Level())
		}
	}
	if n := logs.FilterMessageSnippet("Store slow").Len(); n != 1 || logs.Len() != 1 {
		t.Fatalf("%d WARNs of a slow Store and %d lines in all for one episode, want one WARN only", n, logs.Len())
	}
	calls(300*time.Millisecond, 5*time.Second) // slower than before in the same episode: said
	if n := logs.FilterMessageSnippet("Store slow").Len(); n != 2 || l.Level() != LevelSignificant {
		t.Fatalf("%d WARNs after the Store got slower than before (level %v), want 2", n, l.Level())
	}
	calls(time.Millisecond, slowHold) // normal again, but not yet for slowHold
	if l.Level() != LevelNormal || logs.Len() != 2 {
		t.Fatalf("level %v, %d lines: the episode ended before the level was normal for %v", l.Level(), logs.Len(), slowHold)
	}
	calls(time.Millisecond, 10*time.Second)
	end := logs.FilterMessageSnippet("latency back to normal").All()
	if len(end) != 1 || logs.Len() != 3 {
		t.Fatalf("%d end lines, %d lines in all, want the episode ended once", len(end), logs.Len())
	}
	f := end[0].ContextMap()
	if f["worst_level"] != "significant" || f["level_changes"] != int64(10) {
		t.Fatalf("end of the episode %v, want worst_level significant and 10 level changes (7 in the four rounds, up through mild to significant, and down)", f)
	}
	calls(30*time.Millisecond, 5*time.Second) // a new episode is said again
	if n := logs.FilterMessageSnippet("Store slow").Len(); n != 3 {
		t.Fatalf("%d WARNs after the episode ended and the Store got slow again, want 3", n)
	}
}

// TestLevelHysteresis: a Store whose latency hovers at a threshold changes the level once, not
// at every call (each change is a WARN or an INFO); it goes back down once clearly faster.
func TestLevelHysteresis(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, ps, c, false)
	changes := 0
	prev := l.Level()
	for i := range 200 {
		lat := 9 * time.Millisecond // around the 10 ms of the mild level
		if i%2 == 1 {
			lat = 14 * time.Millisecond
		}
		l.deg.observe(lat, nil, true)
		if l.Level() != prev {
			changes++
			prev = l.Level()
		}
	}
	if changes != 1 || l.Level() != LevelMild {
		t.Fatalf("%d level changes for a latency hovering at 10 ms (now %v), want one, to mild", changes, l.Level())
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d level log lines, want 1", n)
	}
	// Down only once the average has stayed low for levelHold.
	fast := c.Now()
	for l.Level() != LevelNormal {
		if c.Now().Sub(fast) > time.Minute {
			t.Fatalf("a 3 ms Store: level %v after %v, want normal", l.Level(), c.Now().Sub(fast))
		}
		l.deg.observe(3*time.Millisecond, nil, true)
		c.Advance(100 * time.Millisecond)
	}
	if held := c.Now().Sub(fast); held < levelHold {
		t.Fatalf("back to normal after %v of a fast Store, want at least %v", held, levelHold)
	}
	// A Store whose latency swings across the thresholds several times a second (a starved
	// machine: 53 changes in 15 s per instance, each a WARN or an INFO) goes up once and stays.
	for end := c.Now().Add(slowHold); !c.Now().After(end); c.Advance(100 * time.Millisecond) {
		l.deg.observe(3*time.Millisecond, nil, true) // normal for slowHold: the episode ends
	}
	if n := logs.FilterMessageSnippet("latency back to normal").Len(); n != 1 {
		t.Fatalf("%d lines ending the slow episode after %v at normal, want 1", n, slowHold)
	}
	before := logs.Len()
	for i := range 300 { // 30 s, 100 ms apart: 3 slow calls, 3 fast ones, ...
		lat := time.Millisecond
		if i%6 < 3 {
			lat = 40 * time.Millisecond
		}
		l.deg.observe(lat, nil, true)
		c.Advance(100 * time.Millisecond)
	}
	if n := logs.Len() - before; n != 1 || l.Level() != LevelMild {
		t.Fatalf("a swinging Store: %d level log lines (level now %v), want 1, to mild", n, l.Level())
	}
	for _, tc := range []struct {
		avg      time.Duration
		cur, out Level
	}{
		{8 * time.Millisecond, LevelMild, LevelMild},
		{6 * time.Millisecond, LevelMild, LevelNormal},
		{8 * time.Millisecond, LevelNormal, LevelNormal},
		{80 * time.Millisecond, LevelSignificant, LevelSignificant},
		{60 * time.Millisecond, LevelSignificant, LevelMild},
		{5 * time.Millisecond, LevelSignificant, LevelNormal},
		{150 * time.Millisecond, LevelNormal, LevelSignificant},
	} {
		if got := nextLevel(tc.avg, tc.cur); got != tc.out {
			t.Errorf("nextLevel(%v, %v) = %v, want %v", tc.avg, tc.cur, got, tc.out)
		}
	}
}

// Every cost batch says how long its cost took to be admitted (Report.CostSpan): the time since
// the last batch was taken (a batch sent again keeps it), so that L1 spreads the cost over the
// span it really covers.
func TestReportCostSpan(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	c.Advance(100 * time.Millisecond)
	l.tick(c.Now())
	admit(a, 2)
	c.Advance(130 * time.Millisecond)
	l.tick(c.Now())
	prev := ps.lastReport.Load()
	if prev == nil || prev.Cost != 2 || prev.CostSpan != 130*time.Millisecond {
		t.Fatalf("report %+v, want cost 2 over 130ms", prev)
	}
	admit(a, 2)
	c.Advance(70 * time.Millisecond)
	l.tick(c.Now())
	if rep := ps.lastReport.Load(); rep.Seq != prev.Seq+1 || rep.Cost != 2 || rep.CostSpan != 70*time.Millisecond {
		t.Fatalf("next report %+v, want Seq %d, cost 2 over 70ms", rep, prev.Seq+1)
	}
}
