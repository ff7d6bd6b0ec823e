#!/bin/bash
# Runs the CUDA-capable test binaries of scripts/gpu-build.sh on the GPU machine
# (and reduce's, for the kernels of that machine's CPU),
# each from its package directory, all at once (they are timer-bound, not
# CPU-bound), with IBCOLL_REQUIRE=cuda so that a test that would skip for lack
# of CUDA fails instead. Each log goes to $OUT/test-<pkg>.txt; prints one line
# per package with its exit status.
set -uo pipefail
: "${OUT:?set OUT}"
export IBCOLL_REQUIRE=${IBCOLL_REQUIRE:-cuda}
root=$(pwd)
for p in mem asym coll tlmlx5 verbs cmd/ibcoll-perf reduce; do
	n=$(basename "$p")
	(cd "$p" && timeout "${TEST_TIMEOUT:-400}" "$root/bin/gpu/$n.test" -test.v ${TEST_FLAGS:-} \
		>"$OUT/test-$n.txt" 2>&1; echo "$n: exit $?") &
done
wait
