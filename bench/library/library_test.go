package library

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/internal/redistest"
	"github.com/tierbucket/caddy-tierbucket/ratelimit"
)

// BenchmarkDistributed compares one decision of ratelimit (AllowN, Redis Store) with one of
// redis_rate (Allow, GCRA in Redis), both on the same redis-server, in two regimes: "within"
// the quota (every decision admits) and "over" it (every decision refuses). Besides ns/op it
// reports the Redis commands per decision (redis-cmds/op, from INFO's
// total_commands_processed), which is what a fleet of callers costs the shared Redis.
//
//	cd bench && go test ./library/ -run '^$' -bench Distributed -benchmem -count 6
func BenchmarkDistributed(b *testing.B) {
	addr, _ := redistest.Standalone(b)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()

	for _, regime := range []struct {
		name  string
		rate  float64 // per second
		allow bool
	}{
		{"within", 1e9, true},
		{"over", 0.001, false},
	} {
		b.Run("tierbucket-"+regime.name, func(b *testing.B) {
			lim, err := ratelimit.New(ratelimit.Options{
				Cluster: "bench-" + regime.name,
				Apps:    map[string]ratelimit.App{"tenant": {Guaranteed: regime.rate, Burst: max(regime.rate, 1)}},
				Redis:   &ratelimit.Redis{Address: []string{addr}, KeyPrefix: "bench-lib"},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = lim.Close() })
			lim.AllowN(ctx, "tenant", 1) // the first lease (or the burst), outside the timing
			measure(b, rdb, func() bool { return lim.AllowN(ctx, "tenant", 1).Allowed }, regime.allow)
		})
		b.Run("redis_rate-"+regime.name, func(b *testing.B) {
			rl := redis_rate.NewLimiter(rdb)
			limit := redis_rate.Limit{Rate: 1, Burst: 1, Period: 1000 * 1e9} // 0.001/s
			if regime.allow {
				limit = redis_rate.Limit{Rate: 1e9, Burst: 1e9, Period: 1e9}
			}
			key := "bench-rr-" + regime.name
			_, _ = rl.Allow(ctx, key, limit)
			measure(b, rdb, func() bool {
				res, err := rl.Allow(ctx, key, limit)
				return err == nil && res.Allowed > 0
			}, regime.allow)
		})
	}
}

// measure runs decide b.N times, fails if a decision is not want, and reports the Redis
// commands per decision.
func measure(b *testing.B, rdb *redis.Client, decide func() bool, want bool) {
	before := commands(b, rdb)
	b.ResetTimer()
	for b.Loop() {
		if decide() != want {
			b.Fatalf("a decision was not %v", want)
		}
	}
	b.StopTimer()
	// INFO itself is one command.
	b.ReportMetric(float64(commands(b, rdb)-before-1)/float64(b.N), "redis-cmds/op")
}

// commands is the server's total_commands_processed.
func commands(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO stats has no total_commands_processed")
	return 0
}
