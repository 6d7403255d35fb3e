"""1,000 other launches between the faulting launch and the call that surfaces it."""
import ctypes
import os

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
sleep = cu.function(mod, "sleep_us")
fill = cu.function(mod, "fill_f32")
out = cu.alloc(4)
buf = cu.alloc(4 * 256)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
# Keeps the stream busy while the rest is queued (longer in sanitizer builds, whose 1,000 launches take longer).
cu.launch(sleep, [ctypes.c_int64(200000 * int(os.environ.get("E2E_SLOW", "1")))])
cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
for i in range(1000):
    cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(256), ctypes.c_float(i)])  # OTHER-SITE
cu.from_device(out, 1, ctypes.c_float)  # SURFACE-SITE
