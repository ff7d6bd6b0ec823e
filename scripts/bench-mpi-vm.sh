#!/bin/sh
# Runs inside the rxe VM for scripts/bench-mpi.sh (busybox sh, in the
# repository on the 9p share): Open MPI over UCX on rxe0/rxe1 and ibcoll-perf on
# the same devices, in alternated rounds, writing raw output under $BENCH_OUT for
# the host side to check and tabulate. Every run records the packets rxe0 and
# rxe1 sent, so that the host can tell that the bytes really crossed rxe.
#
# Environment (set by bench-mpi.sh): BENCH_OUT, BENCH_NPS, BENCH_COLLS,
# BENCH_SIZES_SMALL and BENCH_SIZES_LARGE (bytes, space separated, the sizes up
# to BENCH_SMALL_MAX and the rest), BENCH_SMALL_ITERS, BENCH_ITERS, BENCH_WARMUP,
# BENCH_ROUNDS.
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=$BENCH_OUT
command -v mpirun >/dev/null || { echo "bench-mpi: no mpirun in this VM (RXEVM_WITH_MPI=1)" >&2; exit 1; }
# Both programs run from the guest's tmpfs, not from the 9p share: paged in over 9p,
# ibcoll-perf took 709-771 major faults per rank and its first iterations 22-81 ms
# (3-19 ms from /tmp).
BIN=/tmp/bench-bin
mkdir -p $BIN && cp .cache/bin/mpi-coll .cache/bin/ibcoll-perf $BIN/ || { echo "bench-mpi: cannot copy the programs to $BIN" >&2; exit 1; }

sent() {
  n=0
  for d in rxe0 rxe1; do
    n=$((n + $(cat /sys/class/infiniband/$d/ports/1/hw_counters/sent_pkts)))
  done
  echo $n
}

# Open MPI: pml ucx only (a forced pml that cannot start aborts the job), no
# btl but self, UCX limited to its verbs transports (no posix/sysv/cma shared
# memory, no tcp); local rank r on rxe(r mod 2), as ibcoll-perf's --device
# list does. UCX 1.13's UD destination-GID check drops the packets rxe hands
# it (ud_verbs wires up rc_verbs), so it is off. Rendezvous uses RDMA writes:
# with UCX's default RDMA-read rendezvous, rxe in the TCG guest logs "Failed
# sending ACK" and every 1 MiB message stalls about 1.2 s on retransmission,
# where put_zcopy takes about 0.1 s. pml_base_verbose and UCX's info log say
# which pml and which transports each endpoint took; the host side checks them.
# Each side runs twice per round: the sizes up to BENCH_SMALL_MAX with
# BENCH_SMALL_ITERS iterations, then the larger ones with BENCH_ITERS, into one
# output file per side and round (the tables use the medians: a few iterations
# descheduled for milliseconds set an average of 5).
bands() {
  f=$1
  shift
  if [ -n "$BENCH_SIZES_SMALL" ]; then "$f" "$BENCH_SMALL_ITERS" "$BENCH_SIZES_SMALL" "$@" || return; fi
  if [ -n "$BENCH_SIZES_LARGE" ]; then "$f" "$BENCH_ITERS" "$BENCH_SIZES_LARGE" "$@" || return; fi
}

mpi1() {
  iters=$1 sizes=$2
  rm -f /tmp/ucx-*.log
  mpirun -np "$np" --oversubscribe --bind-to none \
    --mca pml ucx --mca btl self --mca pml_base_verbose 10 \
    -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_UD_VERBS_ETH_DGID_CHECK=n -x UCX_RNDV_SCHEME=put_zcopy \
    -x UCX_LOG_LEVEL=info -x UCX_LOG_FILE=/tmp/ucx-%p.log -x UCX_WARN_UNUSED_ENV_VARS=y \
    sh -c 'export UCX_NET_DEVICES=rxe$((OMPI_COMM_WORLD_LOCAL_RANK % 2)):1; exec "$@"' sh \
    $BIN/mpi-coll -n "$iters" -w "$BENCH_WARMUP" -c "$BENCH_COLLS" $sizes \
    >> "$OUT/$tag.txt" 2>> "$OUT/$tag.log"
  rc=$?
  cat /tmp/ucx-*.log >> "$OUT/$tag.log" 2>/dev/null
  return $rc
}
mpi() {
  np=$1 tag=$2
  : > "$OUT/$tag.txt"; : > "$OUT/$tag.log"
  bands mpi1
}

port=29555
ibcoll1() {
  iters=$1 sizes=$2
  shift 2
  port=$((port + 1))
  lo=${sizes%% *} hi=${sizes##* }
  mpirun -np "$np" --oversubscribe --bind-to none -x IBCOLL_STORE=127.0.0.1:$port \
    $BIN/ibcoll-perf -c "$BENCH_COLLS" -b "$lo" -e "$hi" -f "$BENCH_FACTOR" \
    -d int32 -n "$iters" -w "$BENCH_WARMUP" --device rxe0,rxe1 -q --timeout 300s "$@" \
    >> "$OUT/$tag.txt" 2>> "$OUT/$tag.log"
}
ibcoll() {
  np=$1 tag=$2
  shift 2
  : > "$OUT/$tag.txt"; : > "$OUT/$tag.log"
  bands ibcoll1 "$@"
}

one() {
  before=$(sent)
  t0=$(date +%s)
  "$@"
  rc=$?
  echo "$tag $rc $((t0)) $(date +%s) $before $(sent)" >> "$OUT/runs.txt"
  echo "bench-mpi: $tag: exit $rc, $(($(date +%s) - t0)) s, $(($(sent) - before)) rxe packets" >&2
  return $rc
}

fail=0
r=1
while [ $r -le "$BENCH_ROUNDS" ]; do
  for np in $BENCH_NPS; do
    tag=r$r-np$np-mpi;      one mpi "$np" $tag || fail=1
    tag=r$r-np$np-ibcoll;   one ibcoll "$np" $tag || fail=1
    tag=r$r-np$np-ibcoll-p; one ibcoll "$np" $tag -p || fail=1
  done
  r=$((r + 1))
done
exit $fail
