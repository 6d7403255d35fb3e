"""After the fault every later call fails, and cdsa reports once."""
import ctypes

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
out = cu.alloc(4)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
try:
    cu.from_device(out, 1, ctypes.c_float)  # SURFACE-SITE
except cu.CudaError as e:
    print("caught", e.name, flush=True)
failures = []
for attempt in range(3):
    try:
        cu.alloc(16)
    except cu.CudaError as e:
        failures.append(e.name)
    try:
        cu.synchronize()
    except cu.CudaError as e:
        failures.append(e.name)
print("later calls failed:", len(failures), sorted(set(failures)), flush=True)
