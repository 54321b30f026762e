package main

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// syncRate is the cluster reports per instance per second, at the default sync interval.
var syncRate = 1 / limiter.DefaultSyncInterval.Seconds()

// longStatsInterval is the stats_interval of the extrapolation's last column: what an operator
// of a large fleet of small tenants would set to save the flushes.
const longStatsInterval = 10 * time.Minute

// statsIntervalOrDefault is the limiters' StatsInterval in the run.
func (s spec) statsIntervalOrDefault() time.Duration {
	if s.statsInterval > 0 {
		return s.statsInterval
	}
	return limiter.DefaultStatsInterval
}

func (r result) perSec(n int64) float64 { return float64(n) / r.steady.d.Seconds() }

// per1000 is Redis script calls per 1000 requests sent in the phase.
func per1000(scripts, sent int64) float64 {
	if sent == 0 {
		return math.NaN()
	}
	return 1000 * float64(scripts) / float64(sent)
}

func (r result) hitRatio() float64 {
	if r.steady.sent == 0 {
		return math.NaN()
	}
	return float64(r.steady.localHits) / float64(r.steady.sent)
}

// classAccuracy sums, over the apps of one class, admitted ÷ what the quota allows over the
// whole run (burst + guaranteed × elapsed) for apps driven above their quota, and admitted ÷
// sent for apps within it (1 = no request of an app within its quota was rejected). It also
// gives the per-app spread (5th/50th/95th percentile) over apps whose allowance is ≥ 100.
type classAcc struct {
	apps         int
	sent, admit  int64
	allowed      float64
	ratio        float64
	p5, p50, p95 float64
	spreadOver   int
}

func (r result) accuracy(band int, over bool) classAcc {
	var c classAcc
	var per []float64
	T := r.elapsed.Seconds()
	for i, a := range r.appSpecs {
		if a.band != band || a.overQuota != over {
			continue
		}
		c.apps++
		c.sent += r.sent[i]
		c.admit += r.admitted[i]
		allow := float64(r.sent[i])
		if over {
			allow = math.Min(a.burst+a.g*T, float64(r.sent[i]))
		}
		c.allowed += allow
		if allow >= 100 {
			per = append(per, float64(r.admitted[i])/allow)
		}
	}
	if c.allowed > 0 {
		c.ratio = float64(c.admit) / c.allowed
	}
	if len(per) > 0 {
		slices.Sort(per)
		q := func(p float64) float64 { return per[int(math.Round(p*float64(len(per)-1)))] }
		c.p5, c.p50, c.p95, c.spreadOver = q(0.05), q(0.5), q(0.95), len(per)
	}
	return c
}

func (r result) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d instances × %d apps: %.0f req/s driven (%.0f offered), scripts/1000 req steady %.2f (first %v: %.2f), local hits %.4f, scripts/s per shard %s\n",
		r.instances, r.apps, r.perSec(r.steady.sent), r.rate, per1000(r.steady.scripts, r.steady.sent),
		r.warm.d.Round(time.Second), per1000(r.warm.scripts, r.warm.sent), r.hitRatio(), r.shardList(r.scriptsNode))
	return b.String()
}

func (r result) shardList(v []int64) string {
	parts := make([]string, 0, len(v))
	for _, x := range v {
		parts = append(parts, fmt.Sprintf("%.0f", r.perSec(x)))
	}
	return strings.Join(parts, " / ")
}

