#!/usr/bin/env bash
# Go microbenchmarks of the hot paths (target: < 1 µs and 0 allocs per request).
# Usage: bash bench/micro.sh     → bench/results/micro-<date>.txt (benchstat input) and its
#                                   benchstat summary bench/results/micro-<date>.md
# Settings (environment): COUNT=6 BENCHTIME=1s BENCH=. PKGS="./cost ./limiter ./connlimit ./redislua ./ratelimit ."
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
COUNT=${COUNT:-6} # benchstat gives a confidence interval from 6 samples on
BENCHTIME=${BENCHTIME:-1s}
BENCH=${BENCH:-.}
PKGS=${PKGS:-./cost ./limiter ./connlimit ./redislua ./ratelimit .}

stamp=$(date -u +%Y-%m-%dT%H%MZ)
mkdir -p "$here/results"
out="$here/results/micro-$stamp.txt"

# Only packages that exist and declare benchmarks (the list above may name packages to come).
cd "$root"
pkgs=()
for p in $PKGS; do
	case " ${pkgs[*]-} " in *" $p "*) continue ;; esac
	if [ -d "$p" ] && grep -qs '^func Benchmark' "$p"/*_test.go; then
		pkgs+=("$p")
	fi
done
if [ ${#pkgs[@]} -eq 0 ]; then
	echo "micro.sh: no package with benchmarks among: $PKGS" >&2
	exit 1
fi

echo "micro.sh: go test -run '^\$' -bench '$BENCH' -benchmem -count $COUNT -benchtime $BENCHTIME ${pkgs[*]}" >&2
status=0
for p in "${pkgs[@]}"; do
	# One package at a time: a package that does not build must not hide the others' results.
	go test -run '^$' -bench "$BENCH" -benchmem -count "$COUNT" -benchtime "$BENCHTIME" "$p" | tee -a "$out" || status=1
done

# benchstat is pinned as a tool in bench/go.mod.
if (cd "$here" && go tool benchstat "results/${out##*/}") >"${out%.txt}.md.tmp" 2>&1; then
	{ echo '```'; cat "${out%.txt}.md.tmp"; echo '```'; } >"${out%.txt}.md"
	cat "${out%.txt}.md"
else
	echo "micro.sh: benchstat failed:" >&2
	cat "${out%.txt}.md.tmp" >&2
	status=1
fi
rm -f "${out%.txt}.md.tmp"
echo "micro.sh: raw results in ${out#"$root"/}" >&2
exit $status
