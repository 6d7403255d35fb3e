"""A real Jupyter kernel (ipykernel and jupyter_client from PyPI, tools/setup.sh) with libcdsa.so preloaded, over the
simulated driver: cells named as IPython names them, the kernel's machinery folded, the report in the output of the
cell that surfaced the fault before its error, the note at the end of that error, and the restart pointer in a later
cell (docs/python.md). `cdsa jupyter install` (a kernelspec) is not written yet; this is the plain LD_PRELOAD path."""
import os
import re

import pytest

from conftest import BANNER, SCRIPTS, clean_env

jupyter_client = pytest.importorskip("jupyter_client") if not os.environ.get("CI") else __import__("jupyter_client")
if not os.environ.get("CI"):
    pytest.importorskip("ipykernel")

CELLS = [
    "import ctypes, simcuda as cu\nctx, mod = cu.init()\nnll = cu.function(mod, 'nll_loss_forward_reduce_cuda_kernel_2d')\n"
    "out = cu.alloc(4)\ntarget = cu.to_device([3, 7, 10, 1], ctypes.c_int64)",
    "x = 1\ncu.launch(nll, cu.nll_args(out, target, 4, 10))",
    "cu.from_device(out, 1, ctypes.c_float)",
    "cu.synchronize()",
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_cells(tmp_path):
    env = clean_env({"CDSA_TRACE_FILE": str(tmp_path / "cdsa-%p.json")})
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        outputs = []
        for cell in CELLS:
            mid = kc.execute(cell)
            msgs = []
            while True:
                m = kc.get_iopub_msg(timeout=120)
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


def test_notebook_cells_report_note_and_restart_pointer(tmp_path):
    outputs = run_cells(tmp_path)
    surfaced = outputs[2]
    kinds = [k for k, _ in surfaced]
    assert "error" in kinds, surfaced
    text = "".join(t for k, t in surfaced[: kinds.index("error")] if k == "stream")
    assert BANNER in text, surfaced  # the report, in this cell's output, before its error
    report = text[text.find(BANNER):]
    assert "Cell In[2], line 2\n      cu.launch(nll, cu.nll_args(out, target, 4, 10))" in report, report
    assert "Cell In[3], line 1\n      cu.from_device(out, 1, ctypes.c_float)" in report, report
    assert "frames of the Jupyter kernel before the cell folded" in report
    for machinery in ("ipykernel", "asyncio", "IPython", "tornado", "runpy"):
        assert f"/{machinery}/" not in report and f"{machinery}.py" not in report, (machinery, report)
    error = dict(surfaced)["error"]
    assert error.rstrip().splitlines()[-1].startswith(
        "cdsa: the CUDA fault came from kernel nll_loss_forward_reduce_cuda_kernel_2d launched at"), error
    later = outputs[3]
    assert not any(BANNER in t for _, t in later), later
    last = dict(later)["error"].rstrip().splitlines()[-1]
    assert last.startswith("cdsa: the CUDA context died earlier") and "Cell In[3]'s output" in last, last
    assert last.endswith("restart the kernel to use CUDA again"), last
