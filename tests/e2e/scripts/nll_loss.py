"""The seed's first case: a loss kernel whose target is out of range, surfaced later by a copy."""
import ctypes
import sys

import simcuda as cu

cu.as_pytorch()  # the seed's program is PyTorch's cross_entropy
ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")


def compute_loss(target_value, ignore_index):
    out = cu.alloc(4)
    target = cu.to_device([3, 7, target_value, 1], ctypes.c_int64)
    cu.launch(nll, cu.nll_args(out, target, 4, 10, ignore_index))  # LAUNCH-SITE
    return out


def log_loss(out):
    return cu.from_device(out, 1, ctypes.c_float)  # SURFACE-SITE


out = compute_loss(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else -100)
print("loss call returned", flush=True)
print("loss", log_loss(out)[0])
