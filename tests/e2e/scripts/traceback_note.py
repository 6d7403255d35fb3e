"""The program's own traceback after a fault: argv[1] says how the program meets the CUDA error.

uncaught     the error ends the program (its traceback must end with cdsa's line)
caught       caught and formatted with traceback.format_exception (the note is on the exception), then an
             unrelated KeyError ends the program (its traceback must not get cdsa's line)
own-tracer   the program traces itself (a debugger, coverage): cdsa adds no tracer; the uncaught error still ends
             with cdsa's line
no-fault     no fault at all: an unrelated KeyError, untouched
rank-env     the program sets RANK in os.environ before CUDA starts; the error is uncaught
"""
import ctypes
import os
import sys
import traceback

mode = sys.argv[1]
if mode == "rank-env":
    os.environ["RANK"] = "5"
    os.environ["WORLD_SIZE"] = "6"
if mode == "own-tracer":
    sys.settrace(lambda frame, event, arg: None)

import simcuda as cu  # noqa: E402

ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")


def compute_loss(target_value):
    out = cu.alloc(4)
    target = cu.to_device([3, 7, target_value, 1], ctypes.c_int64)
    cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
    return out


if mode == "no-fault":
    out = compute_loss(1)
    cu.from_device(out, 1, ctypes.c_float)
    raise KeyError("unrelated")
out = compute_loss(10)
if mode == "caught":
    try:
        cu.from_device(out, 1, ctypes.c_float)
    except cu.CudaError as e:
        print("FORMATTED-BEGIN\n" + "".join(traceback.format_exception(e)) + "FORMATTED-END", flush=True)
    raise KeyError("unrelated")
cu.from_device(out, 1, ctypes.c_float)  # SURFACE-SITE
