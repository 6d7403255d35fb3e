"""Entry points asked for at a version newer than the headers cdsa was built from (issue 27's ceiling): the driver
is asked again at the headers' version, and only the same function back gets the wrapper of that version's
prototype; anything else goes back through a pass-through thunk, which leaves every argument as it was and, once
called for work, keeps every verdict from being exact. Over the simulated driver at version 13990, whose
cuLaunchKernel there takes one more argument (tests/sim/README.md)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, LIBCDSA, PROGRAMS, SCRIPTS, SIMDIR, clean_env, marker_line, run_program, run_python
from entry_point_oracle import CUDA, HEADER_VERSION

VERSIONS = PROGRAMS / "e2e_entry_versions"
NAMES = PROGRAMS / "e2e_driver_names"
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
    assert header_version_text(run) == f"CUDA {HEADER_VERSION // 1000}.{HEADER_VERSION % 1000 // 10}", run.report
    assert "no launch can be named as certain" in run.report
    assert run.trace()["cdsa"]["cuda_headers"] == HEADER_VERSION  # the trace records the headers' version


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


# ---- CUDA 13.1's two ABI changes (issue 27): cuLaunchHostFunc_v2's 4th argument, the multicast binds' CUdevice --
def sim_driver_version():
    # Asked in a child with the test environment: in a sanitizer build the sim needs its runtime preloaded first,
    # which this pytest process does not have.
    code = ("import ctypes, sys; v = ctypes.c_int(); "
            "ctypes.CDLL(sys.argv[1]).cuDriverGetVersion(ctypes.byref(v)); print(v.value)")
    out = subprocess.run([sys.executable, "-c", code, str(SIMDIR / "libcuda.so.1")], env=clean_env(preload=False),
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return int(out.split()[-1])


def abi_line(case, version):
    """What entry_versions.c and abi_entry_points.py print when every argument arrived where it belongs."""
    if case == "hostfunc" and version >= 13010:  # the sim refuses syncMode 7 (cuda.h defines 0 and 1)
        return (f"cuLaunchHostFunc@{version}: syncMode 1 -> 0, ran 1; syncMode 0 -> 0, ran 2; "
                "syncMode 7 -> 1, ran 2;")
    if case == "hostfunc":
        return f"cuLaunchHostFunc@{version}: 3 arguments -> 0, ran 1;"
    return f"cuMulticastBindMem@{version} -> 0, unbind -> 0; cuMulticastBindAddr@{version} -> 0, unbind -> 0"


ABI_CASES = [("hostfunc", 13010), ("hostfunc", 13020), ("hostfunc", 13000), ("multicast", 13010),
             ("multicast", 13000)]


@pytest.mark.parametrize("case,version", ABI_CASES, ids=[f"{c}-{v}" for c, v in ABI_CASES])
def test_the_13_1_abi_changes_reach_the_driver_unshifted_from_c_and_python(tmp_path, case, version):
    """cuLaunchHostFunc at 13010/13020 (cuda-bindings 13.5 asks 13020) is cuLaunchHostFunc_v2: its syncMode arrives;
    the multicast binds at 13010 take a CUdevice second: the unbind names what the bind got. With and without
    cdsa, from C and from Python; with headers of 13.1+ through the wrapper of the 13010 typedef, with older ones
    through the ceiling's thunk."""
    if sim_driver_version() < 13010:
        pytest.skip("the simulated driver is older than CUDA 13.1 (CDSA_SIM_HEADERS)")
    want = abi_line(case, version)
    log, pylog = tmp_path / "c.log", tmp_path / "py.log"
    bare = run_program([VERSIONS, case, version], cwd=tmp_path, preload=False)
    run = run_program([VERSIONS, case, version], cwd=tmp_path, env={"CDSA_DEBUG_ENTRY_POINTS": str(log)})
    py_bare = run_python("abi_entry_points.py", case, version, cwd=tmp_path, preload=False)
    py = run_python("abi_entry_points.py", case, version, cwd=tmp_path, env={"CDSA_DEBUG_ENTRY_POINTS": str(pylog)})
    for r in (bare, run, py_bare, py):
        assert r.rc == 0 and r.out.strip() == want, r.out + r.err
    names = ["cuLaunchHostFunc"] if case == "hostfunc" else ["cuMulticastBindMem", "cuMulticastBindAddr"]
    for got in (requests(log), requests(pylog)):
        for name in names:
            if version < 13010:
                assert got[(name, version)][1] == "wrapped", got[(name, version)]
            elif HEADER_VERSION >= 13010:
                assert got[(name, version)] == (f"PFN_{name}_v13010", "wrapped"), got[(name, version)]
            else:  # a table of older headers: the driver's 13010 function is not its 13000 one
                assert got[(name, version)] == ("unknown", "thunk"), got[(name, version)]


