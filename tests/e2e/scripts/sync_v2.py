"""A fault surfaced by cudaDeviceSynchronize as CUDA 13 makes it: cuCtxSynchronize_v2, obtained from
cuGetProcAddress_v2 at version 13000. The program then raises its own error."""
import ctypes

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
out = cu.alloc(4)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
cu.synchronize_v2()  # SURFACE-SITE
