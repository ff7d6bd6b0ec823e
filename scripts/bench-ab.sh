#!/bin/bash
# Side-by-side latency of two ibcoll-perf builds on soft0, in-process ranks:
#   scripts/bench-ab.sh OLD NEW [ROUNDS]
# runs, per round, each build over 2 and 8 ranks, persistent and not, gather, scatter
# and allreduce of 64 B, 2 KiB and 64 KiB; the builds alternate, and every other
# round turns their order. One line per row: build, round, mode, collective, bytes,
# p50 and min µs (ibcoll-perf's columns). Build the two with
# `go build -o ... ./cmd/ibcoll-perf` at the two commits (git worktree add).
set -euo pipefail
A=$1 B=$2 R=${3:-4}
for round in $(seq 1 "$R"); do
	order=("$A" "$B")
	if [ $((round % 2)) = 0 ]; then order=("$B" "$A"); fi
	for b in "${order[@]}"; do
		for cfg in "-np 2 -p -n 50000" "-np 2 -n 30000" "-np 8 -p -n 10000" "-np 8 -n 5000"; do
			# shellcheck disable=SC2086
			"$b" $cfg -c gather,scatter,allreduce -b 64 -e 64K -f 32 -w 200 2>&1 |
				awk -v b="$(basename "$b")" -v r="$round" -v c="$cfg" '
					/^# collective/ {coll=$3}
					/^ +[0-9]/ {printf "%s r%d %-18s %-9s %6s p50 %7s min %6s\n", b, r, c, coll, $2, $7, $5}'
		done
	done
done
