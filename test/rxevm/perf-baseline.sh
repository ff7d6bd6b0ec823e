#!/bin/sh
# test/rxevm/perf-baseline.sh: a perftest baseline of soft-RoCE in the rxevm VM.
# Runs INSIDE the VM (busybox sh):   test/rxevm/run test/rxevm/perf-baseline.sh
# ib_write_bw and ib_write_lat, server on rxe0 (10.99.0.1), client on rxe1,
# GID index 1 (RoCE v2, IPv4), at 64 KiB and 1 MiB; prints a table.
# Under TCG this is for comparing rxe runs with each other, not with hardware.
# Env: PERF_SIZES ("65536 1048576"), PERF_BW_BYTES / PERF_LAT_BYTES (bytes
# moved per bw / lat test; iterations = bytes / size, at least 5),
# PERF_VERBOSE=1 (show perftest's own output).
set -u
[ -e /sys/class/infiniband/rxe0 ] && [ -e /sys/class/infiniband/rxe1 ] || {
  echo "perf-baseline: no rxe0/rxe1 here; run it through test/rxevm/run" >&2; exit 2; }
SIZES=${PERF_SIZES:-65536 1048576}
BW_BYTES=${PERF_BW_BYTES:-67108864}    # 64 MiB per bandwidth test
LAT_BYTES=${PERF_LAT_BYTES:-16777216}  # 16 MiB per latency test
PORT=18515
HEXPORT=$(printf '%04X' $PORT)
LOG=${TMPDIR:-/tmp}/perf-baseline.$$
mkdir -p "$LOG"
fails=0

# wait (10 s at most) until the perftest server listens on $PORT
wait_listen() {
  i=0
  while ! grep -q ":$HEXPORT [0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 200 ] && return 1; sleep 0.05
  done
}

# run_pair TOOL SIZE ITERS: server on rxe0, client on rxe1; R = the client's
# result line ("#bytes #iterations ...")
run_pair() {
  tool=$1 size=$2 iters=$3 name=$LOG/$1-$2
  timeout 60 "$tool" -d rxe0 -x 1 -F -p $PORT -s "$size" -n "$iters" > "$name.srv" 2>&1 &
  spid=$!
  wait_listen || { echo "perf-baseline: $tool server did not start" >&2; sed 's/^/  srv| /' "$name.srv" >&2; }
  timeout 60 "$tool" -d rxe1 -x 1 -F -p $PORT -s "$size" -n "$iters" 10.99.0.1 > "$name.cli" 2>&1
  crc=$?
  wait $spid; src=$?
  if [ $crc != 0 ] || [ $src != 0 ]; then
    echo "perf-baseline: $tool -s $size failed (client $crc, server $src)" >&2
    sed 's/^/  cli| /' "$name.cli" >&2; sed 's/^/  srv| /' "$name.srv" >&2
    fails=$((fails + 1)); return 1
  fi
  [ "${PERF_VERBOSE:-0}" = 1 ] && sed 's/^/  cli| /' "$name.cli"
  # the first line whose first field is the message size
  R=$(awk -v s="$size" '$1 == s && NF >= 5 { print; exit }' "$name.cli")
  [ -n "$R" ] || { echo "perf-baseline: $tool -s $size: no result line" >&2; fails=$((fails + 1)); return 1; }
}

iters_for() { n=$(($1 / $2)); [ $n -lt 5 ] && n=5; echo $n; }
human() { if [ $(($1 % 1048576)) = 0 ]; then echo "$(($1 / 1048576))MiB"; else echo "$(($1 / 1024))KiB"; fi; }

t0=$(cut -d' ' -f1 /proc/uptime)
echo "perf-baseline: rxe0 (server) <- rxe1 (client, 10.99.0.1, -x 1), kernel $(uname -r), $(nproc) CPUs"
printf '%-13s %7s %6s %11s %9s %9s %9s\n' test size iters "BW MB/s" "lat typ" "lat avg" "lat 99%"
for size in $SIZES; do
  n=$(iters_for $BW_BYTES $size)
  # bw line: #bytes #iterations BW-peak BW-average MsgRate[Mpps]
  if run_pair ib_write_bw $size $n; then
    set -- $R
    printf '%-13s %7s %6s %11s %9s %9s %9s\n' ib_write_bw "$(human $size)" $2 $4 - - -
  fi
  n=$(iters_for $LAT_BYTES $size)
  # lat line: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%  (usec)
  if run_pair ib_write_lat $size $n; then
    set -- $R
    printf '%-13s %7s %6s %11s %9s %9s %9s\n' ib_write_lat "$(human $size)" $2 - $5 $6 $8
  fi
done
echo "(latencies in usec; $(awk -v a=$t0 '{printf "%.0f", $1 - a}' /proc/uptime) s)"
rm -rf "$LOG"
[ $fails = 0 ]
