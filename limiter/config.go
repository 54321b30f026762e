package limiter

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// UnknownAppMode says what happens to app ids that have no configured policy.
type UnknownAppMode uint8

// The unknown-app modes; the zero value is the default.
const (
	// UnknownShared puts every unknown id in one bucket "*" built from Config.Default, so that
	// rotating ids never buy more quota.
	UnknownShared UnknownAppMode = iota
	// UnknownIsolated gives each unknown id its own bucket from Config.Default, at most
	// Config.MaxIsolated of them; idle ones expire. When the bound is reached, new ids fall into
	// the shared bucket (never more quota than the bound allows).
	UnknownIsolated
	// UnknownReject rejects unknown ids with ReasonUnknownApp.
	UnknownReject
)

// String returns the Caddyfile spelling of the mode.
func (m UnknownAppMode) String() string {
	switch m {
	case UnknownShared:
		return "shared"
	case UnknownIsolated:
		return "isolated"
	case UnknownReject:
		return "reject"
	}
	return "unknown"
}

// FailureMode says what the limiter does while the Store is unavailable.
type FailureMode uint8

// The failure modes; the zero value is the default.
const (
	// FailLocal enforces a local rescue bucket per app: rate guaranteed × RescueRatio / last
	// known live instances, burst the same share of the app's burst.
	FailLocal FailureMode = iota
	// FailOpen admits every request the local tokens cannot cover.
	FailOpen
	// FailClosed rejects them with ReasonRedisUnavailable (the handler answers 503).
	FailClosed
)

