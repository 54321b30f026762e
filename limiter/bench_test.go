package limiter

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/memstore"
)

func benchApps(b *testing.B) (hit, refused *App) {
	c := clock.NewManual()
	cfg := baseConfig()
	cfg.Apps["small"] = pol(10, 10, 0)
	frozen := clock.NewManual() // the limiter's time never moves: a refused app stays refused
	l, err := newLimiter(cfg, memstore.New(c), frozen)
	if err != nil {
		b.Fatal(err)
	}
	l.spawn = func(f func()) { f() }
	hit = mustApp(b, l, "a")
	hit.Refund(1 << 60) // enough local tokens for any b.N
	refused = mustApp(b, l, "small")
	for refused.Take(context.Background(), 1, 0).Allowed {
	}
	return hit, refused
}

func BenchmarkTakeLocalHit(b *testing.B) {
	a, _ := benchApps(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if !a.Take(ctx, 1, 0).Allowed {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkTakeLocalReject(b *testing.B) {
	_, a := benchApps(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if a.Take(ctx, 1, 0).Allowed {
			b.Fatal("admitted")
		}
	}
}

func BenchmarkTakeLocalHitParallel(b *testing.B) {
	a, _ := benchApps(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if !a.Take(ctx, 1, 0).Allowed {
				b.Fatal("rejected")
			}
		}
	})
}

func BenchmarkTakeLocalRejectParallel(b *testing.B) {
	_, a := benchApps(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if a.Take(ctx, 1, 0).Allowed {
				b.Fatal("admitted")
			}
		}
	})
}

func BenchmarkAppLookup(b *testing.B) {
	c := clock.NewManual()
	l := testLimiter(b, baseConfig(), memstore.New(c), c, false)
	b.ReportAllocs()
	for b.Loop() {
		if a, _ := l.App("a"); a == nil {
			b.Fatal("missing")
		}
	}
}

// BenchmarkTick is one sync-loop tick (report, rates, lease expiry) of an instance with n
// configured apps, every one of which took a request in the last interval (busy), or none of
// which did for two minutes (idle: quiet apps, which the loop no longer visits).
func BenchmarkTick(b *testing.B) {
	for _, busy := range []bool{true, false} {
		for _, n := range []int{100, 2000, 20000} {
			name := fmt.Sprintf("idle/%d", n)
			if busy {
				name = fmt.Sprintf("busy/%d", n)
			}
			b.Run(name, func(b *testing.B) { benchTick(b, n, busy) })
		}
	}
}

func benchTick(b *testing.B, n int, busy bool) {
	c := clock.NewManual()
	cfg := baseConfig()
	for i := range n {
		cfg.Apps["app"+strconv.Itoa(i)] = pol(1000, 1000, 0)
	}
	l := testLimiter(b, cfg, memstore.New(c), c, false)
	ctx := context.Background()
	apps := make([]*App, 0, n)
	for id := range cfg.Apps {
		a := mustApp(b, l, id)
		a.Take(ctx, 1, 0)
		apps = append(apps, a)
	}
	for range 10 { // the first report and leases
		c.Advance(l.snap().cfg.SyncInterval)
		l.tick(c.Now())
	}
	if !busy { // two minutes without a request: tokens returned, statistics flushed
		for range 120 {
			c.Advance(time.Second)
			l.tick(c.Now())
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if busy {
			b.StopTimer()
			for _, a := range apps {
				a.Take(ctx, 1, 0)
			}
			b.StartTimer()
		}
		c.Advance(l.snap().cfg.SyncInterval)
		l.tick(c.Now())
	}
}

// BenchmarkCreateAppOverride measures creating an app through an override when 3 000 apps were
// created that way and none is configured: the change merges every override into the
// configuration (docs/admin-api.md, "Many apps").
func BenchmarkCreateAppOverride(b *testing.B) {
	cfg := baseConfig()
	cfg.Apps = nil
	cfg.UnknownApp = UnknownIsolated
	l := testLimiter(b, cfg, memstore.New(nil), clock.NewManual(), false)
	g, burst := 1.0, 10.0
	for i := range 3000 {
		if _, err := l.SetAppOverride(context.Background(), fmt.Sprintf("api%05d", i), &AppOverride{Guaranteed: &g, Burst: &burst}); err != nil {
			b.Fatal(err)
		}
	}
	i := 3000
	b.ResetTimer()
	for b.Loop() {
		i++
		if _, err := l.SetAppOverride(context.Background(), fmt.Sprintf("api%05d", i), &AppOverride{Guaranteed: &g, Burst: &burst}); err != nil {
			b.Fatal(err)
		}
	}
}
