// Command mholt is Caddy v2.11.9 with github.com/mholt/caddy-ratelimit v0.1.0. It is a separate
// binary because that plugin registers the same directive and module id (rate_limit) as tierbucket.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/mholt/caddy-ratelimit"
)

func main() {
	caddycmd.Main()
}
