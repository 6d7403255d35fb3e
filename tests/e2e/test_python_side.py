"""What cdsa adds to the program's own Python (python/cdsa/_hook.py, run by libcdsa.so): the note that ends the
program's traceback, and the rank and GPU in the report's header (docs/python.md, docs/launchers.md)."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import (BUILD, PYTHON, PYTHON_EMULATED, ROOT, SCRIPTS, Run, clean_env, emulated, execs_directly,
                      marker_line, other_pythons, run_cli, run_python)

PYTHON_PKG = ROOT / "python"  # the cdsa package's sources (the wheel's tests use the installed one)

NOTE = re.compile(r"^cdsa(\[rank \d+\])?: the CUDA fault.*$", re.M)
# The line an unrelated exception that ends the program after the fault gets: the launch, with no cause claimed.
PRIOR = "cdsa: a CUDA fault was reported before this error: kernel nll_loss_forward_reduce_cuda_kernel_2d launched at "


def last_traceback(err):
    """The last traceback in ERR, from its 'Traceback' line to the end."""
    i = err.rfind("Traceback (most recent call last):")
    assert i >= 0, err
    return err[i:]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PEP 678 notes are 3.11+")
def test_uncaught_error_ends_with_the_launch_line(tmp_path):
    r = run_python("traceback_note.py", "uncaught", cwd=tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    tb = last_traceback(r.err).rstrip().splitlines()
    assert tb[-2].startswith("simcuda.CudaError: CUDA error: cuMemcpyDtoH_v2 returned 710"), tb
    note = tb[-1]
    (trace,) = r.traces()
    # The launch's innermost frame outside site-packages and the standard library: simcuda.py's driver call.
    n, text = next((n, t.strip()) for n, t in enumerate((SCRIPTS / "simcuda.py").read_text().splitlines(), 1)
                   if "lib.cuLaunchKernel(" in t)
    assert note == (f"cdsa: the CUDA fault came from kernel nll_loss_forward_reduce_cuda_kernel_2d launched at "
                    f"simcuda.py:{n}: {text} (cdsa's report above; trace {trace.name})"), note
    assert len(NOTE.findall(r.err)) == 1


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PEP 678 notes are 3.11+")
def test_caught_error_carries_the_note_and_unrelated_errors_do_not(tmp_path):
    r = run_python("traceback_note.py", "caught", cwd=tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    formatted = r.out.split("FORMATTED-BEGIN\n")[1].split("FORMATTED-END")[0]
    assert formatted.rstrip().splitlines()[-1].startswith("cdsa: the CUDA fault came from kernel nll_loss"), formatted
    # The unrelated KeyError that ends the program gets the line that claims no cause, not the note.
    tb = last_traceback(r.err).rstrip().splitlines()
    assert tb[-2] == "KeyError: 'unrelated'" and tb[-1].startswith(PRIOR), tb
    assert not NOTE.search("\n".join(tb)), tb


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PEP 678 notes are 3.11+")
def test_a_program_that_traces_itself_still_gets_the_note_on_its_uncaught_error(tmp_path):
    r = run_python("traceback_note.py", "own-tracer", cwd=tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    tb = last_traceback(r.err).rstrip().splitlines()
    assert tb[-1].startswith("cdsa: the CUDA fault came from kernel nll_loss"), tb


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PEP 678 notes are 3.11+")
@pytest.mark.parametrize("mode", ["uncaught", "caught"])
def test_the_note_under_cdsa_run(tmp_path, mode):
    # `cdsa run` (no LD_PRELOAD of the user's): the same note on the traceback and in format_exception.
    if not execs_directly():
        pytest.skip("the emulated cdsa run cannot exec the emulated interpreter: no binfmt_misc handler")
    p = run_cli("run", "--", PYTHON, SCRIPTS / "traceback_note.py", mode, cwd=tmp_path,
                env=clean_env(preload=False))
    r = Run(p, tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    if mode == "uncaught":
        last = last_traceback(r.err).rstrip().splitlines()[-1]
    else:
        last = r.out.split("FORMATTED-BEGIN\n")[1].split("FORMATTED-END")[0].rstrip().splitlines()[-1]
    (trace,) = r.traces()
    assert last.startswith("cdsa: the CUDA fault came from kernel nll_loss_forward_reduce_cuda_kernel_2d launched at "
                           "simcuda.py:"), last
    assert last.endswith(f"(cdsa's report above; trace {trace.name})"), last


def test_without_a_fault_nothing_changes(tmp_path):
    with_cdsa = run_python("traceback_note.py", "no-fault", cwd=tmp_path)
    without = run_python("traceback_note.py", "no-fault", cwd=tmp_path, preload=False)
    assert with_cdsa.rc == without.rc == 1
    assert with_cdsa.err == without.err
    assert with_cdsa.traces() == []


def test_rank_set_by_the_program_names_the_report_and_the_trace(tmp_path):
    r = run_python("traceback_note.py", "rank-env", cwd=tmp_path)
    assert r.rc == 1 and r.reports == 1, r.err
    lines = r.report.splitlines()
    assert re.fullmatch(r"cdsa\[rank 5\]: rank 5 of 6, pid \d+ on \S+, GPU 0 cdsa simulated GPU \(PCI 0000:3B:00\.0\)",
                        lines[1]), lines[1]
    prefixed = [l for l in lines if l.startswith("cdsa")]
    assert prefixed and all(l.startswith("cdsa[rank 5]: ") for l in prefixed[1:]), prefixed
    (trace,) = r.traces()
    assert re.fullmatch(r"cdsa-.+-rank5-\d+\.json", trace.name), trace.name
    origin = r.trace()["report"]["origin"]
    assert (origin["rank"], origin["world_size"], origin["gpu_ordinal"], origin["gpu_name"],
            origin["gpu_pci_bus_id"]) == (5, 6, 0, "cdsa simulated GPU", "0000:3B:00.0")
    assert last_traceback(r.err).rstrip().splitlines()[-1].startswith("cdsa: the CUDA fault on rank 5 came from")


def test_without_a_rank_the_header_names_the_process_and_gpu(tmp_path):
    r = run_python("nll_loss.py", "10", cwd=tmp_path)
    header = r.report.splitlines()[1]
    assert re.fullmatch(r"cdsa: pid \d+ on \S+, GPU 0 cdsa simulated GPU \(PCI 0000:3B:00\.0\)", header), header
    (trace,) = r.traces()
    assert "rank" not in trace.name


# --- the line for every error the fault caused (tests/e2e/scripts/own_wrapper.py) ------------------------------------
# On every CPython here: on 3.10 the interpreter prints no notes, so the line of an exception that ends the program
# (or a thread) is printed after its traceback, and a caught one has it in __notes__ (*-NOTES), not in
# format_exception.

def all_pythons():
    if PYTHON_EMULATED:  # the emulated interpreter alone (conftest.PYTHON): run_python's default
        return [pytest.param(None, id="e2e_python")]
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    return [pytest.param(sys.executable, id=f"python{this}")] + other_pythons(
        *[v for v in ("3.10", "3.11", "3.12", "3.13") if v != this])


def run_wrapper(mode, tmp_path, python):
    r = run_python("own_wrapper.py", mode, cwd=tmp_path, python=python)
    assert r.reports == 1, r.err
    return r


def python_minor(python):
    argv, env = [str(python), "-c", "import sys; print(*sys.version_info[:2])"], None
    if python is None:
        argv, env = emulated([str(PYTHON), *argv[1:]], None)
    return tuple(int(x) for x in subprocess.run(argv, env=env, capture_output=True, text=True,
                                                check=True).stdout.split())


def caught(r, tag, python):
    """What a handler that formats exception TAG sees: its notes (3.11+: also the end of format_exception)."""
    notes = json.loads(next(l for l in r.out.splitlines() if l.startswith(f"{tag}-NOTES ")).split(" ", 1)[1])
    formatted = r.out.split(f"{tag}-BEGIN\n")[1].split(f"{tag}-END")[0].rstrip().splitlines()
    cdsa_lines = [l for l in formatted if l.startswith("cdsa")]
    if python_minor(python) >= (3, 11):
        assert cdsa_lines == ([notes[-1]] if notes else []) and (not notes or formatted[-1] == notes[-1]), formatted
    return notes


def launch_site():
    """The launch's innermost frame outside site-packages and the standard library: simcuda.py's driver call."""
    return next(f"simcuda.py:{n}: {t.strip()}" for n, t in enumerate((SCRIPTS / "simcuda.py").read_text().splitlines(), 1)
                if "lib.cuLaunchKernel(" in t)


def the_note(r):
    (trace,) = r.traces()
    return (f"cdsa: the CUDA fault came from kernel nll_loss_forward_reduce_cuda_kernel_2d launched at {launch_site()} "
            f"(cdsa's report above; trace {trace.name})")


@pytest.mark.parametrize("python", all_pythons())
def test_an_own_wrappers_error_naming_the_code_ends_with_the_note(tmp_path, python):
    # RuntimeError(f"CUDA error {r} while reading the loss"), raised two lines below the failing call.
    r = run_wrapper("uncaught", tmp_path, python)
    assert r.rc == 1
    tb = last_traceback(r.err).rstrip().splitlines()
    assert tb[-2] == "RuntimeError: CUDA error 710 while reading the loss" and tb[-1] == the_note(r), tb
    assert len(NOTE.findall(r.err)) == 1


@pytest.mark.parametrize("python", all_pythons())
def test_an_own_wrappers_error_caught_and_formatted_has_the_note(tmp_path, python):
    r = run_wrapper("caught", tmp_path, python)
    assert r.rc == 0, r.err
    assert caught(r, "WRAPPER", python) == [the_note(r)]
    assert "Traceback" not in r.err


@pytest.mark.parametrize("python", all_pythons())
def test_unrelated_errors_after_the_fault(tmp_path, python):
    r = run_wrapper("unrelated", tmp_path, python)
    assert r.rc == 1
    # Caught: "index 710" is not an error code, and a ValueError raised in another function is not the fault's...
    assert caught(r, "INDEX", python) == []
    assert caught(r, "OTHER", python) == []
    # ... but the same ValueError raised in the function whose call surfaced the fault (the same code object) is.
    assert caught(r, "SAME", python) == [the_note(r)]
    # Uncaught: an unrelated KeyError ends the program with the line that claims no cause.
    tb = last_traceback(r.err).rstrip().splitlines()
    (trace,) = r.traces()
    assert tb[-2] == "KeyError: 'unrelated'", tb
    assert tb[-1] == f"{PRIOR}{launch_site()} (cdsa's report above; trace {trace.name})", tb


@pytest.mark.parametrize("python", all_pythons())
def test_a_threads_uncaught_error_after_the_fault_gets_the_line(tmp_path, python):
    r = run_wrapper("thread", tmp_path, python)
    assert r.rc == 0 and "main thread done" in r.out, r.err
    tb = last_traceback(r.err).rstrip().splitlines()
    assert tb[-2] == "KeyError: 'unrelated, in a thread'" and tb[-1].startswith(PRIOR), tb
    assert "Exception in thread worker" in r.err


@pytest.mark.parametrize("python", all_pythons())
def test_an_error_raised_before_the_fault_gets_no_line(tmp_path, python):
    r = run_wrapper("before", tmp_path, python)
    assert r.rc == 1
    tb = last_traceback(r.err).rstrip()
    assert tb.endswith("KeyError: 'before the fault'"), tb


# --- the Python API: cdsa.last_report(), cdsa.load_trace() (python/cdsa/_report.py) --------------------------------

def api_lines(out):
    return {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
            if line.split(" ", 1)[0] in ("BEFORE", "LIVE", "LOADED")}


def test_python_api_reads_this_processs_report_and_its_trace(tmp_path):
    r = run_python("python_api.py", cwd=tmp_path, env={"PYTHONPATH": f"{SCRIPTS}{os.pathsep}{PYTHON_PKG}"})
    assert r.rc == 0 and r.reports == 1, r.err
    got = api_lines(r.out)
    assert got["BEFORE"] is True  # no fault yet: no report
    live, loaded = got["LIVE"], got["LOADED"]
    (trace,) = r.traces()
    assert os.path.samefile(tmp_path / live["trace_path"], trace) and loaded["trace_path"] == live["trace_path"]
    line, source = marker_line(SCRIPTS / "python_api.py", "LAUNCH-SITE")
    assert live["kernel"] == "nll_loss_forward_reduce_cuda_kernel_2d" and live["attribution"] == "exact", live
    assert live["error_name"] == "CUDA_ERROR_ASSERT" and live["code"] == 710
    assert live["surfaced_call"] == "cuMemcpyDtoH_v2", live
    # The launch's Python frames, innermost first: simcuda's driver call, then the program's line.
    assert [str(SCRIPTS / "python_api.py"), line, "compute_loss", source] in live["frames"], live["frames"]
    assert live["frames"][0][0].endswith("simcuda.py") and live["native"] > 0, live
    assert r.trace()["version"] == 2 and "surfaced_stack" not in r.trace()["report"]  # stacks by id in the file
    assert "Assertion" in live["device_text"], live["device_text"]
    assert live["rank"] is None and live["gpu"] == "cdsa simulated GPU" and live["candidates"] == 1
    assert live["repr"].startswith("<cdsa.Report CUDA_ERROR_ASSERT: kernel nll_loss_forward_reduce_cuda_kernel_2d at"), live
    # The trace's report is the same data (native frames symbolized the same way).
    assert loaded == live, (loaded, live)
    # The text report agrees: the launch line it prints is the one the API names.
    assert f"line {line}, in compute_loss" in r.report


def test_python_api_without_cdsa_and_on_other_files(tmp_path):
    sys.path.insert(0, str(PYTHON_PKG))
    try:
        import cdsa
    finally:
        sys.path.remove(str(PYTHON_PKG))
    assert cdsa.last_report() is None  # this test process has no libcdsa.so
    r = run_python("no_fault.py", cwd=tmp_path, env={"CDSA_TRACE": "always"})
    (trace,) = r.traces()
    assert cdsa.load_trace(trace) is None  # written at exit: no report in it
    bad = tmp_path / "bad.json"
    for text, message in (("{", "not JSON"), ('{"format": "other"}', "not a cdsa trace file"),
                          ('{"format": "cdsa-trace", "version": 3}', "cdsa trace version 3"),
                          ('{"format": "cdsa-trace", "version": 2, "stacks": [], "report": {"surfaced_stack_id": 4}}',
                           "names stack 4")):
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            cdsa.load_trace(bad)
    with pytest.raises(ValueError, match="not a regular file"):
        cdsa.load_trace(tmp_path)
    with pytest.raises(FileNotFoundError):
        cdsa.load_trace(tmp_path / "missing.json")


def test_python_api_reads_version_1_traces():
    """tests/data/trace-v1: real files of the format before stacks were stored once; cdsa report's JSON of them is
    the same report the API gives."""
    sys.path.insert(0, str(PYTHON_PKG))
    try:
        import cdsa
    finally:
        sys.path.remove(str(PYTHON_PKG))
    kernels = {"autograd": "illegal_address", "graph": "indexSelectSmallIndex",  # the node the assert names
               "native": "nll_loss_forward_reduce_cuda_kernel_2d", "nll": "nll_loss_forward_reduce_cuda_kernel_2d",
               "profile_exit": None}
    for name, kernel in kernels.items():
        f = ROOT / "tests" / "data" / "trace-v1" / f"{name}.json"
        r = cdsa.load_trace(f)
        if kernel is None:
            assert r is None  # written at exit
            continue
        assert r.kernel == kernel and r.trace_path == str(f) and (r.frames or r.native_frames), (f, r)


def test_a_reloaded_module_s_launch_shows_the_new_line(tmp_path):
    # importlib.reload frees the old version's code objects, and the allocator may hand their memory to the new ones:
    # a stack cached by code-object address would print the old line as certain (issue 26). The code-free count
    # makes a reused address's chain be read again.
    run = run_python("python_reload.py", tmp_path, cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    module = tmp_path / "reloaded_step.py"
    assert f'File "{module}", line 4, in step' in part, part
    assert "cu.launch(k, args)  # NEW-SITE" in part, part
    assert "line 2, in step" not in part, part
