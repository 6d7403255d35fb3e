"""Eight threads launching concurrently, 10,000 launches each (or argv[1]), one fault among them, halfway."""
import ctypes
import sys
import threading

import simcuda as cu

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
fill = cu.function(mod, "fill_f32")
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
FAULTY = 5


def worker(k, barrier):
    cu.set_current(ctx)
    s = cu.stream()
    buf = cu.alloc(4 * 64)
    out = cu.alloc(4)
    barrier.wait()
    for i in range(N):
        if k == FAULTY and i == N // 2:
            cu.launch(nll, cu.nll_args(out, target, 4, 10), stream=s)  # LAUNCH-SITE
            continue
        try:
            cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(64), ctypes.c_float(i)], stream=s)
        except cu.CudaError:
            return  # the context died: stop, as a real program would


barrier = threading.Barrier(8)
threads = [threading.Thread(target=worker, args=(k, barrier)) for k in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
cu.synchronize()  # SURFACE-SITE
