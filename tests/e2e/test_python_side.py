"""What cdsa adds to the program's own Python (python/cdsa/_hook.py, run by libcdsa.so): the note that ends the
program's traceback, and the rank and GPU in the report's header (docs/python.md, docs/launchers.md)."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, SCRIPTS, Run, clean_env, marker_line, run_cli, run_python

PYTHON_PKG = ROOT / "python"  # the cdsa package's sources (the wheel's tests use the installed one)

NOTE = re.compile(r"^cdsa(\[rank \d+\])?: the CUDA fault.*$", re.M)


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
    tb = last_traceback(r.err)
    assert tb.rstrip().endswith("KeyError: 'unrelated'"), tb
    assert "cdsa" not in tb


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
    p = run_cli("run", "--", sys.executable, SCRIPTS / "traceback_note.py", mode, cwd=tmp_path,
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
