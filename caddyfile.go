package tierbucket

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

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
//	    capacity <n>
//	    reserved_ratio <f>
//	    emergency_threshold <f>
//	    emergency_ratios <p0> <p1> <p2> <p3>
//	    app <id>|* {
//	        guaranteed <n>
//	        burst <n>
//	        priority <0-3>
//	        max_borrow <n>
//	        max_connections <n>
//	        warmup <duration>
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
//	    shadow
//	    errors
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.Errf("rate_limit takes no arguments (besides a matcher), got %q; use a block", d.Val())
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name != "app" {
			if seen[name] {
				return d.Errf("duplicate subdirective %q", name)
			}
			seen[name] = true
		}
		var err error
		switch name {
		case "cluster":
			h.Cluster, err = oneArg(d)
		case "key":
			h.Key, err = oneArg(d)
		case "unknown_app":
			h.UnknownApp, err = enumArg(d, "shared", "isolated", "reject")
		case "capacity":
			h.Capacity, err = floatArg(d)
		case "reserved_ratio":
			var f float64
			f, err = floatArg(d)
			h.ReservedRatio = &f
		case "emergency_threshold":
			var f float64
			f, err = floatArg(d)
			h.EmergencyThreshold = &f
		case "emergency_ratios":
			args := d.RemainingArgs()
			if len(args) != 4 {
				return d.Errf("emergency_ratios needs 4 values (P0 P1 P2 P3), got %d", len(args))
			}
			h.EmergencyRatios = make([]float64, 4)
			for i, a := range args {
				if h.EmergencyRatios[i], err = parseFloat(a); err != nil {
					return d.Errf("emergency_ratios: %v", err)
				}
			}
		case "app":
			err = h.unmarshalApp(d)
		case "cost":
			h.Cost, err = unmarshalCost(d)
		case "connections":
			h.Connections, err = unmarshalConnections(d)
		case "local":
			h.Local, err = unmarshalLocal(d)
		case "redis":
			h.Redis, err = unmarshalRedis(d)
		case "on_redis_failure":
			h.OnRedisFailure, err = enumArg(d, "local", "open", "closed")
		case "max_wait":
			h.MaxWait, err = durationArg(d)
		case "headers":
			h.Headers, err = enumArg(d, "rejections", "draft", "legacy", "both", "off")
		case "format":
			h.Format, err = enumArg(d, "json", "s3")
		case "shadow":
			err = noArgs(d)
			h.Shadow = true
		case "errors":
			err = noArgs(d)
			h.Errors = true
		default:
			return d.Errf("unknown subdirective %q", name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unmarshalApp parses `app <id>|* { ... }`.
func (h *Handler) unmarshalApp(d *caddyfile.Dispenser) error {
	id, err := oneArg(d)
	if err != nil {
		return err
	}
	if h.Apps == nil {
		h.Apps = map[string]*AppConfig{}
	}
	if _, dup := h.Apps[id]; dup {
		return d.Errf("duplicate app %q", id)
	}
	a := new(AppConfig)
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] {
			return d.Errf("app %q: duplicate subdirective %q", id, name)
		}
		seen[name] = true
		switch name {
		case "guaranteed":
			a.Guaranteed, err = floatArg(d)
		case "burst":
			a.Burst, err = floatArg(d)
		case "priority":
			var n int64
			n, err = intArg(d)
			if err == nil && (n < 0 || n > 3) {
				err = d.Errf("app %q: priority must be 0-3, got %d", id, n)
			}
			a.Priority = int(n)
		case "max_borrow":
			a.MaxBorrow, err = floatArg(d)
		case "max_connections":
			a.MaxConnections, err = intArg(d)
			// 0 stands for "not set" in the JSON config: an operator writing it to block the
			// app would get connections.app (1000) instead. 2^53: the Store counts in doubles.
			if err == nil && (a.MaxConnections < 1 || a.MaxConnections > store.MaxAmount) {
				err = d.Errf("app %q: max_connections must be >= 1 and <= 2^53 (leave it out for connections.app), got %d",
					id, a.MaxConnections)
			}
		case "warmup":
			a.Warmup, err = durationArg(d)
		default:
			return d.Errf("app %q: unknown subdirective %q", id, name)
		}
		if err != nil {
			return err
		}
	}
	if !seen["guaranteed"] {
		return d.Errf("app %q: guaranteed is required", id)
	}
	h.Apps[id] = a
	return nil
}

