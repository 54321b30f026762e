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
	gcEnv    string // GOGC and GOMEMLIMIT, which every Caddy inherits from the environment
	elapsed  time.Duration
}

// gcSettings describes the garbage collector settings the Caddy processes inherit.
func gcSettings() string {
	var set []string
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			set = append(set, k+"="+v)
		}
	}
	if len(set) == 0 {
		return "Go's defaults (GOGC and GOMEMLIMIT unset)"
	}
	return strings.Join(set, ", ")
}

func describeMachine() machine {
	m := machine{
		cpus: runtime.NumCPU(), goVer: firstLine("go", "version"), wrkVer: firstLine("wrk", "-v"),
		redisVer: firstLine("redis-server", "--version"), kernel: firstLine("uname", "-sr"),
		revision: firstLine("git", "describe", "--always", "--dirty"), gcEnv: gcSettings(),
	}
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

// row is one scenario × variant, aggregated over the rounds.
type row struct {
	runs, valid                                   int       // rounds measured; rounds where every response was 2xx (within-quota scenarios)
	p99Added                                      []float64 // ms: p99 minus plain Caddy's p99 in the same round
	ratio, rps, adm, p50, p99, cmds, scripts, hit []float64
	caddyCPU, redisCPU                            []float64       // µs per request
	gc, rssMB                                     []float64       // Caddy's GC cycles per 1000 requests; peak RSS
	roundRPS                                      map[int]float64 // valid rounds: req/s, for same-round comparisons between variants
}

// counts reports whether a sample's round counts: in a within-quota scenario, only if every
// response of its warm-up and measured run was 2xx.
func (x sample) counts(within map[string]bool) bool {
	return !within[x.scenario] || (x.wrk.StatusErrors == 0 && x.wrk.SocketErrors == 0 && x.warmBad == 0)
}

// aggregate groups the samples by scenario and variant; throughput ratios pair each sample with
// plain Caddy's run of the same round and scenario.
//
// In a within-quota scenario a round counts for a variant only if every response of its warm-up
// and measured runs was 2xx (and plain's were too): a limiter that rejects an app within its
// quota, even once at a cold start, does not get a throughput figure for that round.
func aggregate(samples []sample, within map[string]bool) map[[2]string]*row {
	ok := func(x sample) bool { return x.counts(within) }
	base := map[string]float64{} // scenario/round → plain req/s
	baseP99 := map[string]float64{}
	for _, x := range samples {
		if x.variant == "plain" && ok(x) {
			base[fmt.Sprint(x.scenario, "/", x.round)] = x.wrk.RPS()
			baseP99[fmt.Sprint(x.scenario, "/", x.round)] = x.wrk.P99.Seconds() * 1e3
		}
	}
	rows := map[[2]string]*row{}
	for _, x := range samples {
		k := [2]string{x.scenario, x.variant}
		r := rows[k]
		if r == nil {
			r = &row{}
			rows[k] = r
		}
		r.runs++
		if !ok(x) {
			continue // not a valid round: nothing of it counts
		}
		r.valid++
		if bse := base[fmt.Sprint(x.scenario, "/", x.round)]; bse > 0 {
			r.ratio = append(r.ratio, x.wrk.RPS()/bse)
			r.p99Added = append(r.p99Added, x.wrk.P99.Seconds()*1e3-baseP99[fmt.Sprint(x.scenario, "/", x.round)])
		}
		r.rps = append(r.rps, x.wrk.RPS())
		if r.roundRPS == nil {
			r.roundRPS = map[int]float64{}
		}
		r.roundRPS[x.round] = x.wrk.RPS()
		r.adm = append(r.adm, x.wrk.AdmittedRPS())
		r.p50 = append(r.p50, x.wrk.P50.Seconds()*1e3)
		r.p99 = append(r.p99, x.wrk.P99.Seconds()*1e3)
		r.caddyCPU = append(r.caddyCPU, float64(x.caddyCPU.Microseconds())/float64(x.wrk.Requests))
		r.gc = append(r.gc, x.gcCycles*1000/float64(x.wrk.Requests))
		r.rssMB = append(r.rssMB, float64(x.peakRSS)/(1<<20))
		if x.redisCmds >= 0 {
			r.redisCPU = append(r.redisCPU, float64(x.redisCPU.Microseconds())/float64(x.wrk.Requests))
			r.cmds = append(r.cmds, float64(x.redisCmds)*1000/float64(x.wrk.Requests))
			r.scripts = append(r.scripts, float64(x.scriptCmd)*1000/float64(x.wrk.Requests))
		}
		if x.decisions > 0 {
			r.hit = append(r.hit, x.localHits/x.decisions)
		}
	}
	return rows
}

// writeHeading writes a results file's title, the revision measured and the machine.
func writeHeading(b *strings.Builder, title string, m machine) {
	fmt.Fprintf(b, "# tierbucket %s, %s\n\n", title, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(b, "Repository revision: %s.\n\n", m.revision)
	fmt.Fprintf(b, "Machine: %d CPUs, %s; %s; %s; %s; load average at start %s. Every Caddy's garbage collector: %s.\n\n",
		m.cpus, m.cpuModel, m.kernel, m.goVer, m.redisVer, m.loadAvg, m.gcEnv)
}

// report renders the markdown results: one row per scenario × variant.
func report(o options, m machine, samples []sample) string {
	var b strings.Builder
	writeHeading(&b, "side-by-side load test", m)
	fmt.Fprintf(&b, "Load: `wrk -t%d -c%d -d%s` (%s), Host `%s`, against `respond \"ok\" 200` behind the limiter (or `reverse_proxy` to a plain Caddy answering so, in scenario proxied), "+
		"all on 127.0.0.1 on this one machine; %s unmeasured warm-up before each run; %d rounds, variants "+
		"alternated round-robin; a fresh Caddy and an empty Redis for every run. Total %s.\n\n",
		o.threads, o.conns, o.duration, m.wrkVer, appHost, o.warmup, o.rounds, m.elapsed)
	b.WriteString("Throughput is the ratio to plain Caddy measured in the same round: median [min–max] over rounds. " +
		"Latencies and the other columns are medians over rounds. Redis commands per 1000 requests: " +
		"INFO commandstats calls during the measured run ÷ wrk's requests; Redis counts the commands a Lua script runs " +
		"as calls too, so the next column gives the script calls (EVAL/EVALSHA: one round trip each) alone. Local hit ratio: " +
		"caddy_rate_limit_local_hits_total ÷ caddy_rate_limit_requests_total during the run. CPU µs/req: CPU time " +
		"(user + system, /proc/<pid>/stat) the Caddy process and redis-server used during the run ÷ requests; it depends " +
		"much less on what else the shared machine is doing than throughput does. GC cycles / 1000 req: Caddy's " +
		"go_gc_duration_seconds_count during the run ÷ requests (a limiter that keeps a large heap makes the collector run " +
		"less often for the whole process); peak RSS: VmHWM of the Caddy process after the run.\n\n")

	within := map[string]bool{}
	for _, s := range o.scenarios {
		within[s.name] = s.withinQuota
	}
	rows := aggregate(samples, within)
	for _, s := range o.scenarios {
		fmt.Fprintf(&b, "## %s: quota %d req/s (%s)\n\n", s.name, s.quota, s.desc)
		if s.withinQuota {
			b.WriteString("Every request is within the app's quota: a variant's round counts only if every response of " +
				"its warm-up (cold start) and measured run was 2xx; valid rounds are shown as valid/run.\n\n")
		}
		b.WriteString("| variant | valid rounds | throughput vs plain | added p99 (vs plain, same round) | req/s | admitted req/s | p50 | p99 | Caddy CPU µs/req | Caddy GC cycles / 1000 req | Caddy peak RSS | Redis CPU µs/req | Redis cmds / 1000 req | of which scripts | local hit ratio |\n")
		b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, v := range o.variants {
			r := rows[[2]string{s.name, v.name}]
			if r == nil {
				continue
			}
			ratioText := "n/a (no plain run in the same rounds)"
			if len(r.ratio) > 0 {
				st := summarize(r.ratio)
				ratioText = fmt.Sprintf("%.2f [%.2f–%.2f]", st.med, st.min, st.max)
			}
			fmt.Fprintf(&b, "| %s | %d/%d | %s | %s | %.0f | %.0f | %.2f ms | %.2f ms | %.1f | %s | %s | %s | %s | %s | %s |\n",
				v.title, r.valid, r.runs, ratioText, optional(r.p99Added, "%+.2f ms", "–"), summarize(r.rps).med, summarize(r.adm).med,
				summarize(r.p50).med, summarize(r.p99).med, summarize(r.caddyCPU).med,
				optional(r.gc, "%.3f", "–"), optional(r.rssMB, "%.0f MB", "–"),
				optional(r.redisCPU, "%.1f", "–"), optional(r.cmds, "%.2f", "no Redis"),
				optional(r.scripts, "%.2f", "–"), optional(r.hit, "%.4f", "n/a"))
		}
		b.WriteString("\n")
	}
	b.WriteString(targets(rows, "unlimited"))
	b.WriteString(targets(rows, "proxied"))
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

// optionalMed is the median of xs, 0 when there are none.
func optionalMed(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return summarize(xs).med
}

// writeRaw keeps every sample, for anyone who wants to recompute the table.
func writeRaw(path string, samples []sample) error {
	var b strings.Builder
	b.WriteString("round\tscenario\tvariant\trequests\tduration_s\tnon2xx\tsocket_errors\tp50_ms\tp99_ms\tredis_cmds\tscript_cmds\tlocal_hits\tdecisions\tcaddy_cpu_ms\tredis_cpu_ms\twarmup_bad\tgc_cycles\tpeak_rss_mb\n")
	for _, x := range samples {
		fmt.Fprintf(&b, "%d\t%s\t%s\t%d\t%.3f\t%d\t%d\t%.3f\t%.3f\t%d\t%d\t%.0f\t%.0f\t%d\t%d\t%d\t%.0f\t%.1f\n", x.round, x.scenario, x.variant,
			x.wrk.Requests, x.wrk.Duration.Seconds(), x.wrk.StatusErrors, x.wrk.SocketErrors,
			x.wrk.P50.Seconds()*1e3, x.wrk.P99.Seconds()*1e3, x.redisCmds, x.scriptCmd, x.localHits, x.decisions,
			x.caddyCPU.Milliseconds(), x.redisCPU.Milliseconds(), x.warmBad, x.gcCycles, float64(x.peakRSS)/(1<<20))
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// targets checks the load-test targets (docs/performance.md) against a scenario of steady load
// within the quota ("unlimited": Caddy answers; "proxied": Caddy passes on), for tierbucket with
// the Redis store.
func targets(rows map[[2]string]*row, scenario string) string {
	tb := rows[[2]string{scenario, "tierbucket-redis"}]
	if tb == nil || len(tb.ratio) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Targets (docs/performance.md), scenario %s, tierbucket with the Redis store (medians):\n\n", scenario)
	check := func(ok bool, format string, args ...any) {
		mark := "no"
		if ok {
			mark = "yes"
		}
		fmt.Fprintf(&b, "- %s — "+format+"\n", append([]any{mark}, args...)...)
	}
	ratio := summarize(tb.ratio).med
	check(ratio >= 0.97, "≥ 97%% of plain Caddy's throughput (median of per-round ratios over %d valid rounds of %d): %.2f",
		len(tb.ratio), tb.runs, ratio)
	check(tb.valid == tb.runs, "every response 2xx in every round, cold starts included: %d/%d rounds", tb.valid, tb.runs)
	if len(tb.p99Added) > 0 {
		// At wrk's saturation the p99 is queueing in front of a CPU-bound Caddy: it moves by
		// milliseconds for every variant, so the target is judged by scenario latency.
		fmt.Fprintf(&b, "- (not the target) added p99 at saturation, which is queueing (median over rounds of p99 − "+
			"plain's p99): %+.0f µs; the target is judged at a fixed rate: SCENARIOS=latency\n",
			summarize(tb.p99Added).med*1000)
	}
	if plain := rows[[2]string{scenario, "plain"}]; plain != nil {
		cost := (summarize(tb.caddyCPU).med + summarize(tb.redisCPU).med) / summarize(plain.caddyCPU).med
		check(cost <= 1/0.97, "the same target as CPU cost (less noisy): CPU per request, Caddy + Redis, "+
			"≤ 1.03 × plain Caddy's: %.2f", cost)
	}
	for _, peer := range []string{"mholt", "redis_rate"} {
		p := rows[[2]string{scenario, peer}]
		if p == nil || len(p.ratio) == 0 {
			continue
		}
		// Same-round ratios cancel most of what the shared machine does to both.
		var paired []float64
		for round, rps := range tb.roundRPS {
			if prps := p.roundRPS[round]; prps > 0 {
				paired = append(paired, rps/prps)
			}
		}
		if len(paired) == 0 {
			continue // no round where both were valid
		}
		pr := summarize(p.ratio).med
		st := summarize(paired)
		check(st.med >= 1, "not behind %s: tierbucket ÷ %s in the same round %.3f [%.2f–%.2f] over %d rounds "+
			"(of plain Caddy: %.2f vs %.2f); CPU per request (Caddy + Redis) %.1f vs %.1f µs",
			peer, peer, st.med, st.min, st.max, len(paired), ratio, pr,
			summarize(tb.caddyCPU).med+optionalMed(tb.redisCPU), summarize(p.caddyCPU).med+optionalMed(p.redisCPU))
	}
	if len(tb.scripts) > 0 {
		sc := summarize(tb.scripts).med
		check(sc <= 5, "≤ 5 Redis calls (script round trips) per 1000 requests: %.2f (all commands incl. in-script: %.2f)",
			sc, summarize(tb.cmds).med)
	}
	if len(tb.hit) > 0 {
		h := summarize(tb.hit).med
		check(h >= 0.99, "≥ 99%% local hits: %.2f%%", h*100)
	}
	if lat := rows[[2]string{"latency", "tierbucket-redis"}]; scenario == "unlimited" && lat != nil && len(lat.p99Added) > 0 {
		p := summarize(lat.p99Added).med
		check(p < 0.1, "added p99 latency < 100 µs at a fixed rate, away from saturation (scenario latency, "+
			"median over rounds of p99 − plain's p99): %+.0f µs", p*1000)
	}
	b.WriteString("\n")
	return b.String()
}
