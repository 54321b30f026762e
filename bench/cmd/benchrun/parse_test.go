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
		cf := caddyfile(v, scenario{quota: 123}, 1, 2, "127.0.0.1:3")
		if !strings.Contains(cf, "bind 127.0.0.1") || !strings.Contains(cf, `respond "ok" 200`) {
			t.Errorf("%s: not a loopback respond site:\n%s", v.name, cf)
		}
		if v.name != "plain" && (!strings.Contains(cf, "{http.request.host}") || !strings.Contains(cf, "123")) {
			t.Errorf("%s: limiter not keyed on the host with the quota:\n%s", v.name, cf)
		}
		if strings.Contains(cf, "127.0.0.1:3") != v.redis {
			t.Errorf("%s: redis address present = %v, want %v", v.name, !v.redis, v.redis)
		}
	}
}
