// Command scale is the fleet-scale harness behind bench/scale.sh: it starts its own 3-master
// Redis Cluster on loopback, runs simulated gateway instances (in-process limiter.Limiters, each
// with its own instance id and its own redislua store client) driving many apps, and measures
// Redis scripts and commands per shard, local hit ratio and accuracy per app class. See
// bench/README.md and docs/performance.md.
//
// Suites: "fleet" (N ∈ {10, 100} × M ∈ {100, 10 000}, Zipf rates, a cost model fitted to the
// runs) and "calls" (one instance, 1/200/2000/20 000 apps at 10 req/s each, and one hot app at
// 40k req/s: Redis scripts per 1000 requests, first leases apart from the steady state).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	var (
		suite    = flag.String("suite", "fleet", "fleet | calls | one")
		out      = flag.String("out", "bench/results", "directory for the results")
		warmup   = flag.Duration("warmup", 5*time.Second, "driven but not measured (first leases)")
		duration = flag.Duration("duration", 15*time.Second, "measured time per run")
		rate     = flag.Float64("rate", 20000, "fleet suite / one: total offered requests per second")
		n        = flag.Int("instances", 10, "one: simulated instances")
		m        = flag.Int("apps", 100, "one: apps")
		dist     = flag.String("dist", "zipf", "one: zipf | uniform")
		zipfS    = flag.Float64("zipf", 1.0, "Zipf exponent of the per-app rates")
		over     = flag.Float64("over", 0.2, "share of apps whose quota is half their offered rate")
		perApp   = flag.Float64("per-app", 10, "calls suite: requests per second per app")
		hot      = flag.Float64("hot", 40000, "calls suite: the hot app's requests per second (0: skip)")
		appsList = flag.String("apps-list", "1,200,2000,20000", "calls suite: active app counts")
		burstSec = flag.Float64("burst-seconds", 1, "every app's burst in seconds of its guaranteed rate (at least 10 tokens)")
		shared   = flag.Bool("shared-client", false, "all instances share one store client (default: one each)")
		statsInt = flag.Duration("stats-interval", 0, "the limiters' stats_interval (0: the default, 60s)")
	)
	flag.Parse()
	log.SetFlags(log.Ltime)

	work, err := os.MkdirTemp("", "tierbucket-scale-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		os.RemoveAll(work)
		log.Fatal("interrupted") // the redis-servers die with us (Pdeathsig)
	}()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	stamp := time.Now().UTC().Format("2006-01-02T1504Z")
	logf, err := os.Create(filepath.Join(*out, "scale-"+*suite+"-"+stamp+".log"))
	if err != nil {
		log.Fatal(err)
	}
	defer logf.Close()

	nodes, err := startCluster(work, 3, logf)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		for _, nd := range nodes {
			nd.stop()
		}
	}()
	addrs := make([]string, 0, len(nodes))
	for _, nd := range nodes {
		addrs = append(addrs, nd.addr)
	}
	log.Printf("3-master Redis Cluster on %s", strings.Join(addrs, " "))

	var specs []spec
	base := spec{
		warmup: *warmup, duration: *duration, zipfS: *zipfS, shared: *shared, burstSeconds: *burstSec,
		statsInterval: *statsInt,
	}
	switch *suite {
	case "fleet":
		for _, nm := range [][2]int{{10, 100}, {10, 10000}, {100, 100}, {100, 10000}} {
			s := base
			s.instances, s.apps, s.rate, s.dist, s.over = nm[0], nm[1], *rate, "zipf", *over
			specs = append(specs, s)
		}
	case "calls":
		for _, f := range strings.Split(*appsList, ",") {
			var k int
			if _, err := fmt.Sscan(strings.TrimSpace(f), &k); err != nil || k < 1 {
				log.Fatalf("-apps-list: bad count %q", f)
			}
			s := base
			s.instances, s.apps, s.rate, s.dist, s.over = 1, k, *perApp*float64(k), "uniform", 0
			specs = append(specs, s)
		}
		if *hot > 0 {
			s := base
			s.instances, s.apps, s.rate, s.dist, s.over = 1, 1, *hot, "uniform", 0
			specs = append(specs, s)
		}
	case "one":
		s := base
		s.instances, s.apps, s.rate, s.dist, s.over = *n, *m, *rate, *dist, *over
		specs = append(specs, s)
	default:
		log.Fatalf("-suite %q: want fleet, calls or one", *suite)
	}

	var results []result
	started := time.Now()
	for i, s := range specs {
		log.Printf("run %d/%d: %d instances × %d apps, %s rates, %.0f req/s offered, %v warm-up + %v measured",
			i+1, len(specs), s.instances, s.apps, s.dist, s.rate, s.warmup, s.duration)
		r, err := run(context.Background(), s, nodes, addrs, logf)
		if err != nil {
			log.Printf("run %d failed: %v", i+1, err)
			continue
		}
		fmt.Print(r.summary())
		results = append(results, r)
	}
	md := report(*suite, os.Args, started, results)
	path := filepath.Join(*out, "scale-"+*suite+"-"+stamp+".md")
	if err := os.WriteFile(path, []byte(md), 0o600); err != nil {
		log.Fatal(err)
	}
	fmt.Print(md)
	log.Printf("wrote %s", path)
}
