#!/bin/sh
# Runs inside the rxe VM (make bench-rxe), in the repository (9p share):
#  1. perftest's ib_write_bw / ib_write_lat between rxe0 and rxe1;
#  2. ibcoll's verbs layer (ibcoll-pingpong) between the same devices,
# from this one boot. The comparison of ibcoll's collectives with Open MPI's
# over the same devices is scripts/bench-mpi.sh (make bench-mpi).
set -u
sh test/rxevm/perf-baseline.sh || exit 1
echo
echo "ibcoll verbs (ibcoll-pingpong) rxe0 <-> rxe1:"
.cache/bin/ibcoll-pingpong -d rxe0 -d2 rxe1 -s 64K,1M -n ${PINGPONG_ITERS:-64} -timeout 300s
