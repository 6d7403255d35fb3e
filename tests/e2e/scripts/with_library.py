"""Loads a shared library with ctypes (argv[1]; argv[2]: "local" or "global"), calls its own cuInit(0) through
that handle when it has one, then runs a script of this folder (argv[3], its arguments after it) as the main
module: a program that dlopens a library of its own and uses it."""
import ctypes
import os
import runpy
import sys

path, mode, script = sys.argv[1], sys.argv[2], sys.argv[3]
lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL if mode == "global" else ctypes.RTLD_LOCAL)
print("with_library: loaded", flush=True)
if hasattr(lib, "cuInit"):
    print("with_library: its cuInit returned", lib.cuInit(0), flush=True)
sys.argv = [script] + sys.argv[4:]
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), script), run_name="__main__")
