package tierbucket

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
	"github.com/tierbucket/caddy-tierbucket/internal/promhistory"
	"github.com/tierbucket/caddy-tierbucket/internal/settings"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Defaults of the handler's own fields (the shared-state ones are package settings').
const (
	DefaultCluster            = settings.DefaultCluster
	DefaultKey                = "{http.request.host}"
	DefaultReservedRatio      = settings.DefaultReservedRatio
	DefaultEmergencyThreshold = settings.DefaultEmergencyThreshold

	// The `app *` template used when the config has no `app *` block: every unknown app id
	// shares (or, isolated, each gets) a bucket of 100 tokens/s, burst 200, lowest priority.
	DefaultAppGuaranteed = settings.DefaultAppGuaranteed
	DefaultAppBurst      = settings.DefaultAppBurst
	DefaultAppPriority   = settings.DefaultAppPriority
)

// Defaults of the adaptive block (docs/adaptive.md): the learned capacity moves within
// [capacity / 4, capacity × 2] and aims at a backend p90 of 250 ms to response headers; 503 and
// 429 from the backend are throttles.
const (
	DefaultAdaptiveMinShare = 0.25
	DefaultAdaptiveMaxShare = 2
	DefaultLatencyTarget    = 250 * time.Millisecond
)

// defaultThrottleStatus are the backend answers that mean "slow down" by default.
var defaultThrottleStatus = []int{503, 429}

// AppConfig is one `app <id>` block: the L2 policy of one app.
type AppConfig struct {
	// Refill rate in cost tokens per second. Required, > 0.
	Guaranteed float64 `json:"guaranteed,omitempty"`
	// Bucket size in cost tokens, >= guaranteed. Default: guaranteed (one second's worth).
	Burst float64 `json:"burst,omitempty"`
	// 0 (highest) … 3 (lowest). Default 0; the implicit `app *` template has 3.
	Priority int `json:"priority,omitempty"`
	// Most tokens the app may borrow from the cluster's unallocated capacity. Default 0 (never).
	MaxBorrow float64 `json:"max_borrow,omitempty"`
	// Elastic ceiling (cost tokens/s, >= guaranteed): while the cluster has spare capacity the
	// app may be refilled up to this rate (docs/adaptive.md). Default: guaranteed.
	Max float64 `json:"max,omitempty"`
	// In-flight request limit of the app. Default: connections.app.
	MaxConnections int64 `json:"max_connections,omitempty"`
	// Warm-up after idleness (Guava SmoothWarmingUp, cold factor 3): an app idle for at least
	// this long is cold; from its first request on, what L2 grants per second ramps linearly
	// from guaranteed / 3 to guaranteed over this duration, and the stored burst is released no
	// faster than that ramp. Default 0 (off). See store.AppPolicy.Warmup.
	Warmup caddy.Duration `json:"warmup,omitempty"`
	// Refuse every request of the app (403 app_disabled) while keeping its policy and
	// statistics; the admin API's "enabled": true overrides it fleet-wide.
	Disabled bool `json:"disabled,omitempty"`
}

