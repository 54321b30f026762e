package main

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

const syncRate = 10.0 // reports per instance per second (sync_interval 100 ms)

// reportWindow (s) is how long an app stays in an instance's reports after its last request in
// the code measured here: every report carries the apps of the batches acknowledged in the last
// 10 s (limiter's ackWindow) besides those with new traffic. The model's P counts those pairs.
const reportWindow = 10.0

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
	var parts []string
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
		var rcpu []string
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

// model fits total steady scripts/s = R + b × P + c × L: R = instances × 10 reports/s, one
// cluster script each (known from the code: a report is one pipeline with the cluster script
// once); P = per-app report entries per second (pairs seen in the last reportWindow × 10/s);
// L = leases/s (measured). b and c are fitted by
// least squares (non-negative), then the model is extrapolated per shard.
func model(rs []result) string {
	var X [][2]float64
	var y, R []float64
	for _, r := range rs {
		var p float64
		T := r.elapsed.Seconds()
		for i := range r.appSpecs {
			per := float64(r.sent[i]) / T / float64(r.instances) * reportWindow
			p += float64(r.instances) * syncRate * (1 - math.Exp(-per))
		}
		R = append(R, float64(r.instances)*syncRate)
		X = append(X, [2]float64{p, r.perSec(r.steady.leases)})
		y = append(y, r.perSec(r.steady.scripts)-R[len(R)-1])
	}
	b, c := fit2(X, y)
	var sb strings.Builder
	sb.WriteString("## Cost model\n\n")
	sb.WriteString("total scripts/s = R + b × P + c × L, with R = instances × 10 reports/s (one cluster script per report, " +
		"on the cluster's slot: one shard; known from the code, not fitted), P = per-app entries the reports carry per " +
		"second: instance-app pairs with a request in the last 10 s (an app stays in an instance's reports for 10 s after " +
		"its last batch) × 10 reports/s, from the per-app rates actually driven: Σ N·10·(1 − e^(−rate·10 s/N)), " +
		"L = leases/s (measured). b and c fitted by non-negative least squares to the runs above.\n\n")
	fmt.Fprintf(&sb, "b = %.3f scripts per report entry, c = %.3f scripts per lease\n\n", b, c)
	sb.WriteString("| instances | apps | measured scripts/s | model | R | P | L |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range rs {
		m := R[i] + b*X[i][0] + c*X[i][1]
		fmt.Fprintf(&sb, "| %d | %d | %.0f | %.0f | %.0f | %.0f | %.1f |\n", r.instances, r.apps, y[i]+R[i], m, R[i], X[i][0], X[i][1])
	}
	last := rs[len(rs)-1]
	lpr := float64(last.steady.leases) / math.Max(float64(last.steady.sent), 1)
	sb.WriteString("\nExtrapolated to 1000 instances × 10 000 apps (Zipf s = 1; leases per request as in the last run above; " +
		"the cluster scripts all on one shard, the per-app scripts spread evenly over 3 shards):\n\n")
	sb.WriteString("| fleet req/s | R | P | L | cluster-shard scripts/s | other shards scripts/s | target < 50 000 per shard |\n|---:|---:|---:|---:|---:|---:|---|\n")
	for _, total := range []float64{2e5, 2e6, 2e7} {
		r := rates(10000, total, "zipf", 1)
		var p float64
		for _, x := range r {
			p += 1000 * syncRate * (1 - math.Exp(-x*reportWindow/1000))
		}
		l := lpr * total
		perApp := (b*p + c*l) / 3
		clusterShard := 1000*syncRate + perApp
		verdict := "met"
		if clusterShard >= 50000 {
			verdict = "**missed**"
		}
		fmt.Fprintf(&sb, "| %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s |\n", total, 1000*syncRate, p, l, clusterShard, perApp, verdict)
	}
	sb.WriteString("\n")
	return sb.String()
}

// fit2 fits y = b·x0 + c·x1 by least squares with b, c ≥ 0 (a negative one is set to 0 and the
// other refitted alone).
func fit2(X [][2]float64, y []float64) (b, c float64) {
	var s00, s01, s11, s0y, s1y float64
	for k := range X {
		s00 += X[k][0] * X[k][0]
		s01 += X[k][0] * X[k][1]
		s11 += X[k][1] * X[k][1]
		s0y += X[k][0] * y[k]
		s1y += X[k][1] * y[k]
	}
	if det := s00*s11 - s01*s01; math.Abs(det) > 1e-9 {
		b, c = (s0y*s11-s1y*s01)/det, (s1y*s00-s0y*s01)/det
	}
	if b < 0 || c < 0 || (b == 0 && c == 0) {
		b1, c1 := 0.0, 0.0
		if s00 > 0 {
			b1 = max(s0y/s00, 0)
		}
		if s11 > 0 {
			c1 = max(s1y/s11, 0)
		}
		// keep the single-variable fit with the smaller residual
		res := func(b, c float64) (e float64) {
			for k := range X {
				d := y[k] - b*X[k][0] - c*X[k][1]
				e += d * d
			}
			return e
		}
		if res(b1, 0) <= res(0, c1) {
			b, c = b1, 0
		} else {
			b, c = 0, c1
		}
	}
	return b, c
}
