package settings

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Defaults of the cluster's own fields. The concept packages own the defaults of their blocks
// (connections, local, redis).
const (
	DefaultCluster            = "default"
	DefaultReservedRatio      = 0.1
	DefaultEmergencyThreshold = 0.95

	// The `app *` template used when there is no `app *` block: every unknown app id shares
	// (or, isolated, each gets) a bucket of 100 tokens/s, burst 200, lowest priority.
	DefaultAppGuaranteed = 100
	DefaultAppBurst      = 200
	DefaultAppPriority   = store.MaxPriority
)

// DefaultEmergencyRatios are the refill factors per priority in emergency mode (P0 … P3): a
// fresh array each call, so no caller can change another's defaults.
func DefaultEmergencyRatios() [store.MaxPriority + 1]float64 {
	return [store.MaxPriority + 1]float64{1, 0.5, 0.1, 0}
}

// Wildcard is the id of the template policy for app ids without their own block.
const Wildcard = "*"

// Cluster is a cluster's shared-state settings as written: zero and nil fields take their
// defaults.
type Cluster struct {
	ID                 string
	Capacity           float64
	ReservedRatio      *float64
	EmergencyThreshold *float64
	EmergencyRatios    []float64
	UnknownApp         string          // shared (default), isolated or reject
	OnRedisFailure     string          // local (default), open or closed
	Apps               map[string]*App // by id; Wildcard is the template
	Local              *Local
	// Adaptive, if set, makes L1 learn the capacity from the backend's answers, starting from
	// Capacity (its defaults already applied: see the plugin's docs/adaptive.md).
	Adaptive *store.AdaptivePolicy
}

// App is one `app <id>` block.
type App struct {
	Guaranteed     float64
	Burst          float64 // default: guaranteed (at least 1)
	Priority       int
	MaxBorrow      float64
	Max            float64 // elastic ceiling, >= Guaranteed (default: Guaranteed)
	MaxConnections int64
	Warmup         time.Duration
	Disabled       bool
}

// Local is the `local` block: the L3 tuning knobs; zero fields take the limiter's defaults.
type Local struct {
	Reserve         int64
	RefillThreshold float64
	SyncInterval    time.Duration
	SyncBatch       int64
	LeaseTTL        time.Duration
	StatsInterval   time.Duration
}

// The shortest sync_interval and lease_ttl: below them an instance would report or give back
// tokens as fast as Redis answers (1ns made one idle gateway send 80 000 commands a second).
// Below MinStatsInterval every app with traffic would flush its statistics in every report.
const (
	MinSyncInterval  = 10 * time.Millisecond
	MinLeaseTTL      = 100 * time.Millisecond
	MinStatsInterval = time.Second
)

