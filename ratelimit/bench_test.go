package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The in-process comparison with golang.org/x/time/rate (docs/library.md, "Figures"): each
// variant admits every call (a rate far above what the benchmark can take), so both measure
// the cost of an admitted decision. "keyed" looks the key up among 100 apps, as a service with
// one limiter per tenant must; x/time/rate then needs a map of its limiters.
//
//	go test ./ratelimit/ -run '^$' -bench AllowN -benchmem -count 6

const benchApps = 100

func benchKeys() []string {
	keys := make([]string, benchApps)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	return keys
}

func benchLimiter(b *testing.B, keys []string) *Limiter {
	apps := make(map[string]App, len(keys))
	for _, k := range keys {
		apps[k] = App{Guaranteed: 1e12, Burst: 1e12}
	}
	l, err := New(Options{Apps: apps})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	for _, k := range keys {
		if !l.AllowN(context.Background(), k, 1).Allowed { // the first lease, outside the timing
			b.Fatal("refused")
		}
	}
	return l
}

func BenchmarkAllowN(b *testing.B) {
	ctx := context.Background()
	keys := benchKeys()
	b.Run("tierbucket", func(b *testing.B) {
		l := benchLimiter(b, keys[:1])
		b.ResetTimer()
		for b.Loop() {
			if !l.AllowN(ctx, keys[0], 1).Allowed {
				b.Fatal("refused")
			}
		}
	})
	b.Run("xrate", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e12), 1e12)
		for b.Loop() {
			if !l.AllowN(timeNow(), 1) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("tierbucket-keyed", func(b *testing.B) {
		l := benchLimiter(b, keys)
		i := 0
		for b.Loop() {
			if !l.AllowN(ctx, keys[i%benchApps], 1).Allowed {
				b.Fatal("refused")
			}
			i++
		}
	})
	b.Run("xrate-keyed", func(b *testing.B) {
		m := xrateMap(keys)
		i := 0
		for b.Loop() {
			if !m.get(keys[i%benchApps]).AllowN(timeNow(), 1) {
				b.Fatal("refused")
			}
			i++
		}
	})
	b.Run("tierbucket-parallel", func(b *testing.B) {
		l := benchLimiter(b, keys[:1])
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !l.AllowN(ctx, keys[0], 1).Allowed {
					b.Error("refused")
					return
				}
			}
		})
	})
	b.Run("xrate-parallel", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e12), 1e12)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !l.AllowN(timeNow(), 1) {
					b.Error("refused")
					return
				}
			}
		})
	})
}

// xrateLimiters is what a keyed x/time/rate needs: one limiter per key, found under a lock.
type xrateLimiters struct {
	mu sync.RWMutex
	m  map[string]*rate.Limiter
}

func xrateMap(keys []string) *xrateLimiters {
	x := &xrateLimiters{m: make(map[string]*rate.Limiter, len(keys))}
	for _, k := range keys {
		x.m[k] = rate.NewLimiter(rate.Limit(1e12), 1e12)
	}
	return x
}

func (x *xrateLimiters) get(key string) *rate.Limiter {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.m[key]
}

// timeNow is x/time/rate's clock, read per call as its Allow does.
var timeNow = time.Now
