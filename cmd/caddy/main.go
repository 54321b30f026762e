// Command caddy is Caddy with the standard modules and tierbucket, for `go build` without xcaddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/tierbucket/caddy-tierbucket"
)

func main() {
	caddycmd.Main()
}
