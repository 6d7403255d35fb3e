"""Replays a request list of tests/data/requests/ (tools/cuda_requests.py): every (name, version, flags) through
cuGetProcAddress_v2 of the libcuda.so.1 the loader finds, as the runtime made them, in order. Prints how many the
driver answered with a function. argv[1]: the list."""
import ctypes
import sys

import simcuda as cu

n = answered = 0
for line in open(sys.argv[1]):
    if not line.strip() or line.startswith("#"):
        continue
    name, version, flags = line.split()
    fn, status = ctypes.c_void_p(), ctypes.c_int()
    r = cu.lib.cuGetProcAddress_v2(b"" if name == "(empty)" else name.encode(), ctypes.byref(fn), int(version), ctypes.c_uint64(int(flags)),
                                   ctypes.byref(status))
    n += 1
    answered += r == 0 and fn.value is not None
print(f"{n} requests, {answered} answered with a function")
