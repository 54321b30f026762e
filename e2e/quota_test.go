package e2e

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// TestFleetQuota is fleet accuracy end to end: two Caddy processes
// sharing one redis-server enforce ONE app quota. Both are hammered at once for about 3.5 s;
// the requests they admit together must be within ±5% of burst + guaranteed × T, T measured
// from the first request sent to the last response received, and each must admit some.
//
// Parameters: guaranteed 100/s, burst 200, so the allowance is about 200 + 100 × 3.5 = 550
// requests and ±5% is ±27 requests. Every request costs 1 token, so the tolerance spans many
// requests and several leases (a lease is at most burst / (2 × 2 instances) = 50 tokens, and
// much less at this rate): it measures the limiter, not the rounding of one request or one
// lease. The offered load (4 keep-alive clients without pause, thousands of requests per
// second) is many times the quota, so the limiter, not the client, decides what is admitted.
func TestFleetQuota(t *testing.T) {
	requireCaddy(t)
	const (
		guaranteed = 100.0
		burst      = 200.0
		duration   = 3500 * time.Millisecond
		workers    = 2     // per gateway
		maxPerWkr  = 40000 // bound on requests per worker
	)
	addr, _ := redistest.Standalone(t)
	site := fmt.Sprintf(`	rate_limit {
		headers both
		cluster quota
		key {http.request.header.X-App-Id}
		app shop {
			guaranteed %g
			burst %g
		}
		redis {
			address %s
			key_prefix e2e-quota
		}
	}
	respond "ok" 200`, guaranteed, burst, addr)
	gws := []*gateway{startGateway(t, "a", site), startGateway(t, "b", site)}
	f := newFleet(t, addr, "e2e-quota", "quota")
	f.waitLive(gws...) // both know the fleet has two instances before the load starts

	tallies := make([]*loadTally, len(gws))
	var firstErr atomic.Value
	var wg sync.WaitGroup
	client := newClient(t, 5*time.Second, 2*workers)
	start := time.Now()
	deadline := start.Add(duration)
	var lastDone atomic.Int64 // ns since start of the last response
	for i, g := range gws {
		tallies[i] = new(loadTally)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < maxPerWkr && time.Now().Before(deadline); n++ {
					resp, body, err := get(client, g.base, "/bucket/object", "shop")
					if d := int64(time.Since(start)); d > lastDone.Load() {
						lastDone.Store(d) // racy max, good enough: all workers end within µs
					}
					if tallies[i].count(&firstErr, g.name, resp, body, err) {
						if c := resp.Header.Get("X-Ratelimit-Cost"); c != "1" {
							tallies[i].other.Add(1)
							firstErr.CompareAndSwap(nil, fmt.Sprintf("gateway %s: X-RateLimit-Cost %q, want 1", g.name, c))
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Duration(lastDone.Load())

	var admitted, limited int64
	for i, tl := range tallies {
		ok, lim, other := tl.ok.Load(), tl.limited.Load(), tl.other.Load()
		admitted += ok
		limited += lim
		t.Logf("gateway %s: %d admitted, %d rejected (429), %d other", gws[i].name, ok, lim, other)
		if ok == 0 {
			t.Errorf("gateway %s admitted nothing: the quota is not shared", gws[i].name)
		}
		if other != 0 {
			t.Errorf("gateway %s: %d unexpected answers, first: %v", gws[i].name, other, firstErr.Load())
		}
	}
	for _, g := range gws {
		var figs []string
		for _, m := range []string{
			"caddy_rate_limit_leases_total", "caddy_rate_limit_lease_tokens_total",
			"caddy_rate_limit_local_tokens", "caddy_rate_limit_local_hits_total",
		} {
			v, _, _ := g.metric(m, `cluster="quota"`, `app="shop"`)
			figs = append(figs, fmt.Sprintf("%s=%g", m[len("caddy_rate_limit_"):], v))
		}
		t.Logf("gateway %s: %v", g.name, figs)
	}
	allowed := burst + guaranteed*elapsed.Seconds()
	dev := (float64(admitted) - allowed) / allowed
	t.Logf("quota %g/s burst %g, T %.3fs, offered %d requests (%.0f/s): admitted %d, allowed burst + rate × T = %.1f (%+.2f%%)",
		guaranteed, burst, elapsed.Seconds(), admitted+limited, float64(admitted+limited)/elapsed.Seconds(),
		admitted, allowed, 100*dev)
	if limited == 0 {
		t.Fatalf("no request was rejected: the offered load never exceeded the quota, the figures say nothing")
	}
	if math.Abs(dev) > 0.05 {
		t.Errorf("admitted %d is %+.2f%% off burst + rate × T = %.1f (bound ±5%%)", admitted, 100*dev, allowed)
	}
}

// loadTally counts a load's answers from one source: admitted, refused with app_exhausted, and
// anything else.
type loadTally struct{ ok, limited, other atomic.Int64 }

// count counts one answer of gateway name (err: the request failed), keeping the first answer
// that is neither an admission nor an app_exhausted refusal in firstErr. It reports whether
// the request was admitted.
func (t *loadTally) count(firstErr *atomic.Value, name string, resp answer, body string, err error) bool {
	switch {
	case err != nil:
		t.other.Add(1)
		firstErr.CompareAndSwap(nil, fmt.Sprintf("gateway %s: %v", name, err))
	case resp.StatusCode == http.StatusOK:
		t.ok.Add(1)
		return true
	case resp.StatusCode == http.StatusTooManyRequests:
		t.limited.Add(1)
		if r, err := parseRejection(resp, body); err != nil || r.Reason != "app_exhausted" {
			t.other.Add(1)
			firstErr.CompareAndSwap(nil, fmt.Sprintf("gateway %s: 429 %+v %v", name, r, err))
		}
	default:
		t.other.Add(1)
		firstErr.CompareAndSwap(nil, fmt.Sprintf("gateway %s: status %d body %q", name, resp.StatusCode, body))
	}
	return false
}