func maxOf(v []int64) int64 {
	var m int64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func report(suite string, args []string, started time.Time, rs []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# tierbucket scale harness, suite %s, %s\n\n", suite, started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Command: `bench/bin/scale %s` (via `bash bench/scale.sh`). %d CPUs, %s. Total %v.\n\n",
		strings.Join(args[1:], " "), runtime.NumCPU(), runtime.Version(), time.Since(started).Round(time.Second))
	b.WriteString("A 3-master Redis Cluster (redis-server processes on loopback, started by the harness) and in-process " +
		"limiter.Limiters, each with its own instance id and its own redislua store client (pool 8 per node), all in one " +
		"process on this shared 2-CPU machine, Redis included: the absolute rates are what this machine could drive, the " +
		"ratios (per 1000 requests, per shard) are the result. Each request goes to a random instance (a load balancer " +
		"spreading every app over the fleet). Steady state = after the warm-up (first leases), counted with " +
		"CONFIG RESETSTAT + INFO commandstats on every master; scripts = EVAL/EVALSHA/FCALL calls, commands = every " +
		"call (Redis counts the commands a script runs too), minus the harness's own INFO/CONFIG/CLUSTER/PING.\n\n")

	b.WriteString("| instances | apps | offered req/s | driven req/s | first-phase scripts / 1000 req | steady scripts / 1000 req | scripts/s per shard | max shard scripts/s | commands/s per shard | leases/s | local hit ratio | Redis CPU s per s (3 shards) | harness heap MB |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		rcpu := make([]string, 0, len(r.redisCPU))
		for _, c := range r.redisCPU {
			rcpu = append(rcpu, fmt.Sprintf("%.2f", c.Seconds()/r.steady.d.Seconds()))
		}
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.0f | %.1f | %.2f | %s | %.0f | %s | %.1f | %.4f | %s | %.0f |\n",
			r.instances, r.apps, r.rate, r.perSec(r.steady.sent),
			per1000(r.warm.scripts, r.warm.sent), per1000(r.steady.scripts, r.steady.sent),
			r.shardList(r.scriptsNode), r.perSec(maxOf(r.scriptsNode)), r.shardList(r.commandsNode),
			r.perSec(r.steady.leases), r.hitRatio(), strings.Join(rcpu, " / "), r.heapMB)
	}
	b.WriteString("\n")

	hasOver := false
	for _, r := range rs {
		hasOver = hasOver || r.over > 0
	}
	if hasOver {
		b.WriteString("## Accuracy per app class (whole run, warm-up included)\n\n")
		b.WriteString("Every 5th app by rank is driven at twice its quota (guaranteed = offered/2), the others at half of it " +
			"(guaranteed = 2 × offered); burst = max(guaranteed × -burst-seconds, 10). Over quota: admitted ÷ (burst + guaranteed × T) " +
			"(1.00 = exact; the target is ±5%), with the per-app 5th/50th/95th percentiles over apps allowed ≥ 100 " +
			"requests. Within quota: admitted ÷ sent (1.00 = no request rejected).\n\n")
		b.WriteString("| instances | apps | class | apps | over quota: admitted ÷ allowed [p5 p50 p95 (n)] | within quota: admitted ÷ sent |\n|---:|---:|---|---:|---|---:|\n")
		for _, r := range rs {
			for band := range numBands {
				o, u := r.accuracy(band, true), r.accuracy(band, false)
				os := "–"
				if o.apps > 0 {
					os = fmt.Sprintf("%.3f", o.ratio)
					if o.spreadOver > 0 {
						os += fmt.Sprintf(" [%.2f %.2f %.2f (%d)]", o.p5, o.p50, o.p95, o.spreadOver)
					}
				}
				us := "–"
				if u.apps > 0 {
					us = fmt.Sprintf("%.4f", u.ratio)
				}
				fmt.Fprintf(&b, "| %d | %d | %s | %d + %d | %s | %s |\n", r.instances, r.apps, bandNames[band], o.apps, u.apps, os, us)
			}
		}
		b.WriteString("\n")
	}
	if len(rs) >= 3 && suite == "fleet" {
		b.WriteString(model(rs))
	}
	return b.String()
}

// leasesPerSec is the model's lease calls per second of one app spread evenly over n instances:
// each instance consumes r = rate / n per second (the admitted rate: the quota for an app over
// it) and leases S = max(1, min(r × horizon, burst / (2n))) tokens at a time, so r / S leases per
// second (at most one per request).
func leasesPerSec(rate, burst float64, overQuota bool, quota float64, n float64) float64 {
	horizon := limiter.LeaseHorizon.Seconds()
	if overQuota {
		rate = math.Min(rate, quota)
		sync := limiter.Config{SyncInterval: limiter.DefaultSyncInterval}
		horizon = limiter.AtQuotaHorizon(sync, int(n)).Seconds()
	}
	r := rate / n
	if r <= 0 {
		return 0
	}
	size := math.Max(1, math.Min(r*horizon, burst/(2*n)))
	return n * r / size
}

