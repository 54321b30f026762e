package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// machine is what the results were measured on.
type machine struct {
	cpus     int
	cpuModel string
	kernel   string
	goVer    string
	wrkVer   string
	redisVer string
	loadAvg  string // at start: the machine may be shared
	revision string // of this repository: what tierbucket code was measured
	elapsed  time.Duration
}

func describeMachine() machine {
	m := machine{cpus: runtime.NumCPU(), goVer: firstLine("go", "version"), wrkVer: firstLine("wrk", "-v"),
		redisVer: firstLine("redis-server", "--version"), kernel: firstLine("uname", "-sr"),
		revision: firstLine("git", "describe", "--always", "--dirty")}
	m.wrkVer, _, _ = strings.Cut(m.wrkVer, " Copyright")
	for _, f := range strings.Fields(m.redisVer) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			m.redisVer = "redis-server " + v
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.loadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return m
}

// firstLine runs a version command; wrk -v exits 1 but still prints its version.
func firstLine(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

// stats is median, min and max of a set of values.
type stats struct{ med, min, max float64 }

func summarize(xs []float64) stats {
	if len(xs) == 0 {
		return stats{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return stats{med: med, min: s[0], max: s[n-1]}
}

// report renders the markdown results: one row per scenario × variant.
func report(o options, m machine, samples []sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# tierbucket side-by-side load test, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Repository revision: %s.\n\n", m.revision)
	fmt.Fprintf(&b, "Machine: %d CPUs, %s; %s; %s; %s; load average at start %s.\n\n",
		m.cpus, m.cpuModel, m.kernel, m.goVer, m.redisVer, m.loadAvg)
	fmt.Fprintf(&b, "Load: `wrk -t%d -c%d -d%s` (%s), Host `%s`, against `respond \"ok\" 200` behind the limiter, "+
		"all on 127.0.0.1 on this one machine; %s unmeasured warm-up before each run; %d rounds, variants "+
		"alternated round-robin; a fresh Caddy and an empty Redis for every run. Total %s.\n\n",
		o.threads, o.conns, o.duration, m.wrkVer, appHost, o.warmup, o.rounds, m.elapsed)
	b.WriteString("Throughput is the ratio to plain Caddy measured in the same round: median [min–max] over rounds. " +
		"Latencies and the other columns are medians over rounds. Redis commands per 1000 requests: " +
		"INFO commandstats calls during the measured run ÷ wrk's requests; Redis counts the commands a Lua script runs " +
		"as calls too, so the next column gives the script calls (EVAL/EVALSHA: one round trip each) alone. Local hit ratio: " +
		"caddy_rate_limit_local_hits_total ÷ caddy_rate_limit_requests_total during the run.\n\n")

	for _, s := range o.scenarios {
		fmt.Fprintf(&b, "## %s: quota %d req/s (%s)\n\n", s.name, s.quota, s.desc)
		b.WriteString("| variant | throughput vs plain | req/s | admitted req/s | p50 | p99 | Redis cmds / 1000 req | of which scripts | local hit ratio |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
		base := map[int]float64{} // round → plain req/s
		for _, x := range samples {
			if x.scenario == s.name && x.variant == "plain" {
				base[x.round] = x.wrk.RPS()
			}
		}
		for _, v := range o.variants {
			var ratio, rps, adm, p50, p99, cmds, scripts, hit []float64
			for _, x := range samples {
				if x.scenario != s.name || x.variant != v.name {
					continue
				}
				if bse := base[x.round]; bse > 0 {
					ratio = append(ratio, x.wrk.RPS()/bse)
				}
				rps = append(rps, x.wrk.RPS())
				adm = append(adm, x.wrk.AdmittedRPS())
				p50 = append(p50, x.wrk.P50.Seconds()*1e3)
				p99 = append(p99, x.wrk.P99.Seconds()*1e3)
				if x.redisCmds >= 0 {
					cmds = append(cmds, float64(x.redisCmds)*1000/float64(x.wrk.Requests))
					scripts = append(scripts, float64(x.scriptCmd)*1000/float64(x.wrk.Requests))
				}
				if x.decisions > 0 {
					hit = append(hit, x.localHits/x.decisions)
				}
			}
			if len(rps) == 0 {
				continue
			}
			ratioText := "n/a (no plain run in the same rounds)"
			if len(ratio) > 0 {
				r := summarize(ratio)
				ratioText = fmt.Sprintf("%.2f [%.2f–%.2f]", r.med, r.min, r.max)
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.2f ms | %.2f ms | %s | %s | %s |\n",
				v.title, ratioText, summarize(rps).med, summarize(adm).med,
				summarize(p50).med, summarize(p99).med, optional(cmds, "%.2f", "no Redis"), optional(scripts, "%.2f", "–"), optional(hit, "%.4f", "n/a"))
		}
		b.WriteString("\n")
	}
	b.WriteString("Configurations (every limiter keys on `{http.request.host}`, one app, quota Q req/s with a burst of Q):\n\n")
	b.WriteString("- tierbucket: `app bench { guaranteed Q burst Q }`, `cost { operations http }` (cost 1 per GET), " +
		"defaults otherwise (token bucket, L3 leases, rate-limit headers on every response); the Redis variant adds `redis { address … }`.\n")
	b.WriteString("- mholt/caddy-ratelimit v0.1.0: `zone bench { key {http.request.host} window 1s events Q }` — sliding window, " +
		"in memory only (its `distributed` mode syncs through Caddy storage, not Redis); rejects with a Caddy error (429, empty body).\n")
	b.WriteString("- redis_rate: bench/redisrate, `redis_rate_bench { rate Q burst Q period 1s }` — GCRA in one Lua script " +
		"(EVALSHA) per request; fails open on Redis errors.\n")
	for _, n := range o.notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	return b.String()
}

func optional(xs []float64, format, none string) string {
	if len(xs) == 0 {
		return none
	}
	return fmt.Sprintf(format, summarize(xs).med)
}

// writeRaw keeps every sample, for anyone who wants to recompute the table.
func writeRaw(path string, samples []sample) error {
	var b strings.Builder
	b.WriteString("round\tscenario\tvariant\trequests\tduration_s\tnon2xx\tsocket_errors\tp50_ms\tp99_ms\tredis_cmds\tscript_cmds\tlocal_hits\tdecisions\n")
	for _, x := range samples {
		fmt.Fprintf(&b, "%d\t%s\t%s\t%d\t%.3f\t%d\t%d\t%.3f\t%.3f\t%d\t%d\t%.0f\t%.0f\n", x.round, x.scenario, x.variant,
			x.wrk.Requests, x.wrk.Duration.Seconds(), x.wrk.StatusErrors, x.wrk.SocketErrors,
			x.wrk.P50.Seconds()*1e3, x.wrk.P99.Seconds()*1e3, x.redisCmds, x.scriptCmd, x.localHits, x.decisions)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
