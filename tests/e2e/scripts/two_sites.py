"""The same kernel launched from two lines; only the second launch faults."""
import ctypes

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
sleep = cu.function(mod, "sleep_us")
out = cu.alloc(4)
good = cu.to_device([3, 7, 9, 1], ctypes.c_int64)
bad = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
cu.launch(sleep, [ctypes.c_int64(100000)])  # keeps the stream busy while the rest is queued
cu.launch(nll, cu.nll_args(out, good, 4, 10))  # GOOD-SITE
cu.launch(nll, cu.nll_args(out, bad, 4, 10))  # LAUNCH-SITE
cu.launch(nll, cu.nll_args(out, good, 4, 10))  # AFTER-SITE
cu.synchronize()  # SURFACE-SITE
