package redislua

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// commandStats returns the calls per command from INFO commandstats (commands run inside
// scripts included), without INFO itself.
func commandStats(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// TestEfficiency measures one Limiter at a steady load under its quota (target: ≥ 99%
// local hits, ≤ 5 Redis calls per 1000 requests). The figures are logged, not asserted (they are
// benchmarks); the test asserts only that the load was admitted.
func TestEfficiency(t *testing.T) {
	redistest.Slow(t, "runs 3 s of real-time load")
	addr, _ := redistest.Standalone(t) // its own server: the command counts are this test's alone
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	p := store.AppPolicy{Guaranteed: 10000, Burst: 10000}
	l, cs := newLimiter(t, addr, "eff", fleetConfig("eff", "i0", p))
	app, _ := l.App("app")
	before, callsBefore := commandStats(t, admin), cs.calls()

	const rate, dur = 5000, 3 * time.Second // requests of cost 1 per second: half the quota
	r := new(loadResult)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { load(r, app, rate, 1, time.Now(), stop, 1); close(done) }()
	time.Sleep(dur)
	close(stop)
	<-done
	after, calls := commandStats(t, admin), cs.calls()-callsBefore

	var cmds int64
	var detail []string
	for name, n := range after {
		if d := n - before[name]; d > 0 {
			cmds += d
			detail = append(detail, name+"="+strconv.FormatInt(d, 10))
		}
	}
	scripts := after["evalsha"] - before["evalsha"] + after["eval"] - before["eval"]
	takes := r.takes.Load()
	per1000 := func(n int64) float64 { return 1000 * float64(n) / float64(takes) }
	t.Logf("%d requests at %d/s (quota %g/s): %.2f%% local hits; per 1000 requests: %.2f Store calls (round trips), %.2f scripts, %.2f Redis commands incl. those inside scripts [%s]",
		takes, rate, p.Guaranteed, 100*float64(r.hits.Load())/float64(takes), per1000(calls), per1000(scripts), per1000(cmds),
		strings.Join(detail, " "))
	if r.admittedReqs.Load() != takes {
		t.Fatalf("under its quota the app got %d of %d requests admitted", r.admittedReqs.Load(), takes)
	}
}
