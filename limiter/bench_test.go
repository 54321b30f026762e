package limiter

import (
	"context"
	"testing"

	"github.com/tierbucket/caddy-tierbucket/internal/clock"
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
