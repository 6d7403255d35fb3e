"""Eight threads launching concurrently, one fault among them.

eight_threads.py [N]: 10,000 launches each (or N), the fault halfway.
eight_threads.py busy: each thread launches on its own busy stream, 2,000 launches each, the fault 10 launches
in. Every stream still has launches pending when the fault surfaces, so only the device's assert text singles out
the failing one."""
import ctypes
import sys
import threading

import simcuda as cu

BUSY = sys.argv[1:2] == ["busy"]
ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
fill = cu.function(mod, "fill_f32")
sleep = cu.function(mod, "sleep_us")
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
N = 2000 if BUSY else int(sys.argv[1]) if len(sys.argv) > 1 else 10000
FAULT_AT = 10 if BUSY else N // 2
FAULTY = 5


def worker(k, barrier):
    cu.set_current(ctx)
    s = cu.stream()
    buf = cu.alloc(4 * 64)
    out = cu.alloc(4)
    barrier.wait()
    if BUSY:
        # Every stream busy: the faulty one for 100 ms, the others well past its fault, so they all have launches
        # pending when it surfaces.
        cu.launch(sleep, [ctypes.c_int64(100000 if k == FAULTY else 1000000)], stream=s)
    for i in range(N):
        try:
            if k == FAULTY and i == FAULT_AT:
                cu.launch(nll, cu.nll_args(out, target, 4, 10), stream=s)  # LAUNCH-SITE
            else:
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
