#!/bin/sh
# Runs inside the rxe VM (make bench-rxe), in the repository (9p share):
#  1. perftest's ib_write_bw / ib_write_lat between rxe0 and rxe1;
#  2. ibcoll's verbs layer (ibcoll-pingpong) between the same devices;
#  3. ibcoll-perf gather and scatter, 4 processes under mpirun, ranks
#     spread over rxe0 and rxe1;
#  4. Open MPI's MPI_Gather / MPI_Scatter (test/peer/mpi_coll.c), 4
#     processes, Open MPI's default transport for one node;
# then the ratios, all from this one boot.
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NP=${BENCH_NP:-4}
ITERS=${BENCH_ITERS:-5}
T=/tmp/bench.$$
mkdir -p $T
sh test/rxevm/perf-baseline.sh | tee $T/perftest.txt || exit 1
echo
echo "ibcoll verbs (ibcoll-pingpong) rxe0 <-> rxe1:"
.cache/bin/ibcoll-pingpong -d rxe0 -d2 rxe1 -s 64K,1M -n ${PINGPONG_ITERS:-64} -timeout 300s
echo
if ! command -v mpirun >/dev/null; then echo "bench: no mpirun in this VM (RXEVM_WITH_MPI=1)"; exit 1; fi
mpirun -np $NP --oversubscribe -x IBCOLL_STORE=127.0.0.1:29555 .cache/bin/ibcoll-perf -c gather,scatter \
  -b 64K -e 1M -f 16 -n $ITERS -w 1 --device rxe0,rxe1 -q --timeout 300s | tee $T/ibcoll.txt || exit 1
echo
echo "Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}') MPI_Gather / MPI_Scatter, $NP processes:"
mpirun -np $NP --oversubscribe .cache/bin/mpi-coll $ITERS 65536 1048576 | tee $T/mpi.txt || exit 1
echo
echo "=== side by side (one boot, TCG emulation: compare ratios only) ==="
awk -v np=$NP '
  FILENAME ~ /perftest/ && $1 == "ib_write_bw" { s = $2; sub(/KiB/, "*1024", s); sub(/MiB/, "*1048576", s)
      split(s, p, "*"); bw[p[1] * p[2]] = $4 }
  FILENAME ~ /ibcoll/ && /^# collective/ { c = $3; sub(/,/, "", c) }
  FILENAME ~ /ibcoll/ && $1 ~ /^[0-9]+$/ && NF >= 8 { us[c, $2] = $4; bus[c, $2] = $7 }
  FILENAME ~ /mpi/ { mpi[$1, $2] = $3 }
  END {
    printf "%-8s %8s %12s %12s %9s %14s %14s %9s\n", "coll", "bytes", "ibcoll µs", "MPI µs", "MPI/ibc", "ibcoll MB/s", "ib_write_bw", "ratio"
    split("gather scatter", cs, " ")
    split("65536 1048576", ss, " ")
    for (i = 1; i <= 2; i++) for (j = 1; j <= 2; j++) {
      c = cs[i]; s = ss[j]
      if (!((c, s) in us)) continue
      r1 = ((c, s) in mpi && us[c, s] > 0) ? mpi[c, s] / us[c, s] : 0
      mb = bus[c, s] * 1000
      r2 = (s in bw && bw[s] > 0) ? mb / bw[s] : 0
      printf "%-8s %8d %12.0f %12.0f %9.2f %14.1f %14.2f %9.2f\n", c, s, us[c, s], mpi[c, s], r1, mb, bw[s], r2
    }
    print "MPI/ibc > 1: ibcoll is faster. ratio: ibcoll bus bandwidth over ib_write_bw at the same size."
  }' $T/perftest.txt $T/ibcoll.txt $T/mpi.txt
