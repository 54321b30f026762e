package redislua

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// faultResult is what runFault measured.
type faultResult struct {
	admin          *redis.Client
	store          *countingStore
	load           *loadResult
	outageAdmitted int64
	reportedBefore int64 // Σ requests of the reports that succeeded before the fault healed
}

// runFault runs one Limiter under load over its quota (so that the rescue bucket is what limits
// an outage), breaks Redis, waits for fail_open, keeps the load on for a second, heals Redis,
// waits for the normal level and closes the Limiter (which flushes its statistics). It checks
// the properties every fault shares: no Take blocks beyond the Store timeout,
// the rescue bucket limits the outage, the level comes back, and every admitted request reached
// a report.
func runFault(t *testing.T, name string, breakRedis, heal func(*redistest.Server)) faultResult {
	addr, server := redistest.Standalone(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { admin.Close() })
	p := store.AppPolicy{Guaranteed: 1000, Burst: 1000}
	l, cs := newLimiter(t, addr, "fault", fleetConfig("fault", "i0", p))
	app, _ := l.App("app")

	r := new(loadResult)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { load(r, app, 2*p.Guaranteed, 1, time.Now(), stop, 1); close(done) }()
	waitFor(t, "admitted load", 5*time.Second, func() bool { return r.admitted.Load() > 0 })
	time.Sleep(500 * time.Millisecond) // steady load before the fault

	breakRedis(server)
	broken := time.Now()
	admittedAtBreak := r.admitted.Load()
	waitFor(t, "fail_open after "+name, 5*time.Second, func() bool { return l.Level() == limiter.LevelFailOpen })
	time.Sleep(time.Second) // the outage, under load
	res := faultResult{admin: admin, store: cs, load: r, reportedBefore: cs.reported.Load()}
	heal(server)
	outage := time.Since(broken)
	res.outageAdmitted = r.admitted.Load() - admittedAtBreak
	healed := time.Now()
	waitFor(t, "normal level after Redis came back", 10*time.Second, func() bool { return l.Level() == limiter.LevelNormal })
	recovery := time.Since(healed)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Rescue: rate guaranteed × ratio / live instances (1 here), burst likewise; plus the local
	// tokens held when Redis went away (a lease is at most burst / 2).
	rescueMax := p.Burst + p.Guaranteed*outage.Seconds() + p.Burst/2
	t.Logf("%s for %.2fs: admitted %d (rescue allows at most %.0f); normal again %v after Redis came back; longest Take %v; %d Store calls",
		name, outage.Seconds(), res.outageAdmitted, rescueMax, recovery, time.Duration(r.longest.Load()), cs.calls())
	if res.outageAdmitted <= 0 || float64(res.outageAdmitted) > rescueMax {
		t.Errorf("admitted %d during the outage; want > 0 (rescue mode admits) and <= %.0f (rescue limit)", res.outageAdmitted, rescueMax)
	}
	// A liveness bound, not a latency figure: a Take must never hang on a broken Redis.
	if longest, bound := time.Duration(r.longest.Load()), limiter.DefaultStoreTimeout+time.Second; longest > bound {
		t.Errorf("a Take blocked for %v (the Store timeout is %v)", longest, limiter.DefaultStoreTimeout)
	}
	// Exactly once, except what the Store lost after acknowledging it (a restart without
	// persistence), which is sent again.
	if got, want := cs.reported.Load()-l.ResentRequests(), r.admittedReqs.Load(); got != want {
		t.Errorf("successful reports and leases carried %d requests (%d sent again); %d were admitted", got, l.ResentRequests(), want)
	}
	return res
}

// TestRedisRestartUnderLoad stops Redis (a crash: connections refused, data gone) and starts
// it again: the statistics of the outage must reach the new server.
func TestRedisRestartUnderLoad(t *testing.T) {
	redistest.Slow(t, "runs about 3 s of real-time load")
	res := runFault(t, "Redis stopped", (*redistest.Server).Stop, (*redistest.Server).Start)
	s := New(res.admin, "fault")
	ctx := context.Background()
	onServer, err := res.admin.HGet(ctx, s.keys.l2("fault", "app"), "requests").Int64()
	if err != nil {
		t.Fatal(err)
	}
	// The restarted server is empty: it holds exactly what was reported since the restart,
	// which includes everything admitted during the outage.
	if want := res.store.reported.Load() - res.reportedBefore; onServer != want || onServer < res.outageAdmitted {
		t.Errorf("the restarted server holds %d requests; want %d (all reported since the restart, >= %d admitted in the outage)",
			onServer, want, res.outageAdmitted)
	}
	if n, err := res.admin.ZCard(ctx, s.keys.nodes("fault")).Result(); err != nil || n != 1 {
		t.Errorf("live instances on the restarted server: %d %v; want 1", n, err)
	}
}

// TestRedisHungUnderLoad freezes Redis (connections open, no answers: every call times out)
// and continues it.
func TestRedisHungUnderLoad(t *testing.T) {
	redistest.Slow(t, "runs about 3 s of real-time load")
	res := runFault(t, "Redis frozen", (*redistest.Server).Pause, (*redistest.Server).Resume)
	s := New(res.admin, "fault")
	onServer, err := res.admin.HGet(context.Background(), s.keys.l2("fault", "app"), "requests").Int64()
	if err != nil {
		t.Fatal(err)
	}
	// A report that timed out may still have run when the server continued: statistics are
	// delivered at least once, so the server holds at least every admitted request.
	if admitted := res.load.admittedReqs.Load(); onServer < admitted {
		t.Errorf("the server holds %d requests; %d were admitted", onServer, admitted)
	} else if onServer > admitted {
		t.Logf("the server holds %d requests for %d admitted: a timed-out report ran after the freeze", onServer, admitted)
	}
}
