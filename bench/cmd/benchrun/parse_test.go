package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	out := "Running 2s test @ http://127.0.0.1:1/\n  2 threads and 50 connections\n" +
		"BENCH requests=1000 duration_us=2000000 status_errors=900 socket_errors=0 p50_us=1500 p99_us=30000\n"
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 1000 || r.StatusErrors != 900 || r.P50 != 1500*time.Microsecond || r.P99 != 30*time.Millisecond {
		t.Fatalf("parsed %+v", r)
	}
	if r.RPS() != 500 || r.AdmittedRPS() != 50 {
		t.Fatalf("rps %v admitted %v", r.RPS(), r.AdmittedRPS())
	}
	if _, err := parseWrk("no summary"); err == nil {
		t.Fatal("missing BENCH line accepted")
	}
	if _, err := parseWrk("BENCH requests=0 duration_us=0 status_errors=0 socket_errors=0 p50_us=0 p99_us=0"); err == nil {
		t.Fatal("empty run accepted")
	}
}

func TestSumCommandCalls(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=5,usec_per_call=0.5\r\n" +
		"cmdstat_get:calls=20,usec=1\r\n" +
		"cmdstat_info:calls=3,usec=1\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=1\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=1\r\n"
	all, scripts := sumCommandCalls(info)
	if all != 32 || scripts != 10 {
		t.Fatalf("all %d scripts %d, want 32 and 10", all, scripts)
	}
}

func TestSumMetric(t *testing.T) {
	text := strings.Join([]string{
		"# HELP caddy_rate_limit_local_hits_total x",
		`caddy_rate_limit_local_hits_total{app="bench",cluster="default"} 990`,
		`caddy_rate_limit_local_hits_total{app="*",cluster="default"} 10`,
		`caddy_rate_limit_local_hits_totalx 5`,
		"caddy_rate_limit_requests_total 1e3",
	}, "\n")
	if got := sumMetric(text, "caddy_rate_limit_local_hits_total"); got != 1000 {
		t.Fatalf("local hits %v, want 1000", got)
	}
	if got := sumMetric(text, "caddy_rate_limit_requests_total"); got != 1000 {
		t.Fatalf("requests %v, want 1000", got)
	}
}

func TestSummarize(t *testing.T) {
	if s := summarize([]float64{3, 1, 2}); s != (stats{med: 2, min: 1, max: 3}) {
		t.Fatalf("odd: %+v", s)
	}
	if s := summarize([]float64{4, 1, 2, 3}); s != (stats{med: 2.5, min: 1, max: 4}) {
		t.Fatalf("even: %+v", s)
	}
}

func TestCaddyfileKeysOnHost(t *testing.T) {
	for _, v := range variants {
		cf := caddyfile(v, scenario{quota: 123}, 1, 2, "127.0.0.1:3", "")
		if !strings.Contains(cf, "bind 127.0.0.1") || !strings.Contains(cf, `respond "ok" 200`) {
			t.Errorf("%s: not a loopback respond site:\n%s", v.name, cf)
		}
		if v.name != "plain" && (!strings.Contains(cf, "{http.request.host}") || !strings.Contains(cf, "123")) {
			t.Errorf("%s: limiter not keyed on the host with the quota:\n%s", v.name, cf)
		}
		if strings.Contains(cf, "127.0.0.1:3") != v.redis {
			t.Errorf("%s: redis address present = %v, want %v", v.name, !v.redis, v.redis)
		}
		cf = caddyfile(v, scenario{quota: 123, proxied: true}, 1, 2, "127.0.0.1:3", "127.0.0.1:4")
		if !strings.Contains(cf, "reverse_proxy 127.0.0.1:4") || strings.Contains(cf, "respond") {
			t.Errorf("%s: a proxied scenario's site does not pass requests on to the upstream:\n%s", v.name, cf)
		}
	}
}

