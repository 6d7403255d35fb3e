"""PyTorch DDP's death, on the simulated driver: a kernel asserts; the main thread's synchronize fails and its
error handling makes more failing calls, while a watchdog thread (ProcessGroupNCCL's) polling cuEventQuery on the
work's end event sees the error too, prints its own error line and calls abort(). Python's faulthandler is on,
as under torchrun. argv[1] == "term": the main thread, after its failing calls, sends SIGTERM to the process
instead (a launcher's), and the watchdog only waits."""
import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time

import simcuda as cu

faulthandler.enable()
mode = sys.argv[1] if len(sys.argv) > 1 else "abort"
ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
sleep_us = cu.function(mod, "sleep_us")
out = cu.alloc(4)
target = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
event = cu.ptr()
cu.check("cuEventCreate", cu.lib.cuEventCreate(ctypes.byref(event), 0))
recorded = threading.Event()


def watchdog():
    cu.set_current(ctx)
    recorded.wait()
    while True:
        code = cu.lib.cuEventQuery(event)  # WATCHDOG-SITE
        if code not in (0, 600):  # CUDA_SUCCESS, CUDA_ERROR_NOT_READY
            print(f"watchdog: [Rank 0] Process group watchdog thread terminated with exception: CUDA error {code}",
                  file=sys.stderr, flush=True)
            if mode == "abort":
                os.abort()
            time.sleep(30)
        time.sleep(0.0002)


w = threading.Thread(target=watchdog, daemon=True)
w.start()
cu.launch(sleep_us, [ctypes.c_uint64(20000)])  # the step's earlier work: the end event is recorded meanwhile
cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
record = cu.lib.cuEventRecord(event, None)
if record == 0:
    recorded.set()
try:
    cu.synchronize()  # SURFACE-SITE
except cu.CudaError as e:
    print(f"program: step failed: {e}", file=sys.stderr, flush=True)
    for _ in range(3):  # the error handling's own calls fail too
        cu.lib.cuCtxSynchronize()
        cu.lib.cuStreamQuery(None)
if record != 0:  # the fault came before the end event was recorded: no watchdog; c10's terminate
    print(f"program: cuEventRecord failed: {record}", file=sys.stderr, flush=True)
    os.abort() if mode == "abort" else os.kill(os.getpid(), signal.SIGTERM)
if mode == "term":
    os.kill(os.getpid(), signal.SIGTERM)
w.join(30)
print("program: the watchdog did not end the process", file=sys.stderr, flush=True)
sys.exit(5)
