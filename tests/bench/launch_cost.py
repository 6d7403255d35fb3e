#!/usr/bin/env python3
"""Host cost per kernel launch over the simulated driver: bare, and with cdsa at
several recording depths. Each configuration is a fresh process; launches are
made from a C loop at the bottom of a Python call stack PYDEPTH frames deep, so
cdsa records real Python frames. Prints median and p99 (ns) per launch and the
median added by cdsa; "cdsa own" leaves out the simulated driver's work for the
breadcrumb (one cuStreamWriteValue64, timed alone and bare, printed above the
table), which on a GPU is the real driver's stream memop.

usage: launch_cost.py BUILD_DIR [--launches N] [--repeats R] [--sites]
       launch_cost.py BUILD_DIR --callgrind [--launches N] [--only TEXT] [--keep DIR]

--callgrind counts instructions instead (valgrind --tool=callgrind; repeatable,
unlike the timings): the measured launches alone are collected, from C 40 frames
deep and from Python 20 frames deep, bare and with cdsa, from one launch site and
from 200 distinct sites called in turn at one depth, and from C on the legacy NULL stream (one of the
default streams, for which cdsa asks the driver for the current context) (C: 200 functions called
from one loop; Python: 200 functions, each calling a C function that launches
once). Each configuration runs at N and 3N launches and the difference is
divided by 2N: the marginal cost, without start-up, warm-up and first-time
costs; "first time" is what the N-launch run cost beyond N marginal launches,
per distinct site (the new stacks' fills and interning, among the warm-up).
"cdsa's own" leaves out the simulated driver's work for the breadcrumb (its
cuStreamWriteValue*), which on a GPU is a stream memop. "in cdsa" counts the
same without a bare run: the instructions inside libcdsa.so's cuLaunchKernel
minus the simulated driver's cuLaunchKernel and breadcrumb memop that it calls
(exact: the bare run's own variation, and the simulated driver doing more or
less work for its launch beside a memop, do not enter it). --only runs the rows
whose name contains TEXT (and their bare rows); --keep DIR keeps each run's
callgrind output there (ROW.N.out).

--sites times the 200-site modes instead of the one-site loop.
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

# (name, Python frames, C frames, sites, environment; None = bare). Sites: 1, "c" (200 C functions in turn) or
# "py" (200 Python functions in turn, one launch per call into C).
SITES = 200
CALLGRIND_CONFIGS = [
    ("C 40 deep: bare", 1, 40, 1, None),
    ("C 40 deep: cdsa, no stacks", 1, 40, 1, {"CDSA_NATIVE_DEPTH": "0", "CDSA_PYTHON_DEPTH": "0"}),
    ("C 40 deep: cdsa, native 48", 1, 40, 1, {"CDSA_PYTHON_DEPTH": "0"}),
    ("C 40 deep, NULL stream: bare", 1, 40, 1, None),
    ("C 40 deep, NULL stream: cdsa, no stacks", 1, 40, 1, {"CDSA_NATIVE_DEPTH": "0", "CDSA_PYTHON_DEPTH": "0"}),
    ("Python 20 deep: bare", 20, 1, 1, None),
    ("Python 20 deep: cdsa defaults", 20, 1, 1, {}),
    ("Python 20 deep: cdsa, CDSA_NATIVE_FULL=1", 20, 1, 1, {"CDSA_NATIVE_FULL": "1"}),
    ("C 40 deep, 200 sites: bare", 1, 40, "c", None),
    ("C 40 deep, 200 sites: cdsa, native 48", 1, 40, "c", {"CDSA_PYTHON_DEPTH": "0"}),
    ("Python 20 deep, 200 sites: bare", 20, 1, "py", None),
    ("Python 20 deep, 200 sites: cdsa defaults", 20, 1, "py", {}),
]


def python_sites(lib, n, out):
    """SITES distinct Python functions (one code object each), called in turn from one loop: each makes one launch
    through cdsa_bench_launch_one. Two warm-up rounds first, untimed."""
    import time
    src = "".join(f"def site_{k}(launch):\n    return launch()\n" for k in range(SITES))
    ns = {}
    exec(compile(src, "<launch sites>", "exec"), ns)
    sites = [ns[f"site_{k}"] for k in range(SITES)]
    launch = lib.cdsa_bench_launch_one
    if lib.cdsa_bench_launch_setup():
        return 2
    clock = time.perf_counter_ns
    for i in range(-2 * SITES, n):
        t0 = clock()
        if sites[i % SITES](launch):
            return 4
        if i >= 0:
            out[i] = clock() - t0
    return 0


def child(build, n, pydepth=PYDEPTH, cdepth=1, pin=True, sites=1):
    # One core for the whole child: the launching thread does not migrate (the sim's worker sleeps throughout).
    if pin:
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    lib = ctypes.CDLL(str(build / "tests" / "bench" / "libcdsa_launch_bench.so"))
    out = (ctypes.c_int64 * n)()
    if sites == "c":
        lib.cdsa_bench_set_sites(SITES)

    def descend(depth):
        if depth > 1:
            return descend(depth - 1)
        if sites == "memop":
            return lib.cdsa_bench_memops(n, out)
        if sites == "py":
            return python_sites(lib, n, out)  # plus this frame and the site's: pydepth frames at the launch
        return lib.cdsa_bench_launches_deep(cdepth, n, out)

    # Plus the module frame: pydepth Python frames at the launch (with sites from Python: python_sites's and the
    # site's frames are two of them).
    rc = descend(pydepth - 1 if sites != "py" else pydepth - 3)
    if rc:
        sys.exit(f"benchmark failed with {rc}")
    sys.stdout.write(" ".join(map(str, out)))
    with open("/proc/self/status") as f:
        rss = next((l.split()[1] for l in f if l.startswith("VmRSS:")), "0")
    sys.stderr.write(f"rss_kib {rss}\n")


def callgrind_counts(cg_file):
    """(instructions in the measured loop, of which in the simulated driver's cuStreamWriteValue*, in cdsa's own
    code: libcdsa.so's cuLaunchKernel, inclusive, less the simulated driver's cuLaunchKernel and memop)."""
    total = callgrind_total(cg_file)
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", cg_file],
                         capture_output=True, text=True, check=True).stdout
    memop = entry = driver_launch = 0
    for line in ann.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0][0].isdigit():
            continue
        n = int(parts[0].replace(",", ""))
        if "cuStreamWriteValue" in line and "sim" in line:
            memop = max(memop, n)
        if ":cuLaunchKernel" in line:
            # The simulated driver's is named by its object; cdsa's wrapper is the largest of the others (callgrind_annotate
            # does not always name its object on the line).
            if "/sim/" in line:
                driver_launch = max(driver_launch, n)
            else:
                entry = max(entry, n)
    return total, memop, (entry - driver_launch - memop) if entry else 0


# The benchmark program's own settings for a group of rows (its bare row and cdsa's alike).
GROUP_ENV = {"C 40 deep, NULL stream": {"CDSA_BENCH_NULL_STREAM": "1"}}  # launches on the legacy NULL stream


def callgrind_run(build, n, cdsa_lib, pydepth, cdepth, sites, env_extra, keep=None, name=""):
    """(instructions collected, of which the sim's breadcrumb memop) in one child run of n launches; with `keep`
    (a folder), its callgrind output is copied there, named after the row and n."""
    import shutil
    import tempfile
    env = child_env(build, cdsa_lib if env_extra is not None else None)
    env.update(env_extra or {})
    env.update(GROUP_ENV.get(name.split(":")[0], {}))
    toggle = "*measured_one*" if sites == "py" else "*measured_launches*"
    with tempfile.TemporaryDirectory() as tmp:
        cg = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", "--collect-atstart=no",
               f"--toggle-collect={toggle}", sys.executable, __file__, str(build), "--launches", str(n),
               "--child", "--pydepth", str(pydepth), "--cdepth", str(cdepth), "--site-mode", str(sites)]
        subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            slug = "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")
            shutil.copy(cg, keep / f"{slug}.{n}.out")
        return callgrind_counts(cg)


def run_callgrind(build, n, cdsa_lib, only=None, keep=None):
    rows = []
    base = {}
    for name, pydepth, cdepth, sites, env_extra in CALLGRIND_CONFIGS:
        if only and env_extra is not None and only not in name:
            continue
        if only and env_extra is None and not any(only in c[0] and c[0].split(":")[0] == name.split(":")[0]
                                                  for c in CALLGRIND_CONFIGS):
            continue
        t1, m1, c1 = callgrind_run(build, n, cdsa_lib, pydepth, cdepth, sites, env_extra, keep, name)
        t3, m3, c3 = callgrind_run(build, 3 * n, cdsa_lib, pydepth, cdepth, sites, env_extra, keep, name)
        per = (t3 - t1) / (2 * n)
        per_memop = (m3 - m1) / (2 * n)
        n_sites = 1 if sites == 1 else SITES
        first = (t1 - m1 - n * (per - per_memop)) / n_sites  # beyond n marginal launches, per distinct site
        key = name.split(":")[0]
        if env_extra is None:
            base[key] = (per, first)
            rows.append((name, per, None, None, None, None))
        else:
            added = per - base[key][0]
            rows.append((name, per, added, added - per_memop, (c3 - c1) / (2 * n), first - base[key][1]))
    print(f"instructions per launch over the simulated driver (valgrind --tool=callgrind, marginal between "
          f"{n} and {3 * n} launches, the measured launches only)")
    print(f"{'configuration':<44} {'per launch':>11} {'added':>8} {'cdsa own':>9} {'in cdsa':>8} {'first time':>11}")
    for name, per, added, own, exact, first in rows:
        a = "" if added is None else f"{added:.0f}"
        o = "" if own is None else f"{own:.0f}"
        x = "" if exact is None else f"{exact:.0f}"
        f = "" if first is None else f"{first:.0f}"
        print(f"{name:<44} {per:>11.0f} {a:>8} {o:>9} {x:>8} {f:>11}")


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
    ap.add_argument("--site-mode", default="1", help=argparse.SUPPRESS)
    ap.add_argument("--sites", action="store_true", help=f"time {SITES} sites in turn (from C, then Python)")
    ap.add_argument("--only", help="--callgrind: only the rows whose name contains this")
    ap.add_argument("--keep", type=pathlib.Path, help="--callgrind: keep each run's callgrind output in this folder "
                    "(ROW.N.out; for callgrind_annotate, e.g. the difference of the N and 3N runs of a row)")
    a = ap.parse_args()
    build = a.build.resolve()
    if a.child:
        mode = int(a.site_mode) if a.site_mode == "1" else a.site_mode
        return child(build, a.launches, a.pydepth, a.cdepth, pin=True, sites=mode)
    if a.callgrind:
        return run_callgrind(build, a.launches if a.launches != 20000 else 5000,
                             (a.cdsa_lib or build / "lib" / "libcdsa.so").resolve(), a.only,
                             a.keep.resolve() if a.keep else None)
    modes = [("c", "from C"), ("py", "from Python")] if a.sites else [(1, None)]
    cpu = cpu_model()
    for mode, label in modes:
        results = []
        for name, env_extra in CONFIGS:
            medians, p99s, rss = [], [], []
            for _ in range(a.repeats):
                cdsa_lib = (a.cdsa_lib or build / "lib" / "libcdsa.so").resolve()
                env = child_env(build, cdsa_lib if env_extra is not None else None)
                env.update(env_extra or {})
                proc = subprocess.run([sys.executable, __file__, str(build), "--launches", str(a.launches),
                                       "--child", "--site-mode", str(mode)],
                                      env=env, capture_output=True, text=True, check=True)
                vals = sorted(int(x) for x in proc.stdout.split())
                rss.append(int(next((l.split()[1] for l in proc.stderr.splitlines() if l.startswith("rss_kib")), 0)))
                medians.append(statistics.median(vals))
                p99s.append(percentile(vals, 99))
            results.append((name, statistics.median(medians), statistics.median(p99s), statistics.median(rss)))
        base = results[0][1]
        # The simulated driver's breadcrumb (one cuStreamWriteValue64 per launch with breadcrumbs), timed alone and
        # bare: on a GPU that is the real driver's stream memop, so it is left out of "cdsa's own".
        memop = []
        for _ in range(a.repeats):
            proc = subprocess.run([sys.executable, __file__, str(build), "--launches", str(a.launches), "--child",
                                   "--site-mode", "memop"], env=child_env(build, None), capture_output=True,
                                  text=True, check=True)
            memop.append(statistics.median(sorted(int(x) for x in proc.stdout.split())))
        memop_ns = statistics.median(memop)
        where = f"{SITES} sites in turn {label}" if label else "one site"
        print(f"launch cost over the simulated driver: {a.launches} launches x {a.repeats} runs per configuration, "
              f"{PYDEPTH} Python frames at each launch, {where}, pinned to one core")
        print(f"machine: {cpu}, {os.cpu_count()} cores; Python {platform.python_version()}")
        print(f"the simulated driver's breadcrumb memop alone (bare, median): {memop_ns:.0f} ns")
        print(f"{'configuration':<34} {'median ns':>10} {'p99 ns':>10} {'added (median)':>15} {'cdsa own':>9} "
              f"{'RSS added MiB':>14}")
        base_rss = results[0][3]
        for (name, med, p99, rss), (_, env_extra) in zip(results, CONFIGS):
            crumbs = env_extra is not None and env_extra.get("CDSA_BREADCRUMBS") != "0"
            own = f"{med - base - memop_ns:.0f}" if crumbs else ("" if env_extra is None else f"{med - base:.0f}")
            print(f"{name:<34} {med:>10.0f} {p99:>10.0f} {med - base:>15.0f} {own:>9} {(rss - base_rss) / 1024:>14.1f}")


if __name__ == "__main__":
    main()
