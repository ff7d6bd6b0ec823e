#!/usr/bin/env python3
"""Random ibcoll-perf --check runs on soft0 (in-process ranks), to find what the
scenario matrices do not reach: every collective, algorithm, dtype, operator, size,
team size (1-200), root, persistence, in-place, all-or-nothing, memory type (host,
dm, sim, per rank) and, with --faults, an injected fault at a random rank.

Each run must end by itself (a time limit marks a hang) and without a panic; a run
without a fault must exit 0 with every row's check "ok"; a run with a fault may exit
3 (rows ended in errors) where ibcoll-perf says the fault fired, or 2 where it says the
fault never fired and nothing else failed (counted apart: such a run tested no fault),
never with a FAIL row; any other exit of a fault run fails, but for the refusals below. Refusals
of the arguments (an algorithm that needs a power-of-two team, a DM buffer larger than
the pool) are counted apart. Every failing run's command and output go to OUT/fail-N.txt,
a line per run to OUT/log; the summary goes to stdout, and the exit status is 1 when
any run failed.

Usage: perf-torture.py IBCOLL_PERF SECONDS SEED OUT [--race IBCOLL_PERF_RACE] [--faults]
(build the binaries with `go build ./cmd/ibcoll-perf` and `go build -race`; the race
build runs a quarter of the runs of at most 9 ranks).
"""
import argparse
import os
import random
import re
import signal
import subprocess
import time

ALGS = {"barrier": ["agree"], "bcast": ["knomial", "sag", "chain"], "gather": ["knomial", "linear"],
        "gatherv": ["linear"], "scatter": ["knomial", "linear"], "scatterv": ["linear"],
        "reduce": ["knomial", "srg"], "allgather": ["rd", "ring"], "allreduce": ["ring", "rd"],
        "alltoall": ["pairwise"], "reduce_scatter": ["rh", "ring"], "allgatherv": ["ring"],
        "alltoallv": ["pairwise"]}
REDUCTIONS = {"reduce", "allreduce", "reduce_scatter"}
DTYPES = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2, "int32": 4,
          "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}
FLOAT_OPS = ["sum", "prod", "min", "max", "avg"]
INT_OPS = FLOAT_OPS + ["band", "bor", "bxor", "land", "lor", "lxor"]
MEMS = ["host", "host", "host", "dm", "sim"]
RANKS = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 34, 64, 65, 100, 128, 200]
# The kinds ibcoll-perf's --fault takes (perfFaultKinds): it refuses the others.
FAULTS = ["alloc", "reg", "init", "copyin", "copyout", "qperr", "stall"]
# What ibcoll-perf refuses by design: counted apart, not as failures. The memory check
# refuses a run whose estimate passes 3/4 of MemAvailable (session 35's fix).
REFUSALS = ("needs a power-of-two team", "dm pool exhausted", "this machine has available (MemAvailable)")


