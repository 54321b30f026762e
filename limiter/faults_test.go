package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Issue: an app far under its quota got 429 app_exhausted right after an idle period. Its
// rate-based lease target had decayed to one token, so the first lease (slow, as the first one
// after idle often is) brought one token for 32 waiting requests, which then leased one by one
// and gave up after three rounds. Now the lease is sized for every waiter, and a waiter that is
// outrun while L2 still has tokens is admitted on credit, never refused.
func TestSlowLeaseAfterIdleRefusesNobody(t *testing.T) {
	c := clock.NewManual()
	g := newGate(c)
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"big": pol(1e8, 1e8, 0)}
	cfg.StoreTimeout = time.Hour // the waiters wait: only the lease sizing is under test
	l := testLimiter(t, cfg, g, c, true)
	a := mustApp(t, l, "big")
	for range 3 { // idle: the consumption rate decays to 0
		c.Advance(time.Minute)
		l.tick(c.Now())
	}
	if a.rateTgt.Load() > 1 {
		t.Fatalf("rate target after idle = %d, want <= 1", a.rateTgt.Load())
	}

	const waiters = 32
	var wg sync.WaitGroup
	decisions := make(chan Decision, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			decisions <- a.Take(context.Background(), 1, 0)
		}()
	}
	<-g.entered // the first lease is at the Store; let every request queue behind it
	for a.waiting.Load() < waiters {
		time.Sleep(time.Millisecond)
	}
	stop := make(chan struct{})
	go func() { // the Store answers every lease from now on
		for {
			select {
			case g.release <- nil:
			case <-stop:
				return
			}
			select {
			case <-g.entered:
			case <-stop:
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	close(decisions)
	for d := range decisions {
		if !d.Allowed {
			t.Fatalf("a request of an app at 0%% of its quota was rejected: %+v", d)
		}
	}
}

// Issue: a refund of an admission that was never leased (the Store down, the rescue bucket
// paying) put real tokens in the local balance: tokens created from nothing.
func TestMintedRefundCreatesNoTokens(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	a := mustApp(t, l, "a")
	ps.fail.Store(true)
	l.tick(c.Now().Add(time.Second))
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v, want fail_open", l.Level())
	}
	d := a.Take(context.Background(), 21, 0)
	if !d.Allowed || !d.Minted {
		t.Fatalf("rescue admission: %+v", d)
	}
	a.Settle(d, 21, 5) // the declared body was never read
	if tok, debt := a.Tokens(); tok != 0 || debt != 0 {
		t.Fatalf("after the refund of a minted admission: tokens %d debt %d, want 0 and 0", tok, debt)
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("conservation: leased+minted %d != consumed+returned+dropped+held %d", lhs, rhs)
	}
}

// A refund that leaves more local tokens than the fairness cap (burst / 2 per live instance)
// gives the excess back to L2 at the next tick: local tokens sit outside L2's burst bound.
func TestRefundAboveFairnessCapReturned(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"a": pol(20, 20, 0)}
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "a")
	d := a.Take(context.Background(), 21, 0) // a PUT above the burst: all 20, 1 of debt
	if !d.Allowed {
		t.Fatalf("PUT: %+v", d)
	}
	a.Settle(d, 21, 5) // its body was never read
	if tok, _ := a.Tokens(); tok != 15 {
		t.Fatalf("tokens after the refund = %d, want 15", tok)
	}
	l.tick(c.Now())
	if tok, _ := a.Tokens(); tok != 10 || ps.returned.Load() != 5 {
		t.Fatalf("after a tick: tokens %d, returned %d; want 10 and 5", tok, ps.returned.Load())
	}
	if lhs, rhs := conserved(a); lhs != rhs {
		t.Fatalf("conservation: %d != %d", lhs, rhs)
	}
}