// UnmarshalJSON decodes an app policy strictly, as Caddy decodes module config, and names the
// field of a duration that does not parse ("warmup: time: invalid duration ...").
func (a *AppConfig) UnmarshalJSON(b []byte) error {
	type plain AppConfig
	var raw struct {
		plain
		Warmup json.RawMessage `json:"warmup,omitempty"` // shadows plain.Warmup
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	*a = AppConfig(raw.plain)
	if len(raw.Warmup) > 0 {
		if err := a.Warmup.UnmarshalJSON(raw.Warmup); err != nil {
			return fmt.Errorf("warmup: %v", err)
		}
	}
	return nil
}

// ConsoleConfig is the `console` block: where the console's long history ranges come from.
type ConsoleConfig struct {
	// A Prometheus server that scrapes this fleet's metrics (http[s]://host:port): the admin
	// API reads the 1h, 6h, 24h and 7d ranges from it. Empty: only the 15 minutes kept in
	// memory.
	Prometheus string `json:"prometheus,omitempty"`
}

// AdaptiveConfig is the `adaptive` block of `capacity`: L1 learns the capacity the backend
// sustains (docs/adaptive.md).
type AdaptiveConfig struct {
	// The learned capacity stays within [min, max] (cost tokens/s); min <= capacity <= max.
	// Defaults: capacity / 4 and capacity × 2. Guarantees must fit in min (admission).
	Min float64 `json:"min,omitempty"`
	Max float64 `json:"max,omitempty"`
	// The backend's p90 time to response headers when it is healthy. Default 250ms.
	LatencyTarget caddy.Duration `json:"latency_target,omitempty"`
	// Backend statuses that mean "slow down" (4xx or 5xx). Default 503 and 429.
	ThrottleStatus []int `json:"throttle_status,omitempty"`
}

// policy is the adaptive block with its defaults for a starting capacity.
func (a *AdaptiveConfig) policy(capacity float64) store.AdaptivePolicy {
	if a == nil {
		return store.AdaptivePolicy{}
	}
	p := store.AdaptivePolicy{Min: a.Min, Max: a.Max, LatencyTarget: time.Duration(a.LatencyTarget)}
	if p.Min == 0 {
		p.Min = capacity * DefaultAdaptiveMinShare
	}
	if p.Max == 0 {
		p.Max = capacity * DefaultAdaptiveMaxShare
	}
	if p.LatencyTarget == 0 {
		p.LatencyTarget = DefaultLatencyTarget
	}
	return p
}

// throttleStatus is the block's throttle statuses with the default, or an error naming a
// status that is not 4xx or 5xx.
func (a *AdaptiveConfig) throttleStatus() ([]int, error) {
	if a == nil {
		return nil, nil
	}
	if len(a.ThrottleStatus) == 0 {
		return defaultThrottleStatus, nil
	}
	for _, s := range a.ThrottleStatus {
		if s < 400 || s > 599 {
			return nil, fmt.Errorf("adaptive.throttle_status: %d is not a 4xx or 5xx status", s)
		}
	}
	return a.ThrottleStatus, nil
}

// LocalConfig is the `local` block: the L3 tuning knobs. Zero fields take the limiter's
// defaults (reserve 1000, refill_threshold 0.2, sync_interval 100ms, sync_batch 100000,
// lease_ttl 10s, stats_interval 60s).
type LocalConfig struct {
	Reserve         int64          `json:"reserve,omitempty"`
	RefillThreshold float64        `json:"refill_threshold,omitempty"`
	SyncInterval    caddy.Duration `json:"sync_interval,omitempty"`
	SyncBatch       int64          `json:"sync_batch,omitempty"`
	LeaseTTL        caddy.Duration `json:"lease_ttl,omitempty"`
	StatsInterval   caddy.Duration `json:"stats_interval,omitempty"`
}

// ConnectionsConfig is the `connections` block: in-flight limits. Zero fields take the
// defaults (app 1000, cluster 5000, idle_timeout 5m, sweep_interval 30s).
type ConnectionsConfig struct {
	App           int64          `json:"app,omitempty"`            // in-flight limit of an app without max_connections
	Cluster       int64          `json:"cluster,omitempty"`        // in-flight limit of the whole cluster
	IdleTimeout   caddy.Duration `json:"idle_timeout,omitempty"`   // a slot idle this long is swept as leaked
	SweepInterval caddy.Duration `json:"sweep_interval,omitempty"` // how often the leak sweep runs
}

// limits is c as the connlimit package takes it (nil: every default).
func (c *ConnectionsConfig) limits() connlimit.Config {
	if c == nil {
		return connlimit.Config{}
	}
	return connlimit.Config{
		App:           c.App,
		Cluster:       c.Cluster,
		IdleTimeout:   time.Duration(c.IdleTimeout),
		SweepInterval: time.Duration(c.SweepInterval),
	}
}

// definition validates the shared-state fields of h and returns what they define.
func (h *Handler) definition() (cluster.Definition, error) {
	var def cluster.Definition
	lc, err := h.limiterConfig()
	if err != nil {
		return def, err
	}
	def.Conns = h.Connections.limits()
	if err := def.Conns.Validate(); err != nil {
		return def, err
	}
	def.Key = cluster.Key{Cluster: lc.Cluster.ID, Store: "memory"}
	if h.Redis != nil {
		rc, err := h.Redis.resolve(h.ctxPtr())
		if err != nil {
			return def, err
		}
		def.Redis = &rc
		def.Key.Store = redisIdentity(rc)
		def.Key.Conn = redisConnDigest(rc, h.Redis.TrustPoolRaw)
		lc.StoreTimeout = rc.Timeout
	}
	def.Limiter = lc
	if h.Console != nil && h.Console.Prometheus != "" {
		// {env.*} placeholders keep credentials out of the config Caddy serves
		raw := caddy.NewReplacer().ReplaceKnown(h.Console.Prometheus, "")
		if _, err := promhistory.ValidateURL(raw); err != nil {
			return def, fmt.Errorf("console.%v", err)
		}
		def.Prometheus = raw
	}

	// The fingerprint is the configuration as written (not the resolved secrets), so it is
	// stable and never carries a resolved password: the handler's fields less the per-handler
	// ones (json skips the unexported runtime fields).
	shared := *h
	shared.Cluster = lc.Cluster.ID
	shared.Key, shared.Cost, shared.MaxWait, shared.Headers, shared.Shadow, shared.Errors = "", nil, 0, "", false, false
	shared.Format = ""
	fp, err := json.Marshal(shared)
	if err != nil {
		return def, fmt.Errorf("cluster %q: %v", lc.Cluster.ID, err)
	}
	def.Fingerprint = string(fp)
	return def, nil
}

// limiterConfig validates the handler's shared-state fields and returns the limiter config
// they describe (defaults applied). Errors name the field as in JSON / the Caddyfile.
func (h *Handler) limiterConfig() (limiter.Config, error) {
	if _, err := h.Adaptive.throttleStatus(); err != nil {
		return limiter.Config{}, err
	}
	cfg, err := h.sharedSettings().Limiter()
	if err != nil {
		return cfg, err
	}
	cfg.Instance = cluster.InstanceID()
	return cfg, nil
}

// sharedSettings are the handler's shared-state fields as package settings takes them.
func (h *Handler) sharedSettings() settings.Cluster {
	c := settings.Cluster{
		ID:                 h.Cluster,
		Capacity:           h.Capacity,
		ReservedRatio:      h.ReservedRatio,
		EmergencyThreshold: h.EmergencyThreshold,
		EmergencyRatios:    h.EmergencyRatios,
		UnknownApp:         h.UnknownApp,
		OnRedisFailure:     h.OnRedisFailure,
	}
	if h.Adaptive != nil {
		p := h.Adaptive.policy(h.Capacity)
		c.Adaptive = &p
	}
	if h.Apps != nil {
		c.Apps = make(map[string]*settings.App, len(h.Apps))
		for id, a := range h.Apps {
			var app *settings.App
			if a != nil {
				app = &settings.App{
					Guaranteed:     a.Guaranteed,
					Burst:          a.Burst,
					Priority:       a.Priority,
					MaxBorrow:      a.MaxBorrow,
					Max:            a.Max,
					MaxConnections: a.MaxConnections,
					Warmup:         time.Duration(a.Warmup),
					Disabled:       a.Disabled,
				}
			}
			c.Apps[id] = app
		}
	}
	if l := h.Local; l != nil {
		c.Local = &settings.Local{
			Reserve:         l.Reserve,
			RefillThreshold: l.RefillThreshold,
			SyncInterval:    time.Duration(l.SyncInterval),
			SyncBatch:       l.SyncBatch,
			LeaseTTL:        time.Duration(l.LeaseTTL),
			StatsInterval:   time.Duration(l.StatsInterval),
		}
	}
	return c
}

// sortedKeys returns the keys of m in order, so that errors are deterministic.
func sortedKeys[V any](m map[string]V) []string { return settings.SortedKeys(m) }

// validateKey checks the key template: non-empty; a placeholder must be closed.
func validateKey(key string) error {
	if strings.TrimSpace(key) == "" {
		return fmt.Errorf("key must not be empty")
	}
	if strings.Count(key, "{") != strings.Count(key, "}") {
		return fmt.Errorf("key: unbalanced braces in %q", key)
	}
	return nil
}

// RedisConfig is the `redis` block. It is redislua.Config with the timeout as a Caddy duration
// ("50ms", "1d", like every duration of the config), and placeholders ({env.REDIS_PASSWORD}, {file./run/secret})
// allowed in address, url, sentinel, username and password; they are replaced at provisioning.
type RedisConfig struct {
	redislua.Config
	Timeout caddy.Duration `json:"timeout,omitempty"` // what a request waits on Redis at most (default 50ms)

	// TrustPoolRaw is the pool of CAs that Redis' certificate must chain to: one of Caddy's
	// tls.ca_pool.source modules ({"provider": "file", "pem_files": [...]}, "inline", ...),
	// as in reverse_proxy's transport. Default: the system's roots.
	TrustPoolRaw json.RawMessage `json:"tls_trust_pool,omitempty" caddy:"namespace=tls.ca_pool.source inline_key=provider"`
}

// resolve replaces the placeholders, loads the trust pool module and returns the redislua
// config, validated. A nil ctx (tests of the parsing) loads no module.
func (c *RedisConfig) resolve(ctx *caddy.Context) (redislua.Config, error) {
	repl := caddy.NewReplacer()
	rc := c.Config
	rc.Timeout = time.Duration(c.Timeout)
	rc.Address = nil // a copy: the handler's config keeps its placeholders
	for _, a := range c.Address {
		rc.Address = append(rc.Address, repl.ReplaceKnown(a, ""))
	}
	for _, f := range []struct {
		name string
		v    *string
	}{
		{"url", &rc.URL},
		{"sentinel", &rc.Sentinel},
		{"username", &rc.Username},
		{"password", &rc.Password},
		{"sentinel_username", &rc.SentinelUsername},
		{"sentinel_password", &rc.SentinelPassword},
		{"tls_server_name", &rc.TLSServerName},
	} {
		set := *f.v != ""
		*f.v = repl.ReplaceKnown(*f.v, "")
		if set && *f.v == "" {
			// An unset {env.*}: an empty password would reach Redis as its default user.
			return rc, fmt.Errorf("redis.%s is empty once its placeholders are replaced: the variable it names is unset or empty in Caddy's environment", f.name)
		}
	}
	if a := c.TLSClientAuth; a != nil {
		rc.TLSClientAuth = &redislua.ClientAuth{
			CertificateFile: repl.ReplaceKnown(a.CertificateFile, ""),
			KeyFile:         repl.ReplaceKnown(a.KeyFile, ""),
		}
	}
	if err := rc.Validate(); err != nil {
		return rc, err
	}
	if len(c.TrustPoolRaw) > 0 {
		if ctx == nil {
			return rc, fmt.Errorf("redis.tls_trust_pool: no Caddy context to load it")
		}
		// Loaded from a copy: LoadModule clears the raw field it loads, and the handler's
		// config must keep it (it is part of the cluster's definition).
		holder := struct {
			Raw json.RawMessage `caddy:"namespace=tls.ca_pool.source inline_key=provider"`
		}{Raw: append(json.RawMessage(nil), c.TrustPoolRaw...)}
		mod, err := ctx.LoadModule(&holder, "Raw")
		if err != nil {
			return rc, fmt.Errorf("redis.tls_trust_pool: %v", err)
		}
		ca, ok := mod.(caddytls.CA)
		if !ok {
			return rc, fmt.Errorf("redis.tls_trust_pool: module %T is not a CA pool source", mod)
		}
		rc.RootCAs = ca.CertPool()
		if rc.RootCAs == nil {
			return rc, fmt.Errorf("redis.tls_trust_pool: the module gave no certificates")
		}
	}
	return rc, nil
}

// identity names the Store a redis config points at (everything but the credentials and the
// client tuning), so that a reload that points a cluster at another Store gets a new state.
func redisIdentity(rc redislua.Config) string {
	id := struct {
		Address  []string `json:"a,omitempty"`
		URL      string   `json:"u,omitempty"`
		Sentinel string   `json:"s,omitempty"`
		DB       int      `json:"d,omitempty"`
		Prefix   string   `json:"p,omitempty"`
	}{rc.Address, rc.URL, rc.Sentinel, rc.DB, rc.KeyPrefix}
	b, err := json.Marshal(id)
	if err != nil {
		return fmt.Sprint(id)
	}
	return "redis:" + string(b)
}

// redisConnDigest is a digest of what the connection to the Store authenticates and encrypts
// with: the credentials and the TLS settings (the trust pool as written). A reload that changes
// them (the operator fixing a refused password or certificate, or rotating them) gets a new
// state with a new client; the old state's client kept the old settings. Only the digest is
// kept, never the password.
func redisConnDigest(rc redislua.Config, trustPool json.RawMessage) string {
	conn := struct {
		Username   string               `json:"u,omitempty"`
		Password   string               `json:"p,omitempty"`
		SentUser   string               `json:"su,omitempty"`
		SentPass   string               `json:"sp,omitempty"`
		TLS        bool                 `json:"t,omitempty"`
		ClientAuth *redislua.ClientAuth `json:"c,omitempty"`
		ServerName string               `json:"n,omitempty"`
		SkipVerify bool                 `json:"s,omitempty"`
		TrustPool  json.RawMessage      `json:"r,omitempty"`
	}{rc.Username, rc.Password, rc.SentinelUsername, rc.SentinelPassword, rc.TLS, rc.TLSClientAuth, rc.TLSServerName, rc.TLSInsecureSkipVerify, trustPool}
	b, _ := json.Marshal(conn) //nolint:gosec // hashed below, never stored or shown; strings, bools and raw JSON cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// ctxPtr is the handler's Caddy context, nil before setup gave it one.
func (h *Handler) ctxPtr() *caddy.Context {
	if h.ctx.Context == nil {
		return nil
	}
	return &h.ctx
}
