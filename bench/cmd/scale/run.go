package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

const clusterID = "scale"

// spec is one run.
type spec struct {
	instances, apps  int
	rate             float64 // total offered requests per second
	dist             string  // zipf | uniform
	zipfS, over      float64
	warmup, duration time.Duration
	shared           bool
	burstSeconds     float64       // burst = max(guaranteed × burstSeconds, 10)
	statsInterval    time.Duration // the limiters' StatsInterval (0: the default)
}

// app classes: rank bands × whether the app is driven above its quota.
const (
	bandHot = iota
	bandWarm
	bandCold
	numBands
)

var bandNames = [numBands]string{"hot (top 1%)", "warm (next 19%)", "cold (other 80%)"}

type appSpec struct {
	id        string
	rate      float64 // offered req/s
	g, burst  float64
	overQuota bool
	band      int
}

// rates gives each app its offered rate: Zipf (rank i ∝ 1/(i+1)^s) or uniform, summing to total.
func rates(m int, total float64, dist string, s float64) []float64 {
	r := make([]float64, m)
	var sum float64
	for i := range r {
		if dist == "zipf" {
			r[i] = 1 / math.Pow(float64(i+1), s)
		} else {
			r[i] = 1
		}
		sum += r[i]
	}
	for i := range r {
		r[i] *= total / sum
	}
	return r
}

// apps builds the app set: every 1/over-th app (by rank) is driven at twice its quota, the
// others at half of it; burst = max(guaranteed × burstSeconds (at least 1), 10).
func apps(s spec) []appSpec {
	r := rates(s.apps, s.rate, s.dist, s.zipfS)
	out := make([]appSpec, s.apps)
	every := 0
	if s.over > 0 {
		every = int(math.Round(1 / s.over))
	}
	hot := max(s.apps/100, 1)
	warm := max(s.apps/5, hot)
	for i := range out {
		a := appSpec{id: fmt.Sprintf("app%05d", i), rate: r[i]}
		a.overQuota = every > 0 && i%every == every/2
		if a.overQuota {
			a.g = r[i] / 2
		} else {
			a.g = r[i] * 2
		}
		a.burst = max(a.g*max(s.burstSeconds, 1), 10)
		switch {
		case i < hot:
			a.band = bandHot
		case i < warm:
			a.band = bandWarm
		default:
			a.band = bandCold
		}
		out[i] = a
	}
	return out
}

// counters are one worker's totals, read by the main goroutine while it runs.
type counters struct {
	sent, admitted, localHits, failed atomic.Int64
}

// result is what one run measured.
type result struct {
	spec
	appSpecs                  []appSpec
	sent, admitted            []int64 // per app, whole run
	skipped                   []int64 // per app: due but not sent (the driver fell behind)
	elapsed                   time.Duration
	warm, steady              phase
	scriptsNode, commandsNode []int64 // steady state, per shard
	redisCPU                  []time.Duration
	goCPU                     time.Duration
	heapMB                    float64
	activePairsPerSec         float64 // expected (instance, app) pairs with traffic per sync interval, per second
}

// phase is the totals of one phase (first leases, steady state).
type phase struct {
	d                         time.Duration
	sent, admitted, localHits int64
	failed                    int64
	leases                    int64
	scripts, commands         int64
}