NEW_NAMES = ["cuLaunchHostFunc", "cuLaunchHostFunc_v2", "cuLaunchHostFunc_v2_ptsz", "cuMulticastBindMem_v2",
             "cuGraphAddNode_v3"]


@pytest.mark.parametrize("driver", ["sim-stub", "sim"])
def test_dlsym_of_a_name_the_loaded_driver_lacks_is_null_as_without_cdsa(tmp_path, driver):
    """libcdsa.so exports a wrapper of every name its headers declare (cuLaunchHostFunc_v2 with 13.5's); over a
    driver without the name (build/lib/sim-stub: the sim as the 13.0 stub's driver) dlsym still answers NULL, on
    the driver's handle and with RTLD_DEFAULT, as without cdsa: never a wrapper with nothing behind it."""
    lib = BUILD / "lib" / driver / "libcuda.so.1"
    bare = run_program([NAMES, lib, *NEW_NAMES], cwd=tmp_path, preload=False)
    run = run_program([NAMES, lib, *NEW_NAMES], cwd=tmp_path)
    assert bare.rc == 0 and run.rc == 0, run.out + run.err
    assert run.out == bare.out
    lines = dict(l.split(": ", 1) for l in run.out.splitlines())
    assert lines["cuLaunchHostFunc"] == "handle found, default NULL"  # RTLD_LOCAL: not in the global scope
    if driver == "sim-stub":
        for name in NEW_NAMES[1:]:
            assert lines[name] == "handle NULL, default NULL", run.out
        exports = subprocess.run(["nm", "-D", "--defined-only", str(LIBCDSA)], capture_output=True, text=True).stdout
        if HEADER_VERSION >= 13040:
            for name in ("cuLaunchHostFunc_v2", "cuGraphAddNode_v3"):
                assert re.search(rf" T {name}(@@CDSA)?$", exports, re.M), name
    elif sim_driver_version() >= 13040:
        for name in NEW_NAMES[1:]:
            assert lines[name] == "handle found, default NULL", run.out


@pytest.mark.parametrize("driver", ["sim", "sim-stub"])
def test_cdsa_doctor_names_the_header_version_beside_the_drivers(tmp_path, driver):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDSA_")}
    env["LD_LIBRARY_PATH"] = str(BUILD / "lib" / driver)
    p = subprocess.run([str(BUILD / "bin" / "cdsa"), "doctor"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    major, minor = HEADER_VERSION // 1000, HEADER_VERSION % 1000 // 10
    if driver == "sim-stub":  # the toolkit's version (tests/sim/CMakeLists.txt: CDSA_SIM_STUB_VERSION)
        v = int(re.search(r"#define CUDA_VERSION (\d+)", open(os.path.join(CUDA, "include", "cuda.h")).read())[1])
    else:
        v = sim_driver_version()
    drv = f"{v // 1000}.{v % 1000 // 10}"
    assert f"cdsa was built from CUDA {major}.{minor} headers; the driver is CUDA {drv}" in p.stdout, p.stdout
