package limiter

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// snapshot is one immutable configuration with its apps.
type snapshot struct {
	cfg    Config
	apps   map[string]*App
	shared *App // the bucket of unknown apps; nil with UnknownReject

	unallocated float64 // LeaseRequest.Unallocated of this config (see unallocatedRate)
	sums        prioritySums
	ids         *sortedIDs // apps' ids, sorted on first use; shared by the snapshots of one id set
}

// sortedIDs are the ids of a snapshot's apps in order, computed once: the admin API's lists
// and its once-a-second sampler read them, and sorting tens of thousands of ids each time
// would be most of their work.
type sortedIDs struct {
	once sync.Once
	ids  []string
}

func (s *snapshot) sortedIDs() []string {
	s.ids.once.Do(func() {
		s.ids.ids = slices.Sorted(maps.Keys(s.apps))
	})
	return s.ids.ids
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

// newAppFunc builds a bucket (Limiter.newApp).
type newAppFunc func(id, label string, p store.AppPolicy, st *appStats, isolated bool, cfg *Config) *App

// catalog is every bucket of the Limiter: the configuration in force with its configured apps
// and shared unknown bucket (an immutable snapshot behind an atomic pointer, so that a take
// finds its app without a lock), the isolated buckets of unknown ids, and the retired buckets
// whose tokens or statistics are not yet settled. mu serialises install; the isolated and
// retired sets have locks of their own, taken after mu and never together.
type catalog struct {
	mu       sync.Mutex // serialises install
	cur      atomic.Pointer[snapshot]
	isolated isolatedSet
	retired  retiredSet
	unknown  *appStats // statistics of every unknown app (label "*")
	newApp   newAppFunc
}

// prepare returns cfg as install would put it in force: the instance fields of the
// configuration in force, defaults applied and validated. It changes nothing, so that a change
// can be refused before it is written anywhere.
func (c *catalog) prepare(cfg Config) (Config, error) {
	old := c.cur.Load()
	cfg.Instance, cfg.KnownInstances, cfg.OnLiveInstances = old.cfg.Instance, old.cfg.KnownInstances, old.cfg.OnLiveInstances
	return cfg.withDefaults()
}

// install makes cfg the configuration in force at now (its instance fields are kept): buckets
// of apps still configured keep their tokens and statistics and take their new policy, the new
// ones are built, and the others are retired (their tokens go back to L2 at a later tick, not
// here: a reload must not wait on the Store, least of all while it is down).
func (c *catalog) install(cfg Config, now time.Time) error {
	cfg, err := c.prepare(cfg)
	if err != nil {
		return err
	}
	c.put(cfg, now)
	return nil
}

// put is install of a prepared configuration. Its work grows with the apps whose policy
// changed, plus one comparison per configured app: with tens of thousands of apps an admin
// change of one app must not rebuild every bucket's entry. The apps map of the snapshot in
// force is reused while the set of ids stays the same (a snapshot's map is never written).
func (c *catalog) put(cfg Config, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cur.Load()
	s := &snapshot{cfg: cfg, unallocated: unallocatedRate(cfg), sums: sumsOf(cfg)}
	var changed, added []string
	for id, p := range cfg.Apps {
		switch was, ok := old.cfg.Apps[id]; {
		case !ok:
			added = append(added, id)
		case was != p:
			changed = append(changed, id)
		}
	}
	for _, id := range changed {
		old.apps[id].setPolicy(cfg.Apps[id])
	}
	// Every id of cfg is in old or added: the ids of old that are not in cfg are as many as
	// len(old) + len(added) - len(cfg), and a pass to find them is needed only when there are.
	var gone []*App
	s.apps, s.ids = old.apps, old.ids
	if len(added) > 0 || len(cfg.Apps) != len(old.apps) {
		s.apps, s.ids = maps.Clone(old.apps), new(sortedIDs)
		if len(old.apps)+len(added) > len(cfg.Apps) {
			for id, a := range old.apps {
				if _, ok := cfg.Apps[id]; !ok {
					gone = append(gone, a)
					delete(s.apps, id)
				}
			}
		}
		for _, id := range added {
			s.apps[id] = c.newApp(id, id, cfg.Apps[id], new(appStats), false, &cfg)
		}
	}
	// Unknown apps: keep the buckets while the mode stays; otherwise settle them.
	if cfg.UnknownApp != old.cfg.UnknownApp {
		if old.shared != nil {
			gone = append(gone, old.shared)
		}
		gone = append(gone, c.isolated.drain()...)
		if cfg.UnknownApp != UnknownReject {
			s.shared = c.newApp("*", "*", cfg.Default, c.unknown, false, &cfg)
		}
	} else {
		s.shared = old.shared
		if s.shared != nil {
			s.shared.setPolicy(cfg.Default)
		}
		c.isolated.setPolicy(cfg.Default)
	}
	c.cur.Store(s)
	c.retired.add(now, gone)
}

// all returns every bucket that may hold tokens or unsent statistics, in no particular order
// (sorting tens of thousands of apps would be most of a tick's work).
func (c *catalog) all() []*App {
	s := c.cur.Load()
	all := make([]*App, 0, len(s.apps)+1)
	for _, a := range s.apps {
		all = append(all, a)
	}
	if s.shared != nil {
		all = append(all, s.shared)
	}
	all = c.isolated.appendTo(all)
	return c.retired.appendTo(all)
}

// isolatedApp returns id's own bucket, creating it while fewer than MaxIsolated exist; beyond
// the bound new ids share the "*" bucket, so that rotating ids can never buy more quota.
func (c *catalog) isolatedApp(id string, s *snapshot, clk clock.Clock) *App {
	if a := c.isolated.get(id); a != nil {
		return a
	}
	a, full := c.isolated.add(id, s.cfg.MaxIsolated, func(id string) *App {
		a := c.newApp(id, "*", s.cfg.Default, c.unknown, true, &s.cfg)
		a.lastUse.Store(clk.Now().UnixNano())
		return a
	})
	if !full {
		return a
	}
	// Logged at once, then at most once per noticeEvery with the count since: every isolated
	// id is counted under "*" in the metrics, so this line is the operator's only signal.
	times, _, ok := c.isolated.full.due(clk.Now(), 0)
	if log := s.cfg.Logger; log != nil && ok {
		log.Warn("rate_limit: the bound on isolated buckets is reached: new unknown app ids share the \"*\" bucket "+
			"until idle ones expire",
			zap.String("cluster", s.cfg.Cluster.ID), zap.Int("max_isolated", s.cfg.MaxIsolated), zap.Int64("times", times))
	}
	return s.shared
}

// isolatedSet is the buckets of unknown ids with UnknownIsolated, by id. mu guards m; full
// throttles the WARN of the bound being reached.
type isolatedSet struct {
	mu   sync.RWMutex
	m    map[string]*App
	full notice
}

// get returns id's bucket, or nil.
func (s *isolatedSet) get(id string) *App {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[id]
}

// add returns id's bucket, building it with mk unless limit buckets exist (full).
func (s *isolatedSet) add(id string, limit int, mk func(id string) *App) (a *App, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a = s.m[id]; a != nil {
		return a, false
	}
	if len(s.m) >= limit {
		return nil, true
	}
	id = strings.Clone(id) // the caller's string may alias request memory
	a = mk(id)
	s.m[id] = a
	return a, false
}

// len is the number of isolated buckets.
func (s *isolatedSet) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}

