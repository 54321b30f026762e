// Command benchrun is the side-by-side load harness behind bench/run.sh: it starts its own
// redis-server, then, round after round, starts each Caddy variant on loopback, loads it with the
// same wrk settings, collects throughput, latency, Redis commands and tierbucket's local hit
// ratio, and writes a markdown table. See bench/README.md.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/testnet"
)

// sample is one measured wrk run of one variant in one scenario and round.
type sample struct {
	round     int
	scenario  string
	variant   string
	wrk       wrkResult
	redisCmds int64         // INFO commandstats calls during the run, in-script ones included (-1: no Redis)
	scriptCmd int64         // of which EVAL/EVALSHA/FCALL (-1: no Redis)
	caddyCPU  time.Duration // CPU time Caddy used during the run
	redisCPU  time.Duration // CPU time redis-server used during the run
	localHits float64       // delta of caddy_rate_limit_local_hits_total (tierbucket only)
	warmBad   int64         // non-2xx responses and socket errors of the warm-up run (cold start)
	decisions float64       // delta of caddy_rate_limit_requests_total (tierbucket only)
	gcCycles  float64       // delta of go_gc_duration_seconds_count: Caddy's garbage collections
	peakRSS   int64         // bytes: Caddy's peak resident set (VmHWM) after the run
	instr     int64         // -instructions: instructions Caddy ran during the measured run
	idleInstr int64         // -instructions: instructions Caddy ran in idleFor without load afterwards
	idleFor   time.Duration
	allocated float64 // -instructions: bytes Caddy allocated during the measured run (go_memstats_alloc_bytes_total)
}

type options struct {
	binDir, outDir   string
	duration, warmup time.Duration
	rounds           int
	threads, conns   int
	highQuota        int
	lowQuota         int
	variants         []variant
	scenarios        []scenario
	notes            []string
	upstream         string // the proxied scenarios' upstream (host:port), started by run
	instructions     bool   // count the instructions Caddy runs per request (instr.go) instead of timing it
	idle             time.Duration
}

func main() {
	var o options
	var variantList, scenarioList, skipped string
	flag.StringVar(&o.binDir, "bin", "bench/bin", "directory with the Caddy builds")
	flag.StringVar(&o.outDir, "out", "bench/results", "directory for the results")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "measured wrk run per variant and round")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured wrk run before each measured run")
	flag.IntVar(&o.rounds, "rounds", 7, "rounds; each round runs every variant once per scenario")
	flag.IntVar(&o.threads, "threads", 2, "wrk threads")
	flag.StringVar(&serverCPUs, "server-cpus", "", "pin Caddy and redis-server to these CPUs (taskset -c list; default: not pinned)")
	flag.StringVar(&loadCPUs, "load-cpus", "", "pin wrk to these CPUs (taskset -c list; default: not pinned)")
	flag.IntVar(&o.conns, "conns", 50, "wrk connections")
	flag.IntVar(&o.highQuota, "high-quota", 1000000, "quota (req/s) of the 'limit never reached' scenario")
	flag.IntVar(&o.lowQuota, "low-quota", 200, "quota (req/s) of the 'limit reached' scenario")
	flag.StringVar(&variantList, "variants", "", "comma-separated variants to run (default: all)")
	flag.StringVar(&scenarioList, "scenarios", "unlimited,limited", "comma-separated scenarios to run")
	flag.StringVar(&skipped, "skipped", "", "note about variants that could not be built")
	flag.BoolVar(&o.instructions, "instructions", false, "count the instructions each Caddy runs per request under callgrind (instr.go) instead of timing it")
	flag.DurationVar(&o.idle, "idle", 5*time.Second, "with -instructions: the idle time after the load whose instructions are counted apart")
	flag.Parse()
	log.SetFlags(log.Ltime)

	for _, v := range variants {
		if variantList == "" || contains(strings.Split(variantList, ","), v.name) {
			o.variants = append(o.variants, v)
		}
	}
	if len(o.variants) == 0 || o.variants[0].name != "plain" {
		log.Fatal("the variants must include plain (the baseline)")
	}
	if skipped != "" {
		o.notes = append(o.notes, skipped)
	}
	for _, s := range []scenario{
		{name: "unlimited", quota: o.highQuota, desc: "limit never reached: pure overhead", withinQuota: true},
		{name: "limited", quota: o.lowQuota, desc: "limit reached: most requests rejected"},
		{
			name: "apps1", quota: 100000, hosts: 1, withinQuota: true,
			desc: "one app (Host app1), quota 100000: Redis calls per 1000 requests",
		},
		{
			name: "proxied", quota: o.highQuota, proxied: true, withinQuota: true,
			desc: "limit never reached, each request passed on with reverse_proxy to a plain Caddy answering \"ok\": a gateway's shape",
		},
		{
			name: "latency", quota: o.highQuota, rate: 2000, withinQuota: true,
			desc: "a fixed 2000 req/s, open loop (not wrk): the latency the limiter adds away from saturation",
		},
		{
			name: "apps200", quota: 100000, hosts: 200, withinQuota: true,
			desc: "200 apps, wrk rotating Host app1 … app200 per request, `unknown_app isolated`, `app *` guaranteed 100000",
		},
		{
			name: "apps2000", quota: 100000, hosts: 2000, withinQuota: true,
			desc: "2000 apps, wrk rotating Host app1 … app2000 per request, `unknown_app isolated`, `app *` guaranteed 100000",
		},
	} {
		if contains(strings.Split(scenarioList, ","), s.name) {
			o.scenarios = append(o.scenarios, s)
		}
	}
	if len(o.scenarios) == 0 {
		log.Fatalf("no known scenario in %q (unlimited, limited, proxied, latency, apps1, apps200, apps2000)", scenarioList)
	}
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

