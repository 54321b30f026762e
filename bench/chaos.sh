#!/usr/bin/env bash
# Chaos soak (bench/cmd/chaos; docs/operations.md, "Chaos soak"): three real Caddy gateways on a
# Redis Cluster with replicas (or Sentinel), a steady multi-tenant load, a random schedule of
# faults from a seed, the invariants checked as it runs. Exit status 1 when one is violated.
# Usage: bash bench/chaos.sh [-short] [-mode cluster|sentinel] [-seed N] [-duration 30m] [flags of bench/bin/chaos]
#   -short: the CI soak, 90 s of faults unless -duration says otherwise (≈ 2.5 min with setup).
# Report: bench/results/chaos-<mode>-<seed>.md (and on stdout).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

need() { command -v "$1" >/dev/null 2>&1; }
need redis-server || { echo "chaos.sh: redis-server is missing (apt-get install -y redis-server)" >&2; exit 1; }
need redis-cli || { echo "chaos.sh: redis-cli is missing (apt-get install -y redis-tools)" >&2; exit 1; }

args=("$@")
for a in "$@"; do
	if [ "$a" = -short ] || [ "$a" = --short ]; then
		case " $* " in *" -duration"*|*" --duration"*) ;; *) args+=(-duration 90s) ;; esac
	fi
done

mkdir -p bin
go build -o bin/ ./cmd/tierbucket ./cmd/chaos
cd "$here/.."
exec bench/bin/chaos -bin bench/bin/tierbucket "${args[@]}"
