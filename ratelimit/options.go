package ratelimit

import (
	"crypto/x509"
	"time"

	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/internal/settings"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/redislua"
)

// Options configure a Limiter. Every field has the name of its Caddyfile option (docs/library.md
// has the table), the same default and the same validation: a Limiter and a Caddy gateway
// given the same settings, the same Redis key prefix and the same cluster id enforce one set of
// quotas. Zero and nil fields take their defaults.
type Options struct {
	// Cluster is the cluster id (default "default"). Instances with the same id on the same
	// Store share the quotas.
	Cluster string
	// Capacity is the cluster's rate in cost tokens per second (L1); 0 means no cluster limit,
	// no borrowing and no automatic emergency.
	Capacity float64
	// ReservedRatio is the share of Capacity not given out as guarantees (nil: 0.1).
	ReservedRatio *float64
	// EmergencyThreshold is the usage share at which the cluster enters its emergency mode
	// (nil: 0.95).
	EmergencyThreshold *float64
	// EmergencyRatios are the refill factors of priorities 0..3 in an emergency (nil: 1, 0.5,
	// 0.1, 0): four values in [0,1].
	EmergencyRatios []float64

	// Apps are the app policies by key. The key "*" is the template of keys without their own
	// entry (default: 100 tokens/s, burst 200, priority 3).
	Apps map[string]App
	// UnknownApp says what happens to keys without an entry in Apps (default UnknownShared).
	UnknownApp UnknownApp

	// Connections are the in-flight limits that Acquire and Middleware enforce (nil: every
	// default: 1000 per app, 5000 per cluster).
	Connections *Connections
	// Local tunes the in-process tier (nil: every default).
	Local *Local

	// Redis is the shared Store; nil is the in-memory Store of this process alone.
	Redis *Redis
	// OnRedisFailure is what happens while Redis is unavailable (default FailLocal).
	OnRedisFailure FailureMode

	// Logger receives what an operator must know: the Store failing and recovering,
	// degradation levels (nil: nothing is logged).
	Logger *zap.Logger
}

// App is the policy of one app: its token bucket in the shared Store (L2).
type App struct {
	// Guaranteed is the refill rate in cost tokens per second; required, > 0.
	Guaranteed float64
	// Burst is the bucket size, >= Guaranteed (default: Guaranteed, at least 1).
	Burst float64
	// Priority is 0 (highest) … 3: what an overloaded cluster or its emergency throttles first.
	Priority int
	// MaxBorrow is how many tokens the app may borrow from the cluster's unallocated capacity
	// (default 0: never).
	MaxBorrow float64
	// MaxConnections is the app's in-flight limit (default Connections.App).
	MaxConnections int64
	// Warmup ramps an app idle this long from Guaranteed/3 up to Guaranteed (default 0: off).
	Warmup time.Duration
	// Disabled refuses every call for the app (ReasonAppDisabled); the fleet's admin API can
	// enable or disable an app for every instance, this one included.
	Disabled bool
}

// UnknownApp says what happens to keys without their own entry in Options.Apps.
type UnknownApp string

// The unknown-app modes.
const (
	// UnknownShared, the default, puts every unknown key in one bucket made from the "*"
	// template: rotating keys never buy more quota.
	UnknownShared UnknownApp = "shared"
	// UnknownIsolated gives each unknown key its own bucket from the template (bounded count,
	// idle ones expire).
	UnknownIsolated UnknownApp = "isolated"
	// UnknownReject rejects unknown keys with ReasonUnknownApp.
	UnknownReject UnknownApp = "reject"
)

// FailureMode is what a Limiter does while its Redis Store is unavailable.
type FailureMode string

// The failure modes.
const (
	// FailLocal, the default, enforces a rescue bucket per app in each instance: the app's
	// guaranteed rate divided by the last known number of live instances.
	FailLocal FailureMode = "local"
	// FailOpen admits what the local tokens cannot cover.
	FailOpen FailureMode = "open"
	// FailClosed rejects it with ReasonRedisUnavailable.
	FailClosed FailureMode = "closed"
)

// Connections are the in-flight limits; zero fields take their defaults.
type Connections struct {
	App           int64         // limit of an app without MaxConnections (default 1000)
	Cluster       int64         // limit of the whole cluster (default 5000)
	IdleTimeout   time.Duration // a slot idle this long is taken back as leaked (default 5m)
	SweepInterval time.Duration // how often leaked slots are looked for (default 30s)
}

// Local tunes the in-process tier; zero fields take their defaults.
type Local struct {
	Reserve         int64         // tokens leased before the app's rate is known (1000)
	RefillThreshold float64       // lease again in the background below this share (0.2)
	SyncInterval    time.Duration // report to the Store this often (100ms)
	SyncBatch       int64         // send statistics once this many requests wait (100000)
	LeaseTTL        time.Duration // give unspent tokens back after this long (10s)
	StatsInterval   time.Duration // send statistics at least this often (60s)
}

