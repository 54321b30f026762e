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

func TestFit2(t *testing.T) {
	X := [][2]float64{{1, 0}, {0, 1}, {1, 1}, {2, 3}}
	var y []float64
	for _, x := range X {
		y = append(y, 0.5*x[0]+4*x[1])
	}
	b, c := fit2(X, y)
	if math.Abs(b-0.5) > 1e-9 || math.Abs(c-4) > 1e-9 {
		t.Fatalf("b %v c %v, want 0.5 and 4", b, c)
	}
	// A fit that would make b negative keeps both non-negative.
	b, c = fit2([][2]float64{{1, 1}, {2, 1}, {3, 1}}, []float64{3, 2, 1})
	if b < 0 || c < 0 {
		t.Fatalf("negative coefficient: b %v c %v", b, c)
	}
}
