#!/bin/bash
# The staging knobs side by side on the GPU machine: scripts/gpu-table.sh over the
# diagnosis build (BUILD=trace TAGS=ibcoll_stagetrace TESTS=0 scripts/gpu-build.sh),
# 8-rank gather host,cuda at 1 and 4 MiB under each knob setting, with host,host
# as the reference, ROUNDS rounds with the configs' order reversed in every other
# round. Each run's table and stage trace go to $OUT/table/<round>-trace-<config>.txt;
# scripts/staging-table.py gives the ratios, scripts/stagetrace-summary.py the
# timelines. The knobs: IBCOLL_X_POLL_PIECES and IBCOLL_X_COPY_PIECE (tlmlx5),
# IBCOLL_X_BATCH_MIN, IBCOLL_X_EARLY_MIN and IBCOLL_X_PIPE_CHUNK (asym),
# IBCOLL_X_GPU_WORKER (mem); docs/design.md says what each does.
set -uo pipefail
: "${OUT:?set OUT}"
K=${KNOBS:-"gather-hh|gather|-m host,host|
gather-hh-p|gather|-m host,host -p|
gather-hc|gather|-m host,cuda|
gather-hc-pp4|gather|-m host,cuda|IBCOLL_X_POLL_PIECES=4
gather-hc-pp16|gather|-m host,cuda|IBCOLL_X_POLL_PIECES=16
gather-hc-pp16-b256k|gather|-m host,cuda|IBCOLL_X_POLL_PIECES=16 IBCOLL_X_BATCH_MIN=262144
gather-hc-pp16-b4m|gather|-m host,cuda|IBCOLL_X_POLL_PIECES=16 IBCOLL_X_BATCH_MIN=4194304
gather-hc-pp16-w|gather|-m host,cuda|IBCOLL_X_POLL_PIECES=16 IBCOLL_X_GPU_WORKER=1
gather-hc-pp16-w-b256k|gather|-m host,cuda|IBCOLL_X_POLL_PIECES=16 IBCOLL_X_GPU_WORKER=1 IBCOLL_X_BATCH_MIN=262144
gather-hc-p|gather|-m host,cuda -p|
gather-hc-pp16-p|gather|-m host,cuda -p|IBCOLL_X_POLL_PIECES=16
gather-hc-pp16-w-p|gather|-m host,cuda -p|IBCOLL_X_POLL_PIECES=16 IBCOLL_X_GPU_WORKER=1"}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT/table"
for ((r = 1; r <= ROUNDS; r++)); do
	L=$K
	((r % 2 == 0)) && L=$(tac <<<"$K")
	# one round at a time, so that the order can turn
	mkdir -p "$OUT/round$r"
	OUT="$OUT/round$r" ROUNDS=1 BUILDS=trace SIZES="${SIZES:--b 1M -e 4M -f 4}" CONFIGS="$L" \
		"$(dirname "$0")/gpu-table.sh"
	for f in "$OUT/round$r"/table/1-*; do
		mv "$f" "$OUT/table/$r-${f##*/1-}"
	done
	rm -rf "$OUT/round$r"
done
