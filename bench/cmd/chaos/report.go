package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// failOpenBound is how soon after a fault heals no gateway is in fail_open any more: every
// transient fault ends in recovery within 2 s (docs/operations.md, "Fault matrix").
const failOpenBound = 2 * time.Second

// checkAll evaluates every invariant after the run.
func checkAll(c *chaos, top *topology, apps []*appLoad, be *backend, rs []*ran, smp *sampler, ov *overrides, lw *levelWatch, end time.Duration) ([]line, string) {
	var lines []line
	var details strings.Builder
	ws := faultWindows(rs)

	var bad5xx, failed int64
	var firstBad string
	for _, a := range apps {
		bad5xx += a.tally.bad5xx.Load()
		failed += a.tally.failed.Load()
		if firstBad == "" {
			firstBad = a.tally.firstBad
		}
	}
	l := line{
		name: "5xx answers and failed requests (gateways up)", worst: fmt.Sprintf("%d × 5xx, %d failed", bad5xx, failed),
		bound: "0", ok: bad5xx == 0 && failed == 0,
	}
	if firstBad != "" {
		l.worst += "; first: " + trim(firstBad, 160)
	}
	lines = append(lines, l)

	var under int64
	var evs []event
	for _, a := range apps {
		if a.kind == "under" {
			a.tally.mu.Lock()
			under += int64(len(a.tally.non2xx))
			for _, e := range a.tally.non2xx {
				evs = append(evs, event{at: e.at, status: e.status, body: a.id + " on " + e.body})
			}
			a.tally.mu.Unlock()
		}
	}
	l = line{name: "non-2xx answers of the apps far under their quota", worst: fmt.Sprint(under), bound: "0 (every fault of the schedule)", ok: under == 0}
	if len(evs) > 0 {
		slices.SortFunc(evs, func(a, b event) int { return int(a.at - b.at) })
		l.worst += fmt.Sprintf("; first at %v: %d %s", evs[0].at.Round(time.Millisecond), evs[0].status, trim(evs[0].body, 160))
	}
	lines = append(lines, l)

	for _, a := range apps {
		if a.kind == "over" {
			a.tally.mu.Lock()
			lines = append(lines, quotaLine(a.tally.perSec, end, hotG, hotBurst, ws))
			a.tally.mu.Unlock()
		}
	}
	lines = append(lines, inFlightLine(be, ws))
	lines = append(lines, recoveryLines(rs)...)
	lines = append(lines, lw.line())
	lines = append(lines, statsLine(top, apps, rs))
	lines = append(lines, logLines(c, rs)...)
	smp.mu.Lock()
	eps := episodeWindows(rs)
	lines = append(lines, slopeLines(smp.series, func(at time.Duration) bool { return !inWindows(eps, at) })...)
	smp.mu.Unlock()
	ov.verifyLast()
	ov.mu.Lock()
	lines = append(lines, overrideLine(ov.changes, rs))
	lines = append(lines, revertLine(ov.reverted, rs))
	ov.mu.Unlock()
	lines = append(lines, injectLine(rs))

	fmt.Fprintf(&details, "\n| app | kind | offered/s | 2xx | 429 | other 4xx | 5xx | failed | stopped gateway |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range apps {
		t := a.tally
		fmt.Fprintf(&details, "| %s | %s | %.0f | %d | %d | %d | %d | %d | %d |\n", a.id, a.kind, a.rate,
			t.ok.Load(), t.limited.Load(), t.other4xx.Load(), t.bad5xx.Load(), t.failed.Load(), t.excused.Load())
	}
	for _, a := range apps {
		if a.kind != "over" {
			continue
		}
		a.tally.mu.Lock()
		fmt.Fprintf(&details, "\n%s admitted per 10 s:", a.id)
		for s := int64(0); s < int64(end/time.Second); s += 10 {
			var n int64
			for i := s; i < s+10; i++ {
				n += a.tally.perSec[i]
			}
			fmt.Fprintf(&details, " %d", n)
		}
		details.WriteString("\n")
		a.tally.mu.Unlock()
	}
	return lines, details.String()
}

