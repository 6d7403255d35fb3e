"""The kernel faults, no call surfaces it, and the driver is torn down at exit before cdsa's exit probe runs (as
cudart's own exit handlers may do; Python's atexit handlers run before the C library's, so before cdsa's)."""
import atexit
import ctypes
import os
import time

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
out = cu.alloc(4)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
time.sleep(0.2)  # the kernel faults; no call observes it
if not os.environ.get("SIM_CUDA_TEARDOWN_AT_EXIT"):  # else the simulated driver tears itself down, unseen
    atexit.register(lambda: cu.lib.cuDevicePrimaryCtxReset_v2(0))
print("exiting; the driver is torn down first", flush=True)