func unmarshalCost(d *caddyfile.Dispenser) (*cost.Config, error) {
	if err := openBlock(d); err != nil {
		return nil, err
	}
	c := new(cost.Config)
	seen := map[string]bool{}
	var err error
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name != "base" {
			if seen[name] {
				return nil, d.Errf("cost: duplicate subdirective %q", name)
			}
			seen[name] = true
		}
		switch name {
		case "operations":
			c.Operations, err = enumArg(d, "s3", "http")
		case "quantum":
			c.Quantum, err = sizeArg(d)
		case "bandwidth":
			var n int64
			n, err = intArg(d)
			c.Bandwidth = cost.Int(n)
		case "max":
			c.Max, err = intArg(d)
		case "default":
			var n int64
			n, err = intArg(d)
			c.Default = cost.Int(n)
		case "base":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return nil, d.Errf("cost: base needs <OPERATION> <n>, got %d arguments", len(args))
			}
			op, ok := cost.ParseOperation(args[0])
			if !ok {
				return nil, d.Errf("cost: base: unknown operation %q", args[0])
			}
			n, perr := strconv.ParseInt(args[1], 10, 64)
			if perr != nil {
				return nil, d.Errf("cost: base %s: %q is not an integer", args[0], args[1])
			}
			if c.Base == nil {
				c.Base = map[string]int64{}
			}
			if _, dup := c.Base[op.String()]; dup {
				return nil, d.Errf("cost: duplicate base %s", op)
			}
			c.Base[op.String()] = n
		case "stream_estimate":
			c.StreamEstimate, err = sizeArg(d)
		case "response_bytes":
			err = noArgs(d)
			c.ResponseBytes = true
		default:
			return nil, d.Errf("cost: unknown subdirective %q", name)
		}
		if err != nil {
			return nil, err
		}
		if err := c.Validate(); err != nil { // here, so that the error names this line
			return nil, d.Errf("%v", err)
		}
	}
	return c, nil
}

func unmarshalConnections(d *caddyfile.Dispenser) (*ConnectionsConfig, error) {
	if err := openBlock(d); err != nil {
		return nil, err
	}
	c := new(ConnectionsConfig)
	seen := map[string]bool{}
	var err error
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] {
			return nil, d.Errf("connections: duplicate subdirective %q", name)
		}
		seen[name] = true
		var zero bool
		switch name {
		case "app":
			c.App, err = intArg(d)
			zero = c.App == 0
		case "cluster":
			c.Cluster, err = intArg(d)
			zero = c.Cluster == 0
		case "idle_timeout":
			c.IdleTimeout, err = durationArg(d)
			zero = c.IdleTimeout == 0
		case "sweep_interval":
			c.SweepInterval, err = durationArg(d)
			zero = c.SweepInterval == 0
		default:
			return nil, d.Errf("connections: unknown subdirective %q", name)
		}
		if err != nil {
			return nil, err
		}
		if zero {
			// 0 stands for "not set" in the JSON config, that is the default
			return nil, d.Errf("connections.%s must be more than 0 (leave it out for the default), got 0", name)
		}
		if err := c.limits().Validate(); err != nil { // here, so that the error names this line
			return nil, d.Errf("%v", err)
		}
	}
	return c, nil
}

func unmarshalLocal(d *caddyfile.Dispenser) (*LocalConfig, error) {
	if err := openBlock(d); err != nil {
		return nil, err
	}
	c := new(LocalConfig)
	seen := map[string]bool{}
	var err error
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] {
			return nil, d.Errf("local: duplicate subdirective %q", name)
		}
		seen[name] = true
		switch name {
		case "reserve":
			c.Reserve, err = intArg(d)
		case "refill_threshold":
			c.RefillThreshold, err = floatArg(d)
		case "sync_interval":
			c.SyncInterval, err = durationArg(d)
		case "sync_batch":
			c.SyncBatch, err = intArg(d)
		case "lease_ttl":
			c.LeaseTTL, err = durationArg(d)
		case "stats_interval":
			c.StatsInterval, err = durationArg(d)
		default:
			return nil, d.Errf("local: unknown subdirective %q", name)
		}
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

