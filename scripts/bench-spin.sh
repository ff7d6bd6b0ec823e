#!/bin/bash
# scripts/bench-spin.sh: what "spin briefly, then block" (coll/progress.go,
# spinPolls in coll/tunables.go) costs and buys with many in-process ranks on
# few cores. It builds ibcoll-perf with -tags ibcoll_spinhook, where
# IBCOLL_SPIN_POLLS sets spinPolls, with no spinning on free cores after it, and
# "auto" keeps the default rule (cmd/ibcoll-perf/spinhook.go calls
# coll/spinhook.go's SetSpin; neither exists in a normal build), and runs it
# on soft0 at each team size and spin count, in alternated rounds, under
# /usr/bin/time for wall and CPU time, then prints one table.
#
# Environment: SPIN_NPS ("8 64"), SPIN_COUNTS ("0 8 64 512"), SPIN_COLLS
# (gather,allreduce,barrier), SPIN_MIN (1K), SPIN_MAX (64K), SPIN_WORK (3200:
# the iterations per size are SPIN_WORK / ranks, so that every team size runs
# about as long and CPU seconds are well above the clock's 10 ms),
# SPIN_ROUNDS (2), SPIN_OUT (.cache/bench-spin/<time>).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SPIN_NPS:=8 64}" "${SPIN_COUNTS:=0 8 64 512}" "${SPIN_COLLS:=gather,allreduce,barrier}"
: "${SPIN_MIN:=1K}" "${SPIN_MAX:=64K}" "${SPIN_WORK:=3200}" "${SPIN_ROUNDS:=2}"
: "${SPIN_OUT:=.cache/bench-spin/$(date -u +%Y%m%dT%H%M%S)}"
[ -x /usr/bin/time ] || { echo "bench-spin: needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }
mkdir -p .cache/bin "$SPIN_OUT"
bin=.cache/bin/ibcoll-perf-spinhook
go build -tags ibcoll_spinhook -o $bin ./cmd/ibcoll-perf
echo "bench-spin: $(nproc) cores; $SPIN_ROUNDS rounds; ranks $SPIN_NPS; spinPolls $SPIN_COUNTS; $SPIN_COLLS $SPIN_MIN..$SPIN_MAX x4, $SPIN_WORK/ranks iterations (+2 warm-up), non-persistent; raw output in $SPIN_OUT"
for ((r = 1; r <= SPIN_ROUNDS; r++)); do
  for np in $SPIN_NPS; do
    for s in $SPIN_COUNTS; do
      f=$SPIN_OUT/r$r-np$np-spin$s
      IBCOLL_SPIN_POLLS=$s /usr/bin/time -o $f.time -f '%e %U %S' \
        $bin -np "$np" -c "$SPIN_COLLS" -b "$SPIN_MIN" -e "$SPIN_MAX" -f 4 -n $((SPIN_WORK / np)) -q > $f.txt 2> $f.log ||
        { echo "bench-spin: FAIL: np $np spin $s (see $f.log)" >&2; cat $f.log >&2; exit 1; }
      grep -q "spinhook build: spinPolls $s\( \|$\)" $f.log ||
        { echo "bench-spin: FAIL: np $np: the spin hook did not set spinPolls $s" >&2; exit 1; }
      echo "bench-spin: round $r, $np ranks, spinPolls $s: $(cat $f.time) (wall, user, sys s)" >&2
    done
  done
done
echo
echo "=== spin, then block: ibcoll-perf -np N on soft0, $(nproc) cores, round 1 / round 2 ==="
echo "wall, user and sys: seconds for the whole run (team creation included); µs: average per collective, slowest rank"
awk -v work="$SPIN_WORK" -v rounds="$SPIN_ROUNDS" -v nps="$SPIN_NPS" -v spins="$SPIN_COUNTS" -v colls="$SPIN_COLLS" -v lo="$(numfmt --from=iec "$SPIN_MIN")" -v hi="$(numfmt --from=iec "$SPIN_MAX")" '
  function base(f) { sub(/.*\//, "", f); sub(/\.(txt|time)$/, "", f); return f }
  FNR == 1 { split(base(FILENAME), p, "-"); r = substr(p[1], 2); np = substr(p[2], 3); s = substr(p[3], 5) }
  FILENAME ~ /\.time$/ { w[r, np, s] = $1; u[r, np, s] = $2; y[r, np, s] = $3; next }
  /^# collective/ { c = $3; sub(/,$/, "", c) }
  $1 ~ /^[0-9]+$/ && NF >= 9 && ($2 == lo || $2 == hi || c == "barrier") { t[r, np, s, c, $2] = $4; if (!((c, $2) in seen)) { seen[c, $2] = 1; cols[++nc] = c SUBSEP $2 } }
  function pr(a, r2, np, s, fmt,   k, o) { o = ""; for (k = 1; k <= rounds; k++) o = o (k > 1 ? " / " : "") (((k, np, s) in a) ? sprintf(fmt, a[k, np, s]) : "-"); return o }
  function label(b) { return b >= 1048576 ? b / 1048576 "M" : b >= 1024 ? b / 1024 "K" : b }
  END {
    h = "| ranks | iterations | spinPolls | wall s | user s | sys s |"; d = "|---|---|---|---|---|---|"
    for (i = 1; i <= nc; i++) { split(cols[i], q, SUBSEP); h = h " " q[1] (q[1] == "barrier" ? "" : " " label(q[2])) " µs |"; d = d "---|" }
    print h; print d
    n = split(nps, N, " "); m = split(spins, S, " ")
    for (a = 1; a <= n; a++) for (b = 1; b <= m; b++) {
      line = sprintf("| %s | %d | %s | %s | %s | %s |", N[a], work / N[a], S[b], pr(w, 0, N[a], S[b], "%.2f"), pr(u, 0, N[a], S[b], "%.2f"), pr(y, 0, N[a], S[b], "%.2f"))
      for (i = 1; i <= nc; i++) {
        split(cols[i], q, SUBSEP); o = ""
        for (k = 1; k <= rounds; k++) o = o (k > 1 ? " / " : "") (((k, N[a], S[b], q[1], q[2]) in t) ? sprintf("%.0f", t[k, N[a], S[b], q[1], q[2]]) : "-")
        line = line " " o " |"
      }
      print line
    }
  }' "$SPIN_OUT"/r*.time "$SPIN_OUT"/r*.txt