// The log of a fault: one WARN when fail_open begins (with the Store's error and the failure
// mode), repeated errors counted, one INFO when it ends (duration, what was admitted
// meanwhile), a WARN that the rescue buckets assumed this instance alone.
func TestFailOpenLoggedOnce(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "a")
	ps.fail.Store(true)
	for range 5 {
		c.Advance(time.Second)
		l.tick(c.Now())
		a.Take(context.Background(), 1, 0)
	}
	ps.fail.Store(false)
	c.Advance(time.Second)
	l.tick(c.Now())
	if l.Level() != LevelNormal {
		t.Fatalf("level %v after recovery", l.Level())
	}
	if n := logs.FilterMessageSnippet("leaving fail_open").Len(); n != 0 {
		t.Fatalf("recovery logged before the Store answered for %v", recoveryHold)
	}
	for range 6 { // the Store answers for recoveryHold: the episode ends in the log
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	warn := logs.FilterMessageSnippet("entering fail_open").All()
	if len(warn) != 1 || warn[0].Level != zapcore.WarnLevel {
		t.Fatalf("fail_open WARN lines: %+v", logs.All())
	}
	f := warn[0].ContextMap()
	if f["error"] != errDown.Error() || f["on_redis_failure"] != "local" || f["cluster"] != "c1" {
		t.Fatalf("fail_open WARN fields: %v", f)
	}
	if n := logs.FilterMessageSnippet("never had an answer from the Store").Len(); n != 1 {
		t.Fatalf("%d lines about the unknown live-instance count, want 1", n)
	}
	info := logs.FilterMessageSnippet("leaving fail_open").All()
	if len(info) != 1 || info[0].Level != zapcore.InfoLevel {
		t.Fatalf("recovery INFO lines: %+v", logs.All())
	}
	f = info[0].ContextMap()
	if f["failed_store_calls"] != int64(5) || f["admitted_without_store"] != int64(5) ||
		f["duration"] != 5*time.Second {
		t.Fatalf("recovery INFO fields: %v", f)
	}
	if logs.Len() != 3 {
		t.Fatalf("%d log lines, want 3: %+v", logs.Len(), logs.All())
	}
}

// Rescue sizing: a process that starts while the Store is down sizes its rescue buckets with
// the live-instance count persisted from its last run, and reports each new count.
func TestKnownInstancesSizeRescue(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig() // app a: guaranteed 100, burst 1000
	cfg.KnownInstances = 4
	var seen []int
	cfg.OnLiveInstances = func(n int) { seen = append(seen, n) }
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "a")
	ps.fail.Store(true)
	l.tick(c.Now().Add(time.Second))
	admitted := int64(0)
	for a.Take(context.Background(), 1, 0).Allowed {
		admitted++
	}
	if admitted != 250 { // a quarter of the burst
		t.Fatalf("rescue burst with 4 known instances = %d, want 250", admitted)
	}
	ps.fail.Store(false)
	ps.state.Store(&store.ClusterState{LiveInstances: 3, Factors: [4]float64{1, 1, 1, 1}})
	l.tick(c.Now().Add(3 * time.Second))
	l.tick(c.Now().Add(4 * time.Second))
	if len(seen) != 1 || seen[0] != 3 {
		t.Fatalf("OnLiveInstances calls %v, want [3]", seen)
	}
}