// flushesPerSec is the model's statistics flushes per second of one app spread evenly over n
// instances whose limiters flush after statsInterval: an instance whose requests of the app are
// too sparse to keep a token between them (r × horizon < 1) leases one token per request, and
// that lease cannot carry the request it admits; the next lease carries it if it comes within
// statsInterval, otherwise the report flushes it alone. With requests arriving at random (the
// harness spreads them over the instances at random), a request is followed by a gap longer than
// statsInterval with probability exp(-r × statsInterval).
func flushesPerSec(rate float64, overQuota bool, quota float64, n float64, statsInterval time.Duration) float64 {
	if overQuota {
		rate = math.Min(rate, quota)
	}
	r := rate / n
	if r <= 0 || r*limiter.LeaseHorizon.Seconds() >= 1 {
		return 0
	}
	return n * r * math.Exp(-r*statsInterval.Seconds())
}

// floorPerSec is the least shared-state calls per second of one app spread evenly over n
// instances that any exact limiter makes: with a burst below n, at most burst instances hold a
// token at a time, so the requests of the others (the share 1 - burst/n) need the shared state.
func floorPerSec(rate, burst float64, overQuota bool, quota float64, n float64) float64 {
	if overQuota {
		rate = math.Min(rate, quota)
	}
	return rate * math.Max(0, 1-burst/n)
}

// capBoundPerSec is the least lease calls per second of one app spread evenly over n instances
// that any limiter keeping the design's fairness cap makes: every token an instance spends was
// leased, and no lease carries more than max(1, burst / (2n)) tokens (a one-token request's
// need, or the cap), whatever its horizon.
func capBoundPerSec(rate, burst float64, overQuota bool, quota float64, n float64) float64 {
	if overQuota {
		rate = math.Min(rate, quota)
	}
	return rate / math.Max(1, burst/(2*n))
}

