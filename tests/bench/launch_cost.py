#!/usr/bin/env python3
"""Host cost per kernel launch over the simulated driver: bare, and with cdsa at
several recording depths. Each configuration is a fresh process; launches are
made from a C loop at the bottom of a Python call stack PYDEPTH frames deep, so
cdsa records real Python frames. Prints median and p99 (ns) per launch and the
median added by cdsa.

usage: launch_cost.py BUILD_DIR [--launches N] [--repeats R]
"""
import argparse
import ctypes
import os
import pathlib
import platform
import statistics
import subprocess
import sys

CONFIGS = [
    ("bare (no cdsa)", None),
    ("cdsa, no stacks, no breadcrumbs", {"CDSA_NATIVE_DEPTH": "0", "CDSA_PYTHON_DEPTH": "0", "CDSA_BREADCRUMBS": "0"}),
    ("cdsa, no stacks", {"CDSA_NATIVE_DEPTH": "0", "CDSA_PYTHON_DEPTH": "0"}),
    ("cdsa, native 48", {"CDSA_NATIVE_DEPTH": "48", "CDSA_PYTHON_DEPTH": "0"}),
    ("cdsa, native 48 + Python 24", {"CDSA_NATIVE_DEPTH": "48", "CDSA_PYTHON_DEPTH": "24"}),
]
PYDEPTH = 24


def child(build, n):
    # One core for the whole child: the launching thread does not migrate (the sim's worker sleeps throughout).
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    lib = ctypes.CDLL(str(build / "tests" / "bench" / "libcdsa_launch_bench.so"))
    out = (ctypes.c_int64 * n)()

    def descend(depth):
        if depth > 1:
            return descend(depth - 1)
        return lib.cdsa_bench_launches(n, out)

    rc = descend(PYDEPTH - 1)  # plus the module frame: PYDEPTH Python frames at the launch
    if rc:
        sys.exit(f"benchmark failed with {rc}")
    sys.stdout.write(" ".join(map(str, out)))


def percentile(sorted_vals, p):
    return sorted_vals[min(len(sorted_vals) - 1, int(p / 100 * len(sorted_vals)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    build = a.build.resolve()
    if a.child:
        return child(build, a.launches)
    results = []
    for name, env_extra in CONFIGS:
        medians, p99s = [], []
        for _ in range(a.repeats):
            env = {k: v for k, v in os.environ.items() if not k.startswith("CDSA_") and k != "LD_PRELOAD"}
            env["LD_LIBRARY_PATH"] = str(build / "lib" / "sim")
            if env_extra is not None:
                env["LD_PRELOAD"] = str(build / "lib" / "libcdsa.so")
                env.update(env_extra)
            out = subprocess.run([sys.executable, __file__, str(build), "--launches", str(a.launches), "--child"],
                                 env=env, capture_output=True, text=True, check=True).stdout
            vals = sorted(int(x) for x in out.split())
            medians.append(statistics.median(vals))
            p99s.append(percentile(vals, 99))
        results.append((name, statistics.median(medians), statistics.median(p99s)))
    base = results[0][1]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"launch cost over the simulated driver: {a.launches} launches x {a.repeats} runs per configuration, "
          f"{PYDEPTH} Python frames at each launch, pinned to one core")
    print(f"machine: {cpu}, {os.cpu_count()} cores; Python {platform.python_version()}")
    print(f"{'configuration':<34} {'median ns':>10} {'p99 ns':>10} {'added (median)':>15}")
    for name, med, p99 in results:
        print(f"{name:<34} {med:>10.0f} {p99:>10.0f} {med - base:>15.0f}")


if __name__ == "__main__":
    main()
