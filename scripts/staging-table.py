#!/usr/bin/env python3
"""Summarizes scripts/gpu-table.sh's output directory as a markdown table.

Each cell is the median over rounds of the p50 in µs and, in brackets, the
median over rounds of its ratio to the host,host config of the same
collective, build, persistence or lining up, and round (gather-hc-p against
gather-hh-p, gather-cc-turn-S against gather-hh-S).

With --rounds each cell lists every round instead, in round order, separated by
" / ": the ratio to host,host of that round, or for the host,host configs
themselves the p50 in µs (the form of the issue-10 tables in the session notes).

usage: staging-table.py [--rounds] DIR [DIR...]   (the table/ folders of one or more runs)
"""
import collections
import os
import re
import statistics
import sys

NAME = re.compile(r"^(\d+)-([^-]+)-(.+)\.txt$")


def parse(path):
    rows = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 9 and fields[0].isdigit() and fields[1].isdigit():
                rows[int(fields[1])] = float(fields[6])
    return rows


def round_order(rnd):
    """Sorts "DIR:N" round keys by folder, then by round number."""
    d, _, n = rnd.rpartition(":")
    return (d, int(n))


def reference(name):
    """The host,host config that name is compared with: the same collective, and
    the same persistence (-p) or lining up (-S), which end the config's name."""
    coll = name.split("-")[0]
    suffix = next((s for s in ("-p", "-S") if name.endswith(s)), "")
    return coll + "-hh" + suffix


def main(dirs, by_round=False):
    p50 = {}  # (round, build, name) -> {bytes: µs}
    for d in dirs:
        for fn in sorted(os.listdir(d)):
            m = NAME.match(fn)
            if m:
                key = (d + ":" + m.group(1), m.group(2), m.group(3))
                p50[key] = parse(os.path.join(d, fn))
    cells = collections.defaultdict(lambda: collections.defaultdict(list))
    ratios = collections.defaultdict(lambda: collections.defaultdict(list))
    sizes = set()
    for (rnd, build, name), rows in sorted(p50.items(), key=lambda kv: round_order(kv[0][0])):
        ref = p50.get((rnd, build, reference(name)), {})
        for size, t in rows.items():
            sizes.add(size)
            cells[(name, build)][size].append(t)
            if size in ref and name != reference(name):
                ratios[(name, build)][size].append(t / ref[size])
    sizes = sorted(sizes)

    def label(n):
        return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K"

    print("| config | build | " + " | ".join(label(s) for s in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for key in sorted(cells):
        out = []
        for s in sizes:
            ts = cells[key].get(s)
            if not ts:
                out.append("")
                continue
            rs = ratios[key].get(s)
            if by_round:
                cell = " / ".join(f"{r:.2f}" for r in rs) if rs else " / ".join(f"{t:.0f}" for t in ts)
            else:
                cell = f"{statistics.median(ts):.0f}"
                if rs:
                    cell += f" ({statistics.median(rs):.2f})"
            out.append(cell)
        print(f"| {key[0]} | {key[1]} | " + " | ".join(out) + " |")
    failed = [k for k, rows in p50.items() if not rows]
    for k in failed:
        print(f"no rows: round {k[0]} build {k[1]} config {k[2]}", file=sys.stderr)


if __name__ == "__main__":
    args = sys.argv[1:]
    by_round = "--rounds" in args
    main([a for a in args if a != "--rounds"], by_round)
