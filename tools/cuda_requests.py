#!/usr/bin/env python3
"""Regenerates tests/data/requests/: the driver entry points real CUDA runtimes ask for, one list per runtime.

Each runtime runs once over the simulated driver (build/lib/sim, no cdsa) with SIM_CUDA_PROC_LOG, and every
cuGetProcAddress request it makes is kept, in order, once: "<name> <version> <flags>" ("(empty)": cudart's first
request names no symbol). The runtimes:
  cudart-12.9     PyPI nvidia-cuda-runtime-cu12==12.9.79 (nvidia/cuda_runtime/lib/libcudart.so.12), cudaGetDeviceCount
  cudart-13.0     the toolkit's lib64/libcudart.so.13 (--cuda), cudaGetDeviceCount
  cudart-13.5     PyPI nvidia-cuda-runtime==13.5.37 (nvidia/cu13/lib/libcudart.so.13), cudaGetDeviceCount
  cuda-bindings-13.5.0  PyPI cuda-bindings==13.5.0 (with cuda-pathfinder): `cuda.bindings.driver.cuInit(0)`, which
                  resolves every function of its driver module first
A real cudart stops at cuGetExportTable on the sim (tests/sim/README.md), after its requests. The wheels are
downloaded with pip (--no-deps) into --cache and unpacked there; nothing is installed into a Python.

tests/e2e/test_request_coverage.py replays the lists offline against libcdsa.so + the sim.
Usage: tools/cuda_requests.py [--build build] [--cuda /usr/local/cuda] [--cache ~/.cache/cdsa-requests]
"""
import argparse
import glob
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
WHEELS = {
    "cudart-12.9": ["nvidia-cuda-runtime-cu12==12.9.79"],
    "cudart-13.5": ["nvidia-cuda-runtime==13.5.37"],
    "cuda-bindings-13.5.0": ["cuda-bindings==13.5.0", "cuda-pathfinder"],
}
CUDART_CALL = ("import ctypes, sys\nrt = ctypes.CDLL(sys.argv[1])\nn = ctypes.c_int(-1)\n"
               "print('cudaGetDeviceCount', rt.cudaGetDeviceCount(ctypes.byref(n)))\n")
BINDINGS_CALL = "from cuda.bindings import driver\nprint('cuInit', driver.cuInit(0))\n"


def fail(msg):
    sys.exit(f"cuda_requests.py: {msg}")


def unpacked(cache, name):
    """The wheels of WHEELS[name], downloaded and unpacked into cache/name (once)."""
    dest = cache / name
    stamp = dest / ".pins"
    pins = " ".join(WHEELS[name])
    if stamp.exists() and stamp.read_text() == pins:
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                        "--only-binary=:all:", "-d", tmp, *WHEELS[name]], check=True)
        dest.mkdir(parents=True, exist_ok=True)
        for whl in glob.glob(os.path.join(tmp, "*.whl")):
            with zipfile.ZipFile(whl) as z:
                z.extractall(dest)
    stamp.write_text(pins)
    return dest


def requests(argv, sim, env_extra=None):
    """The (name, version, flags) requests `argv` makes over the sim, first-seen order, each once."""
    with tempfile.TemporaryDirectory() as tmp:
        log = pathlib.Path(tmp) / "proc.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CDSA_", "SIM_CUDA_")) and k != "LD_PRELOAD"}
        env.update({"LD_LIBRARY_PATH": str(sim), "SIM_CUDA_PROC_LOG": str(log), **(env_extra or {})})
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        if not log.exists():
            fail(f"{' '.join(map(str, argv))} made no cuGetProcAddress request (rc {p.returncode}): {p.stderr[-800:]}")
        seen, out = set(), []
        for line in log.read_text().splitlines():
            m = re.match(r"(\S*) (-?\d+) (\d+) -> ", line)
            if not m:
                fail(f"an unexpected SIM_CUDA_PROC_LOG line: {line!r}")
            key = (m[1] or "(empty)", m[2], m[3])  # cudart's first request names no symbol
            if key not in seen:
                seen.add(key)
                out.append(key)
        return out, p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"), help="the build tree with lib/sim (default: build)")
    ap.add_argument("--cuda", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"), help="the toolkit (13.0)")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/cdsa-requests"), help="where wheels unpack")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "requests"))
    a = ap.parse_args()
    sim = pathlib.Path(a.build).resolve() / "lib" / "sim"
    if not (sim / "libcuda.so.1").exists():
        fail(f"no simulated driver at {sim}: build it first (cmake --build build --target cdsa_sim_cuda)")
    cache = pathlib.Path(a.cache)
    runs = {
        "cudart-12.9": ([sys.executable, "-c", CUDART_CALL,
                         unpacked(cache, "cudart-12.9") / "nvidia/cuda_runtime/lib/libcudart.so.12"], None,
                        "PyPI nvidia-cuda-runtime-cu12==12.9.79"),
        "cudart-13.0": ([sys.executable, "-c", CUDART_CALL, pathlib.Path(a.cuda) / "lib64/libcudart.so.13"], None,
                        f"the toolkit's {a.cuda}/lib64/libcudart.so.13"),
        "cudart-13.5": ([sys.executable, "-c", CUDART_CALL,
                         unpacked(cache, "cudart-13.5") / "nvidia/cu13/lib/libcudart.so.13"], None,
                        "PyPI nvidia-cuda-runtime==13.5.37"),
        "cuda-bindings-13.5.0": ([sys.executable, "-c", BINDINGS_CALL],
                                 {"PYTHONPATH": str(unpacked(cache, "cuda-bindings-13.5.0"))},
                                 "PyPI cuda-bindings==13.5.0, cuda.bindings.driver.cuInit(0)"),
    }
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (argv, env, source) in runs.items():
        if len(argv) > 3 and not pathlib.Path(argv[3]).exists():
            fail(f"{name}: {argv[3]} not found")
        reqs, p = requests(argv, sim, env)
        header = [f"# {name}: the cuGetProcAddress requests of {source} over the simulated driver",
                  "# (build/lib/sim), first-seen order, each once: <name> <version> <flags>.",
                  "# Generated by tools/cuda_requests.py; replayed by tests/e2e/test_request_coverage.py."]
        (out / f"{name}.txt").write_text("\n".join(header + [" ".join(r) for r in reqs]) + "\n")
        print(f"{name}: {len(reqs)} requests, {len({r[0] for r in reqs})} names ({p.stdout.strip()[-60:]})")


if __name__ == "__main__":
    main()
