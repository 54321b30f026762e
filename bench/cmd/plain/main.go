// Command plain is Caddy v2.11.9 with the standard modules only: the baseline of bench/run.sh.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() {
	caddycmd.Main()
}
