package limiter

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/internal/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Limiter is the L3 tier of one cluster: the local buckets of its apps, their leases from the
// Store, the sync loop that reports statistics and receives L1's state, and the degradation
// level. One Limiter lives per cluster per process and survives config reloads (Update).
type Limiter struct {
	store store.Store
	clock clock.Clock

	cur   atomic.Pointer[snapshot]           // configuration and configured apps: read-mostly
	state atomic.Pointer[store.ClusterState] // L1's state from the last report

	deg degrader // the degradation level (level.go)

	mu       sync.Mutex // serialises install; guards retired
	retired  []*App     // removed apps whose statistics or tokens are not yet settled
	isoMu    sync.RWMutex
	isolated map[string]*App
	unknown  *appStats // statistics of every unknown app (label "*")

	activeMu sync.Mutex
	active   []*App // the apps the sync loop visits: all but the quiet ones (active.go)

	syncer syncer        // the sync loop's state (report.go)
	tally  statsTally    // statistics Seqs and delivery counts (appstats.go)
	lostEm lostEmergency // the operator emergency the Store lost (emergency.go)

	isolatedFull notice // the WARN of unknown ids beyond MaxIsolated

	overrides // the admin API's overrides (overrides_limiter.go)

	stop    chan struct{}
	done    chan struct{}
	reload  chan struct{} // the Store's Watch: read the overrides again
	kick    chan struct{} // SyncNow: report and read the overrides now
	closed  atomic.Bool
	looping bool // the loop goroutine was started (New); Close waits for it

	spawn func(func()) // runs a lease; tests run it inline
}

// snapshot is one immutable configuration with its apps.
type snapshot struct {
	cfg    Config
	apps   map[string]*App
	shared *App // the bucket of unknown apps; nil with UnknownReject

	unallocated float64 // LeaseRequest.Unallocated of this config (see unallocatedRate)
}

// unallocatedRate is the borrow pool's refill rate (LeaseRequest.Unallocated):
// (1 - reserved_ratio) × capacity - Σ the configured apps' guaranteed, at least 0; 0 without L1.
func unallocatedRate(cfg Config) float64 {
	if cfg.Cluster.Capacity <= 0 {
		return 0
	}
	sum := 0.0
	for _, p := range cfg.Apps {
		sum += p.Guaranteed
	}
	u := (1-cfg.Cluster.ReservedRatio)*cfg.Cluster.Capacity - sum
	if !(u > 0) {
		return 0
	}
	return u
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
		store:    st,
		clock:    clock.Or(clk),
		isolated: make(map[string]*App),
		unknown:  new(appStats),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		reload:   make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
		spawn:    func(f func()) { go f() },
	}
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
	s := &snapshot{cfg: cfg, apps: make(map[string]*App, len(cfg.Apps)), unallocated: unallocatedRate(cfg)}
	for id, p := range cfg.Apps {
		s.apps[id] = l.newApp(id, id, p, new(appStats), false, &cfg)
	}
	if cfg.UnknownApp != UnknownReject {
		s.shared = l.newApp("*", "*", cfg.Default, l.unknown, false, &cfg)
	}
	l.cur.Store(s)
	l.base = cfg
	return l, nil
}

func (l *Limiter) snap() *snapshot { return l.cur.Load() }

// Config returns the configuration in force, defaults applied.
func (l *Limiter) Config() Config { return l.snap().cfg }

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
	s := l.cur.Load()
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
		return l.isolatedApp(id, s), store.ReasonNone
	}
	return s.shared, store.ReasonNone
}

