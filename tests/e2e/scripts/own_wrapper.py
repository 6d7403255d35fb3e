"""A program with its own small wrapper over the driver (ctypes, as hand-written bindings and research code do): it
checks the copy's return code and raises its own error two lines after the failing call, naming the error by
number only. argv[1] says what the program does once the fault surfaced.

uncaught    the wrapper's RuntimeError("CUDA error 710 while reading the loss") ends the program
caught      ... is caught and formatted with traceback.format_exception (WRAPPER-BEGIN/END, WRAPPER-NOTES)
unrelated   the wrapper returns the code instead; then, caught and formatted each: an IndexError naming 710 as an
            index (INDEX-...), a ValueError raised in another function (OTHER-...), the same ValueError raised in
            the wrapper itself (SAME-...); then an unrelated KeyError ends the program
thread      the wrapper returns the code; a thread's uncaught KeyError (threading.excepthook); the program exits 0
before      a KeyError raised before the fault, being handled when the fault surfaces, is raised again and ends
            the program
"""
import ctypes
import json
import sys
import threading
import traceback

import simcuda as cu

mode = sys.argv[1]
ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
out = cu.alloc(4)
cu.launch(nll, cu.nll_args(out, cu.to_device([3, 7, 10, 1], ctypes.c_int64), 4, 10))  # LAUNCH-SITE


def read_loss(d, on_error="raise"):
    loss = ctypes.c_float()
    r = cu.lib.cuMemcpyDtoH_v2(ctypes.byref(loss), ctypes.c_uint64(d), ctypes.c_size_t(4))  # SURFACE-SITE
    if r != 0 and on_error != "return":
        raise RuntimeError(f"CUDA error {r} while reading the loss") if on_error == "raise" else ValueError("no loss")
    return loss.value if r == 0 else None


def check_loss(loss):
    if loss is None:
        raise ValueError("no loss")


def show(tag, e):
    """The exception as a handler that logs it sees it: format_exception, and its notes (3.10 prints none)."""
    print(f"{tag}-BEGIN\n" + "".join(traceback.format_exception(e)) + f"{tag}-END", flush=True)
    print(f"{tag}-NOTES " + json.dumps([n for n in getattr(e, "__notes__", ()) if isinstance(n, str)]), flush=True)


if mode == "uncaught":
    read_loss(out)
elif mode == "caught":
    try:
        read_loss(out)
    except RuntimeError as e:
        show("WRAPPER", e)
elif mode == "unrelated":
    loss = read_loss(out, on_error="return")
    try:
        raise IndexError("index 710 out of range")
    except IndexError as e:
        show("INDEX", e)
    try:
        check_loss(loss)
    except ValueError as e:
        show("OTHER", e)
    try:
        read_loss(out, on_error="value")
    except ValueError as e:
        show("SAME", e)
    raise KeyError("unrelated")
elif mode == "thread":
    loss = read_loss(out, on_error="return")

    def worker():
        raise KeyError("unrelated, in a thread")

    t = threading.Thread(target=worker, name="worker")
    t.start()
    t.join()
    print("main thread done", flush=True)
elif mode == "before":
    try:
        raise KeyError("before the fault")
    except KeyError:
        read_loss(out, on_error="return")
        sum(range(3))  # a call: the fault has been handed to the program's Python by now
        raise
