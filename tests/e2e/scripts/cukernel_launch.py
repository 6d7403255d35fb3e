"""The loss kernel launched as cudart 13 launches it: the CUkernel from cuLibraryGetKernel, cast to CUfunction."""
import ctypes

import simcuda as cu

ctx, mod = cu.init()
nll = cu.library_kernel("_Z38nll_loss_forward_reduce_cuda_kernel_2dPfPKliil")
out = cu.alloc(4)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
cu.synchronize()  # SURFACE-SITE
