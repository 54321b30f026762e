// Package tierbucket is a Caddy HTTP handler that does hierarchical, cost-weighted, distributed
// token-bucket rate limiting and concurrent-connection limiting. This package only wires the
// concept packages (cost, limiter, connlimit, redislua) into Caddy.
package tierbucket

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/cost"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler is the `rate_limit` HTTP handler: it identifies the app of a request, estimates the
// request's cost, takes an in-flight slot and cost tokens, and rejects the request (429, or 503
// when the Store is down and on_redis_failure is closed) when either is not available.
//
// Handlers with the same cluster id share one set of buckets and counters, which survives
// config reloads (see pool.go). All fields are named as in the Caddyfile.
type Handler struct {
	// Cluster id: handlers with the same id share buckets. Default "default".
	Cluster string `json:"cluster,omitempty"`
	// The app id of a request: a placeholder or a literal. Default {http.request.host}.
	Key string `json:"key,omitempty"`
	// What happens to app ids without an `apps` entry: shared (default), isolated or reject.
	UnknownApp string `json:"unknown_app,omitempty"`
	// L1 rate of the cluster in cost tokens per second; 0 = no cluster limit.
	Capacity float64 `json:"capacity,omitempty"`
	// Share of capacity not given out as guarantees. Default 0.1.
	ReservedRatio *float64 `json:"reserved_ratio,omitempty"`
	// Usage share at which the cluster goes into emergency mode. Default 0.95.
	EmergencyThreshold *float64 `json:"emergency_threshold,omitempty"`
	// Refill factors of priorities 0..3 in emergency mode. Default [1, 0.5, 0.1, 0].
	EmergencyRatios []float64 `json:"emergency_ratios,omitempty"`
	// Policies by app id; "*" is the template of app ids without their own entry.
	Apps map[string]*AppConfig `json:"apps,omitempty"`
	// The cost model.
	Cost *cost.Config `json:"cost,omitempty"`
	// In-flight request limits.
	Connections *ConnectionsConfig `json:"connections,omitempty"`
	// L3 tuning.
	Local *LocalConfig `json:"local,omitempty"`
	// The Redis Store; absent = the embedded in-memory store (one instance).
	Redis *RedisConfig `json:"redis,omitempty"`
	// What happens while the Store is unavailable: local (default), open or closed.
	OnRedisFailure string `json:"on_redis_failure,omitempty"`
	// Wait up to this long for tokens instead of rejecting at once. Default 0.
	MaxWait caddy.Duration `json:"max_wait,omitempty"`
	// Which rate-limit headers to write: rejections (default: the draft fields RateLimit and
	// RateLimit-Policy, and Retry-After, on rejections only), draft (RateLimit on every
	// response as well), legacy, both or off.
	Headers string `json:"headers,omitempty"`
	// The rejection body: json (default) or s3 (S3 XML errors, 503 SlowDown, for S3 SDKs).
	Format string `json:"format,omitempty"`
	// Count and report decisions, never reject.
	Shadow bool `json:"shadow,omitempty"`
	// Return a Caddy error (for handle_errors) instead of writing the rejection body.
	Errors bool `json:"errors,omitempty"`

	state   *clusterState // shared buckets and counters of the cluster (pool.go)
	release func()        // gives this handler's references back (Cleanup)
	model   *cost.Model
	key     keyMode
	keyHdr  string // canonical header name for keyHeader
	headers headerMode
	maxWait time.Duration
	events  *caddyevents.App
	ctx     caddy.Context
	logger  *zap.Logger
}

// keyMode is how ServeHTTP computes the app id.
type keyMode uint8

const (
	keyHost        keyMode = iota // {http.request.host}: r.Host without the port, no allocation
	keyHeader                     // {http.request.header.X}: r.Header.Get, no allocation
	keyLiteral                    // no placeholder at all
	keyPlaceholder                // anything else: the replacer
)

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rate_limit",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision validates the configuration, builds the cost model and joins (or creates) the
// cluster's shared state, applying this config's policy to it. Unlike most modules it does the
// validation itself, before touching the shared state, so that an invalid config can never be
// applied to the live buckets of a running config.
func (h *Handler) Provision(ctx caddy.Context) error {
	if err := h.setup(ctx); err != nil {
		return err
	}
	eventsApp, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("getting events app: %v", err)
	}
	h.events = eventsApp.(*caddyevents.App)
	return nil
}