// A Limiter that admitted nothing makes no Store call when closed (`caddy validate`
// provisions and closes one, and must not dial Redis).
func TestCloseUnusedMakesNoStoreCall(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	l := testLimiter(t, baseConfig(), ps, c, false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ps.leases.Load() + ps.returns.Load() + ps.reps.Load(); n != 0 {
		t.Fatalf("Close of an unused Limiter made %d Store calls", n)
	}
}

// forgetfulStore answers one report as a Store that lost everything it had acknowledged (a
// failover to a replica that had not received it): PrevSeq 0 for every app.
type forgetfulStore struct {
	*probeStore
	forget   atomic.Bool
	reported atomic.Int64 // Σ Requests of successful reports
}

func (f *forgetfulStore) Report(ctx context.Context, r store.Report) (store.ClusterState, error) {
	st, err := f.probeStore.Report(ctx, r)
	if err == nil {
		for _, a := range r.Apps {
			f.reported.Add(a.Requests)
		}
		if f.forget.CompareAndSwap(true, false) {
			for id := range st.PrevSeq {
				st.PrevSeq[id] = 0
			}
		}
	}
	return st, err
}

// lossCase is a limiter with app "a" on a Store that can forget what it acknowledged.
type lossCase struct {
	t  *testing.T
	c  *clock.Manual
	fs *forgetfulStore
	l  *Limiter
	a  *App
}

func newLossCase(t *testing.T, cfg Config) *lossCase {
	c := clock.NewManual()
	fs := &forgetfulStore{probeStore: newProbe(c)}
	l := testLimiter(t, cfg, fs, c, false)
	return &lossCase{t: t, c: c, fs: fs, l: l, a: mustApp(t, l, "a")}
}

// take takes n requests of cost 1, each of which must be admitted.
func (lc *lossCase) take(n int) {
	lc.t.Helper()
	for range n {
		if !lc.a.Take(context.Background(), 1, 0).Allowed {
			lc.t.Fatal("rejected")
		}
	}
}

// tickAfter advances the clock by d and runs the sync loop's tick.
func (lc *lossCase) tickAfter(d time.Duration) {
	lc.c.Advance(d)
	lc.l.tick(lc.c.Now())
}

// want checks the requests the Store's successful reports carried and those sent again.
func (lc *lossCase) want(reported, resent int64) {
	lc.t.Helper()
	if got := lc.fs.reported.Load(); got != reported || lc.l.ResentRequests() != resent {
		lc.t.Fatalf("reports carried %d requests, %d sent again; want %d and %d",
			got, lc.l.ResentRequests(), reported, resent)
	}
}

// Statistics the Store acknowledged and then lost are sent again, once, and logged.
func TestLostStatisticsSentAgain(t *testing.T) {
	cfg := baseConfig()
	logs := logTo(&cfg)
	cfg.SyncBatch = 1 // every report flushes the app's statistics
	lc := newLossCase(t, cfg)
	lc.take(5)
	lc.tickAfter(time.Second) // acknowledged: 5
	lc.take(3)
	lc.fs.forget.Store(true)
	lc.tickAfter(time.Second) // acknowledged: 3; the answer shows the 5 were lost
	lc.tickAfter(time.Second) // the 5 again
	lc.tickAfter(time.Second) // nothing more
	lc.want(13, 5)
	if n := logs.FilterMessageSnippet("lost statistics").Len(); n != 1 {
		t.Fatalf("%d WARN lines about lost statistics, want 1", n)
	}
}

// A batch lost in a failover is sent again however late the app's next call comes: after a
// failover that took longer than ackWindow (Redis Cluster's default node timeout is 15 s), or an
// app quiet for 30 s. Judging only the batches of the last 10 s would lose them for good, with
// nothing logged.
func TestLostStatisticsSentAgainAfterSilence(t *testing.T) {
	cfg := baseConfig()
	cfg.SyncBatch = 1
	lc := newLossCase(t, cfg)
	lc.take(5)
	lc.tickAfter(time.Second) // acknowledged: 5, then lost by a failover
	lc.fs.forget.Store(true)
	lc.c.Advance(3 * ackWindow) // the app is quiet
	lc.take(3)
	lc.tickAfter(0)           // acknowledged: 3; the answer shows the 5 were lost
	lc.tickAfter(time.Second) // the 5 again
	lc.want(13, 5)
}

// Statistics found lost go out with the next report, not StatsInterval later: the app that
// showed the loss may have gone quiet, and Redis would stay short until it spoke again.
func TestLostStatisticsSentAtOnce(t *testing.T) {
	cfg := baseConfig()
	cfg.SyncBatch = 1 << 40 // only StatsInterval flushes: the app's statistics wait for it
	lc := newLossCase(t, cfg)
	lc.take(5)
	lc.tickAfter(DefaultStatsInterval) // flushed and acknowledged: 5, then lost by a failover
	lc.fs.forget.Store(true)
	lc.take(3)
	lc.tickAfter(DefaultStatsInterval) // flushed: 3; the answer shows the 5 were lost
	lc.tickAfter(time.Second)          // the 5 again, at once
	lc.want(13, 5)
}

// A batch the Store still had ackWindow after acknowledging it is on its replicas: a Store that
// forgets later has the newer batches sent again, not that one. And batches older than the
// Store's memory of the app's Seq are not judged: a Store that forgot the Seq (the app's record
// expired and was made anew) answers 0, and sending them again would count them twice.
func TestLostStatisticsOnlyUnconfirmed(t *testing.T) {
	cfg := baseConfig()
	cfg.SyncBatch = 1
	lc := newLossCase(t, cfg)
	lc.take(5)
	lc.tickAfter(time.Second) // acknowledged: 5
	lc.take(2)
	lc.tickAfter(ackWindow) // acknowledged: 2; the Store still has the 5, ackWindow later
	lc.fs.forget.Store(true)
	lc.take(1)
	lc.tickAfter(time.Second) // acknowledged: 1; the answer shows the 2 were lost, not the 5
	lc.tickAfter(time.Second) // the 2 again
	lc.want(10, 2)

	lc.c.Advance(lc.l.seqMemory()) // the Store's record of the app's Seq expired
	lc.fs.forget.Store(true)
	lc.take(4)
	lc.tickAfter(0) // acknowledged: 4; the answer (0) says nothing about the batches before
	lc.tickAfter(time.Second)
	lc.want(14, 2)
}

// A permanent Store error (a refused password, a missing permission, an untrusted certificate)
// is a configuration error: one ERROR per episode with its cause and remedy (also when the
// episode began as a fault), the rescue limits apply meanwhile, and the recovery after the
// operator's fix is logged like any other.
func TestPermanentErrorLoggedOnce(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, ps, c, false)
	a := mustApp(t, l, "a")
	ps.fail.Store(true) // a fault first: Redis unreachable
	c.Advance(time.Second)
	l.tick(c.Now())
	ps.permanent.Store(true) // then it answers, refusing the password
	admitted := 0
	for range 5 {
		c.Advance(time.Second)
		l.tick(c.Now())
		if a.Take(context.Background(), 1, 0).Allowed {
			admitted++
		}
	}
	if l.Level() != LevelFailOpen || admitted != 5 {
		t.Fatalf("level %v, %d of 5 admitted by the rescue buckets", l.Level(), admitted)
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(errs) != 1 {
		t.Fatalf("ERROR lines: %+v", logs.All())
	}
	f := errs[0].ContextMap()
	if !strings.Contains(f["cause"].(string), "WRONGPASS") || f["remedy"] != "fix the password" || f["cluster"] != "c1" {
		t.Fatalf("ERROR fields: %v", f)
	}
	ps.fail.Store(false)
	for range 7 {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	if l.Level() == LevelFailOpen || logs.FilterMessageSnippet("leaving fail_open").Len() != 1 {
		t.Fatalf("level %v after the fix; logs %+v", l.Level(), logs.All())
	}

	// A new episode that is permanent from its first error: the ERROR replaces the WARN.
	ps.fail.Store(true)
	c.Advance(time.Second)
	l.tick(c.Now())
	c.Advance(time.Second)
	l.tick(c.Now())
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 2 {
		t.Fatalf("%d ERROR lines after a second episode, want 2: %+v", n, logs.All())
	}
	if n := logs.FilterMessageSnippet("Store unavailable").Len(); n != 1 {
		t.Fatalf("%d WARN lines, want only the first episode's: %+v", n, logs.All())
	}
}

// StoreFailed (the start-up probe's refused connection) enters fail_open with the one ERROR of
// the episode; the limiter's own failed calls in that episode add none, a nil error changes
// nothing, and only the limiter's own successful probe leaves fail_open.
func TestStoreFailedFromProbe(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, ps, c, false)
	l.StoreFailed(nil)
	if l.Level() == LevelFailOpen || logs.Len() != 0 {
		t.Fatalf("StoreFailed(nil): level %v, logs %+v", l.Level(), logs.All())
	}
	l.StoreFailed(fmt.Errorf("redislua: probe: %w", errRefused))
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v after a refused probe", l.Level())
	}
	ps.fail.Store(true)
	ps.permanent.Store(true)
	for range 3 {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	l.StoreFailed(errRefused)
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(errs) != 1 || !strings.Contains(errs[0].ContextMap()["cause"].(string), "WRONGPASS") {
		t.Fatalf("ERROR lines: %+v", logs.All())
	}
	ps.fail.Store(false)
	for range 7 {
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	if l.Level() == LevelFailOpen || logs.FilterMessageSnippet("leaving fail_open").Len() != 1 {
		t.Fatalf("level %v after the fix; logs %+v", l.Level(), logs.All())
	}
}

// leaseFailStore fails every Lease while down is set; reports succeed. It is a Redis Cluster
// whose cluster slot is healthy while the master of an app's slot is down.
type leaseFailStore struct {
	store.Store
	down atomic.Bool
}

func (s *leaseFailStore) Lease(ctx context.Context, r store.LeaseRequest) (store.Lease, error) {
	if s.down.Load() {
		return store.Lease{}, errDown
	}
	return s.Store.Lease(ctx, r)
}

// The probe (the cluster report) succeeds while an app's leases keep failing: the level goes
// back and forth, but the log says once that the Store is unavailable and once, after it has
// answered for recoveryHold, that it recovered. Before, each round logged a WARN and an INFO,
// about once a second for as long as the app's master was down.
func TestPartialOutageLoggedOnce(t *testing.T) {
	c := clock.NewManual()
	fs := &leaseFailStore{Store: newProbe(c)}
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, fs, c, false)
	a := mustApp(t, l, "a")
	ctx := context.Background()
	traffic := func(d time.Duration) (admitted int) {
		for end := c.Now().Add(d); c.Now().Before(end); {
			c.Advance(100 * time.Millisecond)
			l.tick(c.Now())
			for range 20 {
				if a.Take(ctx, 1, 0).Allowed {
					admitted++
				}
			}
		}
		return admitted
	}
	traffic(2 * time.Second)
	fs.down.Store(true)
	if n := traffic(20 * time.Second); n == 0 {
		t.Fatal("nothing admitted by the rescue buckets during the outage")
	}
	fs.down.Store(false)
	traffic(time.Second)
	if n := logs.FilterMessageSnippet("leaving fail_open").Len(); n != 0 {
		t.Fatalf("recovery logged before the Store answered for %v: %+v", recoveryHold, logs.All())
	}
	traffic(recoveryHold + time.Second)
	if l.Level() == LevelFailOpen {
		t.Fatal("still in fail_open after the outage")
	}
	warn := logs.FilterMessageSnippet("entering fail_open").All()
	info := logs.FilterMessageSnippet("leaving fail_open").All()
	if len(warn) != 1 || len(info) != 1 {
		t.Fatalf("%d WARN and %d INFO lines, want one each: %+v", len(warn), len(info), logs.All())
	}
	f := info[0].ContextMap()
	if f["relapses"].(int64) < 10 || f["duration"].(time.Duration) < 19*time.Second {
		t.Fatalf("recovery INFO fields %v: want the whole outage, with its relapses", f)
	}
}

// logTo makes cfg log at INFO and above into the returned observer.
func logTo(cfg *Config) *observer.ObservedLogs {
	core, logs := observer.New(zapcore.InfoLevel)
	cfg.Logger = zap.New(core)
	return logs
}

// A failure after a recovery has held for recoveryHold starts a new episode, even when no call
// succeeded in between to log the end of the first one: both end in the log.
func TestEpisodeAfterHeldRecoveryIsNew(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	logs := logTo(&cfg)
	l := testLimiter(t, cfg, ps, c, false)
	ps.fail.Store(true)
	c.Advance(time.Second)
	l.tick(c.Now())
	ps.fail.Store(false)
	c.Advance(time.Second)
	l.tick(c.Now()) // the probe succeeds: the level leaves fail_open, the log waits
	c.Advance(recoveryHold + time.Second)
	ps.fail.Store(true)
	l.tick(c.Now()) // the first call after the hold fails
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v", l.Level())
	}
	warn := logs.FilterMessageSnippet("entering fail_open").Len()
	info := logs.FilterMessageSnippet("leaving fail_open").Len()
	if warn != 2 || info != 1 {
		t.Fatalf("%d WARN and %d INFO lines, want 2 and 1: %+v", warn, info, logs.All())
	}
}

