package limiter

import (
	"errors"
	"sync/atomic"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Limiter is the L3 tier of one cluster: the local buckets of its apps, their leases from the
// Store, the sync loop that reports statistics and receives L1's state, and the degradation
// level. One Limiter lives per cluster per process and survives config reloads (Update).
type Limiter struct {
	store store.Store
	clock clock.Clock

	state atomic.Pointer[store.ClusterState] // L1's state from the last report

	cat    catalog       // the buckets and the configuration in force (catalog.go)
	active activeList    // the apps the sync loop visits (active.go)
	deg    degrader      // the degradation level (level.go)
	syncer syncer        // the sync loop's state (report.go)
	tally  statsTally    // statistics Seqs and delivery counts (appstats.go)
	lostEm lostEmergency // the operator emergency the Store lost (emergency.go)

	ovr overrides // the admin API's overrides (overrides_limiter.go)

	capLog capacityLog // the learned capacity's changes (capacity_state.go)

	stop    chan struct{}
	done    chan struct{}
	reload  chan struct{} // the Store's Watch: read the overrides again
	kick    chan struct{} // SyncNow: report and read the overrides now
	closed  atomic.Bool
	looping bool // the loop goroutine was started (New); Close waits for it

	spawn func(func()) // runs a lease; tests run it inline
}

// New validates cfg, builds the Limiter and starts its sync loop on the system clock. The
// Limiter does not own the Store: Close leaves it open.
func New(cfg Config, st store.Store) (*Limiter, error) { return newWithClock(cfg, st, nil) }

// newWithClock is New on clk (nil: the system clock).
func newWithClock(cfg Config, st store.Store, clk clock.Clock) (*Limiter, error) {
	l, err := newLimiter(cfg, st, clk)
	if err != nil {
		return nil, err
	}
	l.looping = true
	go l.loop()
	return l, nil
}

// newLimiter builds a Limiter without starting its loop (tests drive tick themselves).
func newLimiter(cfg Config, st store.Store, clk clock.Clock) (*Limiter, error) {
	if st == nil {
		return nil, errors.New("limiter: nil store")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		store:  st,
		clock:  clock.Or(clk),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		reload: make(chan struct{}, 1),
		kick:   make(chan struct{}, 1),
		spawn:  func(f func()) { go f() },
	}
	l.cat.isolated.m = make(map[string]*App)
	l.cat.unknown = new(appStats)
	l.cat.newApp = l.newApp
	l.deg.clock = l.clock
	l.deg.cfg = func() *Config { return &l.snap().cfg }
	l.deg.live = func() int { return l.state.Load().LiveInstances }
	l.state.Store(&store.ClusterState{Factors: [store.MaxPriority + 1]float64{1, 1, 1, 1}, LiveInstances: max(cfg.KnownInstances, 1)})
	now := l.clock.Now()
	l.syncer.lastReport, l.syncer.lastRate = now, now
	// Report Seqs start at the time in µs, so that a later Limiter with the same instance id
	// (a restart, a rebuilt pool) continues above its predecessor's (about 10 reports a second).
	l.syncer.seq = uint64(max(now.UnixMicro(), 0))
	l.tally.seq.Store(l.syncer.seq)
	s := &snapshot{cfg: cfg, apps: make(map[string]*App, len(cfg.Apps)), unallocated: unallocatedRate(cfg), sums: sumsOf(cfg), ids: new(sortedIDs)}
	for id, p := range cfg.Apps {
		s.apps[id] = l.newApp(id, id, p, new(appStats), false, &cfg)
	}
	if cfg.UnknownApp != UnknownReject {
		s.shared = l.newApp("*", "*", cfg.Default, l.cat.unknown, false, &cfg)
	}
	l.cat.cur.Store(s)
	l.ovr.base, l.ovr.merged = cfg, cfg
	return l, nil
}

// snap returns the configuration in force with its apps.
func (l *Limiter) snap() *snapshot { return l.cat.cur.Load() }

// Config returns the configuration in force, defaults applied.
func (l *Limiter) Config() Config { return l.snap().cfg }

// ConfigAndIDs returns the configuration in force and its apps' ids in order. The slice is
// shared by every caller until the set of apps changes: read it, never change it.
func (l *Limiter) ConfigAndIDs() (Config, []string) {
	s := l.snap()
	return s.cfg, s.sortedIDs()
}

// Configured reports whether label names one of the limiter's apps now (from the config or an
// admin override), or is "*", the label of every other id.
func (l *Limiter) Configured(label string) bool {
	if label == "*" {
		return true
	}
	_, ok := l.snap().apps[label]
	return ok
}

// State returns L1's state from the last successful report.
func (l *Limiter) State() store.ClusterState { return *l.state.Load() }

// App returns the bucket for an app id: the configured app, the shared unknown bucket, an
// isolated bucket, or nil with ReasonInvalidAppID / ReasonUnknownApp. It does not allocate for
// configured ids.
func (l *Limiter) App(id string) (*App, store.Reason) {
	s := l.cat.cur.Load()
	if a, ok := s.apps[id]; ok {
		return a, store.ReasonNone
	}
	if !ValidAppID(id) {
		return nil, store.ReasonInvalidAppID
	}
	switch s.cfg.UnknownApp {
	case UnknownReject:
		return nil, store.ReasonUnknownApp
	case UnknownIsolated:
		return l.cat.isolatedApp(id, s, l.clock), store.ReasonNone
	default: // UnknownShared
		return s.shared, store.ReasonNone
	}
}

// Update applies a new configuration (a reload): buckets, their tokens and statistics are kept,
// policies change in place, and the admin overrides in force still win over cfg (an override
// cfg makes invalid is left out and logged). Apps no longer configured give their unspent
// tokens back to L2 at the next tick. Update makes no Store call. The instance id,
// KnownInstances and OnLiveInstances cannot change.
func (l *Limiter) Update(cfg Config) error {
	l.ovr.mu.Lock()
	defer l.ovr.mu.Unlock()
	old := l.snap().cfg
	cfg.Instance, cfg.KnownInstances, cfg.OnLiveInstances = old.Instance, old.KnownInstances, old.OnLiveInstances
	if _, err := cfg.withDefaults(); err != nil {
		return err
	}
	l.ovr.base = cfg
	return l.applyOverrides(l.ovr.set)
}

// install makes cfg (overrides merged) the configuration in force (ovr.mu held).
func (l *Limiter) install(cfg Config) error { return l.cat.install(cfg, l.clock.Now()) }

// apps returns every bucket that may hold tokens or unsent statistics, in no particular order.
func (l *Limiter) apps() []*App { return l.cat.all() }

// ResentRequests is how many admitted requests' statistics were sent a second time because the
// Store had lost them after acknowledging them (a failover to a lagging replica, a restart).
func (l *Limiter) ResentRequests() int64 { return l.tally.resent.Load() }

// StatsFlushes is how many per-app statistics batches the cluster reports delivered: apps whose
// statistics no lease or return carried within StatsInterval (or SyncBatch of them waited, or
// the app was removed, or the limiter closed). Each is one Store call of its own for the app.
func (l *Limiter) StatsFlushes() int64 { return l.tally.flushes.Load() }