// setup is Provision without the events app (which needs a loaded config; tests and
// benchmarks call setup directly).
func (h *Handler) setup(ctx caddy.Context) error {
	h.ctx = ctx
	h.logger = ctx.Logger()
	def, err := h.configure()
	if err != nil {
		return err
	}
	h.state, h.release, err = acquireCluster(ctx, def, h.logger)
	if err != nil {
		return err
	}
	registerMetrics(ctx, h.logger)
	return nil
}

// configure validates every field and builds the handler's own parts (key mode, headers, cost
// model) and the definition of its cluster's shared state. It touches no shared state: an
// invalid config can never reach the live buckets of a running one.
func (h *Handler) configure() (definition, error) {
	if h.Key == "" {
		h.Key = DefaultKey
	}
	if err := validateKey(h.Key); err != nil {
		return definition{}, err
	}
	h.key, h.keyHdr = parseKey(h.Key)
	mode, ok := parseHeaderMode(h.Headers)
	if !ok {
		return definition{}, fmt.Errorf("headers must be rejections, draft, legacy, both or off, got %q", h.Headers)
	}
	h.headers = mode
	switch h.Format {
	case "", formatJSON, formatS3:
	default:
		return definition{}, fmt.Errorf("format must be json or s3, got %q", h.Format)
	}
	if h.MaxWait < 0 {
		return definition{}, fmt.Errorf("max_wait must be >= 0, got %v", time.Duration(h.MaxWait))
	}
	h.maxWait = time.Duration(h.MaxWait)

	var costCfg cost.Config
	if h.Cost != nil {
		costCfg = *h.Cost
	}
	model, err := cost.New(costCfg)
	if err != nil {
		return definition{}, err
	}
	h.model = model
	return h.definition()
}

// Cleanup gives this handler's references to the cluster's shared state back. The last
// reference (no config uses the cluster any more) closes it: unspent tokens return to L2.
func (h *Handler) Cleanup() error {
	if h.release != nil {
		h.release()
		h.release = nil
	}
	return nil
}

// parseKey recognises the key templates ServeHTTP can evaluate without the replacer.
func parseKey(key string) (keyMode, string) {
	switch {
	case key == "{http.request.host}":
		return keyHost, ""
	case strings.HasPrefix(key, "{http.request.header.") && strings.HasSuffix(key, "}") &&
		strings.Count(key, "{") == 1:
		name := key[len("{http.request.header.") : len(key)-1]
		if name != "" {
			return keyHeader, textproto.CanonicalMIMEHeaderKey(name)
		}
	case !strings.Contains(key, "{"):
		return keyLiteral, ""
	}
	return keyPlaceholder, ""
}

// appID evaluates the key for r. The fast paths do not allocate: r.Host and header values are
// strings the request already holds.
func (h *Handler) appID(r *http.Request, repl *caddy.Replacer) string {
	switch h.key {
	case keyHost:
		return hostOnly(r.Host)
	case keyHeader:
		if v := r.Header[h.keyHdr]; len(v) > 0 {
			return v[0]
		}
		return ""
	case keyLiteral:
		return h.Key
	}
	if repl == nil {
		return ""
	}
	return repl.ReplaceKnown(h.Key, "")
}

// hostOnly strips the port from a Host header value, like {http.request.host} does, without
// allocating. IPv6 literals lose their brackets.
func hostOnly(host string) string {
	if host == "" {
		return ""
	}
	if host[0] == '[' {
		if i := strings.IndexByte(host, ']'); i > 0 {
			return host[1:i]
		}
		return host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host, ':') == i {
		return host[:i]
	}
	return host
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
