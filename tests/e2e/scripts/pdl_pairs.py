"""PDL pairs from Python, the way NCCL/cuBLAS launch them: cuLaunchKernelEx with programmatic stream serialization,
the secondary's arguments in `extra`. argv: pairs, and the pair whose secondary asserts (-1: none)."""
import ctypes
import sys

import simcuda as cu
from simcuda import lib


class LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


PROGRAMMATIC_STREAM_SERIALIZATION = 6


def launch_ex(f, stream, args=None, extra_buffer=None, pdl=False):
    attrs = (LaunchAttribute * 1)()
    attrs[0].id = PROGRAMMATIC_STREAM_SERIALIZATION
    attrs[0].value[0] = 1  # programmaticStreamSerializationAllowed
    cfg = LaunchConfig((1, 1, 1), (32, 1, 1), 0, stream, attrs, 1 if pdl else 0)
    params, extra = None, None
    if args is not None:
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    if extra_buffer is not None:
        size = ctypes.c_size_t(ctypes.sizeof(extra_buffer))
        extra = (ctypes.c_void_p * 5)(1, ctypes.cast(ctypes.pointer(extra_buffer), ctypes.c_void_p),
                                      2, ctypes.cast(ctypes.pointer(size), ctypes.c_void_p), 0)
    cu.check("cuLaunchKernelEx", lib.cuLaunchKernelEx(ctypes.byref(cfg), f, params, extra))


class NllBuffer(ctypes.Structure):  # the nll kernel's arguments, naturally aligned (CU_LAUNCH_PARAM_BUFFER_POINTER)
    _fields_ = [("out", ctypes.c_uint64), ("target", ctypes.c_uint64), ("n", ctypes.c_int32),
                ("n_classes", ctypes.c_int32), ("ignore", ctypes.c_int64)]


pairs, bad_pair = int(sys.argv[1]), int(sys.argv[2])
ctx, mod = cu.init()
fill = cu.function(mod, "fill_f32")
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
s = cu.stream()
buf, out = cu.alloc(64), cu.alloc(4)
good = cu.to_device([3, 7, 2, 1], ctypes.c_int64)
bad = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
for i in range(pairs):
    launch_ex(fill, s, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(i)])  # PRIMARY-SITE
    target = bad if i == bad_pair else good
    launch_ex(nll, s, extra_buffer=NllBuffer(out, target, 4, 10, -100), pdl=True)  # LAUNCH-SITE
cu.stream_synchronize(s)  # SURFACE-SITE
print("loss", cu.from_device(out, 1, ctypes.c_float)[0])
