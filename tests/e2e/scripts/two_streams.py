"""A fault on one stream while another stream is busy."""
import ctypes

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
sleep = cu.function(mod, "sleep_us")
busy, side = cu.stream(), cu.stream()
out = cu.alloc(4)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
cu.launch(sleep, [ctypes.c_int64(300000)], stream=busy)  # BUSY-SITE
cu.launch(nll, cu.nll_args(out, target, 4, 10), stream=side)  # LAUNCH-SITE
cu.synchronize()  # SURFACE-SITE