// String returns the Caddyfile spelling of the mode.
func (m FailureMode) String() string {
	switch m {
	case FailLocal:
		return "local"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "unknown"
}

// Defaults of the Config fields (the `local` block).
const (
	DefaultMaxIsolated     = 10000
	DefaultReserve         = 1000
	DefaultRefillThreshold = 0.2
	DefaultSyncInterval    = 100 * time.Millisecond
	DefaultSyncBatch       = 100_000
	DefaultLeaseTTL        = 10 * time.Second
	DefaultStatsInterval   = 60 * time.Second // see appstats.go
	DefaultStoreTimeout    = 50 * time.Millisecond
	DefaultRescueRatio     = 1.0
	DefaultIsolatedTTL     = 60 * time.Second

	DefaultEmergencyThreshold = 0.95 // a zero ClusterPolicy.EmergencyThreshold takes it
)

// LeaseHorizon is how long a lease lasts at the app's current rate: the lease target is the
// rate × LeaseHorizon (capped for fairness at burst / (2 × live instances)). It is set by the
// Redis budget, not by the sync interval: at most 5 Store calls per 1000 requests means a lease
// must cover 200 requests, 20 s of an app at 10 requests per second, with the instance's cluster
// reports on top; 30 s leaves that room.
const LeaseHorizon = 30 * time.Second

// AtQuotaSpacing sets the horizon of an app at its quota in a fleet of more than ten
// instances: live instances × AtQuotaSpacing (never above LeaseHorizon), and the instances
// pace themselves (see paced and contestedEarly), so that together they lease about
// 1 / AtQuotaSpacing times per second however many of them serve the app. With a fixed
// 300 ms, one tenant over its quota on a thousand instances would cost the Store 3 300 calls
// per second, and more in refusals.
const AtQuotaSpacing = 30 * time.Millisecond

// Config is the configuration of one cluster's Limiter. Zero fields take their defaults.
type Config struct {
	Cluster         store.ClusterPolicy        // the cluster id and its L1 policy
	Apps            map[string]store.AppPolicy // configured apps by id
	Default         store.AppPolicy            // the `app *` template used for unknown apps
	UnknownApp      UnknownAppMode             // what happens to ids without a policy of their own
	MaxIsolated     int                        // bound on isolated buckets (default 10000)
	IsolatedTTL     time.Duration              // an isolated bucket idle this long expires (default 60 s)
	Reserve         int64                      // lease target before the app's rate is measured (default 1000)
	RefillThreshold float64                    // refill in the background below this share of the lease target (0.2)
	SyncInterval    time.Duration              // report interval (default 100 ms)
	SyncBatch       int64                      // flush an app's statistics at the next report once this many wait (100 000)
	LeaseTTL        time.Duration              // unspent leased tokens older than this go back to L2 (10 s)
	StatsInterval   time.Duration              // statistics no call carried this long go in a report (60 s)
	StoreTimeout    time.Duration              // a request never waits longer on the Store (50 ms)
	OnStoreFailure  FailureMode                // what happens while the Store is unavailable
	RescueRatio     float64                    // share of guaranteed allowed in rescue mode (default 1.0)
	Instance        string                     // unique per process (default: random); fixed at New
	Connections     InFlightSource             // optional: connlimit's counts carried in reports

	// KnownInstances is the live-instance count this cluster had when the process last reached
	// the Store (persisted by the caller); 0 = unknown. It sizes the rescue buckets until the
	// first report succeeds, so that an instance that starts while the Store is down does not
	// assume it is alone (see docs/operations.md, "Faults"). Fixed at New.
	KnownInstances int
	// OnLiveInstances, if set, is called from the sync loop when a report brings a new
	// live-instance count, so the caller can persist it for KnownInstances.
	OnLiveInstances func(n int)
	// Logger receives the state changes an operator must know about: fail_open entered and
	// left, degradation levels. Nil logs nothing.
	Logger *zap.Logger
}

// InFlightSource is the connection counter whose counts travel with the reports (connlimit).
type InFlightSource interface {
	// InFlight returns this instance's in-flight counts now.
	InFlight() (apps map[string]int64, cluster int64)
	// SetRemote receives the other live instances' last reported counts.
	SetRemote(apps map[string]int64, cluster int64)
	// Rejoined says that the Store may no longer hold this instance's state: it said so at the
	// last report (ClusterState.Rejoined), or that report ended fail_open. The connection slots
	// it holds must be leased again.
	Rejoined()
}

// ValidAppID reports whether id is a valid app id: 1–128 characters of [A-Za-z0-9._:-].
func ValidAppID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// withDefaults returns a copy of c with defaults applied, or a precise error.
func (c Config) withDefaults() (Config, error) {
	if c.Cluster.ID == "" {
		c.Cluster.ID = "default"
	}
	for id, p := range c.Apps {
		if !ValidAppID(id) {
			return c, fmt.Errorf("limiter: app %q: invalid app id (1-128 characters of [A-Za-z0-9._:-])", id)
		}
		if es := p.Validate(); len(es) > 0 {
			return c, fmt.Errorf("limiter: %w", es.Prefixed(fmt.Sprintf("app %q: ", id)))
		}
	}
	if c.UnknownApp > UnknownReject {
		return c, fmt.Errorf("limiter: unknown_app: invalid mode %d", c.UnknownApp)
	}
	if c.UnknownApp != UnknownReject {
		if es := c.Default.Validate(); len(es) > 0 {
			return c, fmt.Errorf("limiter: %w (unknown_app %s needs an `app *` policy)", es.Prefixed("app *: "), c.UnknownApp)
		}
	}
	if c.Cluster.EmergencyThreshold == 0 {
		c.Cluster.EmergencyThreshold = DefaultEmergencyThreshold
	}
	if es := c.Cluster.Validate(); len(es) > 0 {
		return c, fmt.Errorf("limiter: %w", es)
	}
	if es := c.Admission(); len(es) > 0 {
		return c, fmt.Errorf("limiter: apps: %s", es[0].Problem)
	}
	if c.OnStoreFailure > FailClosed {
		return c, fmt.Errorf("limiter: on_redis_failure: invalid mode %d", c.OnStoreFailure)
	}
	type check struct {
		bad  bool
		name string
		val  any
	}
	for _, ck := range []check{
		{c.MaxIsolated < 0, "max_isolated", c.MaxIsolated},
		{c.IsolatedTTL < 0, "isolated_ttl", c.IsolatedTTL},
		{c.Reserve < 0, "local.reserve", c.Reserve},
		{c.RefillThreshold < 0 || c.RefillThreshold > 1 || math.IsNaN(c.RefillThreshold), "local.refill_threshold (0-1)", c.RefillThreshold},
		{c.SyncInterval < 0, "local.sync_interval", c.SyncInterval},
		{c.SyncBatch < 0, "local.sync_batch", c.SyncBatch},
		{c.LeaseTTL < 0, "local.lease_ttl", c.LeaseTTL},
		{c.StatsInterval < 0, "local.stats_interval", c.StatsInterval},
		{c.StoreTimeout < 0, "redis.timeout", c.StoreTimeout},
		{c.RescueRatio < 0 || c.RescueRatio > 1 || math.IsNaN(c.RescueRatio), "rescue ratio (0-1)", c.RescueRatio},
	} {
		if ck.bad {
			return c, fmt.Errorf("limiter: %s: invalid value %v", ck.name, ck.val)
		}
	}
	def := func(cond bool, set func()) {
		if cond {
			set()
		}
	}
	def(c.MaxIsolated == 0, func() { c.MaxIsolated = DefaultMaxIsolated })
	def(c.IsolatedTTL == 0, func() { c.IsolatedTTL = DefaultIsolatedTTL })
	def(c.Reserve == 0, func() { c.Reserve = DefaultReserve })
	def(c.RefillThreshold == 0, func() { c.RefillThreshold = DefaultRefillThreshold })
	def(c.SyncInterval == 0, func() { c.SyncInterval = DefaultSyncInterval })
	def(c.SyncBatch == 0, func() { c.SyncBatch = DefaultSyncBatch })
	def(c.LeaseTTL == 0, func() { c.LeaseTTL = DefaultLeaseTTL })
	def(c.StatsInterval == 0, func() { c.StatsInterval = DefaultStatsInterval })
	def(c.StoreTimeout == 0, func() { c.StoreTimeout = DefaultStoreTimeout })
	def(c.RescueRatio == 0, func() { c.RescueRatio = DefaultRescueRatio })
	if c.Instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.Instance = hex.EncodeToString(b[:])
	}
	return c, nil
}
