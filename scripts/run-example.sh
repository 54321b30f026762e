#!/usr/bin/env bash
# Builds Caddy v2.11.9 with this plugin through the pinned xcaddy (tools/go.mod) and runs
# testdata/example.Caddyfile on the embedded (in-memory) store.
#   ./scripts/run-example.sh            build ./caddy and run the example on :8080 (admin :2019)
#   ./scripts/run-example.sh build      only build ./caddy
set -euo pipefail
cd "$(dirname "$0")/.."

# xcaddy must see the local module under an explicit pseudo-version: the Go proxy refuses
# to resolve an unpublished module path (see README, "Building").
(cd tools && go tool xcaddy build v2.11.9 \
	--with github.com/tierbucket/caddy-tierbucket@v0.0.0-00010101000000-000000000000=.. \
	--output ../caddy)
mods=$(./caddy list-modules)
grep -qx 'http.handlers.rate_limit' <<<"$mods" || { echo "rate_limit module missing from ./caddy" >&2; exit 1; }
echo "built ./caddy ($(./caddy version))"

if [ "${1:-}" = build ]; then
	exit 0
fi
echo "try: curl -i -H 'X-App-Id: alpha' http://127.0.0.1:8080/"
exec ./caddy run --config testdata/example.Caddyfile --adapter caddyfile
