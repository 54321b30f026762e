package connlimit

import (
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkAcquireRelease is the per-request cost on one goroutine: 0 allocs/op.
func BenchmarkAcquireRelease(b *testing.B) {
	c := New(Config{}, nil)
	defer c.Close()
	c.Acquire("app", 0) // create the app (and hold one slot, like a busy gateway)
	b.ReportAllocs()
	for b.Loop() {
		tk, _ := c.Acquire("app", 0)
		tk.Release()
	}
}

// BenchmarkAcquireReleaseParallel is the same from all Ps at once, each on its own app (the
// cluster counter is shared, as in production).
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c := New(Config{App: 1 << 30, Cluster: 1 << 30}, nil)
	defer c.Close()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		app := "app" + strconv.FormatInt(next.Add(1)%8, 10)
		c.Acquire(app, 0)
		for pb.Next() {
			tk, _ := c.Acquire(app, 0)
			tk.Release()
		}
	})
}

// BenchmarkReject is a rejection at the app limit: as cheap as an admission, 0 allocs/op.
func BenchmarkReject(b *testing.B) {
	c := New(Config{App: 1}, nil)
	defer c.Close()
	c.Acquire("app", 0)
	b.ReportAllocs()
	for b.Loop() {
		if tk, _ := c.Acquire("app", 0); tk != nil {
			b.Fatal("admitted over the limit")
		}
	}
}

// BenchmarkTouch is the heartbeat of a long stream.
func BenchmarkTouch(b *testing.B) {
	c := New(Config{}, nil)
	defer c.Close()
	tk, _ := c.Acquire("app", 0)
	b.ReportAllocs()
	for b.Loop() {
		tk.Touch()
	}
}

// BenchmarkSweep walks 10,000 in-flight tickets, none idle.
func BenchmarkSweep(b *testing.B) {
	c := New(Config{App: 1 << 20, Cluster: 1 << 20}, nil)
	defer c.Close()
	for range 10000 {
		c.Acquire("app", 0)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Sweep()
	}
}