// A Limiter closed while the Store fails asks it once, not once per app holding tokens: a
// shutdown during an outage (a frozen Redis answers nothing for a second) would otherwise
// wait a timeout per app. The tokens it could not return are dropped, counted, and said.
func TestCloseDuringOutageAsksOnce(t *testing.T) {
	c := clock.NewManual()
	ps := newProbe(c)
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{}
	for i := range 50 {
		cfg.Apps[fmt.Sprintf("x%d", i)] = pol(100, 1000, 0)
	}
	l := testLimiter(t, cfg, ps, c, false)
	var apps []*App
	for i := range 50 {
		a := mustApp(t, l, fmt.Sprintf("x%d", i))
		admit(a, 1)
		apps = append(apps, a)
	}
	ps.fail.Store(true)
	before := ps.reps.Load() + ps.returns.Load()
	err := l.Close()
	if calls := ps.reps.Load() + ps.returns.Load() - before; calls != 1 {
		t.Fatalf("Close during an outage made %d Store calls, want 1", calls)
	}
	if err == nil || !errors.Is(err, errDown) || !strings.Contains(err.Error(), "of 50 apps") ||
		!strings.Contains(err.Error(), "statistics not yet sent are lost") {
		t.Fatalf("Close error = %v, want the Store's error with the 50 apps' tokens and the statistics", err)
	}
	for _, a := range apps {
		if tok, _ := a.Tokens(); tok != 0 {
			t.Fatalf("%s holds %d tokens after Close", a.id, tok)
		}
		if lhs, rhs := conserved(a); lhs != rhs {
			t.Fatalf("%s: conservation %d != %d", a.id, lhs, rhs)
		}
	}
}

