#!/usr/bin/env python3
"""What wrapping costs a hot non-launch driver call (cuCtxGetCurrent, cuDevicePrimaryCtxGetState) over the
simulated driver: ns per call bare and under cdsa, each a fresh process pinned to one core (median of the
batch medians of several runs). With --callgrind, also instructions per call (valgrind; repeatable).

usage: call_cost.py BUILD_DIR [--calls N] [--repeats R] [--callgrind]
"""
import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import tempfile

from benchlib import callgrind_total, child_env, cpu_model


def env_for(build, cdsa):
    return child_env(build, build / "lib" / "libcdsa.so" if cdsa else None)


def timed(build, cdsa, calls):
    core = str(max(os.sched_getaffinity(0)))
    out = subprocess.run(["taskset", "-c", core, str(build / "tests" / "bench" / "call_bench"), str(calls)],
                         env=env_for(build, cdsa), capture_output=True, text=True, check=True).stdout
    return {l.split()[0]: float(l.split()[1]) for l in out.splitlines()}


def instructions(build, cdsa, calls):
    """Total instructions of a run (valgrind callgrind); per call = difference of two call counts."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        str(build / "tests" / "bench" / "call_bench"), str(calls), "1"],
                       env=env_for(build, cdsa), capture_output=True, text=True, check=True)
        return callgrind_total(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--calls", type=int, default=1000000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--callgrind", action="store_true")
    a = ap.parse_args()
    build = a.build.resolve()
    runs = {cdsa: [timed(build, cdsa, a.calls) for _ in range(a.repeats)] for cdsa in (False, True)}
    cpu = cpu_model()
    print(f"driver call cost over the simulated driver: {a.calls} calls x 7 batches x {a.repeats} runs, one core")
    print(f"machine: {cpu}, {os.cpu_count()} cores; {platform.system()} {platform.release()}")
    if a.callgrind:
        n = 20000  # x 3 routes
        per = {cdsa: (instructions(build, cdsa, 2 * n) - instructions(build, cdsa, n)) / (3 * n)
               for cdsa in (False, True)}
        print(f"instructions per call (callgrind, averaged over the three routes): bare {per[False]:.0f}, "
              f"cdsa {per[True]:.0f}, added {per[True] - per[False]:.0f}")
    print(f"{'call (route)':<38} {'bare ns':>8} {'cdsa ns':>8} {'added':>7}")
    for route in runs[False][0]:
        bare = statistics.median(r[route] for r in runs[False])
        wrapped = statistics.median(r[route] for r in runs[True])
        print(f"{route:<38} {bare:>8.1f} {wrapped:>8.1f} {wrapped - bare:>7.1f}")


if __name__ == "__main__":
    main()
