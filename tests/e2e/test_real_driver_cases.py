"""End-to-end: the scenarios where the real CUDA 13 driver and runtime differ from what cdsa assumed (issue 7),
run on the simulated driver, which now behaves like the real one (tests/sim/README.md):
  * cudart 13 launches the CUkernel from cuLibraryGetKernel cast to CUfunction (cuFuncGetName rejects it);
  * cudaDeviceSynchronize is cuCtxSynchronize_v2, obtained from cuGetProcAddress_v2 at version 13000;
  * the device's assert text is printed with fprintf(stderr), by the first call on any thread that sees the fault;
  * cuStreamBeginCaptureToGraph captures into an existing graph, which rejects memory-operation nodes;
  * 64-bit stream memory operations may be missing (SIM_CUDA_NO_64BIT_MEMOPS=1: attribute 122 is 0);
  * at exit the driver may be torn down before cdsa's exit probe runs (the sim's cuDevicePrimaryCtxReset).
Tests marked PENDING pass once the shim handles the case; they are strict, so they turn red when it does."""
import pathlib

import pytest

from cdsa_report import kernel_lines
from conftest import BANNER, PROGRAMS, SANITIZED, marker_line, py_frame, run_program, run_python

HERE = pathlib.Path(__file__).resolve().parent
CASES = PROGRAMS / "e2e_driver_cases"
SOURCE = HERE / "programs" / "driver_cases.cc"
NLL = "nll_loss_forward_reduce_cuda_kernel_2d"
NLL_TEXT = "Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [2,0,0] Assertion " \
           "`t >= 0 && t < n_classes` failed."
PENDING = pytest.mark.xfail(strict=True, reason="issue 7: shim side pending")


def native_site(marker):
    line, _ = marker_line(SOURCE, marker)
    return f"driver_cases.cc:{line}"


# ---- the scenarios on the simulated driver alone: what the programs do without cdsa ------------------------------

@pytest.mark.parametrize("script,args,surface", [("cukernel_launch.py", [], "cuCtxSynchronize"),
                                                 ("sync_v2.py", [], "cuCtxSynchronize_v2"),
                                                 ("two_busy_streams.py", [], "cuCtxSynchronize"),
                                                 ("graph_replay.py", ["to-graph"], "cuStreamSynchronize")],
                         ids=["cukernel_launch", "sync_v2", "two_busy_streams", "capture_to_graph"])
def test_scenario_faults_as_the_real_driver_would(tmp_path, script, args, surface):
    bare = run_python(script, *args, cwd=tmp_path, preload=False)
    assert bare.rc == 1, bare.err
    assert bare.err.count("Assertion `") >= 1, bare.err
    assert f"CudaError: CUDA error: {surface} returned 710 CUDA_ERROR_ASSERT" in bare.err, bare.err
    # The driver prints the assert text before the call that surfaces the fault returns.
    assert bare.err.index("Assertion `") < bare.err.index("Traceback")


def test_native_scenarios_without_cdsa(tmp_path):
    for how in ("launch", "launch-ex", "get-function"):
        bare = run_program([CASES, "cukernel", how], cwd=tmp_path, preload=False)
        assert bare.rc == 1, bare.err
        assert bare.err == NLL_TEXT + "\nprogram: cuCtxSynchronize_v2 failed: CUDA_ERROR_ASSERT\n"
        ok = run_program([CASES, "cukernel", how, -100], cwd=tmp_path, preload=False)
        assert ok.rc == 0 and ok.out == "synchronize_v2: ok\n", ok.err
    bare = run_program([CASES, "capture-to-graph"], cwd=tmp_path, preload=False)
    assert bare.rc == 3 and bare.out == "first replay ok\nsynchronize_v2: 710\n", bare.err


# ---- a CUkernel launch is named ---------------------------------------------------------------------------------

