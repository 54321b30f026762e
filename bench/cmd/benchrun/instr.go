package main

// Instruction counts (-instructions): each Caddy runs under valgrind's callgrind, which counts
// the instructions the process executes. Unlike time, the count hardly depends on what else the
// shared machine is doing (about 1 %), so a difference of 2 % between two builds shows in one
// run where throughput needs dozens of rounds to show 5 %. It counts work, not time: a cache
// miss costs one instruction here and a hundred cycles on the CPU (docs/performance.md).

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// callgrindEnv is what a Caddy under callgrind needs: callgrind cannot follow the signals of
// Go's asynchronous preemption (it aborts on an assertion), so goroutines are preempted at
// function calls only. That changes when goroutines switch, not what they run.
var callgrindEnv = []string{"GODEBUG=asyncpreemptoff=1"}

// callgrindArgs runs bin under callgrind with counting off until measureInstructions turns it
// on, and its dumps in dir.
func callgrindArgs(dir, bin string) []string {
	return []string{
		"--tool=callgrind", "--instr-atstart=no",
		"--callgrind-out-file=" + filepath.Join(dir, "callgrind.out"), bin,
	}
}

// measureInstructions runs one variant under callgrind: warm-up (counted for nothing), then the
// instructions of the measured run, then those of o.idle without load (the limiter's background
// work: syncs, sweeps, statistics).
func measureInstructions(o options, v variant, s scenario, round int, rs *redisServer, wrk *wrkRunner, work string, logf *os.File) (sample, error) {
	smp := sample{round: round, scenario: s.name, variant: v.name, redisCmds: -1, scriptCmd: -1}
	c, dir, err := startVariant(o, v, s, round, rs, work, logf)
	if err != nil {
		return smp, err
	}
	defer c.proc.stop()
	pid := c.proc.cmd.Process.Pid
	if err := callgrindControl(pid, "-i", "on"); err != nil {
		return smp, err
	}
	load := loader(s, c, wrk, logf)
	if smp.warmBad, err = warmUp(o, load); err != nil {
		return smp, err
	}
	m0, err := c.metrics()
	if err != nil {
		return smp, err
	}
	smp.instr, err = countDuring(pid, dir, func() (err error) {
		smp.wrk, err = load(o.duration)
		return err
	})
	if err != nil {
		return smp, err
	}
	m1, err := c.metrics()
	if err != nil {
		return smp, err
	}
	smp.gcCycles = sumMetric(m1, "go_gc_duration_seconds_count") - sumMetric(m0, "go_gc_duration_seconds_count")
	smp.allocated = sumMetric(m1, "go_memstats_alloc_bytes_total") - sumMetric(m0, "go_memstats_alloc_bytes_total")
	smp.idleFor = o.idle
	smp.idleInstr, err = countDuring(pid, dir, func() error {
		time.Sleep(o.idle) // the idle time is what is measured
		return nil
	})
	if err != nil {
		return smp, err
	}
	if c.proc.exited() {
		return smp, fmt.Errorf("caddy exited during the run (see the log)")
	}
	return smp, nil
}

// countDuring zeroes callgrind's counters, runs f, dumps the counters and returns the
// instructions counted meanwhile.
func countDuring(pid int, dir string, f func() error) (int64, error) {
	if err := callgrindControl(pid, "-z"); err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	if err := callgrindControl(pid, "-d"); err != nil {
		return 0, err
	}
	return lastDumpInstructions(dir)
}

// callgrindControl sends a command to the callgrind run of pid (callgrind_control, which
// answers "OK" when it was done).
func callgrindControl(pid int, args ...string) error {
	out, err := exec.Command("callgrind_control", append(args, strconv.Itoa(pid))...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		return fmt.Errorf("callgrind_control %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// lastDumpInstructions reads the instruction count of the latest dump in dir
// (callgrind.out.<n>, the highest n).
func lastDumpInstructions(dir string) (int64, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "callgrind.out.*"))
	if err != nil {
		return 0, err
	}
	last, lastN := "", -1
	for _, p := range paths {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(p), "."))
		if err == nil && n > lastN {
			last, lastN = p, n
		}
	}
	if last == "" {
		return 0, fmt.Errorf("no callgrind dump in %s", dir)
	}
	f, err := os.Open(last)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseCallgrindSummary(f)
}

// parseCallgrindSummary reads the "summary: <Ir>" header line of a callgrind dump.
func parseCallgrindSummary(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "summary:"); ok {
			return strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("callgrind dump without a summary line")
}

// instructionsText is the per-run log line's instruction figures (empty when not counted).
func (x sample) instructionsText() string {
	if x.instr == 0 || x.wrk.Requests == 0 {
		return ""
	}
	return fmt.Sprintf("%.0f instructions/req, idle %.0f/s", x.perRequest(), x.idlePerSecond())
}

// perRequest is the instructions Caddy ran per request of the measured run.
func (x sample) perRequest() float64 { return float64(x.instr) / float64(x.wrk.Requests) }

// idlePerSecond is the instructions per second Caddy ran without load (its background work).
func (x sample) idlePerSecond() float64 {
	if x.idleFor <= 0 {
		return 0
	}
	return float64(x.idleInstr) / x.idleFor.Seconds()
}

// instrRow is one scenario × variant of an instructions run, over its valid rounds.
type instrRow struct {
	runs, valid                         int
	perReq, ratio, added, gc, ps, bytes []float64 // per request; ÷ plain's and − plain's in the same round; GC/1000 req; idle per second; bytes allocated per request
}

