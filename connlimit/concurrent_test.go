package connlimit

import (
	"sync"
	"testing"
	"time"
)

// TestConcurrent races acquires, touches, double and stale releases, sweeps, snapshots and
// remote updates; run it under -race. At the end every counter is back at 0, no peak went
// over its limit, and the tickets held across sweeps were counted as leaked.
func TestConcurrent(t *testing.T) {
	const (
		workers = 8
		iters   = 3000
		appCap  = 6
		cluster = 20
	)
	apps := []string{"a", "b", "c", "d"}
	c, clk := newTest(t, Config{App: appCap, Cluster: cluster, IdleTimeout: time.Second, SweepInterval: time.Hour})

	var wg sync.WaitGroup
	done := make(chan struct{})
	longHeld := make([]*Ticket, workers)
	for w := range workers {
		// One ticket per worker that is never touched: the sweep must take it.
		longHeld[w] = mustAcquire(t, c, apps[w%len(apps)], 0)
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []Handle
			var stale Handle
			for i := range iters {
				tk, _ := c.Acquire(apps[(w+i)%len(apps)], 0)
				if tk != nil {
					if i%3 == 0 {
						tk.Touch()
					}
					held = append(held, tk.Handle())
				}
				if len(held) > 3 || (tk == nil && len(held) > 0) {
					h := held[0]
					held = held[1:]
					h.Release()
					h.Release()
					stale.Release() // an older, ended acquisition: a no-op
					stale = h
				}
			}
			for _, h := range held {
				h.Release()
			}
		}()
	}
	var side sync.WaitGroup
	side.Add(2)
	go func() { // the sweeper, on a clock that runs fast
		defer side.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			clk.Advance(300 * time.Millisecond)
			c.Sweep()
		}
	}()
	go func() { // the limiter's sync loop and the metrics scraper
		defer side.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			c.InFlight()
			c.Snapshot()
			c.Limits("a", 0)
			c.SetRemote(map[string]int64{"a": int64(i % 2)}, int64(i%3))
		}
	}()
	wg.Wait()
	close(done)
	side.Wait()

	c.Sweep() // stamps what no sweep has seen yet
	clk.Advance(2 * time.Second)
	c.Sweep()
	for _, tk := range longHeld {
		tk.Release() // swept already: no-op
	}
	var leakedApps int64
	for _, s := range c.Snapshot() {
		if s.Current != 0 {
			t.Errorf("%q: current %d at the end, want 0", s.App, s.Current)
		}
		limit := int64(appCap)
		if s.App == "" {
			limit = cluster
		} else {
			leakedApps += s.Leaked
		}
		if s.Peak > limit || s.Peak <= 0 {
			t.Errorf("%q: peak %d, want in (0, %d]", s.App, s.Peak, limit)
		}
	}
	cl := stats(t, c, "")
	if cl.Leaked < workers || cl.Leaked != leakedApps {
		t.Errorf("cluster leaked %d, apps leaked %d; want equal and >= %d", cl.Leaked, leakedApps, workers)
	}
}