func run(o options) error {
	stamp := time.Now().UTC().Format("2006-01-02T1504Z")
	measureOne, render := measure, report
	if o.instructions {
		stamp = "instr-" + stamp
		measureOne, render = measureInstructions, instructionsReport
	}
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "tierbucket-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// Interrupted: exit at once; the children die with us (Pdeathsig), the temp dir is removed.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		os.RemoveAll(work)
		log.Fatal("interrupted")
	}()
	logPath := filepath.Join(o.outDir, stamp+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()

	machine := describeMachine()
	wrk, err := newWrkRunner(work, o.threads, o.conns)
	if err != nil {
		return err
	}
	rs, err := startRedis(work, logf)
	if err != nil {
		return err
	}
	defer rs.stop()
	log.Printf("redis-server on %s; logs in %s", rs.addr, logPath)
	if up, err := startUpstream(o, work, logf); err != nil {
		return err
	} else if up != nil {
		defer up.proc.stop()
		o.upstream = fmt.Sprintf("127.0.0.1:%d", up.httpPort)
	}

	var samples []sample
	started := time.Now()
	for round := 1; round <= o.rounds; round++ {
		for _, s := range o.scenarios {
			// Round-robin: each round starts with a different variant so no variant always
			// runs first (or right after the same neighbour) while the machine warms up.
			n := len(o.variants)
			for i := range n {
				v := o.variants[(i+round-1)%n]
				smp, err := measureOne(o, v, s, round, rs, wrk, work, logf)
				if err != nil {
					// One failed run must not lose the others: note it and go on.
					msg := fmt.Sprintf("round %d, %s, %s failed: %v (see %s)", round, s.name, v.name, err, logPath)
					log.Print(msg)
					o.notes = append(o.notes, msg)
					continue
				}
				log.Printf("round %d/%d %-9s %-17s %8.0f req/s  p50 %v  p99 %v  %s", round, o.rounds, s.name, v.name,
					smp.wrk.RPS(), smp.wrk.P50, smp.wrk.P99, smp.instructionsText())
				samples = append(samples, smp)
			}
		}
	}
	machine.elapsed = time.Since(started).Round(time.Second)

	md := render(o, machine, samples)
	mdPath := filepath.Join(o.outDir, stamp+".md")
	if err := os.WriteFile(mdPath, []byte(md), 0o600); err != nil {
		return err
	}
	if err := writeRaw(filepath.Join(o.outDir, stamp+".tsv"), samples); err != nil {
		return err
	}
	fmt.Print(md)
	log.Printf("wrote %s", mdPath)
	return nil
}

