"""A backward launch from a native "autograd engine" thread (no Python frames), after forward launches of the
same operator from Python. tests/e2e/programs/autograd_sim.cc names its functions as PyTorch's do."""
import ctypes
import os

import simcuda as cu

cu.as_pytorch()  # PyTorch's autograd engine, as autograd_sim.cc stands for it
ctx, mod = cu.init()
sim = ctypes.CDLL(os.environ["AUTOGRAD_SIM_LIB"])
index_select = cu.function(mod, "indexSelectSmallIndex")
fill = cu.function(mod, "fill_f32")
backward_kernel = cu.function(mod, "illegal_address")
out = cu.alloc(4 * 64 * 4)
ids = cu.to_device([12, 45, 999, 7], ctypes.c_int64)


def embed():
    return sim.forward_embedding(index_select, ctypes.c_uint64(out), ctypes.c_uint64(ids), 4, 1000)  # FORWARD-SITE


def other_op():
    cu.launch(fill, [ctypes.c_uint64(out), ctypes.c_int32(4), ctypes.c_float(1.0)])


assert embed() == 0
other_op()
assert sim.run_backward_on_engine_thread(ctx, backward_kernel) == 0
cu.synchronize()  # SURFACE-SITE