// drain removes every bucket and returns them.
func (s *isolatedSet) drain() []*App {
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := make([]*App, 0, len(s.m))
	for id, a := range s.m {
		gone = append(gone, a)
		delete(s.m, id)
	}
	return gone
}

// setPolicy gives every bucket the policy p (the `app *` template).
func (s *isolatedSet) setPolicy(p store.AppPolicy) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, a := range s.m {
		a.setPolicy(p)
	}
}

// appendTo appends every bucket to dst.
func (s *isolatedSet) appendTo(dst []*App) []*App {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, a := range s.m {
		dst = append(dst, a)
	}
	return dst
}

// addTotals adds every bucket's local tokens, local debt and L2 borrowing to the totals
// (metrics).
func (s *isolatedSet) addTotals(held, debt *int64, borrowed, l2Debt *float64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, a := range s.m {
		b := a.balance.Load()
		*held += max(b, 0)
		*debt += max(-b, 0)
		ab, ad := a.Borrowing()
		*borrowed, *l2Debt = *borrowed+ab, *l2Debt+ad
	}
}

// expire removes and returns the buckets idle longer than ttl at now whose statistics are
// delivered or due. Removed while they may still wait, an isolated tenant's statistics would
// cost a flush of their own after its last request whatever the StatsInterval; retired, they
// are flushed at once.
func (s *isolatedSet) expire(now time.Time, ttl time.Duration) []*App {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []*App
	for id, a := range s.m {
		idle := now.UnixNano()-a.lastUse.Load() > int64(ttl)
		if idle && (a.statsSettled() || a.statsDue(now, false)) {
			delete(s.m, id)
			gone = append(gone, a)
		}
	}
	return gone
}

// retiredSet is the buckets a reload removed or an isolated id's expiry retired, kept until
// their tokens are returned and their statistics delivered. mu guards apps.
type retiredSet struct {
	mu   sync.Mutex
	apps []*App
}

// add retires apps at now.
func (r *retiredSet) add(now time.Time, apps []*App) {
	if len(apps) == 0 {
		return
	}
	for _, a := range apps {
		a.retiredAt = now
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apps = append(r.apps, apps...)
}

// appendTo appends every retired bucket to dst.
func (r *retiredSet) appendTo(dst []*App) []*App {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(dst, r.apps...)
}

// appendUnlisted appends to dst the retired buckets that are not on the active list.
func (r *retiredSet) appendUnlisted(dst []*App) []*App {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.apps {
		if !a.listed.Load() {
			dst = append(dst, a)
		}
	}
	return dst
}

// set is the retired buckets as a set (their statistics are flushed at once); nil when none.
func (r *retiredSet) set() map[*App]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.apps) == 0 {
		return nil
	}
	m := make(map[*App]bool, len(r.apps))
	for _, a := range r.apps {
		m[a] = true
	}
	return m
}

// settle returns the tokens of the retired buckets and forgets those with nothing left to
// return or report that were retired a minute ago or more. A take still holding a retired app
// (a request in flight during a reload) may lease again; its tokens are returned on a later
// call. Buckets retired meanwhile are kept after the ones looked at.
func (r *retiredSet) settle(now time.Time) {
	r.mu.Lock()
	retired := append([]*App(nil), r.apps...)
	r.mu.Unlock()
	var keep []*App
	for _, a := range retired {
		_ = a.returnTokens(now, 0)
		if !a.settled() || now.Sub(a.retiredAt) < time.Minute {
			keep = append(keep, a)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apps = append(keep, r.apps[len(retired):]...)
}
