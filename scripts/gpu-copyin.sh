#!/bin/bash
# The copy-in question of issue 10 on the GPU machine (docs/design.md, "Where a 1 MiB
# gather cuda,cuda's time goes"): do eight ranks' concurrent copies from one GPU end
# late because their waiters sleep past the spin and wake late, or because copies
# that share the copy engine end together where copies in turn would let the first
# leaves send early? Session 30 ran it and found the second: copies from the device
# to host memory now take the copy turn by default, and the configs ending in -noturn
# turn it off (IBCOLL_X_COPY_TURN=0) for comparison. Run from the repository root
# with bin/gpu.txz carried, built by `scripts/gpu-build.sh` and `BUILD=diag
# TAGS=ibcoll_stagetrace TESTS=0 scripts/gpu-build.sh`. It runs TestCUDACopyTurn (the
# copy turn's data check), times eight concurrent copies alone (mem.test -test.bench
# CUDACopyConcurrent, with IBCOLL_REQUIRE=cuda so that it fails rather than skips
# without a GPU), then runs scripts/gpu-table.sh on the diagnosis build over 8-rank
# gathers at 1 and 4 MiB under each knob, with and without --sync, host,host beside
# them; everything lands in $OUT/copyin.tgz (scripts/staging-table.py for the
# ratios, scripts/stagetrace-summary.py for the copy-in ends i0/i1).
set -uo pipefail
: "${OUT:?set OUT}"
cd "$(dirname "$0")/.."
[ -x bin/gpu/ibcoll-perf-diag ] || tar xJf bin/gpu.txz -C bin
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv; } >"$OUT/gpu.txt" 2>&1
# The turn's own data check first: its timings mean nothing if it moves wrong bytes.
(cd mem && IBCOLL_REQUIRE=cuda timeout 60 ../bin/gpu/mem.test -test.run 'CUDACopyTurn' -test.v) >"$OUT/turn-test.txt" 2>&1 ||
	echo "TestCUDACopyTurn failed: see turn-test.txt"
(cd mem && IBCOLL_REQUIRE=cuda timeout 60 ../bin/gpu/mem.test -test.run '^$' -test.bench CUDACopyConcurrent -test.benchtime 1x) >"$OUT/bench.txt" 2>&1
C="gather-hh|gather|-m host,host|
gather-hh-S|gather|-m host,host --sync|
gather-cc|gather|-m cuda,cuda|
gather-cc-S|gather|-m cuda,cuda --sync|
gather-cc-spin-S|gather|-m cuda,cuda --sync|IBCOLL_X_COPY_SPIN=1000
gather-cc-nap-S|gather|-m cuda,cuda --sync|IBCOLL_X_COPY_NAP=10
gather-cc-sc0-S|gather|-m cuda,cuda --sync|IBCOLL_X_SMALL_COPY=0 IBCOLL_X_COPY_TURN=0
gather-cc-noturn-S|gather|-m cuda,cuda --sync|IBCOLL_X_COPY_TURN=0
gather-cc-noturn|gather|-m cuda,cuda|IBCOLL_X_COPY_TURN=0
gather-ch|gather|-m cuda,host|
gather-ch-noturn|gather|-m cuda,host|IBCOLL_X_COPY_TURN=0
scatter-hh|scatter|-m host,host|
scatter-ch|scatter|-m cuda,host|
scatter-ch-noturn|scatter|-m cuda,host|IBCOLL_X_COPY_TURN=0"
t0=$(date +%s)
CONFIGS=${CONFIGS:-$C} BUILDS=diag ROUNDS=${ROUNDS:-2} SIZES=${SIZES:-"-b 1M -e 4M -f 4"} timeout 300 scripts/gpu-table.sh
echo "table: $(($(date +%s) - t0)) s"
tar czf "$OUT/copyin.tgz" -C "$OUT" table bench.txt turn-test.txt gpu.txt && rm -rf "$OUT/table"
