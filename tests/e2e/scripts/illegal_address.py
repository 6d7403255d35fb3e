"""A kernel that faults with an illegal address (700). Usage: illegal_address.py [pytorch] (as a PyTorch program:
PyTorch's libc10_cuda.so stand-in loaded)."""
import sys

import simcuda as cu

if sys.argv[1:] == ["pytorch"]:
    cu.as_pytorch()
ctx, mod = cu.init()
bad = cu.function(mod, "illegal_address")


def step():
    cu.launch(bad, [])  # LAUNCH-SITE


step()
cu.synchronize()  # SURFACE-SITE
