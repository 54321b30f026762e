package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The bounds the invariants are checked against (docs/operations.md, "Chaos soak").
const (
	// quotaSlack is the fleet accuracy bound: admitted cost per minute of an app over its quota
	// ≤ (1 + quotaSlack) × (guaranteed × 60 + burst) outside faults.
	quotaSlack = 0.05
	// overrideBound is how soon every gateway enforces an override changed while no fault runs.
	overrideBound = time.Second
	// overrideFaultBound is how soon after the last fault of its wait healed a change made
	// during a fault is enforced everywhere (the next report repairs a lost message).
	overrideFaultBound = 5 * time.Second
	// settle is how long after an episode's recovery its effects (leases, holdings sized
	// during the fault) may still show in the admitted cost and in-flight counts.
	settle = 5 * time.Second
	// slopeBound: a gateway process's goroutines and heap fitted over its life may rise by at
	// most this share of their mean (and at least by the absolute floors below) before the
	// series counts as growing.
	slopeBound     = 0.25
	goroutineFloor = 30
	heapFloor      = 8 << 20
	// slopeMinSpan is the shortest series (after its first 30 s) whose slope is judged.
	slopeMinSpan = 45 * time.Second
)

// line is one invariant in the report.
type line struct {
	name, worst, bound string
	ok                 bool
}

func (l line) String() string {
	v := "ok"
	if !l.ok {
		v = "VIOLATED"
	}
	return fmt.Sprintf("| %s | %s | %s | %s |", l.name, l.worst, l.bound, v)
}

// window is a span of the run in which a fault's documented extra allowance applies.
type window struct{ from, to time.Duration }

func (w window) overlap(from, to time.Duration) time.Duration {
	a, b := max(w.from, from), min(w.to, to)
	if b < a {
		return 0
	}
	return b - a
}

// faultWindows are the spans of the episodes whose faults reach the Store (fail_open and its
// rescue limits may apply), from the first injection until settle after recovery.
func faultWindows(rs []*ran) []window {
	var ws []window
	for _, r := range rs {
		for _, f := range r.faults {
			if slices.Contains(storeFaults, f.kind) {
				ws = append(ws, window{r.start, r.healed + r.recovery + settle})
				break
			}
		}
	}
	return ws
}

func inWindows(ws []window, at time.Duration) bool {
	for _, w := range ws {
		if at >= w.from && at <= w.to {
			return true
		}
	}
	return false
}

// quotaLine checks the app over its quota: in every 60 s window (sliding by 5 s) its admitted
// requests stay within (1 + quotaSlack) × (g × 60 + burst) plus, for each fault window it
// overlaps, g × the overlap (the rescue buckets admit up to the quota again beside Redis's
// bucket) and 2 bursts (the rescue buckets' burst, and a bucket a failed master lost).
func quotaLine(perSec map[int64]int64, end time.Duration, g, burst float64, ws []window) line {
	worstRatio, worstDesc := 0.0, "no full minute"
	var highest int64 // the most admitted in any minute, whatever its allowance
	ok := true
	for s := time.Duration(0); s+time.Minute <= end; s += 5 * time.Second {
		var n int64
		for sec := int64(s / time.Second); sec < int64((s+time.Minute)/time.Second); sec++ {
			n += perSec[sec]
		}
		highest = max(highest, n)
		allowed := (1 + quotaSlack) * (g*60 + burst)
		for _, w := range ws {
			if o := w.overlap(s, s+time.Minute); o > 0 {
				allowed += g*o.Seconds() + 2*burst
			}
		}
		ratio := float64(n) / allowed
		if ratio > worstRatio {
			worstRatio = ratio
			worstDesc = fmt.Sprintf("%d admitted in [%v, %v) = %.2f of the allowed %.0f (quota alone %.0f)",
				n, s, s+time.Minute, ratio, allowed, g*60+burst)
		}
		if ratio > 1 {
			ok = false
		}
	}
	if highest > 0 {
		worstDesc += fmt.Sprintf("; the busiest minute: %d = %.2f × the quota alone", highest, float64(highest)/(g*60+burst))
	}
	return line{
		name:  "admitted per minute of the app at 1.5× its quota",
		worst: worstDesc,
		bound: fmt.Sprintf("≤ 1.05 × (g·60 + burst), + g·overlap + 2 bursts per fault window (g %.0f/s, burst %.0f)", g, burst),
		ok:    ok,
	}
}

