// Package redisrate is a bench-only Caddy HTTP handler: the simplest distributed rate limiter,
// one go-redis/redis_rate (GCRA) call to Redis on every request. It is the "per-request Redis
// limiter" that tierbucket is compared against in bench/run.sh; it is not meant for production.
//
// Caddyfile:
//
//	redis_rate_bench {
//		address 127.0.0.1:6379
//		key     {http.request.host}
//		rate    200        # requests per period
//		burst   200        # default: rate
//		period  1s         # default: 1s
//	}
package redisrate

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("redis_rate_bench", parseCaddyfile)
	// Same place in the handler chain as the other limiters' rate_limit directive.
	httpcaddyfile.RegisterDirectiveOrder("redis_rate_bench", httpcaddyfile.Before, "basic_auth")
}

// Handler admits or rejects each request with one redis_rate Allow call.
type Handler struct {
	// Address is the Redis host:port.
	Address string `json:"address,omitempty"`
	// Key is the limit key; placeholders are expanded per request. Default {http.request.host}.
	Key string `json:"key,omitempty"`
	// Rate is the number of requests allowed per Period.
	Rate int `json:"rate,omitempty"`
	// Burst is the bucket size; default Rate.
	Burst int `json:"burst,omitempty"`
	// Period is the rate's time unit; default 1s.
	Period caddy.Duration `json:"period,omitempty"`

	client  *redis.Client
	limiter *redis_rate.Limiter
	limit   redis_rate.Limit
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.redis_rate_bench",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision applies defaults and opens the Redis client.
func (h *Handler) Provision(caddy.Context) error {
	if h.Key == "" {
		h.Key = "{http.request.host}"
	}
	if h.Burst == 0 {
		h.Burst = h.Rate
	}
	if h.Period == 0 {
		h.Period = caddy.Duration(time.Second)
	}
	h.limit = redis_rate.Limit{Rate: h.Rate, Burst: h.Burst, Period: time.Duration(h.Period)}
	h.client = redis.NewClient(&redis.Options{Addr: h.Address})
	h.limiter = redis_rate.NewLimiter(h.client)
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.Address == "" {
		return fmt.Errorf("redis_rate_bench: address is required")
	}
	if h.Rate <= 0 {
		return fmt.Errorf("redis_rate_bench: rate must be > 0, got %d", h.Rate)
	}
	if h.Burst < 0 {
		return fmt.Errorf("redis_rate_bench: burst must be >= 0, got %d", h.Burst)
	}
	return nil
}

// Cleanup closes the Redis client.
func (h *Handler) Cleanup() error {
	if h.client != nil {
		return h.client.Close()
	}
	return nil
}

// ServeHTTP asks Redis for every request; a Redis error fails open, as most such limiters do.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	key := repl.ReplaceAll(h.Key, "")
	res, err := h.limiter.Allow(r.Context(), key, h.limit)
	if err != nil {
		return next.ServeHTTP(w, r)
	}
	if res.Allowed == 0 {
		secs := int(res.RetryAfter/time.Second) + 1
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		w.WriteHeader(http.StatusTooManyRequests)
		return nil
	}
	return next.ServeHTTP(w, r)
}

// UnmarshalCaddyfile parses the redis_rate_bench block (see the package doc).
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		if !d.NextArg() {
			return d.ArgErr()
		}
		val := d.Val()
		var err error
		switch name {
		case "address":
			h.Address = val
		case "key":
			h.Key = val
		case "rate":
			h.Rate, err = strconv.Atoi(val)
		case "burst":
			h.Burst, err = strconv.Atoi(val)
		case "period":
			var p time.Duration
			p, err = caddy.ParseDuration(val)
			h.Period = caddy.Duration(p)
		default:
			return d.Errf("unknown subdirective %q", name)
		}
		if err != nil {
			return d.Errf("%s: %v", name, err)
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var m Handler
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return &m, err
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
