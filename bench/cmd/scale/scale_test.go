package main

import (
	"math"
	"testing"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hincrbyfloat:calls=400,usec=100,usec_per_call=0.25,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=9,usec=10,usec_per_call=1.1,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_cluster|slots:calls=7,usec=10,usec_per_call=1.4,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=1,usec_per_call=1,rejected_calls=0,failed_calls=0\r\n"
	scripts, commands, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if scripts != 123 || commands != 523 {
		t.Fatalf("scripts %d commands %d, want 123 and 523 (harness commands left out)", scripts, commands)
	}
}

func TestRatesAndClasses(t *testing.T) {
	r := rates(100, 1000, "zipf", 1)
	var sum float64
	for i, x := range r {
		sum += x
		if i > 0 && x > r[i-1] {
			t.Fatalf("Zipf rates not decreasing at %d", i)
		}
	}
	if math.Abs(sum-1000) > 1e-6 || math.Abs(r[0]/r[1]-2) > 1e-9 {
		t.Fatalf("sum %v, r0/r1 %v", sum, r[0]/r[1])
	}
	as := apps(spec{apps: 100, rate: 1000, dist: "zipf", zipfS: 1, over: 0.2})
	var over, hot int
	for _, a := range as {
		if a.overQuota {
			over++
			if a.g != a.rate/2 {
				t.Fatalf("over-quota app %s: g %v rate %v", a.id, a.g, a.rate)
			}
		} else if a.g != a.rate*2 {
			t.Fatalf("within-quota app %s: g %v rate %v", a.id, a.g, a.rate)
		}
		if a.burst < a.g || a.burst < 10 {
			t.Fatalf("app %s: burst %v", a.id, a.burst)
		}
		if a.band == bandHot {
			hot++
		}
	}
	if over != 20 || hot != 1 {
		t.Fatalf("over %d hot %d, want 20 and 1", over, hot)
	}
}

func TestLeasesPerSec(t *testing.T) {
	cases := []struct {
		name                     string
		rate, burst, quota, n, w float64
		over                     bool
	}{
		// 10 req/s on one instance, burst 600: a lease covers 30 s (300 tokens).
		{"follows the rate", 10, 600, 20, 1, 10.0 / 300, false},
		// 1000 req/s over 100 instances, burst 1000: capped at burst/2N = 5 tokens, 2 leases/s each.
		{"fairness cap", 1000, 1000, 2000, 100, 200, false},
		// 0.01 req/s: one token per lease, one lease per request.
		{"one per request", 0.01, 10, 1, 1, 0.01, false},
		// driven at 100 req/s, quota 50: leases of 0.3 s of the quota (15 tokens).
		{"at quota", 100, 1000, 50, 1, 50.0 / 15, true},
		{"idle", 0, 10, 1, 10, 0, false},
	}
	for _, c := range cases {
		if got := leasesPerSec(c.rate, c.burst, c.over, c.quota, c.n); math.Abs(got-c.w) > 1e-9 {
			t.Errorf("%s: %v leases/s, want %v", c.name, got, c.w)
		}
	}
}

func TestCapBoundPerSec(t *testing.T) {
	cases := []struct {
		name                     string
		rate, burst, quota, n, w float64
		over                     bool
	}{
		// burst 1000 over 100 instances: a lease carries at most 5 tokens.
		{"cap", 1000, 1000, 2000, 100, 200, false},
		// burst 10 over 1000 instances: one token per lease, one lease per request.
		{"one per request", 50, 10, 100, 1000, 50, false},
		// over its quota: only the quota is spent.
		{"over quota", 100, 1000, 50, 100, 10, true},
	}
	for _, c := range cases {
		if got := capBoundPerSec(c.rate, c.burst, c.over, c.quota, c.n); math.Abs(got-c.w) > 1e-9 {
			t.Errorf("%s: %v leases/s, want %v", c.name, got, c.w)
		}
		// The model never leases more at once than the cap allows, so it is never below the bound.
		if m := leasesPerSec(c.rate, c.burst, c.over, c.quota, c.n); m < capBoundPerSec(c.rate, c.burst, c.over, c.quota, c.n)-1e-9 {
			t.Errorf("%s: model %v below the bound", c.name, m)
		}
	}
}
