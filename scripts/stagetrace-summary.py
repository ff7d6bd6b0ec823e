#!/usr/bin/env python3
"""Summarizes the stage traces of the diagnosis build (asym/trace_on.go).

Reads the "stagetrace" lines of the files given (scripts/gpu-knobs.sh's tables hold
them) and prints, per file and scratch size, medians over the posts of the times in
µs from the post: the first and last step of a copy-in beside the wire done (i0,
i1); first and last Landed report (L0, L1) and their count (nL); first queued
copy-out (q0) and the number of queueing calls (nq); the transport's completion
(C); the queued copies waited for (S); the end (D).

usage: stagetrace-summary.py FILE...
"""
import collections
import re
import statistics
import sys

EVENT = re.compile(r"^(\w)@([\d.]+)(?::(\d+)\+(\d+))?$")
KEYS = ["i0", "i1", "L0", "L1", "nL", "q0", "nq", "C", "S", "D"]


def posts(path):
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 3 or fields[0] != "stagetrace":
                continue
            ev = collections.defaultdict(list)
            for e in fields[3:]:
                m = EVENT.match(e)
                if m:
                    ev[m.group(1)].append(float(m.group(2)))
            nan = float("nan")
            yield int(fields[2]), {
                "i0": min(ev["i"], default=nan), "i1": max(ev["i"], default=nan),
                "L0": min(ev["L"], default=nan), "L1": max(ev["L"], default=nan), "nL": len(ev["L"]),
                "q0": min(ev["q"], default=nan), "nq": len(ev["q"]),
                "C": min(ev["C"], default=nan), "S": min(ev["S"], default=nan), "D": max(ev["D"], default=nan),
            }


def main(paths):
    for path in paths:
        by = collections.defaultdict(list)
        for size, p in posts(path):
            by[size].append(p)
        for size, ps in sorted(by.items()):
            cells = ", ".join(f"{k} {statistics.median(p[k] for p in ps):.0f}" for k in KEYS)
            print(f"{path}: scratch {size >> 10} KiB, {len(ps)} posts: {cells}")


if __name__ == "__main__":
    main(sys.argv[1:])