// isolatedApp returns id's own bucket, creating it while fewer than MaxIsolated exist; beyond
// the bound new ids share the "*" bucket, so that rotating ids can never buy more quota.
func (l *Limiter) isolatedApp(id string, s *snapshot) *App {
	l.isoMu.RLock()
	a := l.isolated[id]
	l.isoMu.RUnlock()
	if a != nil {
		return a
	}
	l.isoMu.Lock()
	defer l.isoMu.Unlock()
	if a = l.isolated[id]; a != nil {
		return a
	}
	if len(l.isolated) >= s.cfg.MaxIsolated {
		l.noteIsolatedFull(s)
		return s.shared
	}
	id = strings.Clone(id) // the caller's string may alias request memory
	a = l.newApp(id, "*", s.cfg.Default, l.unknown, true, &s.cfg)
	a.lastUse.Store(l.clock.Now().UnixNano())
	l.isolated[id] = a
	return a
}

// noteIsolatedFull logs that new unknown ids share the "*" bucket because MaxIsolated buckets
// exist: at once, then at most once per noticeEvery with the count since (isoMu held). Without
// it an operator had no signal: every isolated id is counted under "*" in the metrics anyway.
func (l *Limiter) noteIsolatedFull(s *snapshot) {
	times, _, ok := l.isolatedFull.due(l.clock.Now(), 0)
	if log := l.logger(); log != nil && ok {
		log.Warn("rate_limit: the bound on isolated buckets is reached: new unknown app ids share the \"*\" bucket "+
			"until idle ones expire",
			zap.String("cluster", s.cfg.Cluster.ID), zap.Int("max_isolated", s.cfg.MaxIsolated), zap.Int64("times", times))
	}
}

// Update applies a new configuration (a reload): buckets, their tokens and statistics are kept,
// policies change in place, and the admin overrides in force still win over cfg (an override
// cfg makes invalid is left out and logged). Apps no longer configured give their unspent
// tokens back to L2 at the next tick. Update makes no Store call. The instance id,
// KnownInstances and OnLiveInstances cannot change.
func (l *Limiter) Update(cfg Config) error {
	l.ovMu.Lock()
	defer l.ovMu.Unlock()
	old := l.cur.Load().cfg
	cfg.Instance, cfg.KnownInstances, cfg.OnLiveInstances = old.Instance, old.KnownInstances, old.OnLiveInstances
	if _, err := cfg.withDefaults(); err != nil {
		return err
	}
	l.base = cfg
	return l.applyOverrides(l.ov)
}

// install makes cfg (overrides merged) the configuration in force (ovMu held).
func (l *Limiter) install(cfg Config) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cur.Load()
	cfg.Instance, cfg.KnownInstances, cfg.OnLiveInstances = old.cfg.Instance, old.cfg.KnownInstances, old.cfg.OnLiveInstances
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	s := &snapshot{cfg: cfg, apps: make(map[string]*App, len(cfg.Apps)), unallocated: unallocatedRate(cfg)}
	var gone []*App
	for id, p := range cfg.Apps {
		if a := old.apps[id]; a != nil {
			a.setPolicy(p)
			s.apps[id] = a
		} else {
			s.apps[id] = l.newApp(id, id, p, new(appStats), false, &cfg)
		}
	}
	for id, a := range old.apps {
		if _, ok := s.apps[id]; !ok {
			gone = append(gone, a)
		}
	}
	// Unknown apps: keep the buckets while the mode stays; otherwise settle them.
	l.isoMu.Lock()
	if cfg.UnknownApp != old.cfg.UnknownApp {
		if old.shared != nil {
			gone = append(gone, old.shared)
		}
		for id, a := range l.isolated {
			gone = append(gone, a)
			delete(l.isolated, id)
		}
		if cfg.UnknownApp != UnknownReject {
			s.shared = l.newApp("*", "*", cfg.Default, l.unknown, false, &cfg)
		}
	} else {
		s.shared = old.shared
		if s.shared != nil {
			s.shared.setPolicy(cfg.Default)
		}
		for _, a := range l.isolated {
			a.setPolicy(cfg.Default)
		}
	}
	l.isoMu.Unlock()
	l.cur.Store(s)
	// Their tokens go back to L2 at the next tick (settleRetired), not here: a reload must not
	// wait on the Store, least of all while it is down.
	now := l.clock.Now()
	for _, a := range gone {
		a.retiredAt = now
	}
	l.retired = append(l.retired, gone...)
	return nil
}

