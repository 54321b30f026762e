package tierbucket

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/dustin/go-humanize"

	"github.com/tierbucket/caddy-tierbucket/cost"
	"github.com/tierbucket/caddy-tierbucket/redislua"
	"github.com/tierbucket/caddy-tierbucket/store"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("rate_limit", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("rate_limit", httpcaddyfile.Before, "basic_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	rl := new(Handler)
	if err := rl.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return rl, nil
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Parsing is strict: an unknown
// subdirective, a repeated one (other than distinct `app` ids and `base` operations) or a
// wrong number of arguments is an error with its file and line. Syntax:
//
//	rate_limit [<matcher>] {
//	    cluster <id>
//	    key <placeholder|literal>
//	    unknown_app shared|isolated|reject
//	    capacity <n> [{
//	        adaptive {
//	            min <n>
//	            max <n>
//	            latency_target <duration>
//	            throttle_status <status...>
//	        }
//	    }]
//	    reserved_ratio <f>
//	    emergency_threshold <f>
//	    emergency_ratios <p0> <p1> <p2> <p3>
//	    app <id>|* {
//	        guaranteed <n>
//	        burst <n>
//	        priority <0-3>
//	        max_borrow <n>
//	        max <n>
//	        max_connections <n>
//	        warmup <duration>
//	        disabled
//	    }
//	    cost {
//	        operations s3|http
//	        quantum <size>
//	        bandwidth <n>
//	        max <n>
//	        default <n>
//	        base <OPERATION> <n>
//	        stream_estimate <size>
//	        response_bytes
//	    }
//	    connections {
//	        app <n>
//	        cluster <n>
//	        idle_timeout <duration>
//	        sweep_interval <duration>
//	    }
//	    local {
//	        reserve <n>
//	        refill_threshold <f>
//	        sync_interval <duration>
//	        sync_batch <n>
//	        lease_ttl <duration>
//	        stats_interval <duration>
//	    }
//	    redis {
//	        address <host:port...>
//	        url <redis-url>
//	        sentinel <master>
//	        username <u>
//	        password <p>
//	        sentinel_username <u>
//	        sentinel_password <p>
//	        db <n>
//	        tls
//	        tls_trust_pool <module> [...]
//	        tls_client_auth <certificate_file> <key_file>
//	        tls_server_name <name>
//	        tls_insecure_skip_verify
//	        key_prefix <s>
//	        timeout <duration>
//	        pool_size <n>
//	    }
//	    on_redis_failure local|open|closed
//	    max_wait <duration>
//	    headers rejections|draft|legacy|both|off
//	    format json|s3
//	    shadow
//	    errors
//	    console {
//	        prometheus <url>
//	    }
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.Errf("rate_limit takes no arguments (besides a matcher), got %q; use a block", d.Val())
	}
	return block{repeatable: "app", subs: map[string]parser{
		"cluster":             set(&h.Cluster, oneArg),
		"key":                 set(&h.Key, oneArg),
		"unknown_app":         set(&h.UnknownApp, oneOf("shared", "isolated", "reject")),
		"capacity":            h.unmarshalCapacity,
		"reserved_ratio":      set(&h.ReservedRatio, ptr(floatArg)),
		"emergency_threshold": set(&h.EmergencyThreshold, ptr(floatArg)),
		"emergency_ratios":    set(&h.EmergencyRatios, emergencyRatiosArg),
		"app":                 h.unmarshalApp,
		"cost":                set(&h.Cost, unmarshalCost),
		"connections":         set(&h.Connections, unmarshalConnections),
		"local":               set(&h.Local, unmarshalLocal),
		"redis":               set(&h.Redis, unmarshalRedis),
		"on_redis_failure":    set(&h.OnRedisFailure, oneOf("local", "open", "closed")),
		"max_wait":            set(&h.MaxWait, durationArg),
		"headers":             set(&h.Headers, oneOf("rejections", "draft", "legacy", "both", "off")),
		"format":              set(&h.Format, oneOf("json", "s3")),
		"shadow":              set(&h.Shadow, flagArg),
		"errors":              set(&h.Errors, flagArg),
		"console":             set(&h.Console, unmarshalConsole),
	}}.parse(d)
}

// A parser reads one subdirective, from its name (d's cursor) to its end, into the config.
type parser func(d *caddyfile.Dispenser) error

