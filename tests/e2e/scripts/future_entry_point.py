"""A launch through an entry point newer than cdsa's headers, from Python through ctypes: cuLaunchKernel asked for
at 13990 (the simulated driver's test-only future version, with one more argument), then a synchronize.
argv[1]: "called" launches the bad nll through it; "uncalled" only asks for it and launches through the plain one."""
import ctypes
import sys

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
s = cu.stream()
out = cu.alloc(4)
good = cu.to_device([3, 7, 1, 0], ctypes.c_int64)
bad = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
FutureLaunch = ctypes.CFUNCTYPE(cu.CUresult, cu.ptr, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, cu.ptr, cu.ptr, cu.ptr, ctypes.c_uint)
future = FutureLaunch(cu.proc_address("cuLaunchKernel", 13990))
cu.launch(nll, cu.nll_args(out, good, 4, 10), stream=s)
if sys.argv[1] == "called":
    args = cu.nll_args(out, bad, 4, 10)
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    cu.check("cuLaunchKernel@13990", future(nll, 1, 1, 1, 32, 1, 1, 0, s, params, None, 13990))  # FUTURE LAUNCH
else:
    cu.launch(nll, cu.nll_args(out, bad, 4, 10), stream=s)  # PLAIN LAUNCH
cu.synchronize_v2()
