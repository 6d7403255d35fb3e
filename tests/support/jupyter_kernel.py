"""A real Jupyter kernel over the simulated driver, for tests/e2e/test_notebook.py and tests/wheel/test_wheel.py:
start a kernelspec through jupyter_client, run cells, keep each cell's outputs, and check what a notebook user
must see after a CUDA fault (the issue-18 notebook check). Needs jupyter_client (and ipykernel in the kernel's
Python); the simulated driver's simcuda.py must be on the kernel's PYTHONPATH."""
import re

from cdsa_report import BANNER, raw_report

# Cell 2 makes the bad launch (line 2), cell 3 surfaces the fault, cell 4 fails on the dead context.
CELLS = [
    "import ctypes, simcuda as cu\nctx, mod = cu.init()\nnll = cu.function(mod, 'nll_loss_forward_reduce_cuda_kernel_2d')\n"
    "out = cu.alloc(4)\ntarget = cu.to_device([3, 7, 10, 1], ctypes.c_int64)",
    "x = 1\ncu.launch(nll, cu.nll_args(out, target, 4, 10))",
    "cu.from_device(out, 1, ctypes.c_float)",
    "cu.synchronize()",
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_cells(cells, *, env, cwd, kernel_name="python3", kernel_dirs=None, timeout=120):
    """Starts kernelspec KERNEL_NAME (looked up only in KERNEL_DIRS when given, else on the Jupyter path) with ENV
    in CWD, runs CELLS in order; returns per cell its outputs in order: ("stream", text) and ("error", the
    traceback as text, colours removed)."""
    import jupyter_client
    from jupyter_client.kernelspec import KernelSpecManager

    extra = {}
    if kernel_dirs is not None:
        extra["kernel_spec_manager"] = KernelSpecManager(kernel_dirs=[str(d) for d in kernel_dirs])
    km = jupyter_client.KernelManager(kernel_name=kernel_name, **extra)
    km.start_kernel(env=env, cwd=str(cwd))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=timeout)
        outputs = []
        for cell in cells:
            mid = kc.execute(cell)
            msgs = []
            while True:
                m = kc.get_iopub_msg(timeout=timeout)
                if m["parent_header"].get("msg_id") != mid:
                    continue
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    break
                if m["msg_type"] == "stream":
                    msgs.append(("stream", m["content"]["text"]))
                elif m["msg_type"] == "error":
                    msgs.append(("error", ANSI.sub("", "\n".join(m["content"]["traceback"]))))
            outputs.append(msgs)
        return outputs
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def check_fault_cells(outputs, surfacing=2):
    """OUTPUTS of CELLS (the first four): the report in the surfacing cell's output before its error, naming the
    cells as IPython does with their source and none of the kernel's machinery; that error ends with cdsa's note;
    the next cell's error ends with the restart pointer. Returns the report's text."""
    surfaced = outputs[surfacing]
    kinds = [k for k, _ in surfaced]
    assert "error" in kinds, surfaced
    text = "".join(t for k, t in surfaced[: kinds.index("error")] if k == "stream")
    assert BANNER in text, surfaced  # the report, in this cell's output, before its error
    report = raw_report(text)  # banner to closing rule, indentation kept
    assert "Cell In[2], line 2\n      cu.launch(nll, cu.nll_args(out, target, 4, 10))" in report, report
    assert "Cell In[3], line 1\n      cu.from_device(out, 1, ctypes.c_float)" in report, report
    assert "frames of the Jupyter kernel before the cell folded" in report
    for machinery in ("ipykernel", "asyncio", "IPython", "tornado", "runpy", "traitlets"):
        assert f"/{machinery}/" not in report and f"{machinery}.py" not in report, (machinery, report)
    error = dict(surfaced)["error"]
    assert error.rstrip().splitlines()[-1].startswith(
        "cdsa: the CUDA fault came from kernel nll_loss_forward_reduce_cuda_kernel_2d launched at"), error
    later = outputs[surfacing + 1]
    assert not any(BANNER in t for _, t in later), later
    last = dict(later)["error"].rstrip().splitlines()[-1]
    assert last.startswith("cdsa: the CUDA context died earlier") and "Cell In[3]'s output" in last, last
    assert last.endswith("restart the kernel to use CUDA again"), last
    return report
