// Package tierbucket is a Caddy HTTP handler that does hierarchical, cost-weighted, distributed
// token-bucket rate limiting and concurrent-connection limiting. This package only wires the
// concept packages (cost, limiter, connlimit, the Stores) and the internal ones (cluster,
// response, metrics) into Caddy; docs/design.md, "Architecture", has the map.
package tierbucket

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/admin"
	"github.com/tierbucket/caddy-tierbucket/cost"
	"github.com/tierbucket/caddy-tierbucket/history"
	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
	"github.com/tierbucket/caddy-tierbucket/internal/metrics"
	"github.com/tierbucket/caddy-tierbucket/internal/response"
	_ "github.com/tierbucket/caddy-tierbucket/siteconsole" // the rate_limit_console handler: the console on a site
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler is the `rate_limit` HTTP handler: it identifies the app of a request, estimates the
// request's cost, takes an in-flight slot and cost tokens, and rejects the request (429, or 503
// when the Store is down and on_redis_failure is closed) when either is not available.
//
// Handlers with the same cluster id share one set of buckets and counters, which survives
// config reloads (package internal/cluster). All fields are named as in the Caddyfile.
type Handler struct {
	// Cluster id: handlers with the same id share buckets. Default "default".
	Cluster string `json:"cluster,omitempty"`
	// The app id of a request: a placeholder or a literal. Default {http.request.host}.
	Key string `json:"key,omitempty"`
	// What happens to app ids without an `apps` entry: shared (default), isolated or reject.
	UnknownApp string `json:"unknown_app,omitempty"`
	// L1 rate of the cluster in cost tokens per second; 0 = no cluster limit.
	Capacity float64 `json:"capacity,omitempty"`
	// Learn the capacity from the backend's answers, starting from Capacity (Caddyfile:
	// `capacity <n> { adaptive { ... } }`). Absent: the capacity is static.
	Adaptive *AdaptiveConfig `json:"adaptive,omitempty"`
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
	// What the web console reads beyond this process (docs/console.md).
	Console *ConsoleConfig `json:"console,omitempty"`

	state   *cluster.State // shared buckets and counters of the cluster
	release func()         // gives this handler's references back (Cleanup)
	model   *cost.Model
	key     keyMode
	keyHdr  string // canonical header name for keyHeader
	style   response.Style
	maxWait time.Duration
	// throttle is adaptive.throttle_status: nil when the capacity is static (no signals taken).
	throttle *throttleSet
	events   *caddyevents.App
	ctx      caddy.Context
	logger   *zap.Logger
}

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
	h.state, h.release, err = cluster.Acquire(ctx, def, cluster.Options{
		Logger:     h.logger,
		Validating: validating(),
		Reading:    func(s *cluster.State) history.Reading { return admin.Read(s) },
	})
	if err != nil {
		return err
	}
	metrics.Register(ctx.GetMetricsRegistry(), cluster.Collector, h.logger)
	return nil
}

// configure validates every field and builds the handler's own parts (key mode, headers, cost
// model) and the definition of its cluster's shared state. It touches no shared state: an
// invalid config can never reach the live buckets of a running one.
func (h *Handler) configure() (cluster.Definition, error) {
	if h.Key == "" {
		h.Key = DefaultKey
	}
	if err := validateKey(h.Key); err != nil {
		return cluster.Definition{}, err
	}
	h.key, h.keyHdr = parseKey(h.Key)
	mode, ok := response.ParseHeaderMode(h.Headers)
	if !ok {
		return cluster.Definition{}, fmt.Errorf("headers must be rejections, draft, legacy, both or off, got %q", h.Headers)
	}
	h.style.Headers = mode
	switch h.Format {
	case "", response.FormatJSON, response.FormatS3:
		h.style.S3 = h.Format == response.FormatS3
	default:
		return cluster.Definition{}, fmt.Errorf("format must be json or s3, got %q", h.Format)
	}
	if h.MaxWait < 0 {
		return cluster.Definition{}, fmt.Errorf("max_wait must be >= 0, got %v", time.Duration(h.MaxWait))
	}
	h.maxWait = time.Duration(h.MaxWait)

	var costCfg cost.Config
	if h.Cost != nil {
		costCfg = *h.Cost
	}
	model, err := cost.New(costCfg)
	if err != nil {
		return cluster.Definition{}, err
	}
	h.model = model
	def, err := h.definition()
	if err != nil {
		return def, err
	}
	h.throttle = nil
	if statuses, _ := h.Adaptive.throttleStatus(); statuses != nil {
		h.throttle = newThrottleSet(statuses)
	}
	return def, nil
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

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)

// validating reports whether this process is `caddy validate` (or `caddy adapt --validate`).
// Caddy provisions the modules the same way for validation and for running, and only the
// command line tells them apart: validation must fail on a configuration Redis refuses, while
// a first start comes up under the rescue limits and logs it. It is read once, here at the
// edge, and handed to the cluster package as an option.
var validating = sync.OnceValue(func() bool { return isValidateCommand(os.Args) })

func isValidateCommand(args []string) bool {
	if len(args) < 2 {
		return false
	}
	switch args[1] {
	case "validate":
		return true
	case "adapt":
		for _, a := range args[2:] {
			if a == "--" {
				break
			}
			if a == "--validate" {
				return true
			}
			if v, ok := strings.CutPrefix(a, "--validate="); ok {
				b, err := strconv.ParseBool(v)
				return err == nil && b
			}
		}
	}
	return false
}
