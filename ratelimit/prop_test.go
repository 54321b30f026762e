package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// TestQuotaProperty: whatever the apps and the sequence of costs, what AllowN admits for an
// app never exceeds its burst plus its rate over the time the sequence took.
func TestQuotaProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 3).Draw(rt, "apps")
		apps := make(map[string]App, n)
		keys := make([]string, n)
		for i := range keys {
			g := rapid.Float64Range(0.5, 200).Draw(rt, "guaranteed")
			b := rapid.Float64Range(max(g, 1), 400).Draw(rt, "burst")
			keys[i] = fmt.Sprintf("app%d", i)
			apps[keys[i]] = App{Guaranteed: g, Burst: b}
		}
		start := time.Now()
		l, err := New(Options{Apps: apps})
		if err != nil {
			rt.Fatalf("New: %v", err)
		}
		defer l.Close()
		admitted := make(map[string]float64, n)
		calls := rapid.IntRange(1, 200).Draw(rt, "calls")
		for range calls {
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			cost := rapid.Int64Range(1, int64(apps[key].Burst)).Draw(rt, "cost")
			d := l.AllowN(context.Background(), key, cost)
			if d.Err != nil {
				rt.Fatalf("AllowN(%q, %d): %v", key, cost, d.Err)
			}
			if d.Allowed {
				admitted[key] += float64(cost)
			} else if d.RetryAfter <= 0 || d.Reason == "" {
				rt.Fatalf("a refusal without reason or retry-after: %+v", d)
			}
		}
		elapsed := time.Since(start).Seconds()
		for _, key := range keys {
			a := apps[key]
			if bound := a.Burst + a.Guaranteed*elapsed; admitted[key] > bound+1e-9 {
				rt.Fatalf("%s admitted %v > burst + rate × %.3fs = %v", key, admitted[key], elapsed, bound)
			}
		}
	})
}

// TestMisuseProperty: any key and any cost get a decision, never a panic; Err is set exactly
// for an invalid key or a cost <= 0, and a decision with Err is never allowed.
func TestMisuseProperty(t *testing.T) {
	l := newLimiter(t, Options{Apps: map[string]App{"*": {Guaranteed: 1e6, Burst: 1e6}}})
	rapid.Check(t, func(rt *rapid.T) {
		key := rapid.OneOf(rapid.String(), rapid.StringMatching(`[A-Za-z0-9._:-]{0,130}`)).Draw(rt, "key")
		cost := rapid.OneOf(rapid.Int64(), rapid.Int64Range(-2, 3)).Draw(rt, "cost")
		d := l.AllowN(context.Background(), key, cost)
		badKey, badCost := !limiter.ValidAppID(key), cost <= 0
		switch {
		case d.Allowed && d.Err != nil:
			rt.Fatalf("allowed with an error: %+v", d)
		case badKey && !errors.Is(d.Err, ErrInvalidKey):
			rt.Fatalf("key %q: %+v, want ErrInvalidKey", key, d)
		case !badKey && badCost && !errors.Is(d.Err, ErrInvalidCost):
			rt.Fatalf("cost %d: %+v, want ErrInvalidCost", cost, d)
		case !badKey && !badCost && d.Err != nil:
			rt.Fatalf("AllowN(%q, %d): unexpected error %v", key, cost, d.Err)
		}
	})
}