// inFlightLine checks the connection-limited app's requests in flight at the backend: at most
// the limit, and at most twice the limit inside a fault window (each gateway cut from Redis
// keeps to its share or to its holding: docs/configuration.md, "Fleet-wide with Redis").
func inFlightLine(b *backend, ws []window) line {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := true
	worstOut, worstIn := int64(0), int64(0)
	var firstBad string
	for _, p := range b.peaks {
		bound := b.limit
		if inWindows(ws, p.at) {
			bound = 2 * b.limit
			worstIn = max(worstIn, p.n)
		} else {
			worstOut = max(worstOut, p.n)
		}
		if p.n > bound && firstBad == "" {
			ok = false
			firstBad = fmt.Sprintf("; first beyond its bound: %d at %v", p.n, p.at.Round(time.Millisecond))
		}
	}
	return line{
		name:  "in flight at the backend, connection-limited app",
		worst: fmt.Sprintf("max %d overall; above the limit: max %d outside faults, %d in fault windows%s", b.worst, worstOut, worstIn, firstBad),
		bound: fmt.Sprintf("≤ %d (the limit); ≤ %d in a fault window", b.limit, 2*b.limit),
		ok:    ok,
	}
}

// slopeLines fit each gateway process's goroutines and heap in use over its life, from the
// samples taken in quiet moments (its first 30 s and every episode until 2 s after its
// recovery left out: requests held by a fault raise both for a while), and report the
// steepest rise and the gateway that is never stopped.
func slopeLines(series map[string][]sample, quiet func(time.Duration) bool) []line {
	type fit struct {
		key        string
		rise, mean float64
		span       time.Duration
	}
	var gr, hp []fit
	keys := make([]string, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ss := series[k]
		if len(ss) == 0 {
			continue
		}
		var xs, yg, yh []float64
		for _, s := range ss {
			if s.at-ss[0].at < 30*time.Second || !quiet(s.at) {
				continue
			}
			xs = append(xs, s.at.Seconds())
			yg = append(yg, s.goroutines)
			yh = append(yh, s.heapInuse)
		}
		if len(xs) < 2 {
			continue
		}
		span := time.Duration((xs[len(xs)-1] - xs[0]) * float64(time.Second))
		if span < slopeMinSpan {
			continue
		}
		gr = append(gr, fit{k, slope(xs, yg) * span.Seconds(), mean(yg), span})
		hp = append(hp, fit{k, slope(xs, yh) * span.Seconds(), mean(yh), span})
	}
	mk := func(name string, fits []fit, floor float64, unit func(float64) string) line {
		if len(fits) == 0 {
			return line{name: name, worst: "no process lived long enough", bound: "-", ok: true}
		}
		ok := true
		worst := fits[0]
		for _, f := range fits {
			if f.rise/f.mean > worst.rise/worst.mean {
				worst = f
			}
			if f.rise > max(slopeBound*f.mean, floor) {
				ok = false
			}
		}
		desc := func(f fit) string {
			return fmt.Sprintf("%s: %s over %v (mean %s, %+.1f%%)", f.key, unit(f.rise), f.span.Round(time.Second), unit(f.mean), 100*f.rise/f.mean)
		}
		w := desc(worst)
		for _, f := range fits {
			if f.key == "gw0 #0" && f.key != worst.key {
				w += "; never stopped, " + desc(f)
			}
		}
		return line{
			name:  name,
			worst: fmt.Sprintf("%s; %d processes fitted", w, len(fits)),
			bound: fmt.Sprintf("fitted rise ≤ max(%.0f%% of the mean, %s)", 100*slopeBound, unit(floor)),
			ok:    ok,
		}
	}
	return []line{
		mk("goroutines of each gateway (fitted slope × life)", gr, goroutineFloor, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		mk("heap in use of each gateway (fitted slope × life)", hp, heapFloor, func(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }),
	}
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// overrideLine checks that every change reached every gateway: within overrideBound of the
// write (or of a stopped gateway's start) when no fault ran meanwhile, within
// overrideFaultBound of the heal of the faults that ran meanwhile otherwise.
func overrideLine(chs []change, rs []*ran) line {
	ok := true
	var worstQuiet, worstFault time.Duration
	var bad []string
	refused := 0
	for _, ch := range chs {
		refused += ch.refused
		if len(ch.late) > 0 {
			ok = false
			bad = append(bad, fmt.Sprintf("%s at %v: not on %s", ch.op, ch.at.Round(time.Second), strings.Join(ch.late, ", ")))
			continue
		}
		from := map[string]time.Duration{}
		for _, s := range ch.since {
			if s.started {
				from[s.gw] = s.at
				continue
			}
			base, ok2 := from[s.gw]
			if !ok2 {
				base = ch.written
			}
			if heal, overlapped := healDuring(rs, base, s.at); overlapped {
				lag := s.at - max(base, heal)
				worstFault = max(worstFault, lag)
				if lag > overrideFaultBound {
					ok = false
					bad = append(bad, fmt.Sprintf("%s at %v: %s %v after the fault healed", ch.op, ch.written.Round(time.Second), s.gw, lag.Round(time.Millisecond)))
				}
				continue
			}
			lag := s.at - base
			worstQuiet = max(worstQuiet, lag)
			if lag > overrideBound {
				ok = false
				bad = append(bad, fmt.Sprintf("%s at %v: %s took %v", ch.op, ch.written.Round(time.Second), s.gw, lag.Round(time.Millisecond)))
			}
		}
	}
	worst := fmt.Sprintf("%d changes; slowest gateway %v without a fault, %v after a fault's heal; %d writes refused during faults",
		len(chs), worstQuiet.Round(time.Millisecond), worstFault.Round(time.Millisecond), refused)
	if len(bad) > 0 {
		worst += "; " + strings.Join(bad[:min(3, len(bad))], "; ")
	}
	return line{
		name:  "overrides converge on every gateway",
		worst: worst,
		bound: fmt.Sprintf("≤ %v without a fault; ≤ %v after the fault heals", overrideBound, overrideFaultBound),
		ok:    ok,
	}
}

// healDuring reports whether an episode overlapped [from, to] (until its recovery ended), and
// when the last such one had recovered.
func healDuring(rs []*ran, from, to time.Duration) (time.Duration, bool) {
	var heal time.Duration
	overlapped := false
	for _, r := range rs {
		end := r.healed + r.recovery
		if r.start <= to && from <= end {
			overlapped = true
			heal = max(heal, end)
		}
	}
	return heal, overlapped
}

// revertLine checks that an acknowledged change stays in force: a gateway found enforcing
// something else must be inside a fault (a gateway that started while the Store could not
// answer runs on its config) and back to the change within overrideFaultBound of its heal.
func revertLine(rvs []revert, rs []*ran) line {
	ok := true
	var worst time.Duration
	var bad []string
	for _, rv := range rvs {
		heal, overlapped := healDuring(rs, rv.from, rv.to)
		lag := rv.to - max(rv.from, heal)
		worst = max(worst, lag)
		if !rv.back || !overlapped || lag > overrideFaultBound {
			ok = false
			bad = append(bad, fmt.Sprintf("%s (back: %v, during a fault: %v, %v after its heal)", rv.desc, rv.back, overlapped, lag.Round(time.Millisecond)))
		}
	}
	w := fmt.Sprintf("%d gateways found on another value; back within %v of the fault's heal at worst", len(rvs), worst.Round(time.Millisecond))
	if len(bad) > 0 {
		w += "; " + strings.Join(bad[:min(2, len(bad))], "; ")
	}
	return line{
		name:  "an acknowledged override change stays in force until the next one",
		worst: w,
		bound: fmt.Sprintf("only inside a fault, back within %v of its heal", overrideFaultBound),
		ok:    ok,
	}
}

// episodeWindows are the spans of every episode, from its first injection until 2 s after its
// recovery (the idle connections of the requests it held close within 2 s).
func episodeWindows(rs []*ran) []window {
	ws := make([]window, 0, len(rs))
	for _, r := range rs {
		ws = append(ws, window{r.start, r.healed + r.recovery + 2*time.Second})
	}
	return ws
}