// model explains the steady scripts/s as R + c × L + F: R = instances × 10 cluster reports/s
// (one script each, on the cluster's slot: one shard), L = the lease calls the lease sizes imply
// (leasesPerSec, from the rates actually driven), F = the statistics flushes of instances whose
// requests of an app are too sparse for a lease to carry them (flushesPerSec). Returns, refused
// leases and slot leases are in c, fitted by least squares. The model is then extrapolated to
// 1000 instances × 10 000 apps.
func model(rs []result) string {
	xs, ys := make([]float64, 0, len(rs)), make([]float64, 0, len(rs))
	R, F := make([]float64, 0, len(rs)), make([]float64, 0, len(rs))
	for _, r := range rs {
		T := r.elapsed.Seconds()
		var l, f float64
		for i, a := range r.appSpecs {
			rate := float64(r.sent[i]) / T
			l += leasesPerSec(rate, a.burst, a.overQuota, a.g, float64(r.instances))
			f += flushesPerSec(rate, a.overQuota, a.g, float64(r.instances), r.statsIntervalOrDefault())
		}
		R = append(R, float64(r.instances)*syncRate)
		F = append(F, f)
		xs = append(xs, l)
		ys = append(ys, r.perSec(r.steady.scripts)-R[len(R)-1]-f)
	}
	var sxy, sxx float64
	for i := range xs {
		sxy += xs[i] * ys[i]
		sxx += xs[i] * xs[i]
	}
	c := 1.0
	if sxx > 0 {
		c = sxy / sxx
	}
	var sb strings.Builder
	sb.WriteString("## Cost model\n\n")
	sb.WriteString("total scripts/s = R + c × L + F, with R = instances × 10 cluster reports/s (one script each, on the cluster's " +
		"slot: one shard; known from the code, not fitted), L = the lease calls the lease sizes imply: per app spread " +
		"over N instances at r = rate / N each (the quota for an app over it), N × r / max(1, min(r × 30 s, burst / 2N)) " +
		"(for an app at its quota, its share of the quota over max(0.3 s, N × 30 ms), at most 30 s), and F = the statistics " +
		"flushes: where r × 30 s < 1 every request leases its token and the lease cannot carry the request it admits, so " +
		"a request followed by no other on that instance within stats_interval S is flushed alone, N × r × exp(-r × S) " +
		"(not fitted). Statistics otherwise ride on the leases; returns, refused and slot leases are in c, fitted by least " +
		"squares to the runs above. Runs whose warm-up is shorter than S see no flushes yet.\n\n")
	fmt.Fprintf(&sb, "c = %.3f scripts per modelled lease\n\n", c)
	sb.WriteString("| instances | apps | measured scripts/s | model | R | L (modelled) | F (modelled) | leases/s measured |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range rs {
		fmt.Fprintf(&sb, "| %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", r.instances, r.apps, ys[i]+R[i]+F[i],
			R[i]+c*xs[i]+F[i], R[i], xs[i], F[i], r.perSec(r.steady.leases))
	}
	sb.WriteString("\nExtrapolated to 1000 instances × 10 000 apps (Zipf s = 1, every 5th app over its quota as above; the cluster " +
		"scripts on one shard, the lease and flush scripts spread evenly over 3 shards), for the harness's burst (-burst-seconds), 5 s and " +
		"for a burst of 60 s of the guaranteed rate:\n\n")
	sb.WriteString("The floor is what any limiter exact across the fleet must spend: an app whose burst B is below the " +
		"N instances can hold a token on at most B of them at a time, so at least the share 1 - B/N of its requests " +
		"need the shared state; as cluster-shard scripts/s, R + floor / 3.\n\n")
	sb.WriteString("The lease-cap bound is what any implementation of the design's lease rule must spend: a lease " +
		"carries at most max(1, burst / 2N) tokens (the fairness cap, or the one token a request needs), and every token " +
		"spent was leased, so an app spends at least its rate / max(1, burst / 2N) lease calls per second; as " +
		"cluster-shard scripts/s, R + bound / 3. Where it is above the target, no implementation of the cap meets it.\n\n")
	statsInterval := rs[len(rs)-1].statsIntervalOrDefault()
	fmt.Fprintf(&sb, "With stats_interval %v (the runs'), F = the flushes of the sparse (instance, app) pairs; "+
		"the last column is the cluster's shard with stats_interval %v instead.\n\n", statsInterval, longStatsInterval)
	sb.WriteString("| fleet req/s | burst | R | L | F | cluster-shard scripts/s | other shards scripts/s | target < 50 000 per shard | masters needed for it | lease-cap bound, cluster shard | floor, cluster shard | cluster shard, stats_interval " + longStatsInterval.String() + " |\n|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	burstSecs := rs[len(rs)-1].burstSeconds
	for _, total := range []float64{2e5, 2e6, 2e7} {
		for _, bs := range []float64{max(burstSecs, 1), 5, 60} {
			sp := spec{apps: 10000, rate: total, dist: "zipf", zipfS: 1, over: rs[len(rs)-1].over, burstSeconds: bs}
			var l, f, fLong, floor, bound float64
			for _, a := range apps(sp) {
				l += leasesPerSec(a.rate, a.burst, a.overQuota, a.g, 1000)
				f += flushesPerSec(a.rate, a.overQuota, a.g, 1000, statsInterval)
				fLong += flushesPerSec(a.rate, a.overQuota, a.g, 1000, longStatsInterval)
				floor += floorPerSec(a.rate, a.burst, a.overQuota, a.g, 1000)
				bound += capBoundPerSec(a.rate, a.burst, a.overQuota, a.g, 1000)
			}
			perShard := (c*l + f) / 3
			clusterShard := 1000*syncRate + perShard
			verdict := "met"
			if clusterShard >= 50000 {
				verdict = "**missed**"
			}
			// The cluster's shard carries R plus its part of the leases and flushes:
			// R + (c × L + F) / masters < 50 000.
			masters := math.Ceil((c*l + f) / (50000 - 1000*syncRate))
			fmt.Fprintf(&sb, "| %.0f | %.0f s | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %.0f | %.0f | %.0f | %.0f |\n", total, bs, 1000*syncRate, l, f,
				clusterShard, perShard, verdict, max(masters, 1), 1000*syncRate+bound/3, 1000*syncRate+floor/3,
				1000*syncRate+(c*l+fLong)/3)
		}
	}
	sb.WriteString("\n")
	return sb.String()
}