def test_cukernel_launch_is_named(tmp_path):
    run = run_python("cukernel_launch.py", cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert py_frame("cukernel_launch.py", "LAUNCH-SITE", "<module>") in part, part
    assert NLL in kernel_lines(part)[0], part


@pytest.mark.parametrize("how,marker", [
    ("launch", "KERNEL-SITE"),  # the CUkernel cast to CUfunction, as cudart 13 launches: cuKernelGetName names it
    ("launch-ex", "KERNEL-EX-SITE"),
    ("get-function", "FUNCTION-SITE"),  # cuKernelGetFunction gives a CUfunction: cuFuncGetName names it
    ("module-load", "MODULE-LOAD-SITE"),  # Inductor's static launcher: cuModuleLoad + cuModuleGetFunction
])
def test_native_cukernel_paths_are_named(tmp_path, how, marker):
    run = run_program([CASES, "cukernel", how], cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert native_site(marker) in part, part
    # The driver gives the mangled name the program loaded; the report prints it demangled.
    assert f"kernel {NLL}(float*, long const*, int, int, long)" in kernel_lines(part)[0], part
    assert "_Z38" not in run.report, run.report



# ---- the report comes before the program's own error after cuCtxSynchronize_v2 ------------------------------------

def test_report_before_the_programs_error_after_sync_v2(tmp_path):
    run = run_python("sync_v2.py", cwd=tmp_path)
    assert run.reports == 1, run.err
    assert "surfaced at cuCtxSynchronize_v2" in run.report, run.report
    assert py_frame("sync_v2.py", "SURFACE-SITE", "<module>") in run.surfaced_part()
    assert run.err.index(BANNER) < run.err.index("Traceback (most recent call last)")
    assert py_frame("sync_v2.py", "LAUNCH-SITE", "<module>") in run.launch_part()


def test_native_report_before_the_programs_error_after_sync_v2(tmp_path):
    run = run_program([CASES, "cukernel", "get-function"], cwd=tmp_path)
    assert run.reports == 1, run.err
    assert "surfaced at cuCtxSynchronize_v2" in run.report, run.report
    assert run.err.index(BANNER) < run.err.index("program: cuCtxSynchronize_v2 failed")


# ---- busy streams and threads resolved to the one failing launch by the assert text ------------------------------

def resolved_by_the_assert_text(run, script, function):
    """One exact report, picked by the device's assert text, naming the script's LAUNCH-SITE line; its launch part."""
    assert run.reports == 1, run.err
    assert NLL_TEXT in run.report
    part = run.launch_part()
    assert "AMBIGUOUS" not in run.report, run.report
    assert "matches the device's assert" in part, part
    assert py_frame(script, "LAUNCH-SITE", function) in part
    return part


def test_two_busy_streams_resolved_by_the_assert_text(tmp_path):
    run = run_python("two_busy_streams.py", cwd=tmp_path)
    part = resolved_by_the_assert_text(run, "two_busy_streams.py", "<module>")
    assert "OTHER-SITE" not in part


def test_eight_busy_threads_resolved_by_the_assert_text(tmp_path):
    run = run_python("eight_threads.py", "busy", cwd=tmp_path, timeout=600)
    resolved_by_the_assert_text(run, "eight_threads.py", "worker")


# ---- capture into an existing graph: the program keeps working, the replay's fault names the capture line --------

def test_capture_to_graph_replayed_then_attributed_to_the_capture_line(tmp_path):
    run = run_python("graph_replay.py", "to-graph", cwd=tmp_path)
    assert "first replay ok" in run.out, run.err  # cdsa added no node the graph rejects
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert "graph launch (graph" in part, part
    assert py_frame("graph_replay.py", "LAUNCH-SITE", "<module>") in part
    assert "FIRST-REPLAY" not in part
    assert "kernel indexSelectSmallIndex" in part
    assert py_frame("graph_replay.py", "CAPTURE-SITE", "capture") in part


def test_native_capture_to_graph_replayed_then_attributed(tmp_path):
    run = run_program([CASES, "capture-to-graph"], cwd=tmp_path)
    assert run.out.startswith("first replay ok\n"), run.err
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert native_site("GRAPH-REPLAY-SITE") in part, part
    assert native_site("GRAPH-CAPTURE-SITE") in part, part


# ---- 64-bit stream memory operations are optional (attribute 122); 32-bit ones are not ------------------------------

@pytest.mark.parametrize("no_64bit", [
    pytest.param("1", id="without-64bit-memops"),
    pytest.param("0", id="with-64bit-memops"),
])
def test_breadcrumbs_work_with_or_without_64bit_memops(tmp_path, no_64bit):
    run = run_python("two_streams.py", cwd=tmp_path, env={"SIM_CUDA_NO_64BIT_MEMOPS": no_64bit})
    assert run.reports == 1, run.err
    assert "breadcrumb write failed" not in run.err, run.err
    assert "breadcrumbs were off" not in run.report, run.report
    assert py_frame("two_streams.py", "LAUNCH-SITE", "<module>") in run.launch_part()


@pytest.mark.parametrize("no_64bit", ["1", "0"])
def test_native_breadcrumbs_work_with_or_without_64bit_memops(tmp_path, no_64bit):
    run = run_program([CASES, "nll", 10], cwd=tmp_path, env={"SIM_CUDA_NO_64BIT_MEMOPS": no_64bit})
    assert run.reports == 1, run.err
    assert "breadcrumb write failed" not in run.err, run.err
    assert "breadcrumbs were off" not in run.report, run.report
    assert "the failing launch (the first launch on its stream whose completion never landed)" in run.report
    assert native_site("LAUNCH-SITE") in run.launch_part(), run.report


# ---- the driver torn down at exit before cdsa's probe: the breadcrumbs still name the pending launch -------------
# SIM_CUDA_TEARDOWN_AT_EXIT=1: the driver tears itself down by no entry point, so no wrapper's probe runs before it
# and the exit probe finds it torn down. Through the exported cuDevicePrimaryCtxReset instead, cdsa's wrapper asks
# the context before the teardown, which answers the fault's own code (both answers of cuCtxGetCurrent after a
# fault: its sticky error, or the context, whose streams then answer it).
UNSEEN = {"CDSA_EXIT_PROBE_MS": "300", "SIM_CUDA_TEARDOWN_AT_EXIT": "1"}


def test_native_teardown_at_exit_reports_the_pending_launch(tmp_path):
    bare = run_program([CASES, "teardown-at-exit"], cwd=tmp_path, preload=False, env=UNSEEN)
    assert bare.rc == 0 and bare.err == "", bare.err  # nothing surfaces the fault: the program exits quietly
    run = run_program([CASES, "teardown-at-exit"], cwd=tmp_path, env=UNSEEN)
    assert run.rc == 0, run.err
    assert run.reports == 1, run.err
    assert "driver was torn down" in run.report, run.report
    part = run.launch_part()
    assert "AMBIGUOUS" not in run.report, run.report
    assert native_site("LAUNCH-SITE") in part, part
    assert NLL in kernel_lines(part)[0], part


def test_teardown_at_exit_reports_the_pending_launch(tmp_path):
    run = run_python("teardown_at_exit.py", cwd=tmp_path, env=UNSEEN)
    assert run.rc == 0, run.err
    assert run.reports == 1, run.err
    assert "driver was torn down" in run.report, run.report
    assert py_frame("teardown_at_exit.py", "LAUNCH-SITE", "<module>") in run.launch_part()


@pytest.mark.parametrize("current_after_fault", ["fail", "ok"])
def test_a_seen_teardown_at_exit_reports_the_fault_with_its_code(tmp_path, current_after_fault):
    env = {"CDSA_EXIT_PROBE_MS": "300", "SIM_CUDA_CTX_CURRENT_AFTER_FAULT": current_after_fault}
    for run in (run_program([CASES, "teardown-at-exit"], cwd=tmp_path, env=env),
                run_python("teardown_at_exit.py", cwd=tmp_path, env=env)):
        assert run.rc == 0, run.err
        assert run.reports == 1, run.err
        assert "CUDA error 710" in run.report and "surfaced at the context's teardown" in run.report, run.report
        assert "AMBIGUOUS" not in run.report, run.report
        assert NLL in kernel_lines(run.launch_part())[0], run.report


def test_no_report_at_teardown_without_a_fault(tmp_path):
    run = run_program([CASES, "teardown-at-exit-ok"], cwd=tmp_path, env={"CDSA_EXIT_PROBE_MS": "300"})
    assert run.rc == 0, run.err
    assert run.reports == 0, run.err


# ---- an unloaded module's handle comes back for another kernel --------------------------------------------------

def check_reused_handle_named(run, site):
    # fill_f32 ran from the first module, whose handle cdsa named; the module was unloaded and the allocator gave the
    # same address to the new module's nll kernel, which faults. A name kept by handle would say fill_f32.
    assert run.reports == 1, run.err
    if not SANITIZED:  # ASan's quarantine keeps freed memory from coming back at once
        assert "handle reused: yes" in run.out, run.out
    part = run.launch_part()
    assert f"kernel {NLL}" in kernel_lines(part)[0], part
    assert site in part, part
    assert "fill_f32" not in run.report, run.report
    assert "AMBIGUOUS" not in run.report, run.report


@pytest.mark.parametrize("how", ["module", "library"])
def test_a_reused_handle_is_named_by_its_new_kernel(tmp_path, how):
    run = run_program([CASES, "module-reload", how], cwd=tmp_path)
    assert run.rc == 3, run.err
    check_reused_handle_named(run, native_site("RELOAD-SITE"))


@pytest.mark.parametrize("how", ["module", "library"])
def test_a_reused_handle_is_named_by_its_new_kernel_from_python(tmp_path, how):
    run = run_python("module_reload.py", how, cwd=tmp_path)
    assert run.rc == 1, run.err
    check_reused_handle_named(run, py_frame("module_reload.py", "LAUNCH-SITE", "<module>"))