func TestAggregateAndTargets(t *testing.T) {
	res := func(rps int64) wrkResult {
		return wrkResult{Requests: rps, Duration: time.Second, P50: time.Millisecond, P99: 10 * time.Millisecond}
	}
	var samples []sample
	for round := 1; round <= 3; round++ {
		samples = append(samples,
			sample{
				round: round, scenario: "unlimited", variant: "plain", wrk: res(10000), redisCmds: -1,
				caddyCPU: 200 * time.Millisecond,
			},
			sample{
				round: round, scenario: "unlimited", variant: "tierbucket-redis", wrk: res(9500),
				redisCmds: 240, scriptCmd: 60, localHits: 9950, decisions: 10000,
				caddyCPU: 209 * time.Millisecond, redisCPU: 19 * time.Millisecond,
			},
			sample{
				round: round, scenario: "unlimited", variant: "redis_rate", wrk: res(4000 + int64(round)*1000),
				redisCmds: 20000, scriptCmd: 5000,
			})
	}
	rows := aggregate(samples, map[string]bool{"unlimited": true})
	rr := rows[[2]string{"unlimited", "redis_rate"}]
	if st := summarize(rr.ratio); st.med != 0.6 || st.min != 0.5 || st.max != 0.7 {
		t.Fatalf("redis_rate ratio %+v, want 0.6 [0.5–0.7]", st)
	}
	tb := rows[[2]string{"unlimited", "tierbucket-redis"}]
	if summarize(tb.caddyCPU).med != 22 || summarize(tb.redisCPU).med != 2 {
		t.Fatalf("tierbucket CPU µs/req: caddy %v redis %v, want 22 and 2", tb.caddyCPU, tb.redisCPU)
	}
	if summarize(tb.scripts).med != 60.0*1000/9500 || summarize(tb.hit).med != 0.995 {
		t.Fatalf("tierbucket scripts %v hits %v", tb.scripts, tb.hit)
	}
	got := targets(rows, "unlimited")
	for _, want := range []string{
		"no — ≥ 97% of plain Caddy's throughput (median of per-round ratios over 3 valid rounds of 3): 0.95", "yes — not behind redis_rate: tierbucket ÷ redis_rate in the same round 1.583 [1.36–1.90] over 3 rounds",
		"no — ≤ 5 Redis calls", "yes — ≥ 99% local hits: 99.50%", "≤ 1.03 × plain Caddy's: 1.20",
		"yes — every response 2xx in every round, cold starts included: 3/3 rounds",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
}

// A round with a non-2xx response (measured or in the warm-up, i.e. the cold start) of an app
// within its quota does not count towards the variant's ratio.
func TestAggregateDropsRoundsWithNon2xx(t *testing.T) {
	res := func(rps, bad int64) wrkResult {
		return wrkResult{Requests: rps, StatusErrors: bad, Duration: time.Second}
	}
	samples := []sample{
		{round: 1, scenario: "unlimited", variant: "plain", wrk: res(10000, 0)},
		{round: 1, scenario: "unlimited", variant: "tierbucket-redis", wrk: res(9000, 0)},
		{round: 2, scenario: "unlimited", variant: "plain", wrk: res(10000, 0)},
		{round: 2, scenario: "unlimited", variant: "tierbucket-redis", wrk: res(9900, 1)},
		{round: 3, scenario: "unlimited", variant: "plain", wrk: res(10000, 0)},
		{round: 3, scenario: "unlimited", variant: "tierbucket-redis", wrk: res(9800, 0), warmBad: 2},
		{round: 1, scenario: "limited", variant: "plain", wrk: res(10000, 0)},
		{round: 1, scenario: "limited", variant: "tierbucket-redis", wrk: res(9000, 8800)},
	}
	rows := aggregate(samples, map[string]bool{"unlimited": true})
	tb := rows[[2]string{"unlimited", "tierbucket-redis"}]
	if tb.runs != 3 || tb.valid != 1 || len(tb.ratio) != 1 || tb.ratio[0] != 0.9 {
		t.Fatalf("runs %d valid %d ratios %v, want 3, 1, [0.9]", tb.runs, tb.valid, tb.ratio)
	}
	if lim := rows[[2]string{"limited", "tierbucket-redis"}]; lim.valid != 1 || len(lim.ratio) != 1 {
		t.Fatalf("limited scenario: 429s are expected there, got valid %d ratios %v", lim.valid, lim.ratio)
	}
	if got := targets(rows, "unlimited"); !strings.Contains(got, "no — every response 2xx in every round, cold starts included: 1/3") {
		t.Errorf("targets:\n%s", got)
	}
}

func TestParseStatCPU(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
	stat := "1234 (caddy (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 2 3\n"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3*time.Second {
		t.Fatalf("cpu %v, want 3s (300 ticks)", got)
	}
	if _, err := parseStatCPU("1234 (caddy) S 1"); err == nil {
		t.Fatal("short stat accepted")
	}
}

func TestParseVmHWM(t *testing.T) {
	got, err := parseVmHWM("Name:\tcaddy\nVmPeak:\t 1300 kB\nVmHWM:\t   45312 kB\nVmRSS:\t 40000 kB\n")
	if err != nil || got != 45312<<10 {
		t.Fatalf("parseVmHWM = %d, %v; want %d", got, err, 45312<<10)
	}
	if _, err := parseVmHWM("Name:\tcaddy\n"); err == nil {
		t.Fatal("parseVmHWM without VmHWM: no error")
	}
}
