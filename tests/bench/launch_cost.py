#!/usr/bin/env python3
"""Host cost per kernel launch over the simulated driver: bare, and with cdsa at
several recording depths. Each configuration is a fresh process; launches are
made from a C loop at the bottom of a Python call stack PYDEPTH frames deep, so
cdsa records real Python frames. Prints median and p99 (ns) per launch and the
median added by cdsa.

usage: launch_cost.py BUILD_DIR [--launches N] [--repeats R]
       launch_cost.py BUILD_DIR --callgrind [--launches N]

--callgrind counts instructions instead (valgrind --tool=callgrind; repeatable,
unlike the timings): the measured loop alone is collected, from C 40 frames deep
and from Python 20 frames deep, bare and with cdsa. "cdsa's own" leaves out the
simulated driver's work for the breadcrumb (its cuStreamWriteValue*), which on a
GPU is a stream memop.
"""
import argparse
import ctypes
import os
import pathlib
import platform
import statistics
import subprocess
import sys

from benchlib import callgrind_total, child_env, cpu_model

CONFIGS = [
    ("bare (no cdsa)", None),
    ("cdsa, no stacks, no breadcrumbs", {"CDSA_NATIVE_DEPTH": "0", "CDSA_PYTHON_DEPTH": "0", "CDSA_BREADCRUMBS": "0"}),
    ("cdsa, no stacks", {"CDSA_NATIVE_DEPTH": "0", "CDSA_PYTHON_DEPTH": "0"}),
    ("cdsa, native 48", {"CDSA_NATIVE_DEPTH": "48", "CDSA_PYTHON_DEPTH": "0"}),
    ("cdsa, native 48 + Python 24", {"CDSA_NATIVE_DEPTH": "48", "CDSA_PYTHON_DEPTH": "24"}),
]
PYDEPTH = 24

# (name, Python frames, C frames, environment; None = bare)
CALLGRIND_CONFIGS = [
    ("C 40 deep: bare", 1, 40, None),
    ("C 40 deep: cdsa, no stacks", 1, 40, {"CDSA_NATIVE_DEPTH": "0", "CDSA_PYTHON_DEPTH": "0"}),
    ("C 40 deep: cdsa, native 48", 1, 40, {"CDSA_PYTHON_DEPTH": "0"}),
    ("Python 20 deep: bare", 20, 1, None),
    ("Python 20 deep: cdsa defaults", 20, 1, {}),
    ("Python 20 deep: cdsa, CDSA_NATIVE_FULL=1", 20, 1, {"CDSA_NATIVE_FULL": "1"}),
]


def child(build, n, pydepth=PYDEPTH, cdepth=1, pin=True):
    # One core for the whole child: the launching thread does not migrate (the sim's worker sleeps throughout).
    if pin:
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    lib = ctypes.CDLL(str(build / "tests" / "bench" / "libcdsa_launch_bench.so"))
    out = (ctypes.c_int64 * n)()

    def descend(depth):
        if depth > 1:
            return descend(depth - 1)
        return lib.cdsa_bench_launches_deep(cdepth, n, out)

    rc = descend(pydepth - 1)  # plus the module frame: pydepth Python frames at the launch
    if rc:
        sys.exit(f"benchmark failed with {rc}")
    sys.stdout.write(" ".join(map(str, out)))
    with open("/proc/self/status") as f:
        rss = next((l.split()[1] for l in f if l.startswith("VmRSS:")), "0")
    sys.stderr.write(f"rss_kib {rss}\n")


def callgrind_counts(cg_file):
    """(instructions in the measured loop, of which in the simulated driver's cuStreamWriteValue*)."""
    total = callgrind_total(cg_file)
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", cg_file],
                         capture_output=True, text=True, check=True).stdout
    memop = 0
    for line in ann.splitlines():
        parts = line.split()
        if len(parts) >= 2 and "cuStreamWriteValue" in line and "sim" in line:
            memop = max(memop, int(parts[0].replace(",", "")))
    return total, memop


