// Command redisrate is Caddy v2.11.9 with the bench-only per-request Redis limiter
// (bench/redisrate, go-redis/redis_rate v10).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/tierbucket/caddy-tierbucket/bench/redisrate"
)

func main() {
	caddycmd.Main()
}
