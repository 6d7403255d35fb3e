"""A module unloaded after one of its kernels ran, loaded again until the driver hands its old function handle to
another kernel, which asserts. argv: module | library (cuModuleUnload or cuLibraryUnload). Prints whether the handle
was reused; a name cdsa kept by handle would then be the unloaded kernel's."""
import ctypes
import sys

import simcuda as cu
from simcuda import lib

library = sys.argv[1] == "library"
ctx, first_mod = cu.init()
loaded = [first_mod]


def load_and_get(name):
    """A new module (library) and its kernel `name`."""
    h = ctypes.c_void_p()
    if library:
        cu.check("cuLibraryLoadData", lib.cuLibraryLoadData(ctypes.byref(h), b"image", None, None, 0, None, None, 0))
        loaded.append(h)
        k = ctypes.c_void_p()
        cu.check("cuLibraryGetKernel", lib.cuLibraryGetKernel(ctypes.byref(k), h, name.encode()))
        return k
    cu.check("cuModuleLoadData", lib.cuModuleLoadData(ctypes.byref(h), b"image"))
    loaded.append(h)
    return cu.function(h, name)


def unload():
    h = loaded.pop()
    cu.check("unload", lib.cuLibraryUnload(h) if library else lib.cuModuleUnload(h))


first = load_and_get("fill_f32")
buf = cu.alloc(64)
cu.launch(first, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(1)])
cu.synchronize()
second = None
for _ in range(8):
    unload()
    second = load_and_get("nll_loss_forward_reduce_cuda_kernel_2d")
    if second.value == first.value:
        break
print("handle reused:", "yes" if second.value == first.value else "no", flush=True)
out = cu.alloc(4)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
cu.launch(second, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
cu.synchronize()  # SURFACE-SITE
