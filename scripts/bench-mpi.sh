#!/bin/bash
# scripts/bench-mpi.sh: ibcoll-perf against Open MPI over the same two rxe
# devices, in one boot of the rxe VM (test/rxevm), and a side-by-side table.
#
# Both sides run as separate processes under mpirun, local rank r on rxe(r mod 2):
#  - Open MPI with pml ucx, UCX_TLS=rc_verbs,ud_verbs,self: no shared memory,
#    no tcp, no btl but self (test/peer/mpi_coll.c);
#  - ibcoll-perf, non-persistent and persistent (-p), --device rxe0,rxe1.
# The rounds alternate (MPI, ibcoll, ibcoll -p, then again), per team size.
#
# It fails (non-zero exit) when a run fails, when Open MPI did not select pml
# ucx on every rank, when any UCX endpoint took a transport other than
# rc_verbs/ud_verbs on rxe0/rxe1 (or self, a rank's copy to itself), or when a
# run's rxe packet count is too small for the bytes it had to move (at most
# 4096 bytes a packet): then the data went some other way.
#
# The VM runs under TCG software emulation on a host without KVM: the absolute
# numbers are for comparing the two sides, not for any claim about hardware.
#
# Environment: BENCH_NPS ("2 8"), BENCH_COLLS (gather,scatter; bcast and
# allreduce can be added, at about twice the time), BENCH_MIN (1K), BENCH_MAX
# (1M), BENCH_FACTOR (4), BENCH_SMALL_MAX (64K) and BENCH_SMALL_ITERS (50): the
# iterations of the sizes up to it, BENCH_ITERS (5): those of the larger sizes,
# BENCH_WARMUP (2), BENCH_ROUNDS (2), BENCH_OUT (.cache/bench-mpi/<time>);
# RXEVM_MEM defaults to 2048 here and RXEVM_TIMEOUT to 3600. The defaults take
# 15 minutes or more on a 2-core host: 8 busy-polling MPI processes on the
# guest's 2 vCPUs are slow.
#
# The first table compares medians over the iterations (of the slowest rank's
# time per iteration), the second averages: in the TCG guest whole-VM stalls of
# 2-30 ms hit a few iterations, and set the averages.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${BENCH_NPS:=2 8}" "${BENCH_COLLS:=gather,scatter}"
: "${BENCH_MIN:=1K}" "${BENCH_MAX:=1M}" "${BENCH_FACTOR:=4}"
: "${BENCH_ITERS:=5}" "${BENCH_WARMUP:=2}" "${BENCH_ROUNDS:=2}"
: "${BENCH_SMALL_MAX:=64K}" "${BENCH_SMALL_ITERS:=50}"
: "${BENCH_OUT:=.cache/bench-mpi/$(date -u +%Y%m%dT%H%M%S)}"
export RXEVM_MEM=${RXEVM_MEM:-2048}
# run's default bound on the VM (600 s) is too short on a loaded 2-core host:
# one boot ran 13 minutes there; a hung run still ends at this bound.
export RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-3600}

bytes() {
  local s=$1 m=1
  case $s in *K) m=1024 ;; *M) m=1048576 ;; *G) m=1073741824 ;; esac
  s=${s%[KMG]}
  echo $((s * m))
}
min=$(bytes "$BENCH_MIN") max=$(bytes "$BENCH_MAX")
smallMax=$(bytes "$BENCH_SMALL_MAX")
BENCH_SIZES="" BENCH_SIZES_SMALL="" BENCH_SIZES_LARGE=""
for ((s = min; s <= max; s *= BENCH_FACTOR)); do
  BENCH_SIZES+="$s "
  if [ "$s" -le "$smallMax" ]; then BENCH_SIZES_SMALL+="$s "; else BENCH_SIZES_LARGE+="$s "; fi
done
BENCH_SIZES=${BENCH_SIZES% } BENCH_SIZES_SMALL=${BENCH_SIZES_SMALL% } BENCH_SIZES_LARGE=${BENCH_SIZES_LARGE% }
bands=0 # mpirun runs per side and round: one per band of sizes
[ -z "$BENCH_SIZES_SMALL" ] || bands=$((bands + 1))
[ -z "$BENCH_SIZES_LARGE" ] || bands=$((bands + 1))
iters() { if [ "$1" -le "$smallMax" ]; then echo "$BENCH_SMALL_ITERS"; else echo "$BENCH_ITERS"; fi; }

