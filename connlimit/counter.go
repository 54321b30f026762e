package connlimit

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// MaxApps is the default bound on the number of per-app counters (Config.MaxApps). The root passes only configured app ids and
// "*" (all unknown apps), so the set is bounded by the config; this cap is a second line of
// defence: past it, new ids are counted under "*" instead of growing the map.
const MaxApps = 10000

// UnknownApp is the id under which apps past MaxApps are counted.
const UnknownApp = "*"

// numShards is the number of active-ticket sets, a power of two (Acquire masks with it);
// tickets spread over them so that Acquire and Release of different requests rarely share a
// mutex.
const numShards = 64

// counts are one scope's counters (an app, or the cluster). All fields are atomics: the hot
// path never locks them.
type counts struct {
	current  atomic.Int64 // in flight on this instance
	peak     atomic.Int64 // max of current ever seen
	rejected atomic.Int64 // acquisitions refused by this scope's limit
	leaked   atomic.Int64 // tickets force-released by the sweep
	remote   atomic.Int64 // in flight on (or, with slots, held by) the other live instances
	limit    atomic.Int64 // last limit applied (for Snapshot)
	held     atomic.Int64 // slots this instance holds (UseSlots)
	recent   atomic.Int64 // about the max of current since the last trim (UseSlots)
	waiting  atomic.Int64 // requests waiting for another request's slot lease (grow)

	slotSem      chan struct{} // one slot lease at a time per scope (cap 1); guards idle, refusedUntil
	idle         int           // trims in a row with nothing in flight
	refusedUntil int64         // Counter clock: until then a holding that cannot grow is not asked for
}

// tryAcquire adds one to current if current + remote stays below limit, without ever showing
// an over-count to concurrent readers, and returns the new current.
func (c *counts) tryAcquire(limit int64) (int64, bool) {
	remote := c.remote.Load()
	for {
		cur := c.current.Load()
		if cur+remote >= limit {
			return cur, false
		}
		if c.current.CompareAndSwap(cur, cur+1) {
			return cur + 1, true
		}
	}
}

