"""Two streams, both with launches pending when one of them faults: only the device's assert text tells which."""
import ctypes

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
fill = cu.function(mod, "fill_f32")
sleep = cu.function(mod, "sleep_us")
a, b = cu.stream(), cu.stream()
out = cu.alloc(4)
buf = cu.alloc(4 * 64)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
# Stream b sleeps well past a's fault, so both streams still have launches pending when it surfaces.
cu.launch(sleep, [ctypes.c_int64(200000)], stream=a)
cu.launch(sleep, [ctypes.c_int64(800000)], stream=b)
cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(64), ctypes.c_float(1)], stream=b)  # OTHER-SITE
cu.launch(nll, cu.nll_args(out, target, 4, 10), stream=a)  # LAUNCH-SITE
cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(64), ctypes.c_float(2)], stream=b)
cu.synchronize()  # SURFACE-SITE