// failReturnStore fails every Return (counted); every other call works.
type failReturnStore struct {
	store.Store
	returns atomic.Int64
}

func (s *failReturnStore) Return(context.Context, store.Return) error {
	s.returns.Add(1)
	return errDown
}

// The sync loop stops returning tokens at the first Return that fails: a Redis that froze
// between the report and the returns would otherwise cost the tick a timeout per app whose
// lease expired, holding up the probe that ends the outage.
func TestTickStopsReturningAfterFailure(t *testing.T) {
	c := clock.NewManual()
	st := &failReturnStore{Store: newStore(c)}
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{}
	for i := range 50 {
		cfg.Apps[fmt.Sprintf("x%d", i)] = pol(100, 1000, 0)
	}
	l := testLimiter(t, cfg, st, c, false)
	for i := range 50 {
		admit(mustApp(t, l, fmt.Sprintf("x%d", i)), 1)
	}
	for i := 0; i < 600 && st.returns.Load() == 0; i++ { // idle until the leases expire
		c.Advance(time.Second)
		l.tick(c.Now())
	}
	if n := st.returns.Load(); n != 1 {
		t.Fatalf("the tick whose leases expired made %d Returns, want 1 (then fail_open)", n)
	}
	if l.Level() != LevelFailOpen {
		t.Fatalf("level %v after a failed Return, want fail_open", l.Level())
	}
}

