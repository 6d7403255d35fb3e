"""Launched on one thread, surfaced on another."""
import ctypes
import threading

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
out = cu.alloc(4)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
ready, launched = threading.Event(), threading.Event()


def producer():
    cu.set_current(ctx)
    cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
    launched.set()


def consumer():
    cu.set_current(ctx)
    ready.set()
    launched.wait()
    try:
        cu.from_device(out, 1, ctypes.c_float)  # SURFACE-SITE
    except cu.CudaError as e:
        print("consumer saw", e.name, flush=True)


c = threading.Thread(target=consumer)
c.start()
ready.wait()
t = threading.Thread(target=producer)
t.start()
t.join()
c.join()
