// Command tierbucket is Caddy v2.11.9 with this repository's rate_limit handler (memory or Redis
// store, chosen by the Caddyfile).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/tierbucket/caddy-tierbucket"
)

func main() {
	caddycmd.Main()
}
