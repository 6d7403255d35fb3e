#!/usr/bin/env python3
"""The recorder's per-launch parts, swept over stack depth: instructions per
operation (valgrind --tool=callgrind, the measured loop alone; repeatable)
and, with --time, nanoseconds (noisy on a shared machine).

  native hit N         capture of N native frames seen before (verified cache)
  native evicted N     the same with the thread's cache emptied first (a libunwind fill)
  native libunwind N   unw_backtrace alone (the path before the cache)
  intern N             capture + intern of a repeated N-frame stack (Python frames included)
  ring publish         one launch record into the ring
  python walk N        the GIL-free walk of N Python frames
  python hit N         the same N frames seen before (the verified chain cache)

usage: recorder_bench.py BUILD_DIR [--time] [--iters N]
"""
import argparse
import ctypes
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from benchlib import callgrind_total, child_env

NATIVE_DEPTHS = [8, 16, 32, 64]
PY_DEPTHS = [8, 16, 32]
CASES = ([("native hit", 0, d) for d in NATIVE_DEPTHS] + [("native evicted", 1, d) for d in NATIVE_DEPTHS] +
         [("native libunwind", 2, d) for d in NATIVE_DEPTHS] + [("intern", 3, d) for d in (8, 32)] +
         [("ring publish", 4, 1)] + [("python walk", 5, d) for d in PY_DEPTHS] +
         [("python hit", 6, d) for d in PY_DEPTHS])


def lib_path(build):
    return build / "tests" / "bench" / "libcdsa_recorder_bench.so"


def child(build, kase, depth, iters, timed):
    lib = ctypes.CDLL(str(lib_path(build)))
    lib.cdsa_rb_now_ns.restype = ctypes.c_int64
    if lib.cdsa_rb_init():
        sys.exit("recorder could not start")

    def at_depth(d, fn):  # d Python frames (this one included) at the capture
        return at_depth(d - 1, fn) if d > 1 else fn()

    py_depth = depth if kase in (5, 6) else 1
    native_depth = 1 if kase in (5, 6) else depth
    # The same call site twice, so the second run meets the stacks the first one left in cdsa's cache.
    for n, measure in ((2, False), (iters, True)):
        t0 = lib.cdsa_rb_now_ns()
        at_depth(py_depth, lambda: lib.cdsa_rb_run(kase, native_depth, n, int(measure and not timed)))
        if measure and timed:
            print((lib.cdsa_rb_now_ns() - t0) / iters)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--time", action="store_true", help="nanoseconds per operation instead of instructions")
    ap.add_argument("--iters", type=int, default=0)
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    build = a.build.resolve()
    if a.memory:
        lib = ctypes.CDLL(str(lib_path(build)))
        lib.cdsa_rb_mapped_bytes.restype = lib.cdsa_rb_thread_bytes.restype = ctypes.c_uint64
        if lib.cdsa_rb_init():
            sys.exit("recorder could not start")
        print(f"memory at defaults: tables {lib.cdsa_rb_mapped_bytes() / 2**20:.1f} MiB reserved (resident as they "
              f"fill), native stack cache {lib.cdsa_rb_thread_bytes() / 1024:.1f} KiB per launching thread")
        return
    if a.child:
        return child(build, a.child[0], a.child[1], a.iters, a.time)
    if not lib_path(build).exists():
        sys.exit(f"{lib_path(build)} not built (cmake --build {a.build} --target cdsa_recorder_bench)")
    env = child_env()
    if not a.time and not shutil.which("valgrind"):
        sys.exit("valgrind not found (apt-get install valgrind), or use --time")
    iters = a.iters or (200000 if a.time else 2000)
    mem = subprocess.run([sys.executable, __file__, str(build), "--memory"], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    print(mem)
    unit = "ns" if a.time else "instructions"
    print(f"recorder parts, {unit} per operation ({iters} operations per case"
          f"{', callgrind, the measured loop only' if not a.time else ''})")
    print(f"{'case':<22} {'depth':>6} {unit:>13}")
    for name, kase, depth in CASES:
        cmd = [sys.executable, __file__, str(build), "--iters", str(iters), "--child", str(kase), str(depth)]
        if a.time:
            out = subprocess.run(cmd + ["--time"], env=env, capture_output=True, text=True, check=True).stdout
            val = float(out.split()[-1])
        else:
            with tempfile.TemporaryDirectory() as tmp:
                cg = os.path.join(tmp, "cg.out")
                subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", "--collect-atstart=no"]
                               + cmd, env=env, capture_output=True, check=True)
                val = callgrind_total(cg) / iters
        shown = "" if name == "ring publish" else str(depth)
        print(f"{name:<22} {shown:>6} {val:>13.0f}")


if __name__ == "__main__":
    main()
