package connlimit

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
)

func TestSweepLeaked(t *testing.T) {
	c, clk := newTest(t, Config{IdleTimeout: 300 * time.Second})
	leak := mustAcquire(t, c, "a", 0)
	c.Sweep() // sees it active: its idle time starts now
	clk.Advance(300 * time.Second)
	c.Sweep() // idle exactly IdleTimeout: not yet
	if s := stats(t, c, "a"); s.Current != 1 || s.Leaked != 0 {
		t.Fatalf("at the timeout %+v, want current 1, leaked 0", s)
	}
	fresh := mustAcquire(t, c, "a", 0)
	clk.Advance(time.Second)
	c.Sweep() // leak goes; fresh, seen for the first time, stays
	if s := stats(t, c, "a"); s.Current != 1 || s.Leaked != 1 {
		t.Fatalf("after the sweep %+v, want current 1, leaked 1", s)
	}
	if s := stats(t, c, ""); s.Current != 1 || s.Leaked != 1 {
		t.Fatalf("cluster after the sweep %+v, want current 1, leaked 1", s)
	}
	// The holder's late Release is a no-op, however often it is called.
	leak.Release()
	leak.Release()
	if s := stats(t, c, "a"); s.Current != 1 || s.Leaked != 1 {
		t.Fatalf("after the late release %+v, want current 1, leaked 1", s)
	}
	fresh.Release()
	c.Sweep()
	for _, s := range c.Snapshot() {
		if s.Current != 0 || s.Leaked != 1 {
			t.Fatalf("end %+v, want current 0, leaked 1", s)
		}
	}
}

func TestTouchKeepsStreamAlive(t *testing.T) {
	c, clk := newTest(t, Config{IdleTimeout: 300 * time.Second})
	stream := mustAcquire(t, c, "a", 0)
	idle := mustAcquire(t, c, "a", 0)
	h := stream.Handle()
	for range 10 { // an hour-long stream that shows activity every 200 s
		clk.Advance(200 * time.Second)
		if i := clk.Now().Sub(clock.Start) / (200 * time.Second); i%2 == 0 {
			stream.Touch()
		} else {
			h.Touch()
		}
		c.Sweep()
	}
	s := stats(t, c, "a")
	if s.Current != 1 || s.Leaked != 1 {
		t.Fatalf("stats %+v, want the stream alive (current 1) and the idle one leaked", s)
	}
	idle.Release()
	stream.Release()
	if s := stats(t, c, "a"); s.Current != 0 || s.Leaked != 1 {
		t.Fatalf("end %+v, want current 0, leaked 1", s)
	}
}

// TestSweepLoop: the background loop sweeps at the configured interval, and picks up a new
// interval from Update. It runs in a synctest bubble: time is fake, and synctest.Wait returns
// once the loop has swept and is waiting again.
func TestSweepLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Config{IdleTimeout: time.Second, SweepInterval: time.Hour}, nil)
		defer c.Close()
		mustAcquire(t, c, "a", 0)
		time.Sleep(2 * time.Second) // past IdleTimeout; the hourly sweep is far away
		synctest.Wait()
		if s := stats(t, c, "a"); s.Current != 1 || s.Leaked != 0 {
			t.Fatalf("stats %+v before any sweep, want current 1, leaked 0", s)
		}
		c.Update(Config{IdleTimeout: time.Second, SweepInterval: time.Millisecond}) // the loop picks up the new interval
		// The first sweep sees it active; the first more than IdleTimeout later releases it.
		time.Sleep(time.Second + 2*time.Millisecond)
		synctest.Wait()
		if s := stats(t, c, "a"); s.Current != 0 || s.Leaked != 1 {
			t.Fatalf("stats %+v after the loop swept, want current 0, leaked 1", s)
		}
		c.Close()
		c.Close() // idempotent
	})
}

// The counters of an app KeepApps no longer keeps (a reload removed it) go at the first sweep
// that finds nothing of theirs in flight; the kept ones stay, idle or not. (They stayed for the
// life of the process: 20 apps added and removed left 80 metric series and 25 apps listed.)
func TestSweepForgetsRemovedApps(t *testing.T) {
	c, _ := newTest(t, Config{})
	c.KeepApps(func(app string) bool { return app != "gone" })
	gone := mustAcquire(t, c, "gone", 0)
	mustAcquire(t, c, "kept", 0).Release()
	listed := func() map[string]bool {
		m := map[string]bool{}
		for _, s := range c.Snapshot() {
			m[s.App] = true
		}
		return m
	}
	c.Sweep()
	if l := listed(); !l["gone"] || !l["kept"] {
		t.Fatalf("with a request in flight: listed %v, want both apps", l)
	}
	gone.Release()
	c.Sweep()
	if l := listed(); l["gone"] || !l["kept"] {
		t.Fatalf("after it ended: listed %v, want kept only", l)
	}
}

// A swept ticket stays with its holder until the holder's Release: only then does it go back on
// its shard's free list, so the next request's Acquire cannot be handed a ticket still held.
func TestSweptTicketRecycledOnRelease(t *testing.T) {
	c, clk := newTest(t, Config{IdleTimeout: time.Second})
	leak := mustAcquire(t, c, "a", 0)
	sh := leak.shard
	c.Sweep()
	clk.Advance(2 * time.Second)
	c.Sweep() // force-releases leak
	if s := stats(t, c, "a"); s.Leaked != 1 {
		t.Fatalf("after the sweep %+v, want leaked 1", s)
	}
	if onFreeList(sh, leak) {
		t.Fatal("a swept ticket is on the free list while its holder still has it")
	}
	leak.Release()
	if !onFreeList(sh, leak) {
		t.Fatal("the holder released a swept ticket, and it is not on its shard's free list")
	}
	leak.Release() // a second Release does not put it there twice
	n := 0
	for f := sh.free; f != nil; f = f.next {
		n++
	}
	if n != 1 {
		t.Fatalf("free list of %d tickets, want 1", n)
	}
}

// onFreeList reports whether t is on sh's free list.
func onFreeList(sh *shard, t *Ticket) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for f := sh.free; f != nil; f = f.next {
		if f == t {
			return true
		}
	}
	return false
}