// Limiter validates c and returns the limiter configuration it describes, defaults applied
// (the instance id left for the caller). Errors name the field as in JSON and the Caddyfile.
func (c Cluster) Limiter() (limiter.Config, error) {
	var cfg limiter.Config
	cp, err := c.policy()
	if err != nil {
		return cfg, err
	}
	cfg.Cluster = cp
	unknown, ok := ParseUnknownApp(c.UnknownApp)
	if !ok {
		return cfg, fmt.Errorf("unknown_app must be shared, isolated or reject, got %q", c.UnknownApp)
	}
	cfg.UnknownApp = unknown
	fail, ok := ParseFailureMode(c.OnRedisFailure)
	if !ok {
		return cfg, fmt.Errorf("on_redis_failure must be local, open or closed, got %q", c.OnRedisFailure)
	}
	cfg.OnStoreFailure = fail
	if cfg.Apps, cfg.Default, err = appPolicies(c.Apps); err != nil {
		return cfg, err
	}
	if es := cfg.Admission(); len(es) > 0 {
		return cfg, fmt.Errorf("apps: %s", es[0].Problem)
	}
	if err := c.Local.apply(&cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// ParseUnknownApp parses unknown_app ("" is the default, shared).
func ParseUnknownApp(s string) (limiter.UnknownAppMode, bool) {
	switch s {
	case "", "shared":
		return limiter.UnknownShared, true
	case "isolated":
		return limiter.UnknownIsolated, true
	case "reject":
		return limiter.UnknownReject, true
	}
	return 0, false
}

// ParseFailureMode parses on_redis_failure ("" is the default, local).
func ParseFailureMode(s string) (limiter.FailureMode, bool) {
	switch s {
	case "", "local":
		return limiter.FailLocal, true
	case "open":
		return limiter.FailOpen, true
	case "closed":
		return limiter.FailClosed, true
	}
	return 0, false
}

// policy is the cluster's L1 policy: its id, capacity and emergency settings.
func (c Cluster) policy() (store.ClusterPolicy, error) {
	id := c.ID
	if id == "" {
		id = DefaultCluster
	}
	if !limiter.ValidAppID(id) {
		return store.ClusterPolicy{}, fmt.Errorf("cluster: invalid id %q (1-128 characters of [A-Za-z0-9._:-])", id)
	}
	cp := store.ClusterPolicy{
		ID:                 id,
		Capacity:           c.Capacity,
		ReservedRatio:      DefaultReservedRatio,
		EmergencyThreshold: DefaultEmergencyThreshold,
		EmergencyRatios:    DefaultEmergencyRatios(),
	}
	if c.Adaptive != nil {
		if c.Capacity <= 0 {
			return cp, fmt.Errorf("adaptive needs a capacity > 0 (the starting figure)")
		}
		cp.Adaptive = *c.Adaptive
	}
	if c.ReservedRatio != nil {
		cp.ReservedRatio = *c.ReservedRatio
	}
	if c.EmergencyThreshold != nil {
		cp.EmergencyThreshold = *c.EmergencyThreshold
	}
	if c.EmergencyRatios != nil {
		if len(c.EmergencyRatios) != store.MaxPriority+1 {
			return cp, fmt.Errorf("emergency_ratios needs %d values (P0..P%d), got %d",
				store.MaxPriority+1, store.MaxPriority, len(c.EmergencyRatios))
		}
		copy(cp.EmergencyRatios[:], c.EmergencyRatios)
	}
	if es := cp.Validate(); len(es) > 0 {
		return cp, es
	}
	return cp, nil
}

// appPolicies are the policies of the app blocks by id, and the template of the app ids
// without their own (the `app *` block, or the built-in one).
func appPolicies(blocks map[string]*App) (map[string]store.AppPolicy, store.AppPolicy, error) {
	apps := make(map[string]store.AppPolicy, len(blocks))
	template := store.AppPolicy{
		Guaranteed: DefaultAppGuaranteed,
		Burst:      DefaultAppBurst,
		Priority:   DefaultAppPriority,
	}
	for _, id := range SortedKeys(blocks) {
		if id != Wildcard && !limiter.ValidAppID(id) {
			return nil, template, fmt.Errorf("apps: invalid app id %q (1-128 characters of [A-Za-z0-9._:-], or *)", id)
		}
		p, err := AppPolicy(id, blocks[id])
		if err != nil {
			return nil, template, err
		}
		if id == Wildcard {
			template = p
			continue
		}
		apps[id] = p
	}
	return apps, template, nil
}

// AppPolicy turns one app block into the limiter's policy with defaults applied, or an error
// naming the app and the field.
func AppPolicy(id string, a *App) (store.AppPolicy, error) {
	name := fmt.Sprintf("apps[%q]", id)
	if a == nil {
		return store.AppPolicy{}, fmt.Errorf("%s: empty app block (guaranteed is required)", name)
	}
	p := store.AppPolicy{
		Guaranteed:     a.Guaranteed,
		Burst:          a.Burst,
		Priority:       a.Priority,
		MaxBorrow:      a.MaxBorrow,
		Max:            a.Max,
		MaxConnections: a.MaxConnections,
		Warmup:         a.Warmup,
		Disabled:       a.Disabled,
	}
	if p.Burst == 0 {
		p.Burst = max(p.Guaranteed, 1) // one request of cost 1 fits: `guaranteed 0.5` alone is valid
	}
	if es := p.Validate(); len(es) > 0 {
		return p, es.Prefixed(name + ".")
	}
	return p, nil
}

// apply validates the `local` block and sets its knobs in cfg (nil: every default).
func (l *Local) apply(cfg *limiter.Config) error {
	if l == nil {
		return nil
	}
	switch {
	case l.Reserve < 0:
		return fmt.Errorf("local.reserve must be >= 0, got %d", l.Reserve)
	case !finite(l.RefillThreshold) || l.RefillThreshold < 0 || l.RefillThreshold > 1:
		return fmt.Errorf("local.refill_threshold must be in [0,1], got %v", l.RefillThreshold)
	case l.SyncInterval < 0 || l.SyncInterval > 0 && l.SyncInterval < MinSyncInterval:
		return fmt.Errorf("local.sync_interval must be >= %v (0: the default), got %v", MinSyncInterval, l.SyncInterval)
	case l.SyncBatch < 0:
		return fmt.Errorf("local.sync_batch must be >= 0, got %d", l.SyncBatch)
	case l.LeaseTTL < 0 || l.LeaseTTL > 0 && l.LeaseTTL < MinLeaseTTL:
		return fmt.Errorf("local.lease_ttl must be >= %v (0: the default), got %v", MinLeaseTTL, l.LeaseTTL)
	case l.StatsInterval < 0 || l.StatsInterval > 0 && l.StatsInterval < MinStatsInterval:
		return fmt.Errorf("local.stats_interval must be >= %v (0: the default), got %v", MinStatsInterval, l.StatsInterval)
	}
	cfg.Reserve = l.Reserve
	cfg.RefillThreshold = l.RefillThreshold
	cfg.SyncInterval = l.SyncInterval
	cfg.SyncBatch = l.SyncBatch
	cfg.LeaseTTL = l.LeaseTTL
	cfg.StatsInterval = l.StatsInterval
	return nil
}

// finite reports whether f is a real number (not NaN, not ±Inf).
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// SortedKeys returns the keys of m in order, so that errors are deterministic.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
