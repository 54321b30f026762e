package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
)

// TestStatsIntervalFlushes: `local { stats_interval }` reaches the limiter. Requests admitted
// on the app's first lease, with no later lease or return to carry their statistics (lease_ttl
// an hour away), reach Redis by a report once stats_interval has passed: 2 s here, where the
// default would keep them for a minute. caddy_rate_limit_stats_flushes_total counts that flush.
func TestStatsIntervalFlushes(t *testing.T) {
	requireCaddy(t)
	addr, _ := redistest.Standalone(t)
	site := fmt.Sprintf(`	rate_limit {
		key {http.request.header.X-App-Id}
		app sparse {
			guaranteed 100
			burst 100
		}
		local {
			lease_ttl 1h
			stats_interval 2s
		}
		redis {
			address %s
			key_prefix stats
		}
	}
	respond "ok" 200`, addr)
	g := startGateway(t, "g", site)
	client := newClient(t, 5*time.Second, 1)
	const sent = 3
	for range sent {
		if resp, body, err := get(client, g.base, "/b/o", "sparse"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request: %v %v %q", err, resp, body)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	const key = "stats:{default/sparse}:l2"
	waitUntil(t, fmt.Sprintf("Redis to count the %d requests (stats_interval 2s flushes them)", sent), 20*time.Second, func() bool {
		n, _ := c.HGet(context.Background(), key, "requests").Int64()
		return n == sent
	})
	// The flush is counted for the operator: one Redis call of its own.
	g.waitMetric(5*time.Second, func(v float64) bool { return v == 1 }, "caddy_rate_limit_stats_flushes_total", `cluster="default"`)
}