mkdir -p .cache/bin "$BENCH_OUT"
rm -f "$BENCH_OUT"/*
go build -o .cache/bin/ibcoll-perf ./cmd/ibcoll-perf
mpicc -O2 -Wall -o .cache/bin/mpi-coll test/peer/mpi_coll.c

export BENCH_OUT BENCH_NPS BENCH_COLLS BENCH_SIZES_SMALL BENCH_SIZES_LARGE BENCH_FACTOR BENCH_SMALL_ITERS BENCH_ITERS BENCH_WARMUP BENCH_ROUNDS
echo "bench-mpi: $BENCH_ROUNDS rounds at ${BENCH_NPS// /, } ranks; $BENCH_COLLS; sizes $BENCH_SIZES; $BENCH_SMALL_ITERS iterations up to $BENCH_SMALL_MAX, $BENCH_ITERS above (+$BENCH_WARMUP warm-up); raw output in $BENCH_OUT"
vm=0
RXEVM_WITH_MPI=1 RXEVM_EXTRA="$PWD/.cache/bin/mpi-coll" \
  RXEVM_PASSENV="BENCH_OUT BENCH_NPS BENCH_COLLS BENCH_SIZES_SMALL BENCH_SIZES_LARGE BENCH_FACTOR BENCH_SMALL_ITERS BENCH_ITERS BENCH_WARMUP BENCH_ROUNDS" \
  test/rxevm/run scripts/bench-mpi-vm.sh || vm=$?

fail=0
bad() { echo "bench-mpi: FAIL: $*" >&2; fail=1; }
[ -s "$BENCH_OUT/runs.txt" ] || { echo "bench-mpi: FAIL: the VM wrote no runs (exit $vm)" >&2; exit 1; }
[ "$vm" = 0 ] || bad "the VM payload exited $vm"

# Per run: its exit status, and enough rxe packets for the bytes it moved: at
# least (n-1) blocks per collective, size and iteration (gather, scatter,
# bcast: what leaves or reaches the root; allreduce: each rank must learn the
# other n-1 vectors' sum, at least (n-1)/n of a vector each).
ncoll=$(tr ',' '\n' <<<"$BENCH_COLLS" | grep -c .)
sum=0
for s in $BENCH_SIZES; do sum=$((sum + ($(iters "$s") + BENCH_WARMUP) * s)); done
while read -r tag rc t0 t1 before after; do
  np=${tag#*-np}; np=${np%%-*}
  need=$(( ncoll * (np - 1) * sum / 4096 ))
  pk=$((after - before))
  printf "bench-mpi: %-18s exit %s, %4d s, %8d rxe packets (at least %d needed)\n" "$tag" "$rc" $((t1 - t0)) $pk $need
  [ "$rc" = 0 ] || bad "$tag exited $rc (see $BENCH_OUT/$tag.log)"
  [ $pk -ge $need ] || bad "$tag sent $pk packets on rxe0/rxe1, fewer than the $need its bytes need: the data went another way"
done < "$BENCH_OUT/runs.txt"

# What Open MPI used: pml ucx on every rank, and only verbs transports on rxe.
for f in "$BENCH_OUT"/*-mpi.log; do
  tag=$(basename "$f" .log); np=${tag#*-np}; np=${np%%-*}
  sel=$(grep -c 'select: component ucx selected' "$f" || true)
  [ "$sel" = $((np * bands)) ] || bad "$tag: pml ucx was selected $sel times by $np ranks in $bands runs"
  eps=$(grep -c 'ep_cfg\[' "$f" || true)
  [ "$eps" -gt 0 ] || bad "$tag: no UCX endpoint configuration logged (UCX_LOG_LEVEL=info)"
  other=$(grep -o 'ep_cfg\[[0-9]*\]: .*' "$f" | sed 's/^[^:]*: //; s/[a-z_]*(//g; s/)//g' | tr ' ' '\n' | grep . |
          grep -Ev '^(rc_verbs|ud_verbs)/rxe[01]:1$|^self/memory[0-9]*$' | sort -u | tr '\n' ' ' || true)
  [ -z "$other" ] || bad "$tag: UCX endpoints used $other"
  if grep -q 'WARN  unused env variable' "$f"; then bad "$tag: UCX ignored a setting: $(grep -o 'unused env variable: [A-Z_]*' "$f" | sort -u | tr '\n' ' ')"; fi
done
for f in "$BENCH_OUT"/*-ibcoll*.txt; do
  grep -Eq '^# ibcoll-perf: .* on rxe[01][,rxe01]* \([^)]*\)' "$f" && ! grep -q '^# ibcoll-perf: .*soft' "$f" ||
    bad "$(basename "$f" .txt): ibcoll-perf did not report rank 0 on an rxe device: $(grep -m1 '^# ibcoll-perf' "$f" || echo none)"
done

echo
echo "Open MPI transports, as UCX logged them (every endpoint of every rank, first round):"
grep -ho 'ep_cfg\[[0-9]*\]: .*' "$BENCH_OUT"/r1-np*-mpi.log | sort | uniq -c | sed 's/^/  /'
grep -h '^# ibcoll-perf' "$BENCH_OUT"/r1-*-ibcoll.txt | sed 's/^# /  /'
echo
table() { # $1: p50 or avg
  awk -v stat="$1" -v rounds="$BENCH_ROUNDS" -v nps="$BENCH_NPS" -v colls="$BENCH_COLLS" -v sizes="$BENCH_SIZES" '
  function base(f) { sub(/.*\//, "", f); sub(/\.txt$/, "", f); return f }
  FNR == 1 { tag = base(FILENAME); split(tag, p, "-"); r = substr(p[1], 2); np = substr(p[2], 3)
             side = (tag ~ /-mpi$/) ? "mpi" : (tag ~ /-p$/) ? "ibp" : "ib" }
  side == "mpi" && $NF == "ok" && NF == 7 { t[side, r, np, $1, $2] = (stat == "p50") ? $6 : $3 }
  side != "mpi" && /^# collective/ { c = $3; sub(/,$/, "", c) }
  side != "mpi" && $1 ~ /^[0-9]+$/ && NF >= 10 { t[side, r, np, c, $2] = (stat == "p50") ? $7 : $4 }
  function us(side, np, c, s,   k, o, v) {
    o = ""
    for (k = 1; k <= rounds; k++) { v = ((side, k, np, c, s) in t) ? sprintf("%.0f", t[side, k, np, c, s]) : "-"; o = o (k > 1 ? " / " : "") v }
    return o
  }
  function ratio(side, np, c, s,   k, o, v) {
    o = ""
    for (k = 1; k <= rounds; k++) {
      v = ((side, k, np, c, s) in t && ("mpi", k, np, c, s) in t && t["mpi", k, np, c, s] > 0) ? sprintf("%.2f", t[side, k, np, c, s] / t["mpi", k, np, c, s]) : "-"
      o = o (k > 1 ? " / " : "") v
    }
    return o
  }
  function label(s) { return s >= 1048576 ? s / 1048576 " MiB" : s >= 1024 ? s / 1024 " KiB" : s " B" }
  END {
    print "| ranks | coll | size | MPI µs | ibcoll µs | ibcoll/MPI | ibcoll -p µs | -p/MPI |"
    print "|---|---|---|---|---|---|---|---|"
    n = split(nps, N, " "); m = split(colls, C, ","); q = split(sizes, S, " ")
    for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) for (k = 1; k <= q; k++)
      printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", N[i], C[j], label(S[k]), us("mpi", N[i], C[j], S[k]),
        us("ib", N[i], C[j], S[k]), ratio("ib", N[i], C[j], S[k]), us("ibp", N[i], C[j], S[k]), ratio("ibp", N[i], C[j], S[k])
  }' "$BENCH_OUT"/r*-np*-*.txt
}
echo "=== ibcoll-perf against Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}') (pml ucx, rc_verbs) on rxe0/rxe1, $BENCH_ROUNDS alternated rounds ==="
echo "per collective, the slowest rank's time per iteration; $BENCH_SMALL_ITERS iterations up to $BENCH_SMALL_MAX, $BENCH_ITERS above, after $BENCH_WARMUP warm-up;"
echo "rounds 1 to $BENCH_ROUNDS separated by /; ratio = ibcoll / MPI per round (below 1: ibcoll is faster). TCG emulation: compare ratios, not absolute times."
echo
echo "Median µs over the iterations:"
echo
table p50
echo
echo "Average µs over the iterations:"
echo
table avg
if [ $fail != 0 ]; then
  echo "bench-mpi: FAILED (see above and $BENCH_OUT)" >&2
  exit 1
fi