def run_callgrind(build, n, cdsa_lib):
    import tempfile
    rows = []
    base = {}
    for name, pydepth, cdepth, env_extra in CALLGRIND_CONFIGS:
        env = child_env(build, cdsa_lib if env_extra is not None else None)
        env.update(env_extra or {})
        with tempfile.TemporaryDirectory() as tmp:
            cg = os.path.join(tmp, "cg.out")
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", "--collect-atstart=no",
                   "--toggle-collect=*measured_launches*", sys.executable, __file__, str(build), "--launches", str(n),
                   "--child", "--pydepth", str(pydepth), "--cdepth", str(cdepth)]
            subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            total, memop = callgrind_counts(cg)
        per = total / (n + 16)  # the loop's 16 untimed warm-up launches are collected too
        per_memop = memop / (n + 16)
        key = name.split(":")[0]
        if env_extra is None:
            base[key] = per
            rows.append((name, per, None, None))
        else:
            added = per - base[key]
            rows.append((name, per, added, added - per_memop))
    print(f"instructions per launch over the simulated driver (valgrind --tool=callgrind, {n} launches, "
          f"the measured loop only)")
    print(f"{'configuration':<42} {'per launch':>11} {'added':>8} {'cdsa own':>9}")
    for name, per, added, own in rows:
        a = "" if added is None else f"{added:.0f}"
        o = "" if own is None else f"{own:.0f}"
        print(f"{name:<42} {per:>11.0f} {a:>8} {o:>9}")


def percentile(sorted_vals, p):
    return sorted_vals[min(len(sorted_vals) - 1, int(p / 100 * len(sorted_vals)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--callgrind", action="store_true", help="instructions per launch instead of time")
    ap.add_argument("--cdsa-lib", type=pathlib.Path, help="another libcdsa.so to measure (an older build, "
                    "for a before/after)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pydepth", type=int, default=PYDEPTH, help=argparse.SUPPRESS)
    ap.add_argument("--cdepth", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    build = a.build.resolve()
    if a.child:
        return child(build, a.launches, a.pydepth, a.cdepth, pin=True)
    if a.callgrind:
        return run_callgrind(build, a.launches if a.launches != 20000 else 5000,
                             (a.cdsa_lib or build / "lib" / "libcdsa.so").resolve())
    results = []
    for name, env_extra in CONFIGS:
        medians, p99s, rss = [], [], []
        for _ in range(a.repeats):
            cdsa_lib = (a.cdsa_lib or build / "lib" / "libcdsa.so").resolve()
            env = child_env(build, cdsa_lib if env_extra is not None else None)
            env.update(env_extra or {})
            proc = subprocess.run([sys.executable, __file__, str(build), "--launches", str(a.launches), "--child"],
                                  env=env, capture_output=True, text=True, check=True)
            vals = sorted(int(x) for x in proc.stdout.split())
            rss.append(int(next((l.split()[1] for l in proc.stderr.splitlines() if l.startswith("rss_kib")), 0)))
            medians.append(statistics.median(vals))
            p99s.append(percentile(vals, 99))
        results.append((name, statistics.median(medians), statistics.median(p99s), statistics.median(rss)))
    base = results[0][1]
    cpu = cpu_model()
    print(f"launch cost over the simulated driver: {a.launches} launches x {a.repeats} runs per configuration, "
          f"{PYDEPTH} Python frames at each launch, pinned to one core")
    print(f"machine: {cpu}, {os.cpu_count()} cores; Python {platform.python_version()}")
    print(f"{'configuration':<34} {'median ns':>10} {'p99 ns':>10} {'added (median)':>15} {'RSS added MiB':>14}")
    base_rss = results[0][3]
    for name, med, p99, rss in results:
        print(f"{name:<34} {med:>10.0f} {p99:>10.0f} {med - base:>15.0f} {(rss - base_rss) / 1024:>14.1f}")


if __name__ == "__main__":
    main()