def command(rng, binary, race, faults):
    n = rng.choice(RANKS)
    colls = rng.sample(sorted(ALGS), rng.randint(1, 3))
    dt = rng.choice(sorted(DTYPES))
    w = DTYPES[dt]
    args = [binary, "-np", str(n), "-c", ",".join(colls), "-d", dt, "--check", "-q", "-timeout", "60s"]
    if any(c in REDUCTIONS for c in colls):
        args += ["-o", rng.choice(FLOAT_OPS if "float" in dt else INT_OPS)]
    b = w * rng.choice([1, 1, 2, 3, 5, 17, 100, 1000, 4096, 12345])
    e = max(b, min(b * rng.choice([1, 4, 16, 64, 512]), (8 << 20) if n <= 8 else (8 << 20) // n // 4))
    mems = ""
    r = rng.random()
    if r < 0.3:
        mems = "%s,%s" % (rng.choice(MEMS), rng.choice(MEMS))
        args += ["-m", mems]
    elif r < 0.45:
        spec = ";".join("%d:%s,%s" % (i, rng.choice(MEMS), rng.choice(MEMS)) for i in range(n) if rng.random() < 0.5)
        if spec:
            mems = spec
            args += ["--rank-mem", spec]
    env = {}
    if "dm" in mems:  # each rank's share of the device's 256 KiB
        e = max(w, min(e, (65536 // (n * n)) // w * w))
        b = min(b, e)
        if rng.random() < 0.5:
            # soft0 reports its device memory as a real device's: copies out of it go
            # through the NIC's loopback, as on a ConnectX.
            env["IBCOLL_SOFT_DM_UNCACHED"] = "1"
    args += ["-b", str(b), "-e", str(e), "-f", str(rng.choice([2, 4, 7, 16])),
             "-n", str(rng.choice([1, 2, 5])), "-w", str(rng.choice([0, 1, 2]))]
    for flag, p in (("-p", 0.4), ("-i", 0.2), ("--all-or-nothing", 0.25)):
        if rng.random() < p:
            args.append(flag)
    if rng.random() < 0.3:
        args += ["-r", str(rng.randrange(n))]
    if rng.random() < 0.4:
        c = rng.choice(colls)
        args += ["--alg", "%s=%s" % (c, rng.choice(ALGS[c]))]
    fault = faults and rng.random() < 0.5
    if fault:
        kind = rng.choice(FAULTS)
        if kind in ("alloc", "copyin", "copyout") and not mems and rng.random() < 0.7:
            # Host memory is sent in place: nothing is allocated or copied for it, and
            # such a fault would never fire (session 42: 115 of 296 fault runs).
            args += ["-m", "sim,sim"]
        spec = "%s@%d" % (kind, rng.randrange(n))
        if rng.random() < 0.5:
            spec += ":%d" % rng.randint(1, 6)
        # A short deadline ends a stall fault's run soon; a large team's collectives
        # need longer on this machine (a 200-rank alltoall of 12 KiB blocks passed 5 s
        # in session 42, a failure that no fault made).
        args += ["--fault", spec, "-timeout", "5s" if n <= 33 else "30s"]
    if race and n <= 9 and rng.random() < 0.25:
        # The race detector and --check's plain-Go reference make a run 20-50 times
        # slower: a 5-rank run to 8 MiB took 6.7 minutes on the loaded machine, past the
        # time limit (session 36). Race runs stop at 1 MiB.
        args[0] = race
        i = args.index("-e")
        args[i + 1] = str(max(int(args[args.index("-b") + 1]), min(int(args[i + 1]), 1 << 20)))
    return args, fault, env


def run(args, env, limit=300):
    """Runs args; on passing limit seconds, SIGQUIT makes Go print every goroutine's
    stack before the run is killed, so that a hang's log says where it hung."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, **env))
    try:
        out, _ = p.communicate(timeout=limit)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGQUIT)
        try:
            out, _ = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        return "TIMEOUT", out


def judge(rc, out, fault):
    if rc == "TIMEOUT" or any(k in out for k in ("panic:", "fatal error", "SIGSEGV", "DATA RACE")):
        return "FAIL"
    if any(line.rstrip().endswith(" FAIL") for line in out.splitlines()):
        return "FAIL"
    if rc == 0:
        # A fault that fired fails a collective on every rank (--fault turns
        # all-or-nothing on): a clean exit means it had no effect.
        return "FAIL" if fault else "ok"
    if fault:
        # ibcoll-perf says of each --fault whether it fired; a failure with no fault
        # fired (the team not formed, or the run ending early) is no fault's doing.
        fired = re.search(r"--fault \S+ fired on rank", out)
        if rc == 3 and fired:
            return "ok"
        if rc == 2 and "never fired" in out and not fired and "ended early, at a failed collective" not in out:
            return "unfired"
    if rc in (2, 3) and any(k in out for k in REFUSALS):
        return "refused"
    return "FAIL"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("seconds", type=float)
    ap.add_argument("seed", type=int)
    ap.add_argument("out")
    ap.add_argument("--race")
    ap.add_argument("--faults", action="store_true")
    o = ap.parse_args()
    os.makedirs(o.out, exist_ok=True)
    rng = random.Random(o.seed)
    end = time.time() + o.seconds
    counts = {"ok": 0, "unfired": 0, "refused": 0, "FAIL": 0}
    n = 0
    with open(os.path.join(o.out, "log"), "a") as log:
        while time.time() < end:
            n += 1
            args, fault, env = command(rng, o.binary, o.race, o.faults)
            t0 = time.time()
            rc, out = run(args, env)
            verdict = judge(rc, out, fault)
            counts[verdict] += 1
            envs = "".join("%s=%s " % kv for kv in sorted(env.items()))
            log.write("%d %s rc=%s %.1fs %s%s%s\n" % (n, verdict, rc, time.time() - t0,
                                                       "(race) " if args[0] == o.race else "", envs, " ".join(args[1:])))
            log.flush()
            if verdict == "FAIL":
                with open(os.path.join(o.out, "fail-%d.txt" % n), "w") as f:
                    f.write(envs + " ".join(args) + "\nexit: %s\n" % rc + out[-20000:])
    print("runs %d: ok %d, fault never fired %d, refused %d, failed %d (seed %d; log in %s)" % (
        n, counts["ok"], counts["unfired"], counts["refused"], counts["FAIL"], o.seed, o.out))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
