package redislua

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// TestRedisRestartUnderLoad stops Redis under load and starts it again (DESIGN §8, §14): no Take
// blocks beyond the Store timeout, the Limiter goes to fail_open and enforces the rescue bucket,
// comes back to normal after the restart, and the statistics of the outage reach the new server.
func TestRedisRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs about 3 s of real-time load")
	}
	addr, server := redistest.Standalone(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	p := limiter.AppPolicy{Guaranteed: 1000, Burst: 1000}
	cfg := fleetConfig("fault", "i0", p)
	l, cs := newLimiter(t, addr, "fault", cfg)
	app, _ := l.App("app")

	// Twice the quota in costs of 1: over quota, so the rescue bucket is what limits the outage.
	r := new(loadResult)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { load(r, app, 2*p.Guaranteed, 1, time.Now(), stop, 1); close(done) }()
	waitFor(t, "admitted load", 5*time.Second, func() bool { return r.admitted.Load() > 0 })
	time.Sleep(500 * time.Millisecond) // steady load before the fault

	server.Stop()
	stopped := time.Now()
	admittedAtStop := r.admitted.Load()
	waitFor(t, "fail_open after Redis stopped", 5*time.Second, func() bool { return l.Level() == limiter.LevelFailOpen })
	time.Sleep(time.Second)              // the outage, under load
	reportedBefore := cs.reported.Load() // reports that reached the old server; none succeed now
	server.Start()
	outage := time.Since(stopped)
	outageAdmitted := r.admitted.Load() - admittedAtStop
	started := time.Now()
	waitFor(t, "normal level after Redis restarted", 10*time.Second, func() bool { return l.Level() == limiter.LevelNormal })
	recovery := time.Since(started)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
	if err := l.Close(); err != nil { // flushes the last statistics
		t.Fatal(err)
	}

	// Rescue: rate guaranteed × ratio / live instances (1 here), burst likewise; plus the local
	// tokens held when Redis went away (a lease is at most burst / 2).
	rescueMax := p.Burst + p.Guaranteed*outage.Seconds() + p.Burst/2
	t.Logf("outage %.2fs: admitted %d (rescue allows at most %.0f); back to normal %v after the restart; longest Take %v; %d Store calls",
		outage.Seconds(), outageAdmitted, rescueMax, recovery, time.Duration(r.longest.Load()), cs.calls())
	if outageAdmitted <= 0 || float64(outageAdmitted) > rescueMax {
		t.Errorf("admitted %d during the outage; want > 0 (rescue mode admits) and <= %.0f (rescue limit)", outageAdmitted, rescueMax)
	}
	if longest, bound := time.Duration(r.longest.Load()), limiter.DefaultStoreTimeout+time.Second; longest > bound {
		t.Errorf("a Take blocked for %v (the Store timeout is %v)", longest, limiter.DefaultStoreTimeout)
	}

	// Nothing lost: every admitted request was reported, and the reports since the restart
	// (the outage's included) are on the new server.
	if got, want := cs.reported.Load(), r.admittedReqs.Load(); got != want {
		t.Errorf("reports carried %d requests; %d were admitted", got, want)
	}
	s := New(admin, "fault")
	ctx := context.Background()
	onServer, err := admin.HGet(ctx, s.keys.l2("fault", "app"), "requests").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if want := cs.reported.Load() - reportedBefore; onServer != want || onServer < outageAdmitted {
		t.Errorf("the restarted server holds %d requests; want %d (all reported since the restart, >= %d admitted in the outage)",
			onServer, want, outageAdmitted)
	}
	if n, err := admin.ZCard(ctx, s.keys.nodes("fault")).Result(); err != nil || n != 1 {
		t.Errorf("live instances on the restarted server: %d %v; want 1", n, err)
	}
}
