package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tierbucket/caddy-tierbucket/ratelimit"
)

// A Limiter of this process alone (the in-memory Store), with one app and the template of
// every other key.
func ExampleNew() {
	lim, err := ratelimit.New(ratelimit.Options{
		Apps: map[string]ratelimit.App{
			"alpha": {Guaranteed: 100, Burst: 200},            // 100 tokens/s, 200 at once
			"*":     {Guaranteed: 10, Burst: 20, Priority: 3}, // every other key, together
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close()
	fmt.Println(lim.Allow(context.Background(), "alpha").Allowed)
	// Output: true
}

// Options are validated as the Caddy plugin validates its configuration.
func ExampleNew_invalid() {
	_, err := ratelimit.New(ratelimit.Options{Apps: map[string]ratelimit.App{"alpha": {Guaranteed: 100, Burst: 50}}})
	fmt.Println(err)
	// Output: ratelimit: apps["alpha"].burst must be >= guaranteed (100), got 50
}

// A Limiter on Redis shares its quotas with every instance, Caddy gateways included, that
// uses the same Redis, key prefix and cluster id.
func ExampleNew_redis() { //nolint:testableexamples // needs a Redis Cluster: compiled, not run
	lim, err := ratelimit.New(ratelimit.Options{
		Cluster:  "backend",
		Capacity: 10000,
		Apps:     map[string]ratelimit.App{"alpha": {Guaranteed: 1000, Burst: 2000}},
		Redis: &ratelimit.Redis{
			Address:   []string{"redis-1:6379", "redis-2:6379", "redis-3:6379"}, // a Redis Cluster
			Username:  "tierbucket",
			Password:  "secret",
			TLS:       true,
			KeyPrefix: "ratelimit",
		},
		OnRedisFailure: ratelimit.FailLocal,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close()
}

func ExampleLimiter_Allow() {
	lim, _ := ratelimit.New(ratelimit.Options{Apps: map[string]ratelimit.App{"alpha": {Guaranteed: 0.001, Burst: 2}}})
	defer lim.Close()
	ctx := context.Background()
	for range 3 {
		if d := lim.Allow(ctx, "alpha"); d.Allowed {
			fmt.Println("allowed")
		} else {
			fmt.Println("refused:", d.Reason, "retry in", d.RetryAfter.Round(time.Second))
		}
	}
	// Output:
	// allowed
	// allowed
	// refused: app_exhausted retry in 16m40s
}

// AllowN charges a cost: here the size of a batch.
func ExampleLimiter_AllowN() {
	lim, _ := ratelimit.New(ratelimit.Options{Apps: map[string]ratelimit.App{"alpha": {Guaranteed: 0.001, Burst: 10}}})
	defer lim.Close()
	ctx := context.Background()
	for _, batch := range []int64{6, 6, 4} {
		d := lim.AllowN(ctx, "alpha", batch)
		fmt.Printf("%d: allowed %v %q\n", batch, d.Allowed, d.Reason)
	}
	d := lim.AllowN(ctx, "alpha", 0)
	fmt.Println(errors.Is(d.Err, ratelimit.ErrInvalidCost))
	// Output:
	// 6: allowed true ""
	// 6: allowed false "app_exhausted"
	// 4: allowed true ""
	// true
}

// Wait blocks until the tokens are there, within its context.
func ExampleLimiter_Wait() {
	lim, _ := ratelimit.New(ratelimit.Options{Apps: map[string]ratelimit.App{"alpha": {Guaranteed: 20, Burst: 20}}})
	defer lim.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 2 {
		if err := lim.Wait(ctx, "alpha", 15); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("30 tokens taken")
	// Output: 30 tokens taken
}

// Acquire holds one of the app's in-flight slots until released.
func ExampleLimiter_Acquire() {
	lim, _ := ratelimit.New(ratelimit.Options{Apps: map[string]ratelimit.App{"alpha": {Guaranteed: 100, MaxConnections: 1}}})
	defer lim.Close()
	release, d := lim.Acquire("alpha")
	fmt.Println(d.Allowed)
	_, d = lim.Acquire("alpha")
	fmt.Println(d.Allowed, d.Reason)
	release()
	_, d = lim.Acquire("alpha")
	fmt.Println(d.Allowed)
	// Output:
	// true
	// false app_limit_exceeded
	// true
}

// Close gives the unspent tokens back to the Store; decisions afterwards are refused.
func ExampleLimiter_Close() {
	lim, _ := ratelimit.New(ratelimit.Options{})
	fmt.Println(lim.Close())
	fmt.Println(lim.Allow(context.Background(), "alpha").Err)
	// Output:
	// <nil>
	// ratelimit: limiter closed
}

// Middleware answers as the Caddy plugin: a spent app gets 429 with its JSON body.
func ExampleMiddleware() {
	lim, _ := ratelimit.New(ratelimit.Options{Apps: map[string]ratelimit.App{"alpha": {Guaranteed: 0.001, Burst: 1}}})
	defer lim.Close()
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") })
	h := ratelimit.Middleware(lim, func(r *http.Request) string { return r.Header.Get("X-Tenant") }, hello)
	for range 2 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Tenant", "alpha")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Body.String())
	}
	// Output:
	// 200 hello
	// 429 {"error":"rate_limit_exceeded","reason":"app_exhausted","retry_after":1000,"remaining":0,"cost":1}
}
