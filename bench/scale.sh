#!/usr/bin/env bash
# Fleet-scale and Redis-calls harness (bench/cmd/scale; see bench/README.md, docs/performance.md).
# Usage: bash bench/scale.sh      → bench/results/scale-<suite>-<date>.md (+ .log)
# Settings (environment): SUITES="fleet calls" WARMUP (fleet: 70s, calls: 5s) DURATION=15s (fleet)
#   CALLS_DURATION=30s RATE=20000 (fleet: total offered req/s); extra flags for bench/bin/scale in
#   SCALE_FLAGS. The fleet's warm-up outlasts stats_interval (60 s), so that its steady state
#   includes the statistics flushes of sparse (instance, app) pairs.
# Bounded: fleet ≈ 4 runs × (WARMUP + DURATION + setup), calls ≈ 5 runs × (WARMUP + CALLS_DURATION).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
SUITES=${SUITES:-fleet calls}
DURATION=${DURATION:-15s}
CALLS_DURATION=${CALLS_DURATION:-30s}
RATE=${RATE:-20000}

need() { command -v "$1" >/dev/null 2>&1; }
if ! need redis-server || ! need redis-cli; then
	if [ "$(id -u)" = 0 ] && need apt-get; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
	fi
fi
need redis-server || { echo "scale.sh: redis-server is missing (apt-get install -y redis-server)" >&2; exit 1; }
need redis-cli || { echo "scale.sh: redis-cli is missing (apt-get install -y redis-tools)" >&2; exit 1; }

mkdir -p bin
go build -o bin/ ./cmd/scale
cd "$here/.."
for s in $SUITES; do
	case $s in
	fleet) timeout 15m bench/bin/scale -suite fleet -out bench/results -warmup "${WARMUP:-70s}" -duration "$DURATION" -rate "$RATE" ${SCALE_FLAGS:-} ;;
	calls) timeout 15m bench/bin/scale -suite calls -out bench/results -warmup "${WARMUP:-5s}" -duration "$CALLS_DURATION" ${SCALE_FLAGS:-} ;;
	*) echo "scale.sh: unknown suite $s (fleet, calls)" >&2; exit 1 ;;
	esac
done
