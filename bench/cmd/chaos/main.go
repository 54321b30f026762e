// Command chaos runs a fleet of three real Caddy gateways with the plugin on a Redis Cluster
// with replicas (or on Sentinel), drives a steady multi-tenant load through them, injects a
// random schedule of faults drawn from a seed (often two at once), checks the invariants of
// docs/operations.md ("Chaos soak") as it runs, and prints a report (also written to a file).
// It exits with status 1 when an invariant is violated. bench/chaos.sh builds and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// quiet discards go-redis's log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	var (
		seed     = flag.Uint64("seed", 0, "seed of the fault schedule (0: from the clock; the report names it)")
		mode     = flag.String("mode", "cluster", "Redis deployment: cluster (3 masters + 3 replicas) or sentinel (master, 2 replicas, 3 sentinels)")
		duration = flag.Duration("duration", 30*time.Minute, "length of the fault schedule (the load runs 15 s longer)")
		short    = flag.Bool("short", false, "a short soak for CI: shorter holds and gaps, overrides every 5 s")
		bin      = flag.String("bin", "bench/bin/tierbucket", "Caddy with the plugin")
		out      = flag.String("out", "", "report file (default bench/results/chaos-<mode>-<seed>.md)")
		noFaults = flag.Bool("no-faults", false, "run the load and the checks without faults (a baseline)")
		dir      = flag.String("dir", "", "working directory for Redis and Caddy (default: a new temporary one, removed after a clean run)")
	)
	flag.Parse()
	redis.SetLogger(quiet{}) // the client's reconnection notices during faults say nothing the report needs
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano()) & 0xffffffff
	}
	if *mode != "cluster" && *mode != "sentinel" {
		fmt.Fprintf(os.Stderr, "chaos: -mode %q: want cluster or sentinel\n", *mode)
		os.Exit(2)
	}
	if *out == "" {
		*out = fmt.Sprintf("bench/results/chaos-%s-%d.md", *mode, *seed)
	}
	work := *dir
	if work == "" {
		d, err := os.MkdirTemp("", "chaos-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			os.Exit(2)
		}
		work = d
	}
	cfg := runConfig{seed: *seed, mode: *mode, duration: *duration, short: *short, noFaults: *noFaults, bin: *bin, dir: work}
	report, ok, err := run(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v (files in %s)\n", err, work)
		os.Exit(2)
	}
	fmt.Print(report)
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err == nil {
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil { //nolint:gosec // G306: a report for people to read, no secret in it
			fmt.Fprintln(os.Stderr, "chaos:", err)
		} else {
			fmt.Fprintln(os.Stderr, "chaos: report written to", *out)
		}
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "chaos: invariants violated (logs kept in %s)\n", work)
		os.Exit(1)
	}
	if *dir == "" {
		_ = os.RemoveAll(work)
	}
}

type runConfig struct {
	seed     uint64
	mode     string
	duration time.Duration
	short    bool
	noFaults bool
	bin, dir string
}

// The load: three apps far under their quota (20/s against 60/s), one app offered 1.5× its
// quota, one app whose requests the backend holds (in flight against max_connections).
const (
	underRate, underG, underBurst = 20.0, 60.0, 120.0
	hotRate, hotG, hotBurst       = 45.0, 30.0, 30.0
	connRate, connLimit           = 40.0, 10
	connHold                      = 300 * time.Millisecond
)

// site is the gateways' site block; variant 1 changes a2's burst (a reload with a policy change).
func site(redisBlock, backend string) func(int) string {
	return func(variant int) string {
		return fmt.Sprintf(`	rate_limit {
		key {http.request.header.X-App-Id}
		unknown_app reject
		app a1 {
			guaranteed %[1]g
			burst %[2]g
		}
		app a2 {
			guaranteed %[1]g
			burst %[3]g
		}
		app a3 {
			guaranteed %[1]g
			burst %[2]g
		}
		app hot {
			guaranteed %[4]g
			burst %[5]g
		}
		app conn {
			guaranteed 100000
			burst 100000
			max_connections %[6]d
		}
		# Every report flushes the apps' statistics, so Redis's counts can be compared with
		# the clients' at the end.
		local {
			sync_batch 1
		}
		redis {
			%[7]s
			key_prefix chaos
		}
	}
	# Idle connections to the backend close after 2 s: the gateway's goroutines then follow
	# the requests in flight, not the largest pool a slow moment made (the default keeps them
	# 2 minutes).
	reverse_proxy %[8]s {
		transport http {
			keepalive 2s
		}
	}`, underG, underBurst, underBurst+float64(variant), hotG, hotBurst, connLimit, redisBlock, backend)
	}
}