// apps returns every bucket that may hold tokens or unsent statistics, in no particular order.
func (l *Limiter) apps() []*App {
	s := l.cur.Load()
	all := make([]*App, 0, len(s.apps)+1)
	for _, a := range s.apps {
		all = append(all, a)
	}
	if s.shared != nil {
		all = append(all, s.shared)
	}
	l.isoMu.RLock()
	for _, a := range l.isolated {
		all = append(all, a)
	}
	l.isoMu.RUnlock()
	l.mu.Lock()
	all = append(all, l.retired...)
	l.mu.Unlock()
	return all // in no particular order: sorting 20 000 apps was most of a tick's CPU
}

// ResentRequests is how many admitted requests' statistics were sent a second time because the
// Store had lost them after acknowledging them (a failover to a lagging replica, a restart).
func (l *Limiter) ResentRequests() int64 { return l.tally.resent.Load() }

// StatsFlushes is how many per-app statistics batches the cluster reports delivered: apps whose
// statistics no lease or return carried within StatsInterval (or SyncBatch of them waited, or
// the app was removed, or the limiter closed). Each is one Store call of its own for the app.
func (l *Limiter) StatsFlushes() int64 { return l.tally.flushes.Load() }

// Close stops the sync loop, sends the pending statistics and returns every unspent token to
// L2. After Close, takes are served from local tokens only (there are none left), so they are
// rejected with ReasonRedisUnavailable. The Store is not closed.
func (l *Limiter) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(l.stop)
	if l.looping {
		<-l.done // a tick in progress finishes first (its Store calls are bounded)
	}
	l.syncer.mu.Lock()
	defer l.syncer.mu.Unlock()
	if l.syncer.unwatch != nil {
		l.syncer.unwatch()
	}
	now := l.clock.Now()
	// The pending cost batch is sent first (with its Seq), then what was admitted since, with
	// every app's statistics. A Limiter with nothing to send makes no Store call (`caddy
	// validate` provisions and closes one; a state a reload replaces after its reports failed).
	var err error
	if l.Level() == LevelFailOpen {
		// Known to be away: not asked at all. A call would wait for a new connection's
		// handshake, which go-redis bounds by its socket timeout (1 s), not by the call's: a
		// reload away from a frozen Redis took 1.5 s, 2.9 s with two states to close.
		err = errFailOpen
	} else if (l.syncer.pending != nil && l.syncer.pending.cost > 0) || l.unsent() {
		err = l.report(now, l.apps(), true)
		if err == nil && l.unsent() {
			err = l.report(now, l.apps(), true)
		}
	}
	statsLost := err != nil
	// After one failed call the Store is not asked again: a shutdown during an outage would
	// otherwise wait a timeout per app holding tokens (a frozen Redis: a second each).
	var lost, losers int64
	for _, a := range l.apps() {
		n := a.takeTokens(0)
		if n == 0 {
			continue
		}
		if err == nil {
			if err = a.giveBack(now, n); err == nil {
				continue
			}
		} else {
			a.dropped.Add(n)
		}
		lost, losers = lost+n, losers+1
	}
	l.deg.closing()
	if err == nil {
		return nil
	}
	var what []string
	if losers > 0 {
		what = append(what, fmt.Sprintf("%d unspent tokens of %d apps were not returned (their buckets refill them)", lost, losers))
	}
	if statsLost {
		what = append(what, "the statistics not yet sent are lost")
	}
	return fmt.Errorf("the Store failed while closing and was not asked again: %s: %w", strings.Join(what, "; "), err)
}

// unsent reports whether some app has statistics or cost not yet acknowledged (syncer.mu held).
func (l *Limiter) unsent() bool {
	for _, a := range l.apps() {
		if !a.statsSettled() || a.settledCost.Load() > a.costSent {
			return true
		}
	}
	return false
}