func run(ctx context.Context, s spec, nodes []*node, addrs []string, logf io.Writer) (result, error) {
	res := result{spec: s, appSpecs: apps(s)}
	for _, nd := range nodes {
		if err := nd.client.FlushAll(ctx).Err(); err != nil {
			return res, err
		}
		if err := nd.client.ConfigResetStat(ctx).Err(); err != nil {
			return res, err
		}
	}
	cfg := limiter.Config{
		Cluster:    store.ClusterPolicy{ID: clusterID},
		Apps:       make(map[string]store.AppPolicy, s.apps),
		UnknownApp: limiter.UnknownReject,
		Default:    store.AppPolicy{Guaranteed: 1, Burst: 1},

		StatsInterval: s.statsInterval,
	}
	for _, a := range res.appSpecs {
		cfg.Apps[a.id] = store.AppPolicy{Guaranteed: a.g, Burst: a.burst}
	}
	var stores []*redislua.Store
	var lims []*limiter.Limiter
	cleanup := func() {
		// Close returns every local token; bounded, so that a saturated Redis cannot hang the
		// harness (the next run flushes the cluster anyway).
		done := make(chan struct{})
		go func() {
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for _, l := range lims {
				wg.Add(1)
				sem <- struct{}{}
				go func() { defer wg.Done(); _ = l.Close(); <-sem }()
			}
			wg.Wait()
			close(done)
		}()
		select {
		case <-done:
			for _, st := range stores {
				_ = st.Close()
			}
		case <-time.After(60 * time.Second):
			fmt.Fprintf(logf, "closing the limiters took more than 60 s; going on without them\n")
		}
	}
	for i := range s.instances {
		if i == 0 || !s.shared {
			st, err := redislua.Open(redislua.Config{Address: addrs, PoolSize: 8})
			if err != nil {
				cleanup()
				return res, err
			}
			stores = append(stores, st)
		}
		c := cfg
		c.Instance = fmt.Sprintf("inst%04d", i)
		l, err := limiter.New(c, stores[len(stores)-1])
		if err != nil {
			cleanup()
			return res, err
		}
		lims = append(lims, l)
	}
	defer cleanup()

	// Expected (instance, app) pairs with at least one request per 100 ms sync interval, per
	// second: the number of per-app report entries a report-every-active-app design sends.
	f := 10.0
	for _, a := range res.appSpecs {
		per := a.rate / float64(s.instances) / f
		res.activePairsPerSec += float64(s.instances) * f * (1 - math.Exp(-per))
	}

	// Drivers: apps are dealt to workers; each worker wakes every 10 ms and sends every app
	// the requests its rate is due since the start (catching up after a slow lease), each to
	// a random instance, the way a load balancer spreads an app over the fleet.
	workers := min(64, s.apps)
	res.sent = make([]int64, s.apps)
	res.admitted = make([]int64, s.apps)
	res.skipped = make([]int64, s.apps)
	cnt := make([]counters, workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A fixed seed per worker makes the sequence of instances its requests go to the
			// same from run to run; the choice spreads load and guards nothing.
			rng := rand.New(rand.NewPCG(uint64(w), 42)) //nolint:gosec // G404: seeded math/rand for a reproducible load schedule, not a secret
			c := &cnt[w]
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				e := time.Since(t0).Seconds()
				for i := w; i < s.apps; i += workers {
					select {
					case <-stop:
						return
					default:
					}
					a := &res.appSpecs[i]
					due := int64(a.rate*e) - res.sent[i] - res.skipped[i]
					// A worker that fell behind (slow leases, a saturated machine) catches up at
					// most 100 ms of an app's requests per tick; what it cannot send is not
					// offered (the table shows driven vs offered).
					if lim := int64(a.rate*0.1) + 1; due > lim {
						res.skipped[i] += due - lim
						due = lim
					}
					for ; due > 0; due-- {
						l := lims[rng.IntN(len(lims))]
						app, reason := l.App(a.id)
						res.sent[i]++
						c.sent.Add(1)
						if app == nil {
							c.failed.Add(1)
							_ = reason
							continue
						}
						d := app.Take(ctx, 1, 0)
						if d.Allowed {
							app.Record(store.ReasonNone, 1)
							res.admitted[i]++
							c.admitted.Add(1)
							if d.LocalHit {
								c.localHits.Add(1)
							}
						} else {
							app.Record(d.Reason, 1)
						}
					}
				}
			}
		}()
	}

	totals := func() (p phase) {
		for i := range cnt {
			p.sent += cnt[i].sent.Load()
			p.admitted += cnt[i].admitted.Load()
			p.localHits += cnt[i].localHits.Load()
			p.failed += cnt[i].failed.Load()
		}
		for _, l := range lims {
			for _, st := range l.Stats() {
				p.leases += st.Leases
			}
		}
		for _, nd := range nodes {
			sc, cm, err := nd.counts(ctx)
			if err == nil {
				p.scripts += sc
				p.commands += cm
			}
		}
		return p
	}
	cpuSelf := func() time.Duration { return procCPU("/proc/self/stat") }

	time.Sleep(s.warmup)
	w := totals()
	w.d = time.Since(t0)
	res.warm = w
	for _, nd := range nodes {
		_ = nd.client.ConfigResetStat(ctx).Err()
	}
	cpu0 := cpuSelf()
	var rcpu0 []time.Duration
	for _, nd := range nodes {
		rcpu0 = append(rcpu0, nd.cpu())
	}
	t1 := time.Now()
	time.Sleep(s.duration)
	e := totals()
	e.d = time.Since(t1)
	res.goCPU = cpuSelf() - cpu0
	for i, nd := range nodes {
		res.redisCPU = append(res.redisCPU, nd.cpu()-rcpu0[i])
		sc, cm, err := nd.counts(ctx)
		if err != nil {
			return res, err
		}
		res.scriptsNode = append(res.scriptsNode, sc)
		res.commandsNode = append(res.commandsNode, cm)
	}
	close(stop)
	wg.Wait()
	res.elapsed = time.Since(t0)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.heapMB = float64(ms.HeapAlloc) / (1 << 20)
	res.steady = phase{
		d: e.d, sent: e.sent - w.sent, admitted: e.admitted - w.admitted,
		localHits: e.localHits - w.localHits, failed: e.failed - w.failed, leases: e.leases - w.leases,
		scripts: e.scripts, commands: e.commands,
	}
	fmt.Fprintf(logf, "run %+v\nwarm %+v\nsteady %+v\n", s, res.warm, res.steady)
	return res, nil
}

func procCPU(path string) time.Duration {
	b, err := readFile(path)
	if err != nil {
		return 0
	}
	return parseStat(b)
}