func run(cfg runConfig) (string, bool, error) {
	setupStart := time.Now()
	var top *topology
	var err error
	if cfg.mode == "cluster" {
		top, err = startCluster(cfg.dir)
	} else {
		top, err = startSentinel(cfg.dir)
	}
	if err != nil {
		return "", false, err
	}
	defer top.stop()
	_ = os.WriteFile(filepath.Join(cfg.dir, "topology.txt"), []byte(top.describe()), 0o600)
	start := time.Now()
	be, err := startBackend(connHold, connLimit, start)
	if err != nil {
		return "", false, err
	}
	defer be.close()
	siteFn := site(top.block, be.addr)
	var gws []*gateway
	defer func() {
		for _, g := range gws {
			g.stop(syscall.SIGTERM)
		}
	}()
	for i := range 3 {
		g, err := newGateway(cfg.dir, cfg.bin, fmt.Sprintf("gw%d", i), siteFn)
		if err != nil {
			return "", false, err
		}
		gws = append(gws, g)
	}
	apps := []*appLoad{
		{id: "a1", rate: underRate, kind: "under"},
		{id: "a2", rate: underRate, kind: "under"},
		{id: "a3", rate: underRate, kind: "under"},
		{id: "hot", rate: hotRate, kind: "over"},
		{id: "conn", rate: connRate, kind: "conns", slow: true},
	}
	for _, a := range apps {
		a.tally = newTally()
	}
	c := &chaos{top: top, gws: gws, start: start}
	deadline := time.Now().Add(30 * time.Second)
	for !c.allNormal() {
		if time.Now().After(deadline) {
			return "", false, fmt.Errorf("the gateways did not reach Redis within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	setup := time.Since(setupStart)
	// The run's clock starts with the load.
	start = time.Now()
	c.start, be.start = start, start
	c.load = newLoader(apps, gws, start)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.load.run(ctx) }()

	smp := &sampler{series: map[string][]sample{}}
	every := 5 * time.Second
	if cfg.short {
		every = 2 * time.Second
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			smp.scrapeAll(c)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	lw := &levelWatch{client: &http.Client{Timeout: 2 * time.Second}, since: map[*gateway]time.Time{}, slow: map[*gateway]float64{}}
	wg.Add(1)
	go func() { defer wg.Done(); lw.run(ctx, c) }()

	ovEvery := 10 * time.Second
	if cfg.short {
		ovEvery = 5 * time.Second
	}
	ov := &overrides{
		c: c, every: ovEvery, rng: rand.New(rand.NewPCG(cfg.seed, 1)), //nolint:gosec // G404: seeded for a reproducible run, not a secret
		client: &http.Client{Timeout: 3 * time.Second},
	}
	wg.Add(1)
	go func() { defer wg.Done(); ov.run(ctx) }()

	plan := schedule(cfg.seed, cfg.mode, len(gws), 1000, cfg.short)
	var ran []*ran
	for _, e := range plan {
		if cfg.noFaults || c.since()+e.gap >= cfg.duration {
			break
		}
		time.Sleep(e.gap)
		r := c.runEpisode(e)
		ran = append(ran, r)
		fmt.Fprintf(os.Stderr, "chaos: %v %s → healed %v, recovery %v %s\n", r.start.Round(time.Second), e,
			r.healed.Round(time.Second), r.recovery.Round(10*time.Millisecond), strings.Join(r.errs, "; "))
	}
	if rest := cfg.duration - c.since(); rest > 0 {
		time.Sleep(rest)
	}
	time.Sleep(15 * time.Second) // a quiet tail: every episode's recovery is logged (5 s after the probe)
	cancel()
	wg.Wait()
	end := c.since()

	lines, details := checkAll(c, top, apps, be, ran, smp, ov, lw, end)
	ok := true
	for _, l := range lines {
		ok = ok && l.ok
	}
	return formatReport(cfg, setup, end, plan, ran, apps, lines, details), ok, nil
}
