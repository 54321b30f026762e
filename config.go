package tierbucket

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Defaults of the handler's own fields. The concept packages own the defaults of
// their blocks (cost, connections, local, redis).
const (
	DefaultCluster            = "default"
	DefaultKey                = "{http.request.host}"
	DefaultReservedRatio      = 0.1
	DefaultEmergencyThreshold = 0.95

	// The `app *` template used when the config has no `app *` block: every unknown app id
	// shares (or, isolated, each gets) a bucket of 100 tokens/s, burst 200, lowest priority.
	DefaultAppGuaranteed = 100
	DefaultAppBurst      = 200
	DefaultAppPriority   = store.MaxPriority
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

// defaultEmergencyRatios are the refill factors per priority in emergency mode (P0 … P3).
var defaultEmergencyRatios = [store.MaxPriority + 1]float64{1, 0.5, 0.1, 0}

// wildcardApp is the id of the template policy for app ids without their own block.
const wildcardApp = "*"

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

func parseUnknownApp(s string) (limiter.UnknownAppMode, bool) {
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

func parseFailureMode(s string) (limiter.FailureMode, bool) {
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

// finite reports whether f is a real number (not NaN, not ±Inf).
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// appPolicy turns one app block into the limiter's policy with defaults applied, or an error
// naming the app and the field.
func appPolicy(id string, a *AppConfig) (store.AppPolicy, error) {
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
		Warmup:         time.Duration(a.Warmup),
	}
	if p.Burst == 0 {
		p.Burst = max(p.Guaranteed, 1) // one request of cost 1 fits: `guaranteed 0.5` alone is valid
	}
	if es := p.Validate(); len(es) > 0 {
		return p, es.Prefixed(name + ".")
	}
	return p, nil
}

// limiterConfig validates the handler's shared-state fields and returns the limiter config
// they describe (defaults applied). Errors name the field as in JSON / the Caddyfile.
func (h *Handler) limiterConfig() (limiter.Config, error) {
	var cfg limiter.Config
	cp, err := h.clusterPolicy()
	if err != nil {
		return cfg, err
	}
	cfg.Cluster = cp
	unknown, ok := parseUnknownApp(h.UnknownApp)
	if !ok {
		return cfg, fmt.Errorf("unknown_app must be shared, isolated or reject, got %q", h.UnknownApp)
	}
	cfg.UnknownApp = unknown
	fail, ok := parseFailureMode(h.OnRedisFailure)
	if !ok {
		return cfg, fmt.Errorf("on_redis_failure must be local, open or closed, got %q", h.OnRedisFailure)
	}
	cfg.OnStoreFailure = fail
	if cfg.Apps, cfg.Default, err = h.appPolicies(); err != nil {
		return cfg, err
	}
	if es := cfg.Admission(); len(es) > 0 {
		return cfg, fmt.Errorf("apps: %s", es[0].Problem)
	}
	if err := h.Local.apply(&cfg); err != nil {
		return cfg, err
	}
	cfg.Instance = cluster.InstanceID()
	return cfg, nil
}

// clusterPolicy is the cluster's L1 policy: its id, capacity and emergency settings.
func (h *Handler) clusterPolicy() (store.ClusterPolicy, error) {
	id := h.Cluster
	if id == "" {
		id = DefaultCluster
	}
	if !limiter.ValidAppID(id) {
		return store.ClusterPolicy{}, fmt.Errorf("cluster: invalid id %q (1-128 characters of [A-Za-z0-9._:-])", id)
	}
	cp := store.ClusterPolicy{
		ID:                 id,
		Capacity:           h.Capacity,
		ReservedRatio:      DefaultReservedRatio,
		EmergencyThreshold: DefaultEmergencyThreshold,
		EmergencyRatios:    defaultEmergencyRatios,
		Adaptive:           h.Adaptive.policy(h.Capacity),
	}
	if h.Adaptive != nil && h.Capacity <= 0 {
		return cp, fmt.Errorf("adaptive needs a capacity > 0 (the starting figure)")
	}
	if _, err := h.Adaptive.throttleStatus(); err != nil {
		return cp, err
	}
	if h.ReservedRatio != nil {
		cp.ReservedRatio = *h.ReservedRatio
	}
	if h.EmergencyThreshold != nil {
		cp.EmergencyThreshold = *h.EmergencyThreshold
	}
	if h.EmergencyRatios != nil {
		if len(h.EmergencyRatios) != store.MaxPriority+1 {
			return cp, fmt.Errorf("emergency_ratios needs %d values (P0..P%d), got %d",
				store.MaxPriority+1, store.MaxPriority, len(h.EmergencyRatios))
		}
		copy(cp.EmergencyRatios[:], h.EmergencyRatios)
	}
	if es := cp.Validate(); len(es) > 0 {
		return cp, es
	}
	return cp, nil
}

// appPolicies are the policies of the `app` blocks by id, and the template of the app ids
// without their own (the `app *` block, or the built-in one).
func (h *Handler) appPolicies() (map[string]store.AppPolicy, store.AppPolicy, error) {
	apps := make(map[string]store.AppPolicy, len(h.Apps))
	template := store.AppPolicy{
		Guaranteed: DefaultAppGuaranteed,
		Burst:      DefaultAppBurst,
		Priority:   DefaultAppPriority,
	}
	for _, id := range sortedKeys(h.Apps) {
		if id != wildcardApp && !limiter.ValidAppID(id) {
			return nil, template, fmt.Errorf("apps: invalid app id %q (1-128 characters of [A-Za-z0-9._:-], or *)", id)
		}
		p, err := appPolicy(id, h.Apps[id])
		if err != nil {
			return nil, template, err
		}
		if id == wildcardApp {
			template = p
			continue
		}
		apps[id] = p
	}
	return apps, template, nil
}

// apply validates the `local` block and sets its knobs in cfg (nil: every default).
func (l *LocalConfig) apply(cfg *limiter.Config) error {
	if l == nil {
		return nil
	}
	switch {
	case l.Reserve < 0:
		return fmt.Errorf("local.reserve must be >= 0, got %d", l.Reserve)
	case !finite(l.RefillThreshold) || l.RefillThreshold < 0 || l.RefillThreshold > 1:
		return fmt.Errorf("local.refill_threshold must be in [0,1], got %v", l.RefillThreshold)
	case l.SyncInterval < 0 || l.SyncInterval > 0 && time.Duration(l.SyncInterval) < minSyncInterval:
		return fmt.Errorf("local.sync_interval must be >= %v (0: the default), got %v", minSyncInterval, time.Duration(l.SyncInterval))
	case l.SyncBatch < 0:
		return fmt.Errorf("local.sync_batch must be >= 0, got %d", l.SyncBatch)
	case l.LeaseTTL < 0 || l.LeaseTTL > 0 && time.Duration(l.LeaseTTL) < minLeaseTTL:
		return fmt.Errorf("local.lease_ttl must be >= %v (0: the default), got %v", minLeaseTTL, time.Duration(l.LeaseTTL))
	case l.StatsInterval < 0 || l.StatsInterval > 0 && time.Duration(l.StatsInterval) < minStatsInterval:
		return fmt.Errorf("local.stats_interval must be >= %v (0: the default), got %v", minStatsInterval, time.Duration(l.StatsInterval))
	}
	cfg.Reserve = l.Reserve
	cfg.RefillThreshold = l.RefillThreshold
	cfg.SyncInterval = time.Duration(l.SyncInterval)
	cfg.SyncBatch = l.SyncBatch
	cfg.LeaseTTL = time.Duration(l.LeaseTTL)
	cfg.StatsInterval = time.Duration(l.StatsInterval)
	return nil
}

// The shortest sync_interval and lease_ttl: below them an instance would report or give back
// tokens as fast as Redis answers (1ns made one idle gateway send 80 000 commands a second).
// Below minStatsInterval every app with traffic would flush its statistics in every report.
const (
	minSyncInterval  = 10 * time.Millisecond
	minLeaseTTL      = 100 * time.Millisecond
	minStatsInterval = time.Second
)

// sortedKeys returns the keys of m in order, so that errors are deterministic.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

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
