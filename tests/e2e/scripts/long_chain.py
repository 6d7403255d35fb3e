"""A long PDL chain from Python (issue 26): nll with good targets through cuLaunchKernelEx without attributes, 100
PDL fill_f32 launches, then a PDL nll with bad targets, all on one stream and so sharing one completion mark."""
import ctypes

import simcuda as cu
from simcuda import lib


class LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


PROGRAMMATIC_STREAM_SERIALIZATION = 6


def launch_ex(f, stream, args, pdl=False):
    attrs = (LaunchAttribute * 1)()
    attrs[0].id = PROGRAMMATIC_STREAM_SERIALIZATION
    attrs[0].value[0] = 1
    cfg = LaunchConfig((1, 1, 1), (32, 1, 1), 0, stream, attrs, 1 if pdl else 0)
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    cu.check("cuLaunchKernelEx", lib.cuLaunchKernelEx(ctypes.byref(cfg), f, params, None))


ctx, mod = cu.init()
fill = cu.function(mod, "fill_f32")
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
s = cu.stream()
buf, out = cu.alloc(64), cu.alloc(4)
good = cu.to_device([3, 7, 2, 1], ctypes.c_int64)
bad = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
launch_ex(nll, s, cu.nll_args(out, good, 4, 10))  # GOOD-SITE
for i in range(100):
    launch_ex(fill, s, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(i)], pdl=True)
launch_ex(nll, s, cu.nll_args(out, bad, 4, 10), pdl=True)  # BAD-SITE
cu.stream_synchronize(s)  # SURFACE-SITE
print("loss", cu.from_device(out, 1, ctypes.c_float)[0])
