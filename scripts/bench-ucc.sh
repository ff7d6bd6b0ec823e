#!/bin/bash
# scripts/bench-ucc.sh: ibcoll-perf against UCC's ucc_perftest, allreduce and
# reduce, 2 ranks, persistent collectives, 4 KiB to 16 MiB in steps of 4
# (issue 14), and a side-by-side markdown table.
#
# Usage:
#   UCC_PERFTEST=/path/to/ucc/bin/ucc_perftest scripts/bench-ucc.sh
#
# UCC is not built here: build it yourself (UCC v1.3.0 builds against Debian
# 12's UCX 1.13 with `./autogen.sh && ./configure --with-ucx=/usr
# --with-mpi=/usr`) and point UCC_PERFTEST at its ucc_perftest. mpirun comes
# from PATH: the MPI that ucc_perftest was built with (Open MPI's flags are
# used: --oversubscribe, and --allow-run-as-root when run as root).
#
# The two sides, with the same dtype, op (sum), root (0), iterations and
# warm-up iterations:
#  - UCC: mpirun -np 2 ucc_perftest -c COLL -p ..., two processes on this
#    host (UCC picks its TL; UCX its transports, printed from UCX's log);
#  - ibcoll: ibcoll-perf -np 2 -p ..., two ranks as goroutines of one process
#    on the soft provider.
# Two rounds alternate the order: round 1 runs UCC then ibcoll, round 2 ibcoll
# then UCC. BENCH_RUNS (1) repeats that pair: rounds 2k-1 and 2k are run k. This
# machine's UCC and ibcoll times both move by up to 1.5x between runs minutes
# apart, so one pair of rounds can put a cell on either side of 1.0; with several
# runs the table adds each cell's median ratio over all rounds and how many rounds
# were above 1.0.
#
# What the numbers are (both time a post and its completion; the persistent
# request's init, once per size, is outside UCC's timing and in ibcoll's first
# warm-up iteration, hence at least one warm-up iteration):
#  - UCC µs: ucc_perftest's "max" column: each rank's mean time per iteration,
#    the larger of the two ranks. ucc_perftest puts an untimed barrier
#    between iterations.
#  - ibcoll µs: ibcoll-perf's time_rank_max_us, the same measure: each rank's
#    mean time per iteration, the larger of the two. ibcoll-perf does not line
#    the ranks up between iterations unless BENCH_IBCOLL_ARGS=--sync. The table also gives time_avg_us (per
#    iteration the slower rank's time, averaged: a mean of maxima, never below
#    the max of means), which earlier tables compared.
#
# It fails (non-zero exit, with a message) when UCC_PERFTEST is unset or not
# executable, mpirun is missing, a run exits non-zero, or a run's output lacks
# a size or names another collective or dtype than asked (ucc_perftest 1.3.0
# exits 0 after a failed collective and ignores an invalid -d).
#
# Environment: BENCH_RUNS (1), BENCH_ITERS (100) and BENCH_WARMUP (10) per size,
# BENCH_DTYPE (int8; also int16, int32, int64, the uint kinds, float16,
# bfloat16, float32, float64), BENCH_IBCOLL_ARGS (extra ibcoll-perf arguments:
# --sync lines its ranks up before every iteration, as ucc_perftest's barrier does), BENCH_MPIRUN_ARGS (extra mpirun arguments;
# default "--bind-to none": ibcoll-perf's ranks are not pinned either, and a
# busy-polling rank pinned to a core that other work shares waits for that
# core), BENCH_OUT (.cache/bench-ucc/<time>: raw outputs). UCX_* and UCC_*
# variables reach ucc_perftest (single host: mpirun's environment is
# inherited); UCX's log goes to per-process files in BENCH_OUT at level info
# (UCX_LOG_LEVEL), for the transport lines printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${BENCH_RUNS:=1}" "${BENCH_ITERS:=100}" "${BENCH_WARMUP:=10}" "${BENCH_DTYPE:=int8}"
: "${BENCH_MPIRUN_ARGS=--bind-to none}" "${BENCH_IBCOLL_ARGS=}"
: "${BENCH_OUT:=.cache/bench-ucc/$(date -u +%Y%m%dT%H%M%S)}"
export UCX_LOG_LEVEL=${UCX_LOG_LEVEL:-info}

die() { echo "bench-ucc: FAIL: $*" >&2; exit 1; }

[ -n "${UCC_PERFTEST:-}" ] || die "UCC_PERFTEST is not set: point it at UCC's ucc_perftest (<UCC prefix>/bin/ucc_perftest)"
[ -f "$UCC_PERFTEST" ] && [ -x "$UCC_PERFTEST" ] || die "UCC_PERFTEST=$UCC_PERFTEST is not an executable file"
command -v mpirun >/dev/null || die "mpirun is not on PATH"
command -v python3 >/dev/null || die "python3 is needed for the table"
case $BENCH_DTYPE in
  int8 | uint8) es=1 ;;
  int16 | uint16 | float16 | bfloat16) es=2 ;;
  int32 | uint32 | float32) es=4 ;;
  int64 | uint64 | float64) es=8 ;;
  *) die "BENCH_DTYPE=$BENCH_DTYPE: not a dtype both tools know" ;;
