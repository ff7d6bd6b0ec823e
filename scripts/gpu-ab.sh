#!/bin/bash
# One device call for a change to staging: run on the GPU machine from the repository
# root with bin/gpu.txz carried. It unpacks bin/gpu (scripts/gpu-build.sh: BUILD=base
# for the old commit's ibcoll-perf, then the default build of the new one, with its
# test binaries), runs scripts/gpu-table.sh over both builds (ROUNDS rounds, the
# builds' order turned in every other round; SIZES and CONFIGS as gpu-table.sh takes
# them, by default gather and scatter with CUDA on either side beside host,host at 1,
# 4 and 16 MiB; BUILDS, default "base new", may add a copy of a build under another
# name, "base new base2", so that the table shows the spread of two identical
# binaries beside the difference between the builds), prints scripts/staging-table.py's summary, then runs
# scripts/gpu-tests.sh (IBCOLL_REQUIRE=cuda) unless TESTS=0, and packs every table,
# trace and test log into $OUT/all.tgz: the device returns a limited number of files.
set -uo pipefail
: "${OUT:?set OUT}"
tar xJf bin/gpu.txz -C bin
out=$OUT
mkdir -p "$out/ab"
OUT=$out/ab ROUNDS=${ROUNDS:-4} BUILDS=${BUILDS:-"base new"} SIZES=${SIZES:-"-b 1M -e 16M -f 4"} CONFIGS=${CONFIGS:-"gather-hh|gather|-m host,host
gather-hc|gather|-m host,cuda
gather-ch|gather|-m cuda,host
gather-cc|gather|-m cuda,cuda
scatter-hh|scatter|-m host,host
scatter-ch|scatter|-m cuda,host
scatter-hc|scatter|-m host,cuda
scatter-cc|scatter|-m cuda,cuda"} bash scripts/gpu-table.sh
python3 scripts/staging-table.py "$out/ab/table"
if [ "${TESTS:-1}" = 1 ]; then
	mkdir -p "$out/tests"
	OUT=$out/tests TEST_TIMEOUT=${TEST_TIMEOUT:-300} bash scripts/gpu-tests.sh
	for f in "$out"/tests/test-*.txt; do
		echo "$(basename "$f"): $(grep -c '^--- PASS' "$f") passed, $(grep -c -- '--- FAIL' "$f") failed, $(grep -c '^--- SKIP' "$f") skipped"
	done
fi
(cd "$out" && tar czf all.tgz ab $( [ -d tests ] && echo tests ) && rm -rf ab tests)
