#!/usr/bin/env python3
"""Measures the algorithms of bcast, reduce and reduce_scatter side by side with
ibcoll-perf, two rounds in alternated order, and prints one table per collective
(average µs per collective, round 1 and round 2). docs/design.md keeps the last
tables; tlmlx5/tunables.go keeps the crossovers they give.

usage: scripts/crossovers.py [IBCOLL_PERF] [RANKS]    (default: .cache/bin/ibcoll-perf 8)
"""
import collections
import json
import subprocess
import sys

perf = sys.argv[1] if len(sys.argv) > 1 else ".cache/bin/ibcoll-perf"
ranks = sys.argv[2] if len(sys.argv) > 2 else "8"
sets = [("bcast", ["knomial", "chain", "sag"]), ("reduce", ["knomial", "srg"]), ("reduce_scatter", ["ring", "rh"])]
res = collections.defaultdict(list)
for rnd in range(2):
    for coll, algs in sets:
        for alg in algs if rnd == 0 else list(reversed(algs)):
            extra = [] if coll == "bcast" else ["-d", "int32", "-o", "sum"]
            out = subprocess.run([perf, "-np", ranks, "-c", coll, "--alg", alg, "-b", "1K", "-e", "16M", "-f", "4",
                                  "-n", "10", "-w", "2", "--json"] + extra, capture_output=True, text=True, check=True)
            for row in json.loads(out.stdout)["rows"]:
                res[(coll, row["bytes"], alg)].append(row["time_avg_us"])
for coll, algs in sets:
    print(f"\n{coll}, {ranks} ranks, µs per collective (round 1, round 2)")
    print("| bytes | " + " | ".join(algs) + " | best |")
    print("|---|" + "---|" * (len(algs) + 1))
    for size in sorted({k[1] for k in res if k[0] == coll}):
        vals = {a: res[(coll, size, a)] for a in algs}
        best = min(algs, key=lambda a: sum(vals[a]))
        print(f"| {size} | " + " | ".join(f"{v[0]:.0f}, {v[1]:.0f}" for v in vals.values()) + f" | {best} |")
