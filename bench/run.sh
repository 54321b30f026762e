#!/usr/bin/env bash
# Side-by-side load test of Caddy with and without rate limiters (see bench/README.md).
# Usage: bash bench/run.sh            (from anywhere; results in bench/results/<date>.md)
#        INSTRUCTIONS=1 bash bench/run.sh   (instructions per request under callgrind instead of time;
#                                            results in bench/results/instr-<date>.md)
# Settings (environment): DURATION=5s ROUNDS=7 WARMUP=1s THREADS=2 CONNS=50
#   HIGH_QUOTA=1000000 LOW_QUOTA=200 SCENARIOS=unlimited,limited VARIANTS=plain,tierbucket-memory,... (default: all that build)
#   SERVER_CPUS=1 LOAD_CPUS=0 THREADS=1: Caddy and redis-server on CPU 1, wrk on CPU 0 (default: not pinned)
#   GOGC=… GOMEMLIMIT=…: inherited by every Caddy alike (default: Go's), to compare the limiters under one garbage collector setting
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

if [ -n "${INSTRUCTIONS:-}" ]; then
	# Caddy runs about 30 x slower under callgrind: fewer, longer runs; the count barely varies.
	DURATION=${DURATION:-10s} ROUNDS=${ROUNDS:-3} WARMUP=${WARMUP:-3s} THREADS=${THREADS:-1} CONNS=${CONNS:-10}
	SCENARIOS=${SCENARIOS:-unlimited,proxied}
	# The collector off (unless set): a collection costs millions of instructions at once and
	# comes as often as each Caddy's heap size decides, so with it on the count says more about
	# heap sizes than about the request path; the bytes allocated per request are shown instead.
	if [ -z "${GOGC:-}" ] && [ -z "${GOMEMLIMIT:-}" ]; then
		export GOGC=off GOMEMLIMIT=4GiB
	fi
fi
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-7}
WARMUP=${WARMUP:-1s}
THREADS=${THREADS:-2}
CONNS=${CONNS:-50}
HIGH_QUOTA=${HIGH_QUOTA:-1000000}
LOW_QUOTA=${LOW_QUOTA:-200}
SCENARIOS=${SCENARIOS:-unlimited,limited}

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need redis-server || { [ -n "${INSTRUCTIONS:-}" ] && ! need valgrind; }; then
	if [ "$(id -u)" = 0 ] && need apt-get; then
		apt-get update -qq
		apt-get install -y -qq wrk redis-server valgrind >/dev/null
	fi
fi
need wrk || { echo "run.sh: wrk is missing (apt-get install -y wrk)" >&2; exit 1; }
need redis-server || { echo "run.sh: redis-server is missing (apt-get install -y redis-server)" >&2; exit 1; }
if [ -n "${INSTRUCTIONS:-}" ]; then
	need valgrind || { echo "run.sh: valgrind is missing (apt-get install -y valgrind)" >&2; exit 1; }
fi

echo "building Caddy variants into bench/bin ..." >&2
mkdir -p bin
go build -o bin/ ./cmd/benchrun ./cmd/plain ./cmd/mholt ./cmd/redisrate
variants=plain
skipped=""
if go build -o bin/ ./cmd/tierbucket 2>bin/tierbucket-build.log &&
	bin/tierbucket list-modules 2>/dev/null | grep -qx http.handlers.rate_limit; then
	variants=$variants,tierbucket-memory,tierbucket-redis
else
	echo "run.sh: tierbucket does not build or has no rate_limit module yet (bench/bin/tierbucket-build.log); running without it" >&2
	skipped="tierbucket was not measured: its build failed or has no http.handlers.rate_limit module yet (bench/bin/tierbucket-build.log)."
fi
variants=$variants,mholt,redis_rate
# An alternative tierbucket build to compare with (variant tierbucket-alt-redis, not run by default).
if [ -n "${ALT_BIN:-}" ]; then
	cp "$ALT_BIN" bin/tierbucket-alt
fi
VARIANTS=${VARIANTS:-$variants}

cd "$here/.."
exec bench/bin/benchrun -bin bench/bin -out bench/results \
	-duration "$DURATION" -rounds "$ROUNDS" -warmup "$WARMUP" -threads "$THREADS" -conns "$CONNS" \
	-high-quota "$HIGH_QUOTA" -low-quota "$LOW_QUOTA" -scenarios "$SCENARIOS" -variants "$VARIANTS" -skipped "$skipped" \
	-server-cpus "${SERVER_CPUS:-}" -load-cpus "${LOAD_CPUS:-}" ${INSTRUCTIONS:+-instructions}
