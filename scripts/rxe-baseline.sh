#!/bin/sh
# Runs inside the rxe VM (make bench-rxe): perftest's ib_write_bw and
# ib_write_lat, then ibcoll's own verbs layer (ibcoll-pingpong) between the
# same two devices, at the same sizes, in the same boot, so the two can be
# compared as ratios. The working directory is the repository (9p share).
set -u
sh test/rxevm/perf-baseline.sh || exit 1
echo
echo "ibcoll verbs (ibcoll-pingpong) rxe0 <-> rxe1:"
.cache/bin/ibcoll-pingpong -d rxe0 -d2 rxe1 -s 64K,1M -n ${PINGPONG_ITERS:-64} -timeout 300s
