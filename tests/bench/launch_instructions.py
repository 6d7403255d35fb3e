#!/usr/bin/env python3
"""Instructions per kernel launch (valgrind callgrind; repeatable, unlike timings): the launch_cost.py child
run at two launch counts per configuration; per launch = the difference in the inclusive instructions of the
benchmark's launch loop (cdsa_bench_launches: the timed cuLaunchKernel calls) divided by the extra launches.
Prints that per configuration and what cdsa adds to the bare loop. Use it to compare two builds (before and after a change to the wrappers).

usage: launch_instructions.py BUILD_DIR [--launches N] [--cdsa-lib LIB]

--cdsa-lib measures another build's libcdsa.so over this build's benchmark and simulated driver (a before/after).
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib import child_env  # noqa: E402
from launch_cost import CONFIGS  # noqa: E402


def launch_instructions(build, env_extra, launches, lib):
    """Inclusive instructions of the benchmark's launch loop in a whole run."""
    env = child_env(build, lib if env_extra is not None else None)
    env["CDSA_EXIT_PROBE_MS"] = "0"
    env.update(env_extra or {})
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                        str(HERE / "launch_cost.py"), str(build), "--launches", str(launches), "--child"],
                       env=env, capture_output=True, text=True, check=True)
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out], capture_output=True,
                              text=True, check=True).stdout
    # The loop function (callgrind may name it only by its file and address).
    m = re.search(r"^\s*([\d,]+) .*launch_bench\.cc:(?:cdsa_bench_launches|0x[0-9a-f]+)", text, re.M)
    if not m:
        sys.exit(f"no cdsa_bench_launches in the callgrind profile of {build}")
    return int(m.group(1).replace(",", ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--cdsa-lib", type=pathlib.Path, help="another libcdsa.so to measure (an older build)")
    a = ap.parse_args()
    build = a.build.resolve()
    lib = (a.cdsa_lib or build / "lib" / "libcdsa.so").resolve()
    n = a.launches
    print(f"instructions per launch in the benchmark loop (callgrind, {n} extra launches) for {lib}")
    print(f"{'configuration':<34} {'per launch':>10} {'added':>8}")
    bare = None
    for name, env_extra in CONFIGS:
        per = (launch_instructions(build, env_extra, 2 * n, lib) - launch_instructions(build, env_extra, n, lib)) / n
        bare = per if bare is None else bare
        print(f"{name:<34} {per:>10.0f} {per - bare:>8.0f}")


if __name__ == "__main__":
    main()