esac
[[ $BENCH_RUNS =~ ^[1-9][0-9]*$ && $BENCH_ITERS =~ ^[1-9][0-9]*$ && $BENCH_WARMUP =~ ^[1-9][0-9]*$ ]] ||
  die "BENCH_RUNS ($BENCH_RUNS), BENCH_ITERS ($BENCH_ITERS) and BENCH_WARMUP ($BENCH_WARMUP) must be positive integers"

COLLS="allreduce reduce"
MIN=4096 MAX=16777216 # bytes; the sizes are MIN*4^k up to MAX
mpirun_cmd=(mpirun -np 2 --oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_cmd+=(--allow-run-as-root)
# shellcheck disable=SC2206 # word splitting is what the knob is for
mpirun_cmd+=($BENCH_MPIRUN_ARGS)

mkdir -p .cache/bin "$BENCH_OUT"
rm -f "$BENCH_OUT"/*
BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
go build -o .cache/bin/ibcoll-perf ./cmd/ibcoll-perf || die "go build ./cmd/ibcoll-perf failed"

ucc_info=$(dirname "$UCC_PERFTEST")/ucc_info
ucc_version=unknown
[ -x "$ucc_info" ] && ucc_version=$("$ucc_info" -v 2>/dev/null | sed -n 's/^# UCC version=//p' | head -1)
echo "bench-ucc: UCC $ucc_version ($UCC_PERFTEST), $(mpirun --version 2>/dev/null | head -1)"
echo "bench-ucc: 2 ranks, persistent, $COLLS, $MIN..$MAX bytes x4, $BENCH_DTYPE sum, root 0, $BENCH_ITERS iterations (+$BENCH_WARMUP warm-up), $BENCH_RUNS run(s) of two rounds; raw output in $BENCH_OUT"
echo "bench-ucc: $(nproc) cores; before: $(uptime)"
# Busy-polling UCC ranks lose the most when other work shares the cores: on a
# 2-core host at load 5, ucc_perftest's times went up 10 to 600 times.
awk -v n="$(nproc)" '$1 > n / 2 { printf "bench-ucc: WARNING: load average %s on %d cores: UCC times will be inflated\n", $1, n }' /proc/loadavg

# ucc_perftest takes element counts and doubles them; the table keeps every
# other size (4x steps).
run_ucc() { # round
  local c f cmd
  for c in $COLLS; do
    f=$BENCH_OUT/r$1-ucc-$c
    cmd=("${mpirun_cmd[@]}" -x UCX_LOG_LEVEL -x UCX_LOG_FILE "$UCC_PERFTEST" -c "$c"
      -b $((MIN / es)) -e $((MAX / es)) -d "$BENCH_DTYPE" -o sum -r 0
      -n "$BENCH_ITERS" -w "$BENCH_WARMUP" -p)
    echo "+ UCX_LOG_LEVEL=$UCX_LOG_LEVEL UCX_LOG_FILE=$f.ucx-%p.log ${cmd[*]}" >"$f.cmd"
    UCX_LOG_FILE=$f.ucx-%p.log "${cmd[@]}" >"$f.txt" 2>"$f.log" ||
      die "round $1: ucc_perftest $c exited $? (see $f.txt, $f.log)"
    echo "bench-ucc: round $1: ucc_perftest $c done"
  done
}
run_ibcoll() { # round
  local f=$BENCH_OUT/r$1-ibcoll
  local cmd=(.cache/bin/ibcoll-perf -np 2 -c "${COLLS// /,}" -b $MIN -e $MAX -f 4
    -d "$BENCH_DTYPE" -o sum -r 0 -n "$BENCH_ITERS" -w "$BENCH_WARMUP" -p -q --json $BENCH_IBCOLL_ARGS)
  echo "+ ${cmd[*]}" >"$f.cmd"
  "${cmd[@]}" >"$f.json" 2>"$f.log" || die "round $1: ibcoll-perf exited $? (see $f.json, $f.log)"
  echo "bench-ucc: round $1: ibcoll-perf done"
}

for ((k = 1; k <= BENCH_RUNS; k++)); do
  run_ucc $((2 * k - 1))
  run_ibcoll $((2 * k - 1))
  run_ibcoll $((2 * k))
  run_ucc $((2 * k))
done
echo "bench-ucc: after: $(uptime)"

# UCX's transport choice per endpoint configuration (UCX_LOG_LEVEL=info).
tl=$(cat "$BENCH_OUT"/r*-ucc-*.ucx-*.log 2>/dev/null | sed -n 's/.*\(ep_cfg\[[0-9]*\]: .*\)/\1/p' | sort -u)
if [ -n "$tl" ]; then
  echo "bench-ucc: UCX transports of ucc_perftest's endpoints:"
  echo "$tl" | sed 's/^/bench-ucc:   /'
else
  echo "bench-ucc: UCX printed no ep_cfg lines (UCX_LOG_LEVEL=$UCX_LOG_LEVEL): transports unknown"
fi
echo

python3 - "$BENCH_OUT" "$BENCH_DTYPE" "$MIN" "$MAX" "$BENCH_RUNS" $COLLS <<'EOF'
import json, statistics, sys

out, dtype, lo, hi, runs, colls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
rounds = range(1, 2 * runs + 1)
sizes = []
s = lo
while s <= hi:
    sizes.append(s)
    s *= 4

def fail(msg):
    print("bench-ucc: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)

def ucc(rnd, c):
    """Size in bytes -> the "max" column (µs) of ucc_perftest's table."""
    path = f"{out}/r{rnd}-ucc-{c}.txt"
    head, rows = {}, {}
    for line in open(path):
        if ":" in line:
            k, _, v = line.partition(":")
            head[k.strip()] = v.strip()
            continue
        f = line.split()
        if len(f) == 5 and all(x.replace(".", "", 1).isdigit() for x in f):
            rows[int(f[1])] = float(f[4])
    if head.get("Collective", "").lower() != c:
        fail(f"{path}: collective {head.get('Collective')!r}, not {c}")
    if head.get("Datatype") != dtype:
        fail(f"{path}: datatype {head.get('Datatype')!r}, not {dtype}")
    missing = [s for s in sizes if s not in rows]
    if missing:
        fail(f"{path}: no row for {missing} bytes (a failed collective?)")
    return rows

def ibcoll(rnd):
    """(coll, bytes) -> (time_rank_max_us, algorithm, time_avg_us) of ibcoll-perf's JSON."""
    path = f"{out}/r{rnd}-ibcoll.json"
    doc = json.load(open(path))
    if not doc.get("persistent") or doc.get("dtype") != dtype or doc.get("ranks") != 2:
        fail(f"{path}: not a persistent 2-rank {dtype} run")
    rows = {}
    for r in doc["rows"]:
        if r.get("errors"):
            fail(f"{path}: {r['collective']} {r['bytes']} bytes: {r['errors']}")
        rows[(r["collective"], r["bytes"])] = (r["time_rank_max_us"], r["algorithm"], r["time_avg_us"])
    missing = [(c, s) for c in colls for s in sizes if (c, s) not in rows]
    if missing:
        fail(f"{path}: no row for {missing}")
    return rows

def size(b):
    for unit, n in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n}{unit}"
    return str(b)

u = {(r, c): ucc(r, c) for r in rounds for c in colls}
i = {r: ibcoll(r) for r in rounds}
rn = " / ".join(f"r{r}" for r in rounds)
head = f"| coll | bytes | UCC µs ({rn}) | ibcoll µs ({rn}) | ibcoll/UCC ({rn}) |"
rule = "|---|---:|---:|---:|---:|"
if runs > 1:
    head += " median ibcoll/UCC | rounds above 1.0 |"
    rule += "---:|---:|"
print(head + " ibcoll alg | ibcoll mean of maxima µs |")
print(rule + "---|---:|")
over, over_median = [], []
for c in colls:
    for s in sizes:
        ut = [u[(r, c)][s] for r in rounds]
        it = [i[r][(c, s)][0] for r in rounds]
        q = [b / a if a > 0 else float("inf") for a, b in zip(ut, it)]
        med, above = statistics.median(q), sum(x > 1.0 for x in q)
        if s >= 65536 and above:
            over.append(f"{c} {size(s)}" + (f" ({above} of {len(q)})" if runs > 1 else ""))
        if s >= 65536 and med > 1.0:
            over_median.append(f"{c} {size(s)} ({med:.2f})")
        mm = [i[r][(c, s)][2] for r in rounds]
        row = (f"| {c} | {size(s)} | {' / '.join(f'{x:.1f}' for x in ut)} | {' / '.join(f'{x:.1f}' for x in it)} "
               f"| {' / '.join(f'{x:.2f}' for x in q)} |")
        if runs > 1:
            row += f" {med:.2f} | {above} of {len(q)} |"
        print(row + f" {i[1][(c, s)][1]} | {' / '.join(f'{x:.1f}' for x in mm)} |")
print()
print("UCC µs: ucc_perftest's max over the 2 ranks of each rank's mean time per iteration.")
print("ibcoll µs: the same for ibcoll-perf (time_rank_max_us); the last column is its mean over")
print("iterations of the slower rank's time (time_avg_us), which earlier tables compared.")
print("From 64K, ibcoll/UCC above 1.0 in a round: " + (", ".join(over) if over else "none"))
if runs > 1:
    print(f"From 64K, median ibcoll/UCC over the {len(rounds)} rounds above 1.0: " + (", ".join(over_median) if over_median else "none"))
EOF