// A block is the grammar of a Caddyfile block: the parser of each of its subdirectives.
type block struct {
	prefix string            // starts the block's own errors ("cost: "), so that they name it
	subs   map[string]parser // by subdirective name
	// repeatable may be given more than once (`app`, `base`): its parser rejects a repeated id.
	repeatable string
	// check, if set, runs after each subdirective, so that an invalid value is reported at
	// the line that set it.
	check func() error
}

// parse reads the block that follows d's cursor. An unknown subdirective, or one given twice
// (other than b.repeatable), is an error.
func (b block) parse(d *caddyfile.Dispenser) error {
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		parse, ok := b.subs[name]
		switch {
		case !ok:
			return d.Errf("%sunknown subdirective %q", b.prefix, name)
		case seen[name] && name != b.repeatable:
			return d.Errf("%sduplicate subdirective %q", b.prefix, name)
		}
		seen[name] = true
		if err := parse(d); err != nil {
			return err
		}
		if b.check != nil {
			if err := b.check(); err != nil {
				return d.Errf("%v", err)
			}
		}
	}
	return nil
}

// unmarshalCapacity parses `capacity <n> [{ adaptive { ... } }]`.
func (h *Handler) unmarshalCapacity(d *caddyfile.Dispenser) (err error) {
	if h.Capacity, err = floatArg(d); err != nil {
		return err
	}
	return block{prefix: "capacity: ", subs: map[string]parser{
		"adaptive": set(&h.Adaptive, unmarshalAdaptive),
	}}.parse(d)
}

