package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseCallgrindSummary(t *testing.T) {
	dump := "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 20758\ncmd:  caddy run\npart: 1\n\n" +
		"positions: line\nevents: Ir\nsummary: 963443698\n\n\ntotals: 963443732\n"
	n, err := parseCallgrindSummary(strings.NewReader(dump))
	if err != nil || n != 963443698 {
		t.Fatalf("got %d, %v; want 963443698", n, err)
	}
	if _, err := parseCallgrindSummary(strings.NewReader("events: Ir\ntotals: 5\n")); err == nil {
		t.Fatal("a dump without a summary line was accepted")
	}
}

func TestAggregateInstructions(t *testing.T) {
	run := func(variant string, round int, requests, instr int64, non2xx int64) sample {
		return sample{
			round: round, scenario: "unlimited", variant: variant,
			wrk:   wrkResult{Requests: requests, Duration: time.Second, StatusErrors: non2xx},
			instr: instr, idleInstr: 5000, idleFor: 5 * time.Second, allocated: float64(requests) * 100,
		}
	}
	samples := []sample{
		run("plain", 1, 1000, 50_000_000, 0), run("tierbucket-redis", 1, 1000, 51_000_000, 0),
		run("plain", 2, 2000, 100_000_000, 0), run("tierbucket-redis", 2, 500, 26_000_000, 0),
		run("mholt", 1, 1000, 52_000_000, 0), run("mholt", 2, 1000, 10, 1), // a round with a 429 does not count
	}
	rows := aggregateInstructions(samples, map[string]bool{"unlimited": true})
	tb := rows[[2]string{"unlimited", "tierbucket-redis"}]
	if tb.valid != 2 || summarize(tb.ratio) != (stats{med: 1.03, min: 1.02, max: 1.04}) {
		t.Fatalf("tierbucket: %+v, ratios %v", tb, tb.ratio)
	}
	if tb.ps[0] != 1000 || tb.bytes[0] != 100 {
		t.Fatalf("idle/s %v, bytes/req %v", tb.ps, tb.bytes)
	}
	mh := rows[[2]string{"unlimited", "mholt"}]
	if mh.runs != 2 || mh.valid != 1 {
		t.Fatalf("mholt: %d valid of %d, want 1 of 2", mh.valid, mh.runs)
	}
	text := instructionTargets(rows, "unlimited")
	if !strings.Contains(text, "- yes — instructions per request ≤ 1.03 × plain Caddy's: 1.030") ||
		!strings.Contains(text, "- yes — not above mholt/caddy-ratelimit: 1.030 vs 1.040") {
		t.Fatalf("targets:\n%s", text)
	}
}