// raisePeak sets peak to max(peak, n).
func (c *counts) raisePeak(n int64) {
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// raiseRecent makes recent at least n. Not exact under races (two admissions may store in the
// wrong order): it only steers how much of a holding a trim keeps.
func (c *counts) raiseRecent(n int64) {
	if n > c.recent.Load() {
		c.recent.Store(n)
	}
}

// setLimit records the limit for Snapshot, writing only when it changed to keep the line clean.
func (c *counts) setLimit(limit int64) {
	if c.limit.Load() != limit {
		c.limit.Store(limit)
	}
}

// appCounts is one app's counters.
type appCounts struct {
	counts
	name string
}

// shard is one set of active tickets, an intrusive doubly linked list, and the shard's free
// tickets, a singly linked list, under one small mutex: taking a ticket and making it findable
// by the sweep is one critical section, and so is giving it back. The free list holds at most
// the shard's peak of tickets in flight at once.
type shard struct {
	mu   sync.Mutex
	head *Ticket  // active tickets
	free *Ticket  // released tickets, linked through next
	_    [40]byte // one shard per cache line
}

// Counter counts in-flight requests per app and for one cluster and enforces their limits
// against this instance's counts plus the other live instances' last reports.
// It implements limiter.InFlightSource through InFlight and SetRemote. All methods are safe
// for concurrent use.
type Counter struct {
	now   clock.Clock
	epoch time.Time // activity times are durations since epoch (monotonic with the system clock)
	real  bool      // now is the system clock: c.clock uses time.Since, which reads only the monotonic clock
	cfg   atomic.Pointer[Config]

	cluster counts
	apps    atomic.Pointer[map[string]*appCounts] // copy-on-write: lock-free reads
	appsMu  sync.Mutex                            // serialises writers of apps

	shards [numShards]shard

	keep     atomic.Pointer[func(app string) bool] // KeepApps
	slots    atomic.Pointer[SlotSource]            // fleet-wide slots (UseSlots); nil: local + reported counts
	trimOnce sync.Once
	restates atomic.Int32  // Rejoined: how many more trims lease every holding again
	restate  chan struct{} // wakes the trim loop for it

	reset     chan struct{} // Update → loop: the sweep interval may have changed
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a Counter for one cluster and starts its leak sweep loop (stopped by Close).
// Zero or negative fields of cfg take their defaults (call cfg.Validate first to reject them).
// clk is the clock (nil = the system clock); tests inject one and call Sweep themselves.
func New(cfg Config, clk clock.Clock) *Counter {
	_, real := clock.Or(clk).(clock.System)
	c := &Counter{
		now:     clock.Or(clk),
		real:    real,
		epoch:   clock.Or(clk).Now(),
		reset:   make(chan struct{}, 1),
		restate: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	cfg = sanitize(cfg)
	c.cfg.Store(&cfg)
	c.cluster.limit.Store(cfg.Cluster)
	c.cluster.slotSem = make(chan struct{}, 1)
	apps := map[string]*appCounts{}
	c.apps.Store(&apps)
	go c.loop(cfg.SweepInterval)
	return c
}

// sanitize replaces every zero or negative field by its default.
func sanitize(cfg Config) Config {
	if cfg.App < 0 {
		cfg.App = 0
	}
	if cfg.Cluster < 0 {
		cfg.Cluster = 0
	}
	if cfg.IdleTimeout < 0 {
		cfg.IdleTimeout = 0
	}
	if cfg.SweepInterval < 0 {
		cfg.SweepInterval = 0
	}
	return cfg.withDefaults()
}

// Acquire takes one in-flight slot for app (appLimit is the app's max_connections; <= 0 means
// Config.App). It admits only if, for the app and then for the cluster, local + remote < limit
// (with slots: a slot of this instance's holding is free, or the holding can grow);
// otherwise it returns (nil, reason), counts the rejection in the scope that refused, and
// leaves every current count as it was. The caller must Release the ticket when the request
// ends. 0 allocations for an app already seen.
func (c *Counter) Acquire(app string, appLimit int64) (*Ticket, store.Reason) {
	cfg := c.cfg.Load()
	if appLimit <= 0 {
		appLimit = cfg.App
	}
	a := c.app(app)
	a.setLimit(appLimit)
	// The app first: a request its app refuses takes no cluster slot (and grows no holding).
	var deadline time.Time // of the Store calls growing holdings: one Store timeout in all
	na, ok := c.take(&a.counts, app, appLimit, &deadline)
	if !ok {
		a.rejected.Add(1)
		return nil, store.ReasonAppLimitExceeded
	}
	nc, ok := c.take(&c.cluster, "", cfg.Cluster, &deadline)
	if !ok {
		a.current.Add(-1) // roll back: the request never got in
		c.cluster.rejected.Add(1)
		return nil, store.ReasonClusterLimitExceeded
	}
	// Peaks only count admitted requests, so a rolled-back cluster slot never shows as a peak.
	c.cluster.raisePeak(nc)
	a.raisePeak(na)
	c.cluster.raiseRecent(nc)
	a.raiseRecent(na)
	// The shard of the cluster's new count: requests in flight at once took distinct counts, so
	// they spread over the shards without a shared counter or a random draw.
	return c.shards[nc&(numShards-1)].activate(c, a), store.ReasonNone
}

// Limits returns the limit and the fleet-wide current count (local + remote) of app, for the
// X-Connection-Limit/Current headers (remaining = limit - current, floored at 0). appLimit <= 0
// means Config.App. app "" (never a valid app id) asks for the cluster's figures.
func (c *Counter) Limits(app string, appLimit int64) (limit, current int64) {
	cfg := c.cfg.Load()
	if app == "" {
		return cfg.Cluster, c.cluster.current.Load() + c.cluster.remote.Load()
	}
	if appLimit <= 0 {
		appLimit = cfg.App
	}
	a := (*c.apps.Load())[app]
	if a == nil {
		return appLimit, 0
	}
	return appLimit, a.current.Load() + a.remote.Load()
}

// Update applies a reloaded config; counters, peaks and in-flight tickets are kept. Zero or
// negative fields take their defaults.
func (c *Counter) Update(cfg Config) {
	cfg = sanitize(cfg)
	c.cfg.Store(&cfg)
	c.cluster.limit.Store(cfg.Cluster)
	select {
	case c.reset <- struct{}{}:
	default: // a reset is already pending; the loop reads the newest config
	}
}

// Close stops the sweep loop. The Counter still counts afterwards; it just no longer sweeps.
func (c *Counter) Close() {
	c.closeOnce.Do(func() { close(c.stop) })
	<-c.done
}

// loop runs Sweep every SweepInterval until Close.
func (c *Counter) loop(interval time.Duration) {
	defer close(c.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
			c.Sweep()
		case <-c.reset:
			tick.Reset(c.cfg.Load().SweepInterval)
		}
	}
}

// clock is the injected clock's now as a duration since the Counter's creation.
func (c *Counter) clock() int64 {
	if c.real {
		return int64(time.Since(c.epoch)) // reads only the monotonic clock
	}
	return int64(c.now.Now().Sub(c.epoch))
}

// app returns app's counters, creating them on first use (bounded by MaxApps).
func (c *Counter) app(name string) *appCounts {
	if a := (*c.apps.Load())[name]; a != nil {
		return a
	}
	return c.addApp(name)
}

// KeepApps sets which apps' counters are kept: the others go once nothing of theirs is in flight
// or held, at the next sweep (an app a reload removed; its requests count under "*" from then
// on), so that neither the admin API nor the metrics list them for the life of the process.
func (c *Counter) KeepApps(keep func(app string) bool) { c.keep.Store(&keep) }

// forgetApps drops the counters of apps KeepApps no longer keeps, once idle (Sweep).
func (c *Counter) forgetApps() {
	keep := c.keep.Load()
	if keep == nil {
		return
	}
	c.appsMu.Lock()
	defer c.appsMu.Unlock()
	old := *c.apps.Load()
	var gone []string
	for name, a := range old {
		if !(*keep)(name) && a.current.Load() == 0 && a.held.Load() == 0 {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return
	}
	apps := make(map[string]*appCounts, len(old))
	for k, v := range old {
		apps[k] = v
	}
	for _, name := range gone {
		delete(apps, name)
	}
	c.apps.Store(&apps)
}

// addApp creates name's counters by copying the map (rare: once per app).
func (c *Counter) addApp(name string) *appCounts {
	c.appsMu.Lock()
	defer c.appsMu.Unlock()
	old := *c.apps.Load()
	if a := old[name]; a != nil {
		return a
	}
	if len(old) >= c.cfg.Load().MaxApps && name != UnknownApp {
		if a := old[UnknownApp]; a != nil {
			return a
		}
		name = UnknownApp
	}
	a := &appCounts{name: name}
	a.slotSem = make(chan struct{}, 1)
	a.limit.Store(c.cfg.Load().App)
	apps := make(map[string]*appCounts, len(old)+1)
	for k, v := range old {
		apps[k] = v
	}
	apps[name] = a
	c.apps.Store(&apps)
	return a
}