func unmarshalAdaptive(d *caddyfile.Dispenser) (*AdaptiveConfig, error) {
	if err := noArgs(d); err != nil {
		return nil, err
	}
	a := new(AdaptiveConfig)
	err := block{
		prefix: "adaptive: ",
		subs: map[string]parser{
			"min":            setNonZero("adaptive", &a.Min, floatArg),
			"max":            setNonZero("adaptive", &a.Max, floatArg),
			"latency_target": setNonZero("adaptive", &a.LatencyTarget, durationArg),
			"throttle_status": func(d *caddyfile.Dispenser) error {
				args := d.RemainingArgs()
				if len(args) == 0 {
					return d.Errf("adaptive: throttle_status needs at least one status")
				}
				for _, arg := range args {
					n, err := parseInt[int](arg)
					if err != nil {
						return d.Errf("adaptive: throttle_status: %v", err)
					}
					a.ThrottleStatus = append(a.ThrottleStatus, n)
				}
				if _, err := a.throttleStatus(); err != nil {
					return d.Errf("%v", err)
				}
				return nil
			},
		},
	}.parse(d)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// unmarshalApp parses `app <id>|* { ... }`.
func (h *Handler) unmarshalApp(d *caddyfile.Dispenser) error {
	id, err := oneArg(d)
	if err != nil {
		return err
	}
	if _, dup := h.Apps[id]; dup {
		return d.Errf("duplicate app %q", id)
	}
	a := new(AppConfig)
	guaranteed := false
	err = block{prefix: fmt.Sprintf("app %q: ", id), subs: map[string]parser{
		"guaranteed": func(d *caddyfile.Dispenser) (err error) {
			guaranteed = true
			a.Guaranteed, err = floatArg(d)
			return err
		},
		"burst": set(&a.Burst, floatArg),
		"priority": func(d *caddyfile.Dispenser) error {
			n, err := intArg[int64](d)
			if err == nil && (n < 0 || n > 3) {
				return d.Errf("app %q: priority must be 0-3, got %d", id, n)
			}
			a.Priority = int(n)
			return err
		},
		"max_borrow": set(&a.MaxBorrow, floatArg),
		"max":        set(&a.Max, floatArg),
		"max_connections": func(d *caddyfile.Dispenser) (err error) {
			a.MaxConnections, err = intArg[int64](d)
			// 0 stands for "not set" in the JSON config: an operator writing it to block the
			// app would get connections.app (1000) instead. 2^53: the Store counts in doubles.
			if err == nil && (a.MaxConnections < 1 || a.MaxConnections > store.MaxAmount) {
				err = d.Errf("app %q: max_connections must be >= 1 and <= 2^53 (leave it out for connections.app), got %d",
					id, a.MaxConnections)
			}
			return err
		},
		"warmup":   set(&a.Warmup, durationArg),
		"disabled": set(&a.Disabled, flagArg),
	}}.parse(d)
	if err != nil {
		return err
	}
	if !guaranteed {
		return d.Errf("app %q: guaranteed is required", id)
	}
	if h.Apps == nil {
		h.Apps = map[string]*AppConfig{}
	}
	h.Apps[id] = a
	return nil
}

func unmarshalCost(d *caddyfile.Dispenser) (*cost.Config, error) {
	if err := noArgs(d); err != nil {
		return nil, err
	}
	c := new(cost.Config)
	err := block{
		prefix: "cost: ", repeatable: "base", check: func() error { return c.Validate() },
		subs: map[string]parser{
			"operations": set(&c.Operations, oneOf("s3", "http")),
			"quantum":    set(&c.Quantum, sizeArg),
			"bandwidth":  set(&c.Bandwidth, ptr(intArg[int64])),
			"max":        set(&c.Max, intArg),
			"default":    set(&c.Default, ptr(intArg[int64])),
			"base": func(d *caddyfile.Dispenser) error {
				args := d.RemainingArgs()
				if len(args) != 2 {
					return d.Errf("cost: base needs <OPERATION> <n>, got %d arguments", len(args))
				}
				op, ok := cost.ParseOperation(args[0])
				if !ok {
					return d.Errf("cost: base: unknown operation %q", args[0])
				}
				n, err := parseInt[int64](args[1])
				if err != nil {
					return d.Errf("cost: base %s: %v", args[0], err)
				}
				if _, dup := c.Base[op.String()]; dup {
					return d.Errf("cost: duplicate base %s", op)
				}
				if c.Base == nil {
					c.Base = map[string]int64{}
				}
				c.Base[op.String()] = n
				return nil
			},
			"stream_estimate": set(&c.StreamEstimate, sizeArg),
			"response_bytes":  set(&c.ResponseBytes, flagArg),
		},
	}.parse(d)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func unmarshalConnections(d *caddyfile.Dispenser) (*ConnectionsConfig, error) {
	if err := noArgs(d); err != nil {
		return nil, err
	}
	c := new(ConnectionsConfig)
	err := block{
		prefix: "connections: ", check: func() error { return c.limits().Validate() },
		subs: map[string]parser{
			"app":            setNonZero("connections", &c.App, intArg),
			"cluster":        setNonZero("connections", &c.Cluster, intArg),
			"idle_timeout":   setNonZero("connections", &c.IdleTimeout, durationArg),
			"sweep_interval": setNonZero("connections", &c.SweepInterval, durationArg),
		},
	}.parse(d)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// setNonZero is set for a field of the block named blockName where 0 stands for "not set" in
// the JSON config, that is the default: written in a Caddyfile, it would not mean what it says.
func setNonZero[T comparable](blockName string, dst *T, arg func(*caddyfile.Dispenser) (T, error)) parser {
	return func(d *caddyfile.Dispenser) error {
		name := d.Val()
		if err := set(dst, arg)(d); err != nil {
			return err
		}
		var zero T
		if *dst == zero {
			return d.Errf("%s.%s must be more than 0 (leave it out for the default), got 0", blockName, name)
		}
		return nil
	}
}

func unmarshalLocal(d *caddyfile.Dispenser) (*LocalConfig, error) {
	if err := noArgs(d); err != nil {
		return nil, err
	}
	c := new(LocalConfig)
	err := block{prefix: "local: ", subs: map[string]parser{
		"reserve":          set(&c.Reserve, intArg),
		"refill_threshold": set(&c.RefillThreshold, floatArg),
		"sync_interval":    set(&c.SyncInterval, durationArg),
		"sync_batch":       set(&c.SyncBatch, intArg),
		"lease_ttl":        set(&c.LeaseTTL, durationArg),
		"stats_interval":   set(&c.StatsInterval, durationArg),
	}}.parse(d)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func unmarshalConsole(d *caddyfile.Dispenser) (*ConsoleConfig, error) {
	if err := noArgs(d); err != nil {
		return nil, err
	}
	c := new(ConsoleConfig)
	err := block{prefix: "console: ", subs: map[string]parser{
		"prometheus": set(&c.Prometheus, oneArg),
	}}.parse(d)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func unmarshalRedis(d *caddyfile.Dispenser) (*RedisConfig, error) {
	if err := noArgs(d); err != nil {
		return nil, err
	}
	c := new(RedisConfig)
	// `tls insecure_skip_verify` is another spelling of tls_insecure_skip_verify: the two count
	// as one subdirective.
	insecure := func(d *caddyfile.Dispenser) error {
		if c.TLSInsecureSkipVerify {
			return d.Errf("redis: duplicate subdirective %q", "tls_insecure_skip_verify")
		}
		c.TLSInsecureSkipVerify = true
		return nil
	}
	err := block{prefix: "redis: ", subs: map[string]parser{
		"address": func(d *caddyfile.Dispenser) error {
			if c.Address = d.RemainingArgs(); len(c.Address) == 0 {
				return d.Errf("redis: address needs at least one host:port")
			}
			return nil
		},
		"url":               set(&c.URL, oneArg),
		"sentinel":          set(&c.Sentinel, oneArg),
		"username":          set(&c.Username, oneArg),
		"password":          set(&c.Password, oneArg),
		"sentinel_username": set(&c.SentinelUsername, oneArg),
		"sentinel_password": set(&c.SentinelPassword, oneArg),
		"db":                set(&c.DB, intArg),
		"tls": func(d *caddyfile.Dispenser) error {
			c.TLS = true
			switch args := d.RemainingArgs(); {
			case len(args) == 1 && args[0] == "insecure_skip_verify":
				return insecure(d)
			case len(args) > 0:
				return d.Errf("redis: tls takes no arguments (see tls_insecure_skip_verify), got %q", strings.Join(args, " "))
			}
			return nil
		},
		"tls_trust_pool": set(&c.TrustPoolRaw, trustPoolArg),
		"tls_client_auth": func(d *caddyfile.Dispenser) error {
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("redis: tls_client_auth takes <certificate_file> <key_file>, got %d arguments", len(args))
			}
			c.TLSClientAuth = &redislua.ClientAuth{CertificateFile: args[0], KeyFile: args[1]}
			return nil
		},
		"tls_server_name": set(&c.TLSServerName, oneArg),
		"tls_insecure_skip_verify": func(d *caddyfile.Dispenser) error {
			if err := insecure(d); err != nil {
				return err
			}
			if d.NextArg() {
				return d.Errf("redis: tls_insecure_skip_verify takes no arguments, got %q", d.Val())
			}
			return nil
		},
		"key_prefix": set(&c.KeyPrefix, oneArg),
		"timeout":    set(&c.Timeout, durationArg),
		"pool_size":  set(&c.PoolSize, intArg),
	}}.parse(d)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// trustPoolArg parses `tls_trust_pool <module> [args] [{ ... }]` as reverse_proxy's transport
// does: the module is one of Caddy's tls.ca_pool.source modules (file, inline, ...).
func trustPoolArg(d *caddyfile.Dispenser) (json.RawMessage, error) {
	if !d.NextArg() {
		return nil, d.Errf("redis: tls_trust_pool needs a CA pool module (file, inline, ...)")
	}
	stem := d.Val()
	unm, err := caddyfile.UnmarshalModule(d, "tls.ca_pool.source."+stem)
	if err != nil {
		return nil, err
	}
	ca, ok := unm.(caddytls.CA)
	if !ok {
		return nil, d.Errf("redis: tls_trust_pool: module %s is not a CA pool source", stem)
	}
	return caddyconfig.JSONModuleObject(ca, "provider", stem, nil), nil
}

// emergencyRatiosArg reads `emergency_ratios <p0> <p1> <p2> <p3>`.
func emergencyRatiosArg(d *caddyfile.Dispenser) ([]float64, error) {
	args := d.RemainingArgs()
	if len(args) != 4 {
		return nil, d.Errf("emergency_ratios needs 4 values (P0 P1 P2 P3), got %d", len(args))
	}
	ratios := make([]float64, 4)
	for i, a := range args {
		var err error
		if ratios[i], err = parseFloat(a); err != nil {
			return nil, d.Errf("emergency_ratios: %v", err)
		}
	}
	return ratios, nil
}

// The readers below take d on a subdirective's name and read its arguments; each kind of value
// has one. set and ptr turn them into parsers.

// set returns the parser of a subdirective whose value arg reads into *dst.
func set[T any](dst *T, arg func(*caddyfile.Dispenser) (T, error)) parser {
	return func(d *caddyfile.Dispenser) (err error) {
		*dst, err = arg(d)
		return err
	}
}

// ptr reads the value of arg into a field where nil means "not set".
func ptr[T any](arg func(*caddyfile.Dispenser) (T, error)) func(*caddyfile.Dispenser) (*T, error) {
	return func(d *caddyfile.Dispenser) (*T, error) {
		v, err := arg(d)
		return &v, err
	}
}

// oneArg reads the single argument of a subdirective (on a block line, the one before `{`).
func oneArg(d *caddyfile.Dispenser) (string, error) {
	name := d.Val()
	args := d.RemainingArgs()
	if len(args) != 1 {
		return "", d.Errf("%s needs exactly one argument, got %d", name, len(args))
	}
	return args[0], nil
}

// noArgs checks that a subdirective has no arguments (a block one, none before `{`).
func noArgs(d *caddyfile.Dispenser) error {
	name := d.Val()
	if args := d.RemainingArgs(); len(args) > 0 {
		return d.Errf("%s takes no arguments, got %q", name, strings.Join(args, " "))
	}
	return nil
}

// flagArg reads a subdirective without arguments that turns an option on.
func flagArg(d *caddyfile.Dispenser) (bool, error) {
	return true, noArgs(d)
}

// oneOf returns the reader of a single argument that must be one of allowed.
func oneOf(allowed ...string) func(*caddyfile.Dispenser) (string, error) {
	return func(d *caddyfile.Dispenser) (string, error) {
		name := d.Val()
		v, err := oneArg(d)
		if err == nil && !slices.Contains(allowed, v) {
			return "", d.Errf("%s must be one of %s, got %q", name, strings.Join(allowed, "|"), v)
		}
		return v, err
	}
}

func floatArg(d *caddyfile.Dispenser) (float64, error) { return parsedArg(d, parseFloat) }

func intArg[T int | int64](d *caddyfile.Dispenser) (T, error) { return parsedArg(d, parseInt[T]) }

func sizeArg(d *caddyfile.Dispenser) (int64, error) { return parsedArg(d, parseSize) }

func durationArg(d *caddyfile.Dispenser) (caddy.Duration, error) {
	return parsedArg(d, func(s string) (caddy.Duration, error) {
		dur, err := caddy.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration: %v", s, err)
		}
		return caddy.Duration(dur), nil
	})
}

// parsedArg reads the single argument of a subdirective with parse; an error names the
// subdirective.
func parsedArg[T any](d *caddyfile.Dispenser, parse func(string) (T, error)) (T, error) {
	name := d.Val()
	s, err := oneArg(d)
	if err != nil {
		return *new(T), err
	}
	v, err := parse(s)
	if err != nil {
		return *new(T), d.Errf("%s: %v", name, err)
	}
	return v, nil
}

func parseFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return f, nil
}

func parseInt[T int | int64](s string) (T, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%s is an integer out of range (beyond ±2^63)", s)
	}
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return T(n), nil
}

// parseSize parses a byte size: a plain number of bytes, or a number and a unit of
// humanize.ParseBytes, as Caddy's own size options take, in any case: B, K/KB, M/MB, G/GB, T/TB,
// P/PB, E/EB (powers of 1000), Ki/KiB, Mi/MiB, ... (powers of 1024). 65536, 64KiB, 1MB, 0.5KiB.
// The number is split off here and ParseBytes reads the unit alone, because on the whole string
// it would take "1,5MiB" for 15 MiB and truncate a fraction of a byte ("1.3B" is 1 to it), where
// both are errors here.
func parseSize(s string) (int64, error) {
	unit := strings.TrimLeft(s, "0123456789.")
	f, err := strconv.ParseFloat(s[:len(s)-len(unit)], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (like 65536, 64KiB or 1MiB)", s)
	}
	mult, err := humanize.ParseBytes("1 " + unit) // the space ends the number: only the unit is read
	if err != nil {
		return 0, fmt.Errorf("%q: unknown size unit %q (B, KB, MB, GB, KiB, MiB, GiB, ...)", s, unit)
	}
	// the bound is well inside int64, which float64 cannot reach exactly (MaxInt64 rounds up)
	v := f * float64(mult)
	if v != math.Trunc(v) || v > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return int64(v), nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
