package tierbucket

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tierbucket/caddy-tierbucket/internal/cluster"
)

// TestProvisionRejectsInvalidConfig: every invalid config fails provisioning with
// a message naming the field (property 10).
func TestProvisionRejectsInvalidConfig(t *testing.T) {
	cases := []struct {
		name, json, want string
	}{
		{"guaranteed zero", `{"apps":{"a":{"guaranteed":0,"burst":5}}}`, `apps["a"].guaranteed must be > 0`},
		{"guaranteed negative", `{"apps":{"a":{"guaranteed":-1}}}`, `apps["a"].guaranteed`},
		{"empty app", `{"apps":{"a":null}}`, `apps["a"]: empty app block`},
		{"burst below guaranteed", `{"apps":{"a":{"guaranteed":10,"burst":5}}}`, `apps["a"].burst must be >= guaranteed`},
		{"burst below one", `{"apps":{"a":{"guaranteed":0.5,"burst":0.5}}}`, `apps["a"].burst must be >= 1`},
		{"guaranteed huge", `{"apps":{"a":{"guaranteed":1e30}}}`, `apps["a"].guaranteed must be > 0 and <= 2^53, got 1e+30`},
		{"priority high", `{"apps":{"a":{"guaranteed":1,"priority":4}}}`, `apps["a"].priority must be 0-3`},
		{"priority negative", `{"apps":{"a":{"guaranteed":1,"priority":-1}}}`, `apps["a"].priority`},
		{"max_borrow negative", `{"apps":{"a":{"guaranteed":1,"max_borrow":-3}}}`, `apps["a"].max_borrow`},
		{"max_connections negative", `{"apps":{"a":{"guaranteed":1,"max_connections":-3}}}`, `apps["a"].max_connections`},
		{"max_connections above 2^53", `{"apps":{"a":{"guaranteed":1,"max_connections":9007199254740993}}}`, `apps["a"].max_connections`},
		{"warmup negative", `{"apps":{"a":{"guaranteed":1,"warmup":"-1s"}}}`, `apps["a"].warmup must be >= 0`},
		{"warmup negative ns", `{"apps":{"a":{"guaranteed":1,"warmup":-5}}}`, `apps["a"].warmup must be >= 0`},
		{"warmup not a duration", `{"apps":{"a":{"guaranteed":1,"warmup":"soon"}}}`, `warmup: time: invalid duration "soon"`},
		{"app unknown field", `{"apps":{"a":{"guaranteed":1,"warmpu":"1s"}}}`, `unknown field "warmpu"`},
		{"wildcard invalid", `{"apps":{"*":{"guaranteed":0}}}`, `apps["*"].guaranteed`},
		{"invalid app id", `{"apps":{"a b":{"guaranteed":1}}}`, `apps: invalid app id "a b"`},
		{"app id too long", `{"apps":{"` + strings.Repeat("x", 129) + `":{"guaranteed":1}}}`, `apps: invalid app id`},
		{"reserved_ratio high", `{"reserved_ratio":1.5}`, "reserved_ratio must be in [0,1), got 1.5"},
		{"reserved_ratio one", `{"reserved_ratio":1}`, "reserved_ratio must be < 1"},
		{"reserved_ratio negative", `{"reserved_ratio":-0.1}`, "reserved_ratio"},
		{"emergency_threshold high", `{"emergency_threshold":1.2}`, "emergency_threshold must be in (0,1], got 1.2"},
		{"emergency_threshold zero", `{"emergency_threshold":0}`, "emergency_threshold must be > 0"},
		{"emergency_ratios count", `{"emergency_ratios":[1,0.5,0.1]}`, "emergency_ratios needs 4 values"},
		{"emergency_ratios range", `{"emergency_ratios":[1,0.5,2,0]}`, "emergency_ratios[2] must be in [0,1]"},
		{"capacity negative", `{"capacity":-5}`, "capacity must be >= 0"},
		{"console prometheus scheme", `{"console":{"prometheus":"127.0.0.1:9090"}}`, "console.prometheus: "},
		{"console prometheus query", `{"console":{"prometheus":"http://u:secret@p:9090/?x=1"}}`, "console.prometheus: http://u:xxxxx@p:9090/?x=1: want http[s]://host[:port][/path]"},
		{"adaptive without capacity", `{"adaptive":{"min":1}}`, "adaptive needs a capacity > 0"},
		{"adaptive min above capacity", `{"capacity":100,"adaptive":{"min":200}}`, "adaptive.min must be > 0 and <= capacity (100), got 200"},
		{"adaptive max below capacity", `{"capacity":100,"adaptive":{"max":50}}`, "adaptive.max must be >= capacity (100)"},
		{"adaptive latency_target negative", `{"capacity":100,"adaptive":{"latency_target":"-1s"}}`, "adaptive.latency_target must be > 0"},
		{"adaptive throttle_status", `{"capacity":100,"adaptive":{"throttle_status":[503,200]}}`, "adaptive.throttle_status: 200 is not a 4xx or 5xx status"},
		{
			"sum of guaranteed over an adaptive capacity", `{"capacity":1000,"adaptive":{"min":100},"apps":{"a":{"guaranteed":901}}}`,
			"apps: sum of guaranteed (901) exceeds (1 - reserved_ratio) × capacity = 900",
		},
		{"app max below guaranteed", `{"apps":{"a":{"guaranteed":10,"max":5}}}`, `apps["a"].max must be >= guaranteed (10)`},
		{
			"sum of guaranteed", `{"capacity":1000,"apps":{"a":{"guaranteed":600},"b":{"guaranteed":301}}}`,
			"apps: sum of guaranteed (901) exceeds (1 - reserved_ratio) × capacity = 900",
		},
		{"sum with reserved_ratio", `{"capacity":1000,"reserved_ratio":0.5,"apps":{"a":{"guaranteed":501}}}`, "sum of guaranteed"},
		{"unknown_app", `{"unknown_app":"sometimes"}`, `unknown_app must be shared, isolated or reject, got "sometimes"`},
		{"headers", `{"headers":"all"}`, `headers must be rejections, draft, legacy, both or off, got "all"`},
		{"on_redis_failure", `{"on_redis_failure":"panic"}`, `on_redis_failure must be local, open or closed, got "panic"`},
		{"max_wait negative", `{"max_wait":"-1s"}`, "max_wait must be >= 0"},
		{"key empty", `{"key":" "}`, "key must not be empty"},
		{"key unbalanced", `{"key":"{http.request.header.X"}`, "key: unbalanced braces"},
		{"cluster id", `{"cluster":"a/b"}`, `cluster: invalid id "a/b"`},
		{"cost base", `{"cost":{"base":{"FETCH":1}}}`, `cost.base: unknown operation "FETCH"`},
		{"cost quantum", `{"cost":{"quantum":-1}}`, "cost.quantum"},
		{"cost operations", `{"cost":{"operations":"grpc"}}`, "cost.operations"},
		{"connections app", `{"connections":{"app":-1}}`, "connections.app"},
		{"connections idle_timeout", `{"connections":{"idle_timeout":"-5s"}}`, "connections.idle_timeout"},
		{"local reserve", `{"local":{"reserve":-1}}`, "local.reserve must be >= 0"},
		{"local refill_threshold", `{"local":{"refill_threshold":1.5}}`, "local.refill_threshold must be in [0,1]"},
		{"local sync_interval", `{"local":{"sync_interval":"-1s"}}`, "local.sync_interval must be >= 10ms (0: the default), got -1s"},
		{"local sync_interval too short", `{"local":{"sync_interval":"1ns"}}`, "local.sync_interval must be >= 10ms (0: the default), got 1ns"},
		{"local sync_batch", `{"local":{"sync_batch":-1}}`, "local.sync_batch"},
		{"local lease_ttl", `{"local":{"lease_ttl":"-1s"}}`, "local.lease_ttl must be >= 100ms (0: the default), got -1s"},
		{"local lease_ttl too short", `{"local":{"lease_ttl":"1ms"}}`, "local.lease_ttl must be >= 100ms (0: the default), got 1ms"},
		{"local stats_interval", `{"local":{"stats_interval":"-1m"}}`, "local.stats_interval must be >= 1s (0: the default), got -1m0s"},
		{"local stats_interval too short", `{"local":{"stats_interval":"100ms"}}`, "local.stats_interval must be >= 1s (0: the default), got 100ms"},
		{"connections sweep_interval too short", `{"connections":{"sweep_interval":"1ms"}}`, "connections.sweep_interval must be >= 100ms"},
		{"redis no address", `{"redis":{}}`, "redis.address"},
		{"redis bad address", `{"redis":{"address":["nohost"]}}`, "redis.address[0]"},
		{"redis db on cluster", `{"redis":{"address":["a:1","b:2"],"db":3}}`, "redis.db"},
		{"redis timeout", `{"redis":{"address":["a:1"],"timeout":"-1s"}}`, "redis.timeout"},
		{"redis key_prefix", `{"redis":{"address":["a:1"],"key_prefix":"a{b}"}}`, "redis.key_prefix"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			if err := json.Unmarshal([]byte(tc.json), &h); err != nil {
				if strings.Contains(err.Error(), tc.want) {
					return // rejected while decoding, naming the field
				}
				t.Fatalf("decode: %v", err)
			}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			err := h.Provision(ctx)
			if err == nil {
				_ = h.Cleanup()
				t.Fatalf("Provision accepted %s", tc.json)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestLimiterConfigDefaults: an empty config gets the documented defaults.
func TestLimiterConfigDefaults(t *testing.T) {
	var h Handler
	cfg, err := h.limiterConfig()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Cluster
	if c.ID != "default" || c.Capacity != 0 || c.ReservedRatio != 0.1 || c.EmergencyThreshold != 0.95 ||
		c.EmergencyRatios != [4]float64{1, 0.5, 0.1, 0} {
		t.Errorf("cluster defaults: %+v", c)
	}
	if d := cfg.Default; d.Guaranteed != DefaultAppGuaranteed || d.Burst != DefaultAppBurst || d.Priority != 3 {
		t.Errorf("default app template: %+v", d)
	}
	if cfg.Instance == "" || cfg.Instance != cluster.InstanceID() {
		t.Errorf("instance id %q", cfg.Instance)
	}
	// an explicit `app *` replaces the template; burst defaults to guaranteed
	h.Apps = map[string]*AppConfig{"*": {Guaranteed: 7}, "a": {Guaranteed: 3, Burst: 9, Priority: 1}}
	cfg, err = h.limiterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Default; d.Guaranteed != 7 || d.Burst != 7 || d.Priority != 0 {
		t.Errorf("app * template: %+v", d)
	}
	if a := cfg.Apps["a"]; a.Guaranteed != 3 || a.Burst != 9 || a.Priority != 1 || len(cfg.Apps) != 1 {
		t.Errorf("apps: %+v", cfg.Apps)
	}
}

func TestHostOnlyAndParseKey(t *testing.T) {
	for in, want := range map[string]string{
		"example.com": "example.com", "example.com:8080": "example.com", "[::1]:80": "::1",
		"[::1]": "::1", "::1": "::1", "": "", "a:b:c": "a:b:c",
	} {
		if got := hostOnly(in); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
	for key, want := range map[string]keyMode{
		"{http.request.host}":              keyHost,
		"{http.request.header.X-App}":      keyHeader,
		"fixed":                            keyLiteral,
		"{http.request.uri.query.app}":     keyPlaceholder,
		"{http.request.header.A}-{http.x}": keyPlaceholder,
	} {
		if got, _ := parseKey(key); got != want {
			t.Errorf("parseKey(%q) = %d, want %d", key, got, want)
		}
	}
	if _, hdr := parseKey("{http.request.header.x-app-id}"); hdr != "X-App-Id" {
		t.Errorf("header name not canonical: %q", hdr)
	}
}

// TestJSONDurationsAreCaddyDurations: every duration of the JSON config is a Caddy duration, so
// "1d" works everywhere the Caddyfile takes it, and so do nanoseconds.
func TestJSONDurationsAreCaddyDurations(t *testing.T) {
	const day = 24 * time.Hour
	in := `{"max_wait":"1d","apps":{"a":{"guaranteed":1,"warmup":"1d"}},
		"connections":{"idle_timeout":"1d","sweep_interval":86400000000000},
		"local":{"sync_interval":"1d","lease_ttl":"1d","stats_interval":"1d"},
		"redis":{"address":["a:1"],"timeout":"1d"}}`
	var h Handler
	if err := json.Unmarshal([]byte(in), &h); err != nil {
		t.Fatal(err)
	}
	got := map[string]caddy.Duration{
		"max_wait":                   h.MaxWait,
		"apps.a.warmup":              h.Apps["a"].Warmup,
		"connections.idle_timeout":   h.Connections.IdleTimeout,
		"connections.sweep_interval": h.Connections.SweepInterval,
		"local.sync_interval":        h.Local.SyncInterval,
		"local.lease_ttl":            h.Local.LeaseTTL,
		"local.stats_interval":       h.Local.StatsInterval,
		"redis.timeout":              h.Redis.Timeout,
	}
	for field, d := range got {
		if time.Duration(d) != day {
			t.Errorf("%s = %v, want 24h", field, time.Duration(d))
		}
	}
	rc, err := h.Redis.resolve(nil)
	if err != nil || rc.Timeout != day {
		t.Errorf("redis timeout resolved to %v (%v), want 24h", rc.Timeout, err)
	}
	if c := h.Connections.limits(); c.IdleTimeout != day || c.SweepInterval != day {
		t.Errorf("connections limits = %+v, want 24h durations", c)
	}
	for _, bad := range []string{`{"connections":{"idle_timeout":"soon"}}`, `{"redis":{"timeout":true}}`, `{"local":{"lease_ttl":"1 week"}}`} {
		var h Handler
		if err := json.Unmarshal([]byte(bad), &h); err == nil {
			t.Errorf("Unmarshal(%s) accepted a malformed duration", bad)
		}
	}
}
