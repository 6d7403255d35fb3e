"""One rank of a fake multi-rank job (fake_launcher.py starts it with RANK set). argv[1] says what this rank does:
assert   its loss kernel asserts (710 with the device's text), surfaced at the copy after it
collective  a collective kernel (its name an NCCL one) faults with 700 and no text: a rank that failed because of
            a peer, as far as its own evidence goes
clean    launches and exits 0
hang     launches, then waits to be killed (the launcher's SIGTERM: no trace)"""
import ctypes
import sys
import time

import simcuda as cu

mode = sys.argv[1]
ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
out = cu.alloc(4)


def train_step(bad):
    target = cu.to_device([3, 7, 10 if bad else 1, 1], ctypes.c_int64)
    cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
    return cu.from_device(out, 1, ctypes.c_float)[0]


def all_reduce():
    k = cu.function(mod, "ncclDevKernel_AllReduce_Sum_f32_RING_LL_illegal_address")
    cu.launch(k, [])  # COLLECTIVE-SITE
    cu.synchronize()


if mode == "assert":
    train_step(True)
elif mode == "collective":
    train_step(False)
    all_reduce()
elif mode == "clean":
    train_step(False)
elif mode == "hang":
    train_step(False)
    print("rank waiting", flush=True)
    time.sleep(120)