// shardDownStore fails the leases and returns of one app, as a Redis Cluster whose master
// holding that app's slot is down: the cluster's reports and every other app still work.
type shardDownStore struct {
	store.Store
	down string
}

func (s *shardDownStore) Lease(ctx context.Context, r store.LeaseRequest) (store.Lease, error) {
	if r.App == s.down {
		return store.Lease{}, errDown
	}
	return s.Store.Lease(ctx, r)
}

func (s *shardDownStore) Return(ctx context.Context, r store.Return) error {
	if r.App == s.down {
		return errDown
	}
	return s.Store.Return(ctx, r)
}

// A partial outage (one Cluster master down) puts the limiter in fail_open, but an app whose
// own leases still succeed keeps being served by them, not by the rescue bucket as well: both
// at once admitted 1.5–2 × its quota while another app's master was down (found black-box).
// The app whose master is down gets the rescue bucket.
func TestPartialOutageOtherAppsStayExact(t *testing.T) {
	c := clock.NewManual()
	st := &shardDownStore{Store: newStore(c)}
	cfg := baseConfig()
	cfg.Apps = map[string]store.AppPolicy{"down": pol(100, 100, 0), "up": pol(100, 100, 0)}
	l := testLimiter(t, cfg, st, c, false)
	down, up := mustApp(t, l, "down"), mustApp(t, l, "up")
	sawFailOpen := false
	run := func(d time.Duration) (admittedDown, admittedUp int) {
		for end := c.Now().Add(d); c.Now().Before(end); {
			sawFailOpen = sawFailOpen || l.Level() == LevelFailOpen
			c.Advance(2 * time.Millisecond) // each app asked at 500 requests/s, 5 × its quota
			if admit(up, 1).Allowed {
				admittedUp++
			}
			if admit(down, 1).Allowed {
				admittedDown++
			}
			if c.Now().UnixMilli()%100 == 0 {
				l.tick(c.Now())
			}
		}
		return
	}
	run(5 * time.Second) // warm: both at their quota
	st.down = "down"
	var gotDown, gotUp int
	for range 20 {
		d, u := run(time.Second)
		gotDown, gotUp = gotDown+d, gotUp+u
	}
	if !sawFailOpen {
		t.Fatal("the failing leases never put the limiter in fail_open")
	}
	// 20 s at 100/s, plus at most one burst and the local tokens held when the outage began.
	if gotUp > 2150 || gotUp < 1900 {
		t.Errorf("the app whose leases work admitted %d in 20 s, want its quota (2000, + its burst and the local tokens)", gotUp)
	}
	if gotDown == 0 || gotDown > 2150 {
		t.Errorf("the app whose master is down admitted %d in 20 s, want the rescue bucket's share (> 0, ≤ quota)", gotDown)
	}
	t.Logf("20 s of partial outage: down %d, up %d; up minted %d leased %d", gotDown, gotUp, up.minted.Load(), up.leased.Load())
}
