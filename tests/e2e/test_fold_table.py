"""The fold table (report/hybrid_stack.h, rule 4) end to end: from a real process with every native frame recorded
(CDSA_NATIVE_FULL=1), the report folds exactly the interpreter and call-machinery frames into its one "folded"
line, shows every other native frame (a binding, the op), and `--native-all` shows them all. The table is written
out here again, independently of report/hybrid_stack.cc, so that a change to either is seen."""
import re

import pytest

from conftest import BUILD, run_cli, run_python

AUTOGRAD_LIB = BUILD / "tests" / "e2e" / "libe2e_autograd_sim.so"
NATIVE = re.compile(r"^(.+?) \(([^()\s]+)\+0x[0-9a-f]+\)(?: at \S+)?$")  # "function (module+0x1f)[ at file:line]"
FOLDED = re.compile(r"^\((\d+) interpreter and call-machinery frames folded; --native-all shows them\)$")

# Rule 4: whole modules, process and thread start, and CPython's call machinery by name in any module.
MODULES = re.compile(r"^(python3(\.\d+)?|libpython3\.\d+.*\.so.*|libffi\.so.*|_ctypes\..*\.so)$")
START = {"_start", "start_thread", "clone", "__clone", "clone3", "__clone3"}
NAMES = re.compile(r"^(_PyEval_.*|PyEval_.*|.*Vectorcall.*|_PyObject_.*Call.*|PyObject_Call.*|cfunction_call.*|"
                   r"slot_tp_.*|_PyFunction_.*|Py_RunMain|Py_BytesMain|pymain_.*|_PyRun_.*|PyRun_.*|run_mod|"
                   r"run_eval_code_obj|ffi_call.*|_ctypes_callproc|PyCFuncPtr_call)$")


def in_table(function, module):
    base = function.split("@")[0]
    return bool(MODULES.match(module)) or base in START or base.startswith("__libc_start_") or bool(NAMES.match(base))


def native_frames(launch_part):
    return [m.groups() for m in (NATIVE.match(l.strip()) for l in launch_part.splitlines()) if m]


def stack_of(text, start):
    return text[text.index(start):].split("cdsa: hint")[0]


@pytest.mark.parametrize("script,env,start,shown", [
    # ctypes straight into the driver: every native frame is machinery.
    ("nll_loss.py", {}, "Launched from (most recent call last):", []),
    # The forward launch an autograd candidate names: the binding's and the op's frames are shown (the failing
    # launch itself ran on the engine's thread, without Python frames: its native list is shown whole, rule 5).
    ("autograd_case.py", {"AUTOGRAD_SIM_LIB": str(AUTOGRAD_LIB)}, "- candidate:", ["libe2e_autograd_sim.so"]),
])
def test_the_report_folds_exactly_the_table(tmp_path, script, env, start, shown):
    args = ["10"] if script == "nll_loss.py" else []
    run = run_python(script, *args, cwd=tmp_path, env={"CDSA_NATIVE_FULL": "1", **env})
    assert run.reports == 1, run.err
    default = stack_of(run.report, start)
    (trace,) = run.traces()
    full = run_cli("report", "--native-all", trace.name, cwd=tmp_path, timeout=300)
    assert full.returncode == 0, full.stderr
    everything = native_frames(stack_of(full.stdout, start))
    kept = native_frames(default)
    assert everything and not any(m.startswith("libcdsa") for _, m in everything)  # rule 1: cdsa never appears
    # Every frame the default view shows is outside the table, every frame it leaves out is in it.
    assert all(not in_table(f, m) for f, m in kept), kept
    left_out = [fm for fm in everything if fm not in kept]
    assert left_out and all(in_table(f, m) for f, m in left_out), [fm for fm in left_out if not in_table(*fm)]
    counts = [int(m.group(1)) for m in (FOLDED.match(l.strip()) for l in default.splitlines()) if m]
    assert sum(counts) == len(left_out), (counts, len(left_out), default)
    for module in shown:
        assert any(m == module for _, m in kept), default
    assert "folded" not in stack_of(full.stdout, start)
