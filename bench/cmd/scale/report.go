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
			"(guaranteed = 2 × offered); burst = max(guaranteed, 10). Over quota: admitted ÷ (burst + guaranteed × T) " +
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

// model fits total steady scripts/s = a × (instances × 10 reports/s) + b × (active instance-app
// pairs per sync interval, per s) + c × leases/s by least squares, and extrapolates per shard.
func model(rs []result) string {
	var X [][3]float64
	var y []float64
	for _, r := range rs {
		X = append(X, [3]float64{float64(r.instances) * syncRate, r.activePairsPerSec, r.perSec(r.steady.leases)})
		y = append(y, r.perSec(r.steady.scripts))
	}
	coef, ok := leastSquares(X, y)
	var b strings.Builder
	b.WriteString("## Cost model\n\n")
	b.WriteString("Fitted by least squares to the runs above: total scripts/s = a × R + b × P + c × L, with R = instances × " +
		"10 reports/s (one cluster script per report, on the cluster's slot: one shard), P = instance-app pairs with at " +
		"least one request in a 100 ms sync interval, per second (from the offered rates: Σ N·10·(1 − e^(−rate/(N·10)))), " +
		"L = leases/s (measured).\n\n")
	if !ok {
		b.WriteString("(singular fit: not enough distinct runs)\n")
		return b.String()
	}
	fmt.Fprintf(&b, "a = %.3f, b = %.3f, c = %.3f\n\n", coef[0], coef[1], coef[2])
	b.WriteString("| instances | apps | measured scripts/s | model | R | P | L |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range rs {
		m := coef[0]*X[i][0] + coef[1]*X[i][1] + coef[2]*X[i][2]
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.0f | %.0f | %.0f | %.1f |\n", r.instances, r.apps, y[i], m, X[i][0], X[i][1], X[i][2])
	}
	// Extrapolation: 1000 instances × 10 000 apps, the same Zipf shape, at several fleet rates;
	// leases/s scaled from the largest run's leases per request.
	last := rs[len(rs)-1]
	lpr := float64(last.steady.leases) / math.Max(float64(last.steady.sent), 1)
	b.WriteString("\nExtrapolated to 1000 instances × 10 000 apps (Zipf s = 1; leases per request as in the last run above; " +
		"the cluster scripts all on one shard, the per-app scripts spread evenly over 3 shards):\n\n")
	b.WriteString("| fleet req/s | P | L | cluster-shard scripts/s | other shards scripts/s | target < 50 000 per shard |\n|---:|---:|---:|---:|---:|---|\n")
	for _, total := range []float64{2e5, 2e6, 2e7} {
		r := rates(10000, total, "zipf", 1)
		var p float64
		for _, x := range r {
			p += 1000 * syncRate * (1 - math.Exp(-x/(1000*syncRate)))
		}
		l := lpr * total
		perApp := (coef[1]*p + coef[2]*l) / 3
		clusterShard := coef[0]*1000*syncRate + perApp
		verdict := "met"
		if clusterShard >= 50000 {
			verdict = "**missed**"
		}
		fmt.Fprintf(&b, "| %.0f | %.0f | %.0f | %.0f | %.0f | %s |\n", total, p, l, clusterShard, perApp, verdict)
	}
	b.WriteString("\n")
	return b.String()
}

// leastSquares solves the 3×3 normal equations (Gaussian elimination with partial pivoting).
func leastSquares(X [][3]float64, y []float64) ([3]float64, bool) {
	var A [3][4]float64
	for k := range X {
		for i := range 3 {
			for j := range 3 {
				A[i][j] += X[k][i] * X[k][j]
			}
			A[i][3] += X[k][i] * y[k]
		}
	}
	for c := range 3 {
		p := c
		for r := c + 1; r < 3; r++ {
			if math.Abs(A[r][c]) > math.Abs(A[p][c]) {
				p = r
			}
		}
		if math.Abs(A[p][c]) < 1e-12 {
			return [3]float64{}, false
		}
		A[c], A[p] = A[p], A[c]
		for r := range 3 {
			if r == c {
				continue
			}
			f := A[r][c] / A[c][c]
			for k := c; k < 4; k++ {
				A[r][k] -= f * A[c][k]
			}
		}
	}
	return [3]float64{A[0][3] / A[0][0], A[1][3] / A[1][1], A[2][3] / A[2][2]}, true
}
