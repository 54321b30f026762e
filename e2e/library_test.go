package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/ratelimit"
)

// TestLibraryJoinsFleet: a Go program using package ratelimit (this test process) and two
// Caddy gateways on the same Redis, key prefix and cluster are one fleet:
//
//   - quota: all three take load on one app (guaranteed 100/s, burst 200) for about 3.5 s;
//     what they admit together is within ±5 % of burst + guaranteed × T, and each admits some;
//   - an admin override (PUT /rate_limit/apps/shop on one gateway) reaches the library, whose
//     decisions then show the overridden burst;
//   - the operator emergency (POST /rate_limit/emergency/activate on the other gateway) blocks
//     the library's priority-3 app with emergency_blocked while its priority-0 app is served,
//     and deactivating it lets the priority-3 app in again.
func TestLibraryJoinsFleet(t *testing.T) {
	requireCaddy(t)
	const (
		guaranteed = 100.0
		burst      = 200.0
		duration   = 3500 * time.Millisecond
		workers    = 2     // per instance
		maxPerWkr  = 40000 // bound on calls per worker
		prefix     = "e2e-lib"
		cluster    = "lib"
	)
	addr, _ := redistest.Standalone(t)
	site := fmt.Sprintf(`	rate_limit {
		cluster %s
		key {http.request.header.X-App-Id}
		unknown_app reject
		app shop {
			guaranteed %g
			burst %g
		}
		app vip {
			guaranteed 1000
			burst 2000
		}
		app batch {
			guaranteed 1000
			burst 2000
			priority 3
		}
		redis {
			address %s
			key_prefix %s
		}
	}
	respond "ok" 200`, cluster, guaranteed, burst, addr, prefix)
	gws := []*gateway{startGateway(t, "a", site), startGateway(t, "b", site)}
	lim, err := ratelimit.New(ratelimit.Options{
		Cluster:    cluster,
		UnknownApp: ratelimit.UnknownReject,
		Apps: map[string]ratelimit.App{
			"shop":  {Guaranteed: guaranteed, Burst: burst},
			"vip":   {Guaranteed: 1000, Burst: 2000},
			"batch": {Guaranteed: 1000, Burst: 2000, Priority: 3},
		},
		Redis: &ratelimit.Redis{Address: []string{addr}, KeyPrefix: prefix},
	})
	if err != nil {
		t.Fatalf("ratelimit.New: %v", err)
	}
	defer lim.Close()
	f := newFleet(t, addr, prefix, cluster)
	f.waitLive(gws...)
	waitLibraryLive(t, f)

	// Quota: all three on "shop".
	tallies := make([]*loadTally, len(gws)+1) // the gateways, then the library
	for i := range tallies {
		tallies[i] = new(loadTally)
	}
	var firstErr atomic.Value
	var wg sync.WaitGroup
	client := newClient(t, 5*time.Second, 2*workers)
	start := time.Now()
	deadline := start.Add(duration)
	var lastDone atomic.Int64 // ns since start of the last answer
	done := func() {
		if d := int64(time.Since(start)); d > lastDone.Load() {
			lastDone.Store(d) // racy max, good enough: all workers end within µs
		}
	}
	for i, g := range gws {
		for range workers {
			wg.Go(func() {
				for n := 0; n < maxPerWkr && time.Now().Before(deadline); n++ {
					resp, body, err := get(client, g.base, "/bucket/object", "shop")
					done()
					tallies[i].count(&firstErr, g.name, resp, body, err)
				}
			})
		}
	}
	lib := tallies[len(gws)]
	for range workers {
		wg.Go(func() {
			ctx := context.Background()
			for n := 0; n < maxPerWkr && time.Now().Before(deadline); n++ {
				d := lim.Allow(ctx, "shop")
				done()
				switch {
				case d.Allowed:
					lib.ok.Add(1)
				case d.Reason == ratelimit.ReasonAppExhausted:
					lib.limited.Add(1)
				default:
					lib.other.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("library: %+v", d))
				}
				// Paced like an HTTP client (a round trip to a gateway takes about as long), so
				// that the in-process caller does not take the CPU the gateways need.
				time.Sleep(250 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	elapsed := time.Duration(lastDone.Load())

	var admitted, limited int64
	for i, tl := range tallies {
		name := "library"
		if i < len(gws) {
			name = "gateway " + gws[i].name
		}
		ok, lim, other := tl.ok.Load(), tl.limited.Load(), tl.other.Load()
		admitted += ok
		limited += lim
		t.Logf("%s: %d admitted, %d refused, %d other", name, ok, lim, other)
		if ok == 0 {
			t.Errorf("%s admitted nothing: the quota is not shared", name)
		}
		if other != 0 {
			t.Errorf("%s: %d unexpected answers, first: %v", name, other, firstErr.Load())
		}
	}
	allowed := burst + guaranteed*elapsed.Seconds()
	dev := (float64(admitted) - allowed) / allowed
	t.Logf("quota %g/s burst %g, T %.3fs, offered %d: admitted %d, allowed burst + rate × T = %.1f (%+.2f%%)",
		guaranteed, burst, elapsed.Seconds(), admitted+limited, admitted, allowed, 100*dev)
	if limited == 0 {
		t.Fatalf("nothing was refused: the offered load never exceeded the quota, the figures say nothing")
	}
	if math.Abs(dev) > 0.05 {
		t.Errorf("admitted %d is %+.2f%% off burst + rate × T = %.1f (bound ±5%%)", admitted, 100*dev, allowed)
	}

	// An admin override on gateway a reaches the library.
	if status, body := gws[0].adminDo("PUT", "/rate_limit/apps/shop", "application/json", `{"guaranteed": 50, "burst": 77}`); status != 200 {
		t.Fatalf("PUT /rate_limit/apps/shop on gateway a: %d %s", status, body)
	}
	waitLibrary(t, "the override's burst 77 on shop", func() (bool, string) {
		d := lim.Allow(context.Background(), "shop")
		return d.Limit == 77, fmt.Sprintf("%+v", d)
	})

	// The operator emergency, activated on gateway b, reaches the library.
	if status, body := gws[1].adminPost("/rate_limit/emergency/activate", "application/json", `{"reason": "e2e library drill", "duration": "10m"}`); status != 200 {
		t.Fatalf("activate on gateway b: %d %s", status, body)
	}
	waitLibrary(t, "emergency_blocked for the priority-3 app", func() (bool, string) {
		d := lim.Allow(context.Background(), "batch")
		return d.Reason == ratelimit.ReasonEmergencyBlocked, fmt.Sprintf("%+v", d)
	})
	if d := lim.Allow(context.Background(), "vip"); !d.Allowed {
		t.Errorf("the priority-0 app in the emergency: %+v, want allowed", d)
	}
	if status, body := gws[1].adminPost("/rate_limit/emergency/deactivate", "", ""); status != 200 {
		t.Fatalf("deactivate on gateway b: %d %s", status, body)
	}
	waitLibrary(t, "the priority-3 app allowed after the emergency", func() (bool, string) {
		d := lim.Allow(context.Background(), "batch")
		return d.Allowed, fmt.Sprintf("%+v", d)
	})
}

// waitLibraryLive waits until this process's Limiter has a heartbeat in the fleet's nodes set
// (instance ids are "<host>-<pid>-<random>").
func waitLibraryLive(t *testing.T, f *fleet) {
	t.Helper()
	pid := "-" + strconv.Itoa(os.Getpid()) + "-"
	waitLibrary(t, "the library's heartbeat", func() (bool, string) {
		hb, err := f.heartbeats()
		for id := range hb {
			if strings.Contains(id, pid) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("heartbeats %v, err %v", hb, err)
	})
}

// waitLibrary polls cond until it holds, for at most 5 s (a sync interval is 100 ms; the
// overrides and the emergency arrive within one, or at once through the Store's notifications).
func waitLibrary(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("library: %s: not within 5 s; last: %s", what, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