// Redis is the Redis Store: one address is a standalone server, several a Redis Cluster, and
// with Sentinel they are the sentinels. The options are the Caddy plugin's `redis` block.
type Redis struct {
	Address  []string // host:port addresses
	URL      string   // a redis:// or rediss:// URL, instead of Address
	Sentinel string   // the master name: Address are then the sentinels
	Username string   // an ACL user (docs/security.md lists the commands it needs)
	Password string
	// SentinelUsername and SentinelPassword are the sentinels' own credentials.
	SentinelUsername string
	SentinelPassword string
	DB               int

	TLS bool // connect over TLS (implied by rediss:// and by any other TLS option)
	// TLSClientCertFile and TLSClientKeyFile are the PEM files of a client certificate.
	TLSClientCertFile     string
	TLSClientKeyFile      string
	TLSServerName         string         // the name the server's certificate must have
	TLSInsecureSkipVerify bool           // accept any server certificate: for tests only
	RootCAs               *x509.CertPool // the CAs the server's certificate must chain to (nil: the system's)

	KeyPrefix string        // the prefix of every key (default "ratelimit")
	Timeout   time.Duration // what a call waits on Redis at most (default 50ms)
	PoolSize  int           // connections per server (default: go-redis's)
}

// resolved is what Options describe, validated.
type resolved struct {
	limiter limiter.Config
	conns   connlimit.Config
	redis   *redislua.Config // nil: the memory Store
}

// resolve validates o with the Caddy plugin's validation (package settings, connlimit's and
// redislua's) and returns what it describes.
func (o Options) resolve() (resolved, error) {
	var r resolved
	s := settings.Cluster{
		ID:                 o.Cluster,
		Capacity:           o.Capacity,
		ReservedRatio:      o.ReservedRatio,
		EmergencyThreshold: o.EmergencyThreshold,
		EmergencyRatios:    o.EmergencyRatios,
		UnknownApp:         string(o.UnknownApp),
		OnRedisFailure:     string(o.OnRedisFailure),
	}
	if o.Apps != nil {
		s.Apps = make(map[string]*settings.App, len(o.Apps))
		for id, a := range o.Apps {
			s.Apps[id] = &settings.App{
				Guaranteed:     a.Guaranteed,
				Burst:          a.Burst,
				Priority:       a.Priority,
				MaxBorrow:      a.MaxBorrow,
				MaxConnections: a.MaxConnections,
				Warmup:         a.Warmup,
				Disabled:       a.Disabled,
			}
		}
	}
	if l := o.Local; l != nil {
		s.Local = &settings.Local{
			Reserve:         l.Reserve,
			RefillThreshold: l.RefillThreshold,
			SyncInterval:    l.SyncInterval,
			SyncBatch:       l.SyncBatch,
			LeaseTTL:        l.LeaseTTL,
			StatsInterval:   l.StatsInterval,
		}
	}
	lc, err := s.Limiter()
	if err != nil {
		return r, err
	}
	r.limiter = lc
	if c := o.Connections; c != nil {
		r.conns = connlimit.Config{App: c.App, Cluster: c.Cluster, IdleTimeout: c.IdleTimeout, SweepInterval: c.SweepInterval}
	}
	if err := r.conns.Validate(); err != nil {
		return r, err
	}
	if o.Redis != nil {
		rc := o.Redis.config()
		if err := rc.Validate(); err != nil {
			return r, err
		}
		r.redis = &rc
		r.limiter.StoreTimeout = rc.Timeout
	}
	return r, nil
}

// config is the Store's configuration.
func (r *Redis) config() redislua.Config {
	rc := redislua.Config{
		Address:               append([]string(nil), r.Address...),
		URL:                   r.URL,
		Sentinel:              r.Sentinel,
		Username:              r.Username,
		Password:              r.Password,
		SentinelUsername:      r.SentinelUsername,
		SentinelPassword:      r.SentinelPassword,
		DB:                    r.DB,
		TLS:                   r.TLS,
		TLSServerName:         r.TLSServerName,
		TLSInsecureSkipVerify: r.TLSInsecureSkipVerify,
		RootCAs:               r.RootCAs,
		KeyPrefix:             r.KeyPrefix,
		Timeout:               r.Timeout,
		PoolSize:              r.PoolSize,
	}
	if r.TLSClientCertFile != "" || r.TLSClientKeyFile != "" {
		rc.TLSClientAuth = &redislua.ClientAuth{CertificateFile: r.TLSClientCertFile, KeyFile: r.TLSClientKeyFile}
	}
	return rc
}
