// Package tierbucket is a Caddy HTTP handler that does hierarchical, cost-weighted, distributed
// token-bucket rate limiting and concurrent-connection limiting. This package only wires the
// concept packages (cost, limiter, connlimit, redislua) into Caddy.
package tierbucket

import (
	_ "github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/caddytest"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "go.uber.org/zap"
	_ "pgregory.net/rapid"
)
