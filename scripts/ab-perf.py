#!/usr/bin/env python3
"""Compares builds of ibcoll-perf side by side: ROUNDS rounds, each running every
build once with the same arguments, the order reversed every other round; prints per
collective and size the median over the rounds of each build's p50 (time_p50_us) and
of its slowest rank's mean (time_rank_max_us), µs. docs/design.md quotes its tables.

usage: scripts/ab-perf.py ROUNDS "IBCOLL-PERF ARGS" BUILD...
e.g.:  scripts/ab-perf.py 6 "-np 2 -c gather -b 64K -e 4M -f 4 -n 500 -w 20 -p" /tmp/before /tmp/after
"""
import json
import statistics
import subprocess
import sys

if len(sys.argv) < 4:
    sys.exit(__doc__)
rounds, args, builds = int(sys.argv[1]), sys.argv[2].split(), sys.argv[3:]
res = {}
for r in range(rounds):
    for b in builds if r % 2 == 0 else builds[::-1]:
        out = subprocess.run([b] + args + ["-q", "--json"], capture_output=True, text=True, check=True).stdout
        for row in json.loads(out)["rows"]:
            res.setdefault((row["collective"], row["bytes"]), {}).setdefault(b, []).append(
                (row["time_p50_us"], row["time_rank_max_us"]))
print("| coll | bytes | " + " | ".join(f"{b} p50 | {b} slowest" for b in builds) + " |")
print("|---|---|" + "---|---|" * len(builds))
for (coll, size), v in sorted(res.items()):
    cells = []
    for b in builds:
        cells.append("%.1f" % statistics.median(x[0] for x in v[b]))
        cells.append("%.1f" % statistics.median(x[1] for x in v[b]))
    print(f"| {coll} | {size} | " + " | ".join(cells) + " |")
