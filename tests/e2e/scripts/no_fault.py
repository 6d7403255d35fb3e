"""A clean run: cdsa must print nothing and write nothing; the exit status is the program's."""
import ctypes
import sys

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
fill = cu.function(mod, "fill_f32")
out = cu.alloc(4)
buf = cu.alloc(4 * 16)
target = cu.to_device([3, 7, 9, 1], ctypes.c_int64)
cu.launch(nll, cu.nll_args(out, target, 4, 10))
for i in range(100):
    cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(i)])
print("loss", cu.from_device(out, 1, ctypes.c_float)[0])
print("buf", cu.from_device(buf, 2, ctypes.c_float))
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