func trim(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func recoveryLines(rs []*ran) []line {
	okOpen := true
	var worstOpen, worstNormal time.Duration
	var epOpen, epNormal, badOpen, badNormal string
	for _, r := range rs {
		lo := r.leftFailOpen
		if lo < 0 {
			lo = r.recovery
		}
		if lo > worstOpen {
			worstOpen, epOpen = lo, r.String()
		}
		if r.leftFailOpen < 0 || lo > failOpenBound {
			okOpen = false
			if badOpen == "" {
				badOpen = fmt.Sprintf("; beyond: %v after %s", lo.Round(10*time.Millisecond), r.episode)
			}
		}
		if r.recovery > worstNormal {
			worstNormal, epNormal = r.recovery, r.String()
		}
		if !r.recovered && badNormal == "" {
			badNormal = fmt.Sprintf("; not within 60 s: %s", r.episode)
		}
	}
	return []line{
		{
			name:  "recovery: no gateway in fail_open after the fault healed",
			worst: fmt.Sprintf("%v (%s)%s", worstOpen.Round(10*time.Millisecond), trim(epOpen, 120), trim(badOpen, 200)),
			bound: fmt.Sprintf("≤ %v", failOpenBound), ok: okOpen,
		},
		{
			// The latency levels follow the average of the Store's latency, which a busy host
			// lifts past 10 ms without a fault: the levelWatch line checks that they follow it.
			name:  "every gateway at level 0 after the fault healed (for information)",
			worst: fmt.Sprintf("%v (%s)%s", worstNormal.Round(10*time.Millisecond), trim(epNormal, 120), trim(badNormal, 200)),
			bound: "-", ok: true,
		},
	}
}

// statsLine compares Redis's per-app request counts with the 2xx answers the clients saw,
// waiting up to a minute for the last reports. A SIGKILLed gateway may take the statistics of
// its last moments with it (bounded by the 2xx answers it gave in the 2 s before the kill);
// requests that failed on a stopped gateway may have been admitted (and counted) or not.
func statsLine(top *topology, apps []*appLoad, rs []*ran) line {
	var clients, excused, killLoss int64
	for _, a := range apps {
		clients += a.tally.ok.Load()
		excused += a.tally.excused.Load() + a.tally.failed.Load()
	}
	for _, r := range rs {
		killLoss += r.killLoss
	}
	var rc redis.UniversalClient
	if top.mode == "cluster" {
		addrs := make([]string, 0, len(top.data))
		for _, n := range top.data {
			addrs = append(addrs, n.proxy.Addr())
		}
		rc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	} else {
		addrs := make([]string, 0, len(top.sentinels))
		for _, s := range top.sentinels {
			addrs = append(addrs, s.addr())
		}
		rc = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: addrs})
	}
	defer rc.Close()
	var got int64
	last := int64(-1)
	var readErr error
	began, stableSince := time.Now(), time.Now()
	for {
		got, readErr = 0, nil
		for _, a := range apps {
			n, err := rc.HGet(context.Background(), "chaos:{default/"+a.id+"}:l2", "requests").Int64()
			if err != nil && err != redis.Nil {
				readErr = err
			}
			got += n
		}
		if got != last {
			last, stableSince = got, time.Now()
		}
		within := readErr == nil && got >= clients-killLoss && got <= clients+excused
		// Equal, or within the bound and unchanged for 5 s (every report has long arrived:
		// the last statistics travel with the next report, 100 ms later), or a minute.
		if got == clients || (within && time.Since(stableSince) >= 5*time.Second) || time.Since(began) > time.Minute {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	ok := readErr == nil && got >= clients-killLoss && got <= clients+excused
	worst := fmt.Sprintf("Redis %d, clients %d (diff %+d) after %v", got, clients, got-clients, time.Since(began).Round(100*time.Millisecond))
	if readErr != nil {
		worst += "; " + readErr.Error()
	}
	return line{
		name:  "Redis's statistics equal the admitted requests the clients saw (within a minute of the end)",
		worst: worst,
		bound: fmt.Sprintf("clients − %d (2xx of SIGKILLed gateways in their last 2 s) ≤ Redis ≤ clients + %d (requests cut by a stop)", killLoss, excused),
		ok:    ok,
	}
}

// logLines check the gateways' logs: each fail_open episode logged once (a WARN, then one INFO
// before the next WARN), every episode of a process alive at the end recovered, every
// partition seen by its gateway, no line outside Caddy's logger.
func logLines(c *chaos, rs []*ran) []line {
	var opened, doubled, open, plain, errs, partitions, partitionsSeen, slow, normal int
	var firstPlain, firstErr, unseen string
	logsOf := map[int][]processLog{}
	for gi, g := range c.gws {
		files := g.logFiles()
		for fi, path := range files {
			pl, err := readLog(path)
			if err != nil {
				continue
			}
			logsOf[gi] = append(logsOf[gi], pl)
			o, d, op := pl.episodes()
			opened += o
			doubled += d
			if op && fi == len(files)-1 {
				open++
			}
			plain += pl.plain
			if firstPlain == "" {
				firstPlain = pl.firstPlain
			}
			errs += pl.errors
			if firstErr == "" {
				firstErr = pl.firstErr
			}
			for _, e := range pl.events {
				switch e.msg {
				case msgSlow:
					slow++
				case msgNormal:
					normal++
				}
			}
		}
	}
	for _, r := range rs {
		for _, f := range r.faults {
			if f.kind != partition || f.hold < 1500*time.Millisecond {
				continue
			}
			partitions++
			from, to := c.start.Add(r.start), c.start.Add(r.healed+2*time.Second)
			seen := false
			for _, pl := range logsOf[f.target] {
				if pl.enteredBetween(from, to) {
					seen = true
				}
			}
			if seen {
				partitionsSeen++
			} else if unseen == "" {
				unseen = fmt.Sprintf("; not logged: %s at %v", f, r.start.Round(time.Second))
			}
		}
	}
	out := make([]line, 0, 3)
	out = append(out,
		line{
			name: "fail_open episodes logged once, each recovery logged",
			worst: fmt.Sprintf("%d WARNs, %d logged inside an open episode, %d still open at the end; partitions logged by their gateway: %d of %d%s",
				opened, doubled, open, partitionsSeen, partitions, unseen),
			bound: "0 doubled, 0 open, every partition ≥ 1.5 s logged",
			ok:    doubled == 0 && open == 0 && partitionsSeen == partitions,
		},
		line{
			name:  "lines outside Caddy's logger",
			worst: fmt.Sprintf("%d%s", plain, map[bool]string{true: "; first: " + trim(firstPlain, 120), false: ""}[plain > 0]),
			bound: "0", ok: plain == 0,
		},
	)
	info := fmt.Sprintf("%d ERROR lines", errs)
	if firstErr != "" {
		info += "; first: " + trim(firstErr, 160)
	}
	out = append(out, line{name: "ERROR lines (for information)", worst: info + fmt.Sprintf("; slow stretches: %d WARNs, %d back-to-normal INFOs", slow, normal), bound: "-", ok: true})
	return out
}

func injectLine(rs []*ran) line {
	var errs []string
	for _, r := range rs {
		errs = append(errs, r.errs...)
	}
	l := line{name: "faults injected and healed as scheduled", worst: fmt.Sprintf("%d episodes, %d harness errors", len(rs), len(errs)), bound: "0 errors", ok: len(errs) == 0}
	if len(errs) > 0 {
		l.worst += "; first: " + trim(errs[0], 200)
	}
	return l
}

func formatReport(cfg runConfig, setup, end time.Duration, plan []episode, rs []*ran, apps []*appLoad, lines []line, details string) string {
	var b strings.Builder
	short := ""
	if cfg.short {
		short = " -short"
	}
	fmt.Fprintf(&b, "# Chaos soak: %s, seed %d\n\n", cfg.mode, cfg.seed)
	fmt.Fprintf(&b, "Command: `bash bench/chaos.sh -mode %s -seed %d -duration %v%s`\n\n", cfg.mode, cfg.seed, cfg.duration, short)
	fmt.Fprintf(&b, "Setup %v; load for %v; %d fault episodes (%d with two faults at once).\n\n",
		setup.Round(100*time.Millisecond), end.Round(time.Second), len(rs), countDouble(rs))
	verdict := "all invariants held"
	for _, l := range lines {
		if !l.ok {
			verdict = "INVARIANTS VIOLATED"
		}
	}
	fmt.Fprintf(&b, "**%s**\n\n| invariant | worst value | bound | |\n|---|---|---|---|\n", verdict)
	for _, l := range lines {
		fmt.Fprintln(&b, l)
	}
	b.WriteString(details)
	fmt.Fprintf(&b, "\n| start | faults | healed | out of fail_open | level 0 | harness errors |\n|---:|---|---:|---:|---:|---|\n")
	for _, r := range rs {
		var fs []string
		for _, f := range r.faults {
			fs = append(fs, f.String())
		}
		fmt.Fprintf(&b, "| %v | %s | %v | %v | %v | %s |\n", r.start.Round(100*time.Millisecond), strings.Join(fs, " + "),
			r.healed.Round(100*time.Millisecond), r.leftFailOpen.Round(10*time.Millisecond), r.recovery.Round(10*time.Millisecond), trim(strings.Join(r.errs, "; "), 200))
	}
	_ = plan
	_ = apps
	return b.String()
}

func countDouble(rs []*ran) int {
	n := 0
	for _, r := range rs {
		if len(r.faults) > 1 {
			n++
		}
	}
	return n
}
