"""Entry points asked for at a version newer than the headers cdsa was built from (issue 27's ceiling): the driver
is asked again at the headers' version, and only the same function back gets the wrapper of that version's
prototype; anything else goes back through a pass-through thunk, which leaves every argument as it was and, once
called for work, keeps every verdict from being exact. Over the simulated driver at version 13990, whose
cuLaunchKernel there takes one more argument (tests/sim/README.md)."""
import re

from conftest import PROGRAMS, SCRIPTS, marker_line, run_program, run_python

VERSIONS = PROGRAMS / "e2e_entry_versions"
FUTURE = {"SIM_CUDA_DRIVER_VERSION": "13990"}


def requests(path):
    """The CDSA_DEBUG_ENTRY_POINTS lines as {(name, version): (selected, outcome)}."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"cuGetProcAddress (\S+) (\d+) \d+ -> (\S+) (\S+)", line)
        if m:
            out[(m.group(1), int(m.group(2)))] = (m.group(3), m.group(4))
    return out


def header_version_text(run):
    m = re.search(r"cdsa was built from (CUDA \d+\.\d+) headers", run.report)
    return m.group(1) if m else ""


def test_a_launch_through_a_newer_entry_point_keeps_its_arguments_and_makes_no_verdict_exact(tmp_path):
    log = tmp_path / "requests.log"
    bare = run_program([VERSIONS, "future", "called"], cwd=tmp_path, env=FUTURE, preload=False)
    run = run_program([VERSIONS, "future", "called"], cwd=tmp_path,
                      env={**FUTURE, "CDSA_DEBUG_ENTRY_POINTS": str(log)})
    # The extra argument reached the driver unmoved (the sim refuses the launch otherwise), with and without cdsa.
    assert bare.rc == 3 and run.rc == 3, run.out + run.err
    assert "synchronize: 710" in run.out
    got = requests(log)
    assert got[("cuLaunchKernel", 13990)] == ("unknown", "thunk"), got
    # cuCtxSynchronize at 13990 is the driver's 13000 function: wrapped, so the fault surfaces at that call.
    assert got[("cuCtxSynchronize", 13990)] == ("PFN_cuCtxSynchronize_v13000", "wrapped"), got
    assert run.reports == 1 and run.surfaced_at() == "cuCtxSynchronize_v2", run.err
    # The one launch cdsa recorded (the good one) is not named: its mark landed, and the bad launch it never saw
    # would make its candidacy no proof anyway.
    assert "cdsa: the failing launch (" not in run.report, run.report
    assert "cuLaunchKernel (asked for at 13990)" in run.report, run.report
    assert header_version_text(run).startswith("CUDA 13."), run.report
    assert "no launch can be named as certain" in run.report


def test_a_newer_entry_point_asked_for_but_never_called_changes_nothing(tmp_path):
    run = run_program([VERSIONS, "future", "uncalled"], cwd=tmp_path, env=FUTURE)
    assert run.rc == 3, run.out + run.err
    assert "cdsa: the failing launch" in run.report, run.report
    assert "launch #2 (#2 on its stream)" in run.kernel_line(), run.report
    assert "asked for at" not in run.report


def test_a_request_above_the_drivers_version_gets_the_drivers_answer(tmp_path):
    bare = run_program([VERSIONS, "refused"], cwd=tmp_path, preload=False)
    run = run_program([VERSIONS, "refused"], cwd=tmp_path)
    assert bare.rc == 0 and run.rc == 0, run.err
    assert "cuGetProcAddress(cuLaunchKernel, 13990): 1 NULL" in bare.out  # cuda.h: CUDA_ERROR_INVALID_VALUE
    assert run.out == bare.out


def test_from_python_the_thunk_passes_every_argument_and_the_verdict_names_the_entry_point(tmp_path):
    called = run_python("future_entry_point.py", "called", cwd=tmp_path, env=FUTURE)
    assert called.rc == 1 and "CUDA error: cuCtxSynchronize_v2 returned 710" in called.err, called.err
    assert "cdsa: the failing launch (" not in called.report
    assert "cuLaunchKernel (asked for at 13990)" in called.report, called.report
    (tmp_path / "uncalled").mkdir()
    uncalled = run_python("future_entry_point.py", "uncalled", cwd=tmp_path / "uncalled", env=FUTURE)
    assert uncalled.rc == 1, uncalled.err
    assert "cdsa: the failing launch" in uncalled.report, uncalled.report
    n, _ = marker_line(SCRIPTS / "future_entry_point.py", "PLAIN LAUNCH")
    assert f'future_entry_point.py", line {n}' in uncalled.launch_part(), uncalled.report