func unmarshalRedis(d *caddyfile.Dispenser) (*RedisConfig, error) {
	if err := openBlock(d); err != nil {
		return nil, err
	}
	c := new(RedisConfig)
	seen := map[string]bool{}
	var err error
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] {
			return nil, d.Errf("redis: duplicate subdirective %q", name)
		}
		seen[name] = true
		switch name {
		case "address":
			c.Address = d.RemainingArgs()
			if len(c.Address) == 0 {
				return nil, d.Errf("redis: address needs at least one host:port")
			}
		case "url":
			c.URL, err = oneArg(d)
		case "sentinel":
			c.Sentinel, err = oneArg(d)
		case "username":
			c.Username, err = oneArg(d)
		case "password":
			c.Password, err = oneArg(d)
		case "sentinel_username":
			c.SentinelUsername, err = oneArg(d)
		case "sentinel_password":
			c.SentinelPassword, err = oneArg(d)
		case "db":
			var n int64
			n, err = intArg(d)
			c.DB = int(n)
		case "tls":
			c.TLS = true
			switch args := d.RemainingArgs(); {
			case len(args) == 1 && args[0] == "insecure_skip_verify":
				// the older spelling of tls_insecure_skip_verify
				if seen["tls_insecure_skip_verify"] {
					return nil, d.Errf("redis: duplicate subdirective %q", "tls_insecure_skip_verify")
				}
				seen["tls_insecure_skip_verify"] = true
				c.TLSInsecureSkipVerify = true
			case len(args) > 0:
				return nil, d.Errf("redis: tls takes no arguments (see tls_insecure_skip_verify), got %q", strings.Join(args, " "))
			}
		case "tls_trust_pool":
			c.TrustPoolRaw, err = trustPoolArg(d)
		case "tls_client_auth":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return nil, d.Errf("redis: tls_client_auth takes <certificate_file> <key_file>, got %d arguments", len(args))
			}
			c.TLSClientAuth = &redislua.ClientAuth{CertificateFile: args[0], KeyFile: args[1]}
		case "tls_server_name":
			c.TLSServerName, err = oneArg(d)
		case "tls_insecure_skip_verify":
			if d.NextArg() {
				return nil, d.Errf("redis: tls_insecure_skip_verify takes no arguments, got %q", d.Val())
			}
			c.TLSInsecureSkipVerify = true
		case "key_prefix":
			c.KeyPrefix, err = oneArg(d)
		case "timeout":
			c.Timeout, err = durationArg(d)
		case "pool_size":
			var n int64
			n, err = intArg(d)
			c.PoolSize = int(n)
		default:
			return nil, d.Errf("redis: unknown subdirective %q", name)
		}
		if err != nil {
			return nil, err
		}
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

// openBlock checks that a block subdirective has no arguments and opens a block.
func openBlock(d *caddyfile.Dispenser) error {
	name := d.Val()
	if d.NextArg() {
		return d.Errf("%s takes no arguments, got %q", name, d.Val())
	}
	return nil
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

// noArgs checks that a flag subdirective has no arguments.
func noArgs(d *caddyfile.Dispenser) error {
	name := d.Val()
	if args := d.RemainingArgs(); len(args) > 0 {
		return d.Errf("%s takes no arguments, got %q", name, strings.Join(args, " "))
	}
	return nil
}

func enumArg(d *caddyfile.Dispenser, allowed ...string) (string, error) {
	name := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return "", err
	}
	for _, a := range allowed {
		if v == a {
			return v, nil
		}
	}
	return "", d.Errf("%s must be one of %s, got %q", name, strings.Join(allowed, "|"), v)
}

func floatArg(d *caddyfile.Dispenser) (float64, error) {
	name := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	f, err := parseFloat(v)
	if err != nil {
		return 0, d.Errf("%s: %v", name, err)
	}
	return f, nil
}

func parseFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return f, nil
}

func intArg(d *caddyfile.Dispenser) (int64, error) {
	name := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, d.Errf("%s: %s is an integer out of range (beyond ±2^63)", name, v)
	}
	if err != nil {
		return 0, d.Errf("%s: %q is not an integer", name, v)
	}
	return n, nil
}

func durationArg(d *caddyfile.Dispenser) (caddy.Duration, error) {
	name := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, d.Errf("%s: %q is not a duration: %v", name, v, err)
	}
	return caddy.Duration(dur), nil
}

func sizeArg(d *caddyfile.Dispenser) (int64, error) {
	name := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	n, err := parseSize(v)
	if err != nil {
		return 0, d.Errf("%s: %v", name, err)
	}
	return n, nil
}

// parseSize parses a byte size: a plain number of bytes, or a number with a unit, B, KB, MB,
// GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), case-insensitive: 65536, 64KiB, 1MiB.
func parseSize(s string) (int64, error) {
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("%q is not a size (like 65536, 64KiB or 1MiB)", s)
	}
	mult, ok := map[string]float64{
		"": 1, "b": 1,
		"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
	}[unit]
	if !ok {
		return 0, fmt.Errorf("%q: unknown size unit %q (B, KB, MB, GB, KiB, MiB, GiB)", s, s[i:])
	}
	v := f * mult
	if v != math.Trunc(v) || v > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return int64(v), nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