// aggregateInstructions groups the samples by scenario and variant, pairing each with plain
// Caddy's run of the same round. A round counts under the same rule as the load test's: in a
// within-quota scenario, only if every response was 2xx.
func aggregateInstructions(samples []sample, within map[string]bool) map[[2]string]*instrRow {
	ok := func(x sample) bool { return x.counts(within) }
	base := map[string]float64{}
	for _, x := range samples {
		if x.variant == "plain" && ok(x) {
			base[fmt.Sprint(x.scenario, "/", x.round)] = x.perRequest()
		}
	}
	rows := map[[2]string]*instrRow{}
	for _, x := range samples {
		k := [2]string{x.scenario, x.variant}
		if rows[k] == nil {
			rows[k] = &instrRow{}
		}
		r := rows[k]
		r.runs++
		if !ok(x) {
			continue
		}
		r.valid++
		pr := x.perRequest()
		r.perReq = append(r.perReq, pr)
		if bse := base[fmt.Sprint(x.scenario, "/", x.round)]; bse > 0 {
			r.ratio = append(r.ratio, pr/bse)
			r.added = append(r.added, pr-bse)
		}
		r.gc = append(r.gc, x.gcCycles*1000/float64(x.wrk.Requests))
		r.ps = append(r.ps, x.idlePerSecond())
		r.bytes = append(r.bytes, x.allocated/float64(x.wrk.Requests))
	}
	return rows
}

// instructionsReport renders an instructions run: one table per scenario and the targets.
func instructionsReport(o options, m machine, samples []sample) string {
	var b strings.Builder
	writeHeading(&b, "instructions per request", m)
	fmt.Fprintf(&b, "Each Caddy ran under valgrind's callgrind (`GODEBUG=asyncpreemptoff=1`), which counts the "+
		"instructions the whole process executes, garbage collector and background goroutines included; "+
		"load `wrk -t%d -c%d -d%s`, Host `%s`, after %s of uncounted warm-up; then %s without load, counted apart (idle "+
		"instructions/s: the limiter's background work). %d rounds, variants alternated; a fresh Caddy and an empty Redis "+
		"for every run. Total %s.\n\n", o.threads, o.conns, o.duration, appHost, o.warmup, o.idle, o.rounds, m.elapsed)
	b.WriteString("Instructions per request: the measured run's count ÷ wrk's requests (median [min–max] over rounds); " +
		"vs plain: ÷ plain Caddy's figure of the same round; added: − plain Caddy's figure of the same round. " +
		"Under callgrind Caddy serves about 30 × fewer requests per second than natively, so a limiter's background " +
		"work weighs about 30 × more per request here than at full speed. Bytes allocated: Caddy's " +
		"go_memstats_alloc_bytes_total during the run ÷ requests; with the collector on, its work per request is " +
		"roughly these bytes × the live heap ÷ the heap target, which a limiter holding a large heap lowers for the " +
		"whole process.\n\n")
	within := map[string]bool{}
	for _, s := range o.scenarios {
		within[s.name] = s.withinQuota
	}
	rows := aggregateInstructions(samples, within)
	for _, s := range o.scenarios {
		fmt.Fprintf(&b, "## %s: quota %d req/s (%s)\n\n", s.name, s.quota, s.desc)
		b.WriteString("| variant | valid rounds | instructions / req | vs plain | added / req | bytes allocated / req | GC cycles / 1000 req | idle instructions / s |\n")
		b.WriteString("|---|---:|---:|---|---:|---:|---:|---:|\n")
		for _, v := range o.variants {
			r := rows[[2]string{s.name, v.name}]
			if r == nil {
				continue
			}
			st := summarize(r.perReq)
			ratioText := "n/a"
			if len(r.ratio) > 0 {
				rt := summarize(r.ratio)
				ratioText = fmt.Sprintf("%.3f [%.3f–%.3f]", rt.med, rt.min, rt.max)
			}
			fmt.Fprintf(&b, "| %s | %d/%d | %.0f [%.0f–%.0f] | %s | %s | %s | %s | %s |\n", v.title, r.valid, r.runs,
				st.med, st.min, st.max, ratioText, optional(r.added, "%+.0f", "–"), optional(r.bytes, "%.0f", "–"),
				optional(r.gc, "%.3f", "–"), optional(r.ps, "%.3g", "–"))
		}
		b.WriteString("\n")
		b.WriteString(instructionTargets(rows, s.name))
	}
	for _, n := range o.notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	return b.String()
}

// instructionTargets checks the throughput targets as work (docs/performance.md): tierbucket
// with the Redis store within 3 % of plain Caddy's instructions per request, and not above
// mholt/caddy-ratelimit's.
func instructionTargets(rows map[[2]string]*instrRow, scenario string) string {
	tb := rows[[2]string{scenario, "tierbucket-redis"}]
	if tb == nil || len(tb.ratio) == 0 {
		return ""
	}
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	var b strings.Builder
	r := summarize(tb.ratio).med
	fmt.Fprintf(&b, "Targets as work, scenario %s, tierbucket with the Redis store (medians):\n\n", scenario)
	fmt.Fprintf(&b, "- %s — instructions per request ≤ 1.03 × plain Caddy's: %.3f\n", yes(r <= 1.03), r)
	if mh := rows[[2]string{scenario, "mholt"}]; mh != nil && len(mh.ratio) > 0 {
		mr := summarize(mh.ratio).med
		fmt.Fprintf(&b, "- %s — not above mholt/caddy-ratelimit: %.3f vs %.3f × plain Caddy's\n", yes(r <= mr), r, mr)
	}
	b.WriteString("\n")
	return b.String()
}
