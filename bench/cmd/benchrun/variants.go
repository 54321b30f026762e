package main

import (
	"fmt"
	"strings"
)

// appHost is the Host header wrk sends: every limiter keys on {http.request.host}, so all the
// load counts against one app in every variant.
const appHost = "bench"

// scenario is one load shape: the quota (requests per second, burst of one second) that every
// limiter is configured with.
type scenario struct {
	name  string
	quota int
	desc  string
	// withinQuota: every request is within the app's quota, so every response (warm-up, i.e.
	// the cold start, included) must be 2xx; a variant's round with any other answer does not
	// count towards its throughput ratio.
	withinQuota bool
	// hosts > 1: wrk rotates the Host header over hosts app ids (app1 … appN), one per request.
	hosts int
	// rate > 0: instead of wrk at full speed, an open-loop client at this many requests per
	// second (fixedRate): the latency the limiter adds, away from saturation.
	rate int
	// proxied: Caddy passes each request on to an upstream (a plain Caddy answering "ok", the
	// same for every variant) with reverse_proxy, as a gateway does, instead of answering it.
	proxied bool
}

// variant is one Caddy build plus the limiter block that goes in front of `respond "ok" 200`
// (or of `reverse_proxy` in a proxied scenario).
type variant struct {
	name       string // short id used in flags and raw results
	title      string // table label
	bin        string // binary name under bench/bin
	redis      bool   // talks to the bench's redis-server
	tierbucket bool   // exposes caddy_rate_limit_* metrics
	block      func(s scenario, redisAddr string) string
}

// variants lists every variant in table order; "plain" must be first (the baseline).
var variants = []variant{
	{
		name: "plain", title: "Caddy (no limiter)", bin: "plain",
		block: func(scenario, string) string { return "" },
	},
	{
		name: "tierbucket-memory", title: "tierbucket, memory store", bin: "tierbucket", tierbucket: true,
		block: func(s scenario, _ string) string { return tierbucketBlock(s, "", "") },
	},
	{
		name: "tierbucket-redis", title: "tierbucket, Redis store", bin: "tierbucket", tierbucket: true, redis: true,
		block: func(s scenario, addr string) string { return tierbucketBlock(s, addr, "") },
	},
	{
		// Not in run.sh's default list: shows what the rate-limit response headers cost.
		name: "tierbucket-memory-headers-off", title: "tierbucket, memory store, `headers off`", bin: "tierbucket",
		tierbucket: true,
		block:      func(s scenario, _ string) string { return tierbucketBlock(s, "", "headers off") },
	},
	{
		// Not in run.sh's default list: the header modes, to measure what each costs with Redis.
		name: "tierbucket-redis-headers-off", title: "tierbucket, Redis store, `headers off`", bin: "tierbucket",
		tierbucket: true, redis: true,
		block: func(s scenario, addr string) string { return tierbucketBlock(s, addr, "headers off") },
	},
	{
		name: "tierbucket-redis-headers-draft", title: "tierbucket, Redis store, `headers draft`", bin: "tierbucket",
		tierbucket: true, redis: true,
		block: func(s scenario, addr string) string { return tierbucketBlock(s, addr, "headers draft") },
	},
	{
		name: "tierbucket-redis-headers-both", title: "tierbucket, Redis store, `headers both`", bin: "tierbucket",
		tierbucket: true, redis: true,
		block: func(s scenario, addr string) string { return tierbucketBlock(s, addr, "headers both") },
	},
	{
		name: "tierbucket-redis-headers-legacy", title: "tierbucket, Redis store, `headers legacy`", bin: "tierbucket",
		tierbucket: true, redis: true,
		block: func(s scenario, addr string) string { return tierbucketBlock(s, addr, "headers legacy") },
	},
	{
		// Not in run.sh's default list: an alternative build of tierbucket (ALT_BIN=<caddy binary>
		// bash bench/run.sh copies it to bench/bin/tierbucket-alt), with its default settings, to
		// measure a patch side by side with the current code.
		name: "tierbucket-alt-redis", title: "tierbucket, alternative build (ALT_BIN), Redis store", bin: "tierbucket-alt",
		tierbucket: true, redis: true,
		block: func(s scenario, addr string) string { return tierbucketBlock(s, addr, "") },
	},
	{
		// Not in run.sh's default list: the alternative build (ALT_BIN) on the memory store.
		name: "tierbucket-alt-memory", title: "tierbucket, alternative build (ALT_BIN), memory store", bin: "tierbucket-alt",
		tierbucket: true,
		block:      func(s scenario, _ string) string { return tierbucketBlock(s, "", "") },
	},
	{
		name: "mholt", title: "mholt/caddy-ratelimit v0.1.0 (in memory)", bin: "mholt",
		block: func(s scenario, _ string) string {
			return fmt.Sprintf(`rate_limit {
		zone bench {
			key {http.request.host}
			window 1s
			events %d
		}
	}`, s.quota)
		},
	},
	{
		name: "redis_rate", title: "redis_rate v10, one Redis call per request", bin: "redisrate", redis: true,
		block: func(s scenario, addr string) string {
			return fmt.Sprintf(`redis_rate_bench {
		address %s
		key {http.request.host}
		rate %d
		burst %d
		period 1s
	}`, addr, s.quota, s.quota)
		},
	},
}

// tierbucketBlock is the rate_limit block: one app with guaranteed = burst = quota; cost 1 per
// request (operations http, GET base 1) so that cost tokens equal requests in every variant;
// extra is one more subdirective line, if any.
//
// A scenario with hosts (app ids app1 … appN) uses `unknown_app isolated` and an `app *` template
// instead: each host gets its own bucket, as a multi-tenant gateway with unlisted tenants does.
func tierbucketBlock(s scenario, redisAddr, extra string) string {
	var b strings.Builder
	app, unknown := appHost, ""
	if s.hosts >= 1 {
		app, unknown = "*", "\n\t\tunknown_app isolated"
	}
	fmt.Fprintf(&b, `rate_limit {
		key {http.request.host}%s
		app %s {
			guaranteed %d
			burst %d
		}
		cost {
			operations http
		}`, unknown, app, s.quota, s.quota)
	if extra != "" {
		fmt.Fprintf(&b, "\n\t\t%s", extra)
	}
	if redisAddr != "" {
		fmt.Fprintf(&b, `
		redis {
			address %s
		}`, redisAddr)
	}
	b.WriteString("\n\t}")
	return b.String()
}

// caddyfile is the whole config of one variant: loopback only, admin on its own port (for
// /metrics), no HTTPS, no config persistence, no access log. upstream is the address a proxied
// scenario passes requests on to.
func caddyfile(v variant, s scenario, httpPort, adminPort int, redisAddr, upstream string) string {
	terminal := `respond "ok" 200`
	if s.proxied {
		terminal = "reverse_proxy " + upstream
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	auto_https off
	persist_config off
}

http://:%d {
	bind 127.0.0.1
	%s
	%s
}
`, adminPort, httpPort, v.block(s, redisAddr), terminal)
}

// upstreamCaddyfile is the proxied scenarios' upstream: plain Caddy answering "ok" on port.
func upstreamCaddyfile(port, adminPort int) string {
	return caddyfile(variants[0], scenario{}, port, adminPort, "", "")
}
