#!/usr/bin/env bash
# Installs what the tests need (redis-server, chromium, the console's npm packages) and runs every
# test of the module and of the web console.
# Used by CI (.ci/run) and by developers: `./scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Redis store's tests and the fleet e2e tests start their own redis-server processes; the
# S3 end-to-end tests drive boto3; the console's browser tests run Debian's chromium; the long
# history test starts Debian's prometheus.
if ! command -v redis-server >/dev/null 2>&1 || ! python3 -c 'import boto3' >/dev/null 2>&1 ||
	! command -v chromium >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
	pkgs="redis-server redis-tools python3-boto3 chromium prometheus"
	if [ "$(id -u)" = 0 ]; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo apt-get update -qq
		sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null
	else
		echo "scripts/test.sh: redis-server, chromium or prometheus is not installed and this user cannot install them;" >&2
		echo "  the tests that need them will skip (or fail under CI=true)." >&2
	fi
fi
# Debian's packages start a system redis on :6379 and prometheus on :9090; the tests never use them.

# The web console (console/): its packages from the lockfile, lint, type check, unit tests, and
# the build, which must be what is committed in console/dist (embedded in the Go binary). Its
# browser tests run with the Go end-to-end tests below (TestConsoleBrowser).
echo "== console: npm ci, lint, type check, unit tests, build"
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' 2>/dev/null; then
	echo "scripts/test.sh: the console needs Node.js >= 20.19 with npm (found: $(node --version 2>/dev/null || echo none))" >&2
	exit 1
fi
(
	cd console
	npm ci --no-audit --no-fund
	npm run lint
	npm run typecheck
	npm test
	npm run build
)
if ! git diff --exit-code --stat -- console/dist || [ -n "$(git status --porcelain -- console/dist)" ]; then
	echo "scripts/test.sh: console/dist differs from what the sources build to: run 'npm run build' in console/ and commit console/dist" >&2
	exit 1
fi

echo "== go vet"
go vet ./...

# The Go library (ratelimit/) is for programs that do not run Caddy: it must not link it.
if go list -deps ./ratelimit | grep -q '^github.com/caddyserver/'; then
	echo "scripts/test.sh: package ratelimit depends on Caddy (go list -deps ./ratelimit | grep caddyserver)" >&2
	exit 1
fi

# golangci-lint (.golangci.yml) at the version pinned in tools/go.mod, on this module and on the
# load harness's (bench/). `go tool` builds it once into Go's build cache (a few minutes on a
# cold cache: about 1,200 packages), then starts it in about a second; the lint results are
# cached too (~/.cache/golangci-lint), so a warm run re-analyses only changed packages.
echo "== golangci-lint"
go tool -modfile=tools/go.mod golangci-lint run ./...
(cd bench && go tool -modfile=../tools/go.mod golangci-lint run ./...)

echo "== build the tests (in parallel)"
go test -short -run '^$' ./... >/dev/null

# One package at a time: several suites run real Caddy and redis-server processes under load
# (end-to-end, fleet accuracy, fault injection) and would otherwise compete for the CPUs.
echo "== go test (all packages, includes the end-to-end tests that build the caddy binary)"
# -count=1: the end-to-end tests run a binary built at test time, which the test cache cannot see.
go test -count=1 -p 1 -timeout 12m ./...

# The concurrent packages once more under the race detector.
echo "== go test -race (concurrent packages)"
go test -race -timeout 8m ./limiter/... ./connlimit/...

# The config parsers and the cost model under Go's fuzzer (their seed corpora already ran with
# the plain tests above), about 30 s in all. The budgets are execution counts, not durations:
# Go 1.26's fuzz coordinator can report a spurious "context deadline exceeded" when a duration
# ends while a worker is busy (golang/go#75804, fixed in Go 1.27). -fuzz takes one target of one
# package per run. A failing input is written to <package>/testdata/fuzz/<target>/; commit it as
# a regression seed.
echo "== fuzz (bounded)"
go test -run '^$' -fuzz '^FuzzCaddyfile$' -fuzztime 40000x .
go test -run '^$' -fuzz '^FuzzJSONConfig$' -fuzztime 40000x .
go test -run '^$' -fuzz '^FuzzEstimate$' -fuzztime 200000x ./cost/
go test -run '^$' -fuzz '^FuzzClassify$' -fuzztime 100000x ./cost/

# The load harness (its own module: the peers it builds never reach the plugin's go.mod).
echo "== bench harness (vet and unit tests)"
(cd bench && go vet ./... && go test -count=1 ./...)

# ---- chaos soak (bench/chaos.sh; docs/operations.md, "Chaos soak") ----
# Three real gateways on a Redis Cluster with replicas, a multi-tenant load and a seeded
# schedule of faults (two at once half the time), every invariant checked; about 2.5 minutes
# with the build. A fixed seed, so that a failure reproduces: `bash bench/chaos.sh -short -seed 35`.
echo "== chaos soak (short, seeded)"
bash bench/chaos.sh -short -seed 35 -out "${TMPDIR:-/tmp}/chaos-ci-35.md"
