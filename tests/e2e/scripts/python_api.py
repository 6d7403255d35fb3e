"""cdsa's Python API in a program (docs/python.md): cdsa.last_report() before and after a fault the program
catches, and cdsa.load_trace() of the trace that fault wrote. Prints one JSON object per line:
BEFORE (no report yet), LIVE (the live report), LOADED (the trace's)."""
import ctypes
import json

import cdsa
import simcuda as cu


def summary(r):
    return {"kernel": r.kernel, "frames": [list(f) for f in r.frames], "native": len(r.native_frames),
            "attribution": r.attribution, "error_name": r.error_name, "code": r.code,
            "surfaced_call": r.surfaced_call, "device_text": r.device_text, "trace_path": r.trace_path,
            "rank": r.rank, "gpu": r.gpu, "launch_line": r.launch_line, "candidates": len(r.candidates),
            "repr": repr(r)}


ctx, mod = cu.init()
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
print("BEFORE " + json.dumps(cdsa.last_report() is None), flush=True)


def compute_loss(target_value):
    out = cu.alloc(4)
    target = cu.to_device([3, 7, target_value, 1], ctypes.c_int64)
    cu.launch(nll, cu.nll_args(out, target, 4, 10))  # LAUNCH-SITE
    return out


out = compute_loss(10)
try:
    cu.from_device(out, 1, ctypes.c_float)
except cu.CudaError:
    live = cdsa.last_report()
    print("LIVE " + json.dumps(summary(live)), flush=True)
    print("LOADED " + json.dumps(summary(cdsa.load_trace(live.trace_path))), flush=True)