// measure runs one variant once: fresh Redis state, fresh Caddy, warm-up, measured run.
func measure(o options, v variant, s scenario, round int, rs *redisServer, wrk *wrkRunner, work string, logf *os.File) (sample, error) {
	smp := sample{round: round, scenario: s.name, variant: v.name, redisCmds: -1, scriptCmd: -1}
	c, _, err := startVariant(o, v, s, round, rs, work, logf)
	if err != nil {
		return smp, err
	}
	defer c.proc.stop()

	load := loader(s, c, wrk, logf)
	if smp.warmBad, err = warmUp(o, load); err != nil {
		return smp, err
	}
	m0, err := c.metrics()
	if err != nil {
		return smp, err
	}
	hits0, dec0 := sumMetric(m0, "caddy_rate_limit_local_hits_total"), sumMetric(m0, "caddy_rate_limit_requests_total")
	gc0 := sumMetric(m0, "go_gc_duration_seconds_count")
	if err := rs.resetStats(); err != nil {
		return smp, err
	}
	caddyCPU0, err := c.proc.cpuTime()
	if err != nil {
		return smp, err
	}
	redisCPU0, err := rs.proc.cpuTime()
	if err != nil {
		return smp, err
	}
	if smp.wrk, err = load(o.duration); err != nil {
		return smp, err
	}
	caddyCPU1, err := c.proc.cpuTime()
	if err != nil {
		return smp, err
	}
	redisCPU1, err := rs.proc.cpuTime()
	if err != nil {
		return smp, err
	}
	smp.caddyCPU, smp.redisCPU = caddyCPU1-caddyCPU0, redisCPU1-redisCPU0
	calls, scripts, err := rs.commandCalls(logf)
	if err != nil {
		return smp, err
	}
	if v.redis {
		smp.redisCmds, smp.scriptCmd = calls, scripts
	} else if calls != 0 {
		return smp, fmt.Errorf("variant without Redis sent %d Redis commands", calls)
	}
	m, err := c.metrics()
	if err != nil {
		return smp, err
	}
	smp.gcCycles = sumMetric(m, "go_gc_duration_seconds_count") - gc0
	if smp.peakRSS, err = c.proc.peakRSS(); err != nil {
		return smp, err
	}
	if v.tierbucket {
		fmt.Fprintf(logf, "metrics after the run:\n%s", rateLimitLines(m))
		smp.localHits = sumMetric(m, "caddy_rate_limit_local_hits_total") - hits0
		smp.decisions = sumMetric(m, "caddy_rate_limit_requests_total") - dec0
	}
	if c.proc.exited() {
		return smp, fmt.Errorf("caddy exited during the run (see the log)")
	}
	return smp, nil
}

// startVariant empties Redis and starts a fresh Caddy of variant v for scenario s in its own
// directory (returned).
func startVariant(o options, v variant, s scenario, round int, rs *redisServer, work string, logf *os.File) (*caddyServer, string, error) {
	if err := rs.reset(); err != nil {
		return nil, "", err
	}
	dir := filepath.Join(work, fmt.Sprintf("%s-%s-%d", v.name, s.name, round))
	c, err := launch(o, v.bin, dir, func(httpPort, adminPort int) string {
		config := caddyfile(v, s, httpPort, adminPort, rs.addr, o.upstream)
		fmt.Fprintf(logf, "=== round %d %s %s\n%s", round, s.name, v.name, config)
		return config
	}, logf)
	return c, dir, err
}

// loader returns the load of scenario s against c: wrk, or the open-loop client at a fixed rate.
func loader(s scenario, c *caddyServer, wrk *wrkRunner, logf *os.File) func(d time.Duration) (wrkResult, error) {
	return func(d time.Duration) (wrkResult, error) {
		if s.rate > 0 {
			return fixedRate(c.httpPort, s.rate, d, logf)
		}
		return wrk.run(c.httpPort, s.hosts, d, logf)
	}
}

// warmUp runs the unmeasured load before a measured run and returns its non-2xx responses and
// socket errors (a cold start's).
func warmUp(o options, load func(time.Duration) (wrkResult, error)) (int64, error) {
	if o.warmup <= 0 {
		return 0, nil
	}
	wr, err := load(o.warmup)
	if err != nil {
		return 0, fmt.Errorf("warm-up: %v", err)
	}
	return wr.StatusErrors + wr.SocketErrors, nil
}

// startUpstream starts the upstream of the proxied scenarios, if any is to run (nil otherwise):
// one plain Caddy for the whole run, the same for every variant.
func startUpstream(o options, work string, logf *os.File) (*caddyServer, error) {
	if !slices.ContainsFunc(o.scenarios, func(s scenario) bool { return s.proxied }) {
		return nil, nil
	}
	o.instructions = false // only the Caddy under test is counted
	return launch(o, variants[0].bin, filepath.Join(work, "upstream"), upstreamCaddyfile, logf)
}

// launch starts the Caddy build bin (under o.binDir) in dir, on two free ports, with the config
// that config writes for them.
func launch(o options, bin, dir string, config func(httpPort, adminPort int) string, logf *os.File) (*caddyServer, error) {
	httpPort, err := testnet.FreePortWith(0)
	if err != nil {
		return nil, err
	}
	adminPort, err := testnet.FreePortWith(0)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path, err := filepath.Abs(filepath.Join(o.binDir, bin))
	if err != nil {
		return nil, err
	}
	return startCaddy(path, dir, config(httpPort, adminPort), httpPort, adminPort, o.instructions, logf)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}
