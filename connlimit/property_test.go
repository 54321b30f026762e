package connlimit

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// The counters: +1 per acquire, −1 per release (once), never negative, peak is a max;
// and current == acquired − released − leaked, for every app and for the cluster.

const (
	propIdle    = 10 * time.Second
	propCluster = 6
	propApp     = 3 // Config.App: the limit of Acquire(app, 0)
)

var propApps = []string{"a", "b", "c"}

// modelCounts is the model of one scope.
type modelCounts struct {
	acquired, released, leaked, rejected, peak, remote int64
}

func (m *modelCounts) current() int64 { return m.acquired - m.released - m.leaked }

// held is one acquisition the test holds.
type held struct {
	t     *Ticket
	h     Handle
	app   string
	fresh bool          // activity since the last sweep
	seen  time.Duration // when a sweep last found it fresh, model time
	swept bool          // force-released by the sweep, holder not yet told
	done  bool          // ended by the holder's Release (or the holder's Release after a sweep)
}

type connMachine struct {
	c       *Counter
	clk     *clock.Manual
	cluster modelCounts
	apps    map[string]*modelCounts
	held    []*held
}

func (m *connMachine) pick(t *rapid.T, label string, ok func(*held) bool) *held {
	var hs []*held
	for _, h := range m.held {
		if ok(h) {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		t.Skip("nothing to " + label)
	}
	return rapid.SampledFrom(hs).Draw(t, label)
}

func (m *connMachine) Acquire(t *rapid.T) {
	app := rapid.SampledFrom(propApps).Draw(t, "app")
	limit := rapid.Int64Range(0, 4).Draw(t, "limit")
	eff := limit
	if eff == 0 {
		eff = propApp
	}
	a := m.apps[app]
	tk, r := m.c.Acquire(app, limit)
	switch {
	case a.current()+a.remote >= eff: // the app is checked first
		if tk != nil || r != store.ReasonAppLimitExceeded {
			t.Fatalf("Acquire = %v, %v; want app_limit_exceeded", tk, r)
		}
		a.rejected++
	case m.cluster.current()+m.cluster.remote >= propCluster:
		if tk != nil || r != store.ReasonClusterLimitExceeded {
			t.Fatalf("Acquire = %v, %v; want cluster_limit_exceeded", tk, r)
		}
		m.cluster.rejected++
	default:
		if tk == nil || r != store.ReasonNone {
			t.Fatalf("Acquire = %v, %v; want a ticket", tk, r)
		}
		a.acquired++
		m.cluster.acquired++
		a.peak = max(a.peak, a.current())
		m.cluster.peak = max(m.cluster.peak, m.cluster.current())
		m.held = append(m.held, &held{t: tk, h: tk.Handle(), app: app, fresh: true})
	}
}

// Release ends a held acquisition through the Ticket, twice: the second call is a no-op. A
// swept ticket's release changes nothing.
func (m *connMachine) Release(t *rapid.T) {
	h := m.pick(t, "release", func(h *held) bool { return !h.done })
	if !h.swept {
		m.apps[h.app].released++
		m.cluster.released++
	}
	h.done = true
	if rapid.Bool().Draw(t, "via handle") {
		h.h.Release()
	} else {
		h.t.Release()
	}
	h.t.Release()
}

// StaleRelease releases an ended acquisition through its Handle, after the Ticket may have
// been recycled: a no-op.
func (m *connMachine) StaleRelease(t *rapid.T) {
	h := m.pick(t, "stale", func(h *held) bool { return h.done })
	h.h.Release()
	h.h.Touch()
}

func (m *connMachine) Touch(t *rapid.T) {
	h := m.pick(t, "touch", func(h *held) bool { return !h.done })
	h.t.Touch()
	if !h.swept {
		h.fresh = true
	}
}

func (m *connMachine) Advance(t *rapid.T) {
	// Whole seconds, so that idle == IdleTimeout exactly (not swept) comes up often.
	m.clk.Advance(time.Duration(rapid.IntRange(0, 2*int(propIdle/time.Second)).Draw(t, "advance")) * time.Second)
}

func (m *connMachine) Sweep(t *rapid.T) {
	m.c.Sweep()
	for _, h := range m.held {
		if h.done || h.swept {
			continue
		}
		if h.fresh {
			h.fresh, h.seen = false, m.now()
		} else if m.now()-h.seen > propIdle {
			h.swept = true
			m.apps[h.app].leaked++
			m.cluster.leaked++
		}
	}
}

func (m *connMachine) SetRemote(t *rapid.T) {
	remote := map[string]int64{}
	for _, app := range propApps {
		m.apps[app].remote = 0
		if rapid.Bool().Draw(t, "has "+app) {
			n := rapid.Int64Range(0, 3).Draw(t, "remote "+app)
			remote[app] = n
			m.apps[app].remote = n
		}
	}
	m.cluster.remote = rapid.Int64Range(0, 5).Draw(t, "remote cluster")
	m.c.SetRemote(remote, m.cluster.remote)
}

func (m *connMachine) now() time.Duration { return m.clk.Now().Sub(clock.Start) }

// Check compares every scope with the model.
func (m *connMachine) Check(t *rapid.T) {
	for _, s := range m.c.Snapshot() {
		want := &m.cluster
		if s.App != "" {
			want = m.apps[s.App]
		}
		if s.Current < 0 || s.Peak < s.Current {
			t.Fatalf("%q: current %d, peak %d: negative or peak below current", s.App, s.Current, s.Peak)
		}
		if s.Current != want.current() || s.Peak != want.peak || s.Leaked != want.leaked ||
			s.Rejected != want.rejected || s.Remote != want.remote {
			t.Fatalf("%q: got %+v, want current %d (= %d acquired − %d released − %d leaked), peak %d, leaked %d, rejected %d, remote %d",
				s.App, s, want.current(), want.acquired, want.released, want.leaked, want.peak,
				want.leaked, want.rejected, want.remote)
		}
	}
}

func TestPropertyCounters(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := clock.NewManual()
		m := &connMachine{
			c:    New(Config{App: propApp, Cluster: propCluster, IdleTimeout: propIdle, SweepInterval: time.Hour}, clk),
			clk:  clk,
			apps: map[string]*modelCounts{},
		}
		defer m.c.Close()
		for _, app := range propApps {
			m.apps[app] = &modelCounts{}
		}
		t.Repeat(rapid.StateMachineActions(m))
	})
}
