"""End-to-end: CDSA_BACKEND=cupti on the simulated driver. There is no real CUPTI here: a fake libcupti
(tests/unit/cupti_tracer/fake_cupti.c, built as <build>/tests/fake_cuda_home/lib64/libcupti.so.13 and found
through CUDA_HOME) reports the subscriber slot taken, fails, or accepts the subscription and lets the test play
CUPTI's part. Whatever CUPTI does, the process keeps its attribution, with one line saying why."""
import pathlib
import textwrap

import pytest

from conftest import BUILD, SCRIPTS, py_frame, run_python

FAKE_HOME = BUILD / "tests" / "fake_cuda_home"
NLL_KERNEL = "nll_loss_forward_reduce_cuda_kernel_2d"


def built_without_cupti_headers():
    cache = BUILD / "CMakeCache.txt"
    return cache.exists() and "CDSA_HAVE_CUPTI:INTERNAL=OFF" in cache.read_text()


@pytest.fixture(autouse=True)
def _fake_built():
    if built_without_cupti_headers():
        pytest.skip("this build has no CUPTI headers: the backend is a stub (cupti_tracer/stub.cc)")
    assert (FAKE_HOME / "lib64" / "libcupti.so.13").exists(), "fake libcupti missing: build first"


def cdsa_lines(err):
    return [l for l in err.splitlines() if l.startswith("cdsa: CDSA_BACKEND=cupti")]


def assert_attributed(run):
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert f"kernel {NLL_KERNEL}" in part, part
    assert py_frame("nll_loss.py", "LAUNCH-SITE", "compute_loss") in part, part


@pytest.mark.parametrize("holder", [None, "CUPTI for Nsight Systems"])
def test_slot_taken_falls_back_to_interposition(tmp_path, holder):
    env = {"CDSA_BACKEND": "cupti", "CUDA_HOME": str(FAKE_HOME), "FAKE_CUPTI_MODE": "multiple"}
    if holder:
        env["FAKE_CUPTI_HOLDER"] = holder
    run = run_python("nll_loss.py", 10, cwd=tmp_path, env=env)
    assert "fake-cupti: cuptiSubscribe_v2 name=cdsa" in run.err, run.err  # the fake was the one asked
    lines = cdsa_lines(run.err)
    assert len(lines) == 1, run.err
    assert "the one CUPTI subscriber slot is taken" in lines[0]
    if holder:
        assert f"taken by {holder} (" in lines[0], lines[0]
    else:
        assert "taken (" in lines[0], lines[0]
    assert "recording launches through driver interposition instead" in lines[0]
    assert "cuptiEnableDomain" not in run.err
    assert_attributed(run)


def test_cupti_error_falls_back_to_interposition(tmp_path):
    env = {"CDSA_BACKEND": "cupti", "CUDA_HOME": str(FAKE_HOME), "FAKE_CUPTI_MODE": "error"}
    run = run_python("nll_loss.py", -1, cwd=tmp_path, env=env)
    lines = cdsa_lines(run.err)
    assert len(lines) == 1, run.err
    assert "cuptiSubscribe failed: CUPTI_ERROR_NOT_INITIALIZED (fake) (15," in lines[0], lines[0]
    assert "recording launches through driver interposition instead" in lines[0]
    assert_attributed(run)


def test_no_libcupti_reachable_falls_back_with_one_message(tmp_path):
    # CUDA_HOME pins the toolkit: the machine's own libcupti (ld.so.cache) is not looked for.
    env = {"CDSA_BACKEND": "cupti", "CUDA_HOME": str(tmp_path / "no-toolkit-here")}
    run = run_python("nll_loss.py", 10, cwd=tmp_path, env=env)
    lines = cdsa_lines(run.err)
    assert len(lines) == 1, run.err
    assert "libcupti not found (searched: " in lines[0], lines[0]
    assert "recording launches through driver interposition instead" in lines[0]
    assert "fake-cupti" not in run.err
    assert_attributed(run)


def test_default_backend_never_loads_libcupti(tmp_path):
    run = run_python("nll_loss.py", 10, cwd=tmp_path, env={"CUDA_HOME": str(FAKE_HOME)})
    assert "fake-cupti" not in run.err
    assert not cdsa_lines(run.err)
    assert_attributed(run)


def test_unknown_backend_value_is_one_message(tmp_path):
    run = run_python("nll_loss.py", 10, cwd=tmp_path, env={"CDSA_BACKEND": "nvtx", "CUDA_HOME": str(FAKE_HOME)})
    assert run.err.count("CDSA_BACKEND=nvtx: expected driver or cupti; using driver") == 1, run.err
    assert "fake-cupti" not in run.err
    assert_attributed(run)


# The fake accepts the subscription and exports a cuLaunchKernel that calls the driver's between CUPTI's enter and
# exit callbacks, as CUPTI does inside the driver; the script launches through it (dlsym: libcdsa.so's wrapper
# is bound to it, so the order is wrapper -> enter -> driver -> exit -> wrapper). Each launch must be recorded once.
CUPTI_SCRIPT = textwrap.dedent('''
    import ctypes, sys
    sys.path.insert(0, {scripts!r})
    import simcuda as cu

    fake = ctypes.CDLL({fake!r})

    def launch(f, args, grid):
        holders = list(args)
        params = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in holders])
        code = fake.cuLaunchKernel(f, grid, 1, 1, 32, 1, 1, 0, None, params, None)  # LAUNCH-SITE
        cu.check("cuLaunchKernel", code)

    ctx, mod = cu.init()
    nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
    out = cu.alloc(4)
    good = cu.to_device([3, 7, 1, 1], ctypes.c_int64)
    bad = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
    launch(nll, cu.nll_args(out, good, 4, 10), 1)
    launch(nll, cu.nll_args(out, good, 4, 10), 2)
    launch(nll, cu.nll_args(out, bad, 4, 10), 3)  # the last: a later launch could meet the fault already
    print("launched", flush=True)
    print(cu.from_device(out, 1, ctypes.c_float))
''')


def cupti_run(tmp_path, miss=""):
    script = tmp_path / "cupti_launch.py"
    script.write_text(CUPTI_SCRIPT.format(scripts=str(SCRIPTS), fake=str(FAKE_HOME / "lib64" / "libcupti.so.13")))
    env = {"CDSA_BACKEND": "cupti", "CUDA_HOME": str(FAKE_HOME), "FAKE_CUPTI_MODE": "ok", "FAKE_CUPTI_MISS": miss}
    run = run_python(script, cwd=tmp_path, env=env)
    n = next(i for i, l in enumerate(script.read_text().splitlines(), 1) if "# LAUNCH-SITE" in l)
    return run, f'File "{script}", line {n}, in launch'


def test_cupti_callbacks_feed_the_recorder_once(tmp_path):
    run, site = cupti_run(tmp_path)
    assert "fake-cupti: cuptiEnableDomain(1, domain 1)" in run.err, run.err
    assert not cdsa_lines(run.err), run.err  # the backend started and saw every launch: no line at all
    assert "launched" in run.out
    assert run.reports == 1, run.err
    part = run.launch_part()
    # (The wrapper named the kernel before the call, through cuFuncGetName: CUPTI's symbolName is not needed.)
    assert f"kernel {NLL_KERNEL}  grid (3,1,1) block (32,1,1)" in part, part
    assert "launch #3 (#3 on its stream)" in part, part
    assert site in part, part
    launches = run.trace()["launches"]
    # Three launches, each recorded once (from the callback), with the grid CUPTI reported.
    assert [l["grid"][0] for l in launches] == [1, 2, 3], launches


def test_a_launch_cupti_misses_is_recorded_by_the_wrapper(tmp_path):
    # CUPTI misses launch 1 and the failing launch 3: the wrapper records them, one line says so.
    run, site = cupti_run(tmp_path, miss="1,3")
    lines = cdsa_lines(run.err)
    assert len(lines) == 1 and "CUPTI did not report a launch that the driver interposition saw" in lines[0], run.err
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert f"kernel {NLL_KERNEL}  grid (3,1,1)" in part, part
    assert "launch #3 (#3 on its stream)" in part, part
    assert site in part, part
    assert [l["grid"][0] for l in run.trace()["launches"]] == [1, 2, 3]


# CUDA_INJECTION64_PATH: the driver dlopens libcdsa.so and calls InitializeInjection() inside cuInit. The simulated
# driver does not, so the script plays the driver's part: libcdsa.so is loaded with ctypes (RTLD_LOCAL, not
# preloaded: no interposition at all) and InitializeInjection is called after cuInit.
INJECTION_SCRIPT = textwrap.dedent('''
    import ctypes, sys
    sys.path.insert(0, {scripts!r})
    import simcuda as cu

    ctx, mod = cu.init()
    cdsa = ctypes.CDLL({libcdsa!r})
    print("InitializeInjection", cdsa.InitializeInjection(), flush=True)
    fake = ctypes.CDLL({fake!r})

    class LaunchParams(ctypes.Structure):
        _fields_ = [("f", ctypes.c_void_p)] + [(n, ctypes.c_uint) for n in
                    ("gx", "gy", "gz", "bx", "by", "bz", "shmem")] + [
                    ("stream", ctypes.c_void_p), ("params", ctypes.c_void_p), ("extra", ctypes.c_void_p)]

    def launch_seen_by_cupti(f, args):
        p = LaunchParams(f.value, 1, 1, 1, 32, 1, 1, 0, None, None, None)
        fake.fake_cupti_emit(307, 0, b"cuLaunchKernel", b"nll_from_cupti", ctypes.byref(p), 0)
        cu.launch(f, args)
        fake.fake_cupti_emit(307, 1, b"cuLaunchKernel", b"nll_from_cupti", ctypes.byref(p), 0)  # INJECTED-SITE

    nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
    out = cu.alloc(4)
    launch_seen_by_cupti(nll, cu.nll_args(out, cu.to_device([3, 7, 1, 1], ctypes.c_int64), 4, 10))
    launch_seen_by_cupti(nll, cu.nll_args(out, cu.to_device([3, 7, 10, 1], ctypes.c_int64), 4, 10))
    try:
        cu.from_device(out, 1, ctypes.c_float)
    except cu.CudaError as e:
        # CUPTI reports the API exit of the call that surfaced the fault, with its return value.
        fake.fake_cupti_emit(8, 1, b"cuMemcpyDtoH_v2", None, None, e.code)
        print("surfaced", e.code, flush=True)
''')


# libcdsa.so uses initial-exec TLS on its launch path (DF_STATIC_TLS); it keeps that block under the 512 bytes
# glibc reserves for libraries dlopen'ed after start-up, so loading it without LD_PRELOAD -- as the driver does
# for CUDA_INJECTION64_PATH -- needs no tunable (docs/backends.md).
INJECTION_TLS = {}


def injection_script(tmp_path):
    script = tmp_path / "injected.py"
    script.write_text(INJECTION_SCRIPT.format(scripts=str(SCRIPTS), libcdsa=str(BUILD / "lib" / "libcdsa.so"),
                                              fake=str(FAKE_HOME / "lib64" / "libcupti.so.13")))
    return script


def test_injection_alone_records_and_reports_through_cupti(tmp_path):
    script = injection_script(tmp_path)
    # Default backend: InitializeInjection starts CUPTI by itself.
    run = run_python(script, cwd=tmp_path, preload=False, env={"CUDA_HOME": str(FAKE_HOME), "FAKE_CUPTI_MODE": "ok", **INJECTION_TLS})
    assert "InitializeInjection 1" in run.out, run.out + run.err
    assert "fake-cupti: cuptiEnableDomain(1, domain 1)" in run.err, run.err
    assert not cdsa_lines(run.err), run.err
    assert "surfaced 710" in run.out
    assert run.reports == 1, run.err
    assert "surfaced at cuMemcpyDtoH_v2" in run.report
    part = run.launch_part()
    # Named from CUPTI's symbolName, copied at API enter (the fake's string is gone by the report).
    assert "kernel nll_from_cupti  grid (1,1,1) block (32,1,1)" in part, part
    assert "launch #2 (#2 on its stream)" in part, part
    n = next(i for i, l in enumerate(script.read_text().splitlines(), 1) if "# INJECTED-SITE" in l)
    assert f'File "{script}", line {n}, in launch_seen_by_cupti' in part, part


def test_injection_alone_with_the_slot_taken_says_nothing_is_recorded(tmp_path):
    script = injection_script(tmp_path)
    run = run_python(script, cwd=tmp_path, preload=False,
                     env={"CUDA_HOME": str(FAKE_HOME), "FAKE_CUPTI_MODE": "multiple", "FAKE_CUPTI_HOLDER": "ncu",
                          **INJECTION_TLS})
    lines = cdsa_lines(run.err)
    assert len(lines) == 1, run.err
    assert "slot is taken by ncu (" in lines[0]
    assert "libcdsa.so is not preloaded (LD_PRELOAD), so no launch is recorded" in lines[0], lines[0]
    assert run.reports == 0, run.err


# Issue 26 item 2: the CUPTI backend alone (injected, no interposition) placed no mark at all (its launch callbacks
# left every mark deferred for an operation it never sees): nll good, a synchronous copy, 100 fill, nll bad gave
# "AMBIGUOUS: 64 launches", #1-#64, worded as PDL groups, and the failing #102 not listed. Now each launch's mark
# goes out at its API exit (a stream that carries no PDL launch), so the failing launch is named.
CUPTI_ALONE_SCRIPT = textwrap.dedent('''
    import ctypes, sys
    sys.path.insert(0, {scripts!r})
    import simcuda as cu

    ctx, mod = cu.init()
    cdsa = ctypes.CDLL({libcdsa!r})
    print("InitializeInjection", cdsa.InitializeInjection(), flush=True)
    fake = ctypes.CDLL({fake!r})

    class LaunchParams(ctypes.Structure):
        _fields_ = [("f", ctypes.c_void_p)] + [(n, ctypes.c_uint) for n in
                    ("gx", "gy", "gz", "bx", "by", "bz", "shmem")] + [
                    ("stream", ctypes.c_void_p), ("params", ctypes.c_void_p), ("extra", ctypes.c_void_p)]

    def launch_seen_by_cupti(f, name, args):
        p = LaunchParams(f.value, 1, 1, 1, 32, 1, 1, 0, None, None, None)
        fake.fake_cupti_emit(307, 0, b"cuLaunchKernel", name, ctypes.byref(p), 0)
        cu.launch(f, args)
        fake.fake_cupti_emit(307, 1, b"cuLaunchKernel", name, ctypes.byref(p), 0)  # ALONE-SITE

    nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
    fill = cu.function(mod, "fill_f32")
    out, buf = cu.alloc(4), cu.alloc(64)
    launch_seen_by_cupti(nll, b"nll_from_cupti", cu.nll_args(out, cu.to_device([3, 7, 1, 1], ctypes.c_int64), 4, 10))
    print("loss", cu.from_device(out, 1, ctypes.c_float)[0], flush=True)  # a synchronous copy
    for i in range(100):
        launch_seen_by_cupti(fill, b"fill_from_cupti", [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(i)])
    launch_seen_by_cupti(nll, b"nll_from_cupti", cu.nll_args(out, cu.to_device([3, 7, 10, 1], ctypes.c_int64), 4, 10))
    try:
        cu.from_device(out, 1, ctypes.c_float)
    except cu.CudaError as e:
        fake.fake_cupti_emit(8, 1, b"cuMemcpyDtoH_v2", None, None, e.code)
        print("surfaced", e.code, flush=True)
''')


def test_the_cupti_backend_alone_places_marks(tmp_path):
    script = tmp_path / "cupti_alone.py"
    script.write_text(CUPTI_ALONE_SCRIPT.format(scripts=str(SCRIPTS), libcdsa=str(BUILD / "lib" / "libcdsa.so"),
                                                fake=str(FAKE_HOME / "lib64" / "libcupti.so.13")))
    run = run_python(script, cwd=tmp_path, preload=False, env={"CUDA_HOME": str(FAKE_HOME), "FAKE_CUPTI_MODE": "ok"})
    assert "surfaced 710" in run.out, run.out + run.err
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert "launch #102 (#102 on its stream)" in part, run.report
    assert "programmatic dependent" not in run.report, run.report  # no PDL in this program
    t = run.trace()["report"]
    assert t["attribution"] == "exact", run.report
    assert [c["launch"]["seq"] for c in t["candidates"]] == [102]


REAL_CUPTI_HOME = pathlib.Path("/usr/local/cuda")


@pytest.mark.skipif(not (REAL_CUPTI_HOME / "lib64" / "libcupti.so.13").exists(), reason="no real libcupti here")
def test_real_libcupti_on_the_simulated_driver_falls_back(tmp_path):
    # The toolkit's own libcupti, loaded and asked for real: against the simulated driver it cannot subscribe
    # (seen: CUPTI_ERROR_UNKNOWN), and the process keeps its attribution with one line naming the library.
    run = run_python("nll_loss.py", 10, cwd=tmp_path, env={"CDSA_BACKEND": "cupti", "CUDA_HOME": str(REAL_CUPTI_HOME)})
    lines = cdsa_lines(run.err)
    assert len(lines) == 1, run.err
    assert "cuptiSubscribe failed: " in lines[0] and str(REAL_CUPTI_HOME / "lib64" / "libcupti.so.13") in lines[0], lines[0]
    assert lines[0].endswith("recording launches through driver interposition instead"), lines[0]
    assert_attributed(run)


# CUPTI alone (injected): a fault no call surfaces, then the program tears its context down (cudaDeviceReset,
# cuDevicePrimaryCtxReset). No wrapper sees the reset, so before CUPTI's enter callback of it ran the teardown
# probe the fault was found only at exit, in a driver already torn down: error 709 and no code of the fault's own,
# so a copy or memop cdsa cannot see might have been it, and the report was AMBIGUOUS. Probed at the callback, the
# context answers 710 while it still can, and the launch is named.
CUPTI_ALONE_RESET_SCRIPT = CUPTI_ALONE_SCRIPT.split("nll = cu.function")[0] + textwrap.dedent('''
    nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
    out = cu.alloc(4)
    launch_seen_by_cupti(nll, b"nll_from_cupti", cu.nll_args(out, cu.to_device([3, 7, 1, 1], ctypes.c_int64), 4, 10))
    print("loss", cu.from_device(out, 1, ctypes.c_float)[0], flush=True)  # a synchronous copy
    launch_seen_by_cupti(nll, b"nll_from_cupti", cu.nll_args(out, cu.to_device([3, 7, 10, 1], ctypes.c_int64), 4, 10))
    dev = ctypes.c_int(0)
    fake.fake_cupti_emit(545, 0, b"cuDevicePrimaryCtxReset_v2", None, ctypes.byref(dev), 0)
    r = cu.lib.cuDevicePrimaryCtxReset_v2(dev)
    fake.fake_cupti_emit(545, 1, b"cuDevicePrimaryCtxReset_v2", None, ctypes.byref(dev), r)
    print("reset", r, flush=True)
''')


# Both answers of cuCtxGetCurrent after a fault (tests/sim/README.md): the sticky error (the probe's first call meets
# the fault) or the context (the probe's stream queries meet it).
@pytest.mark.parametrize("current_after_fault", ["fail", "ok"])
def test_the_cupti_backend_alone_probes_before_a_teardown(tmp_path, current_after_fault):
    script = tmp_path / "cupti_alone_reset.py"
    script.write_text(CUPTI_ALONE_RESET_SCRIPT.format(scripts=str(SCRIPTS), libcdsa=str(BUILD / "lib" / "libcdsa.so"),
                                                      fake=str(FAKE_HOME / "lib64" / "libcupti.so.13")))
    run = run_python(script, cwd=tmp_path, preload=False, env={"CUDA_HOME": str(FAKE_HOME), "FAKE_CUPTI_MODE": "ok",
                                                               "SIM_CUDA_CTX_CURRENT_AFTER_FAULT": current_after_fault})
    assert "reset " in run.out, run.out + run.err
    assert run.reports == 1, run.err
    assert "CUDA error 710" in run.report, run.report
    assert "surfaced at the context's teardown" in run.report, run.report
    part = run.launch_part()
    assert "launch #2 (#2 on its stream)" in part, run.report
    t = run.trace()["report"]
    assert t["attribution"] == "exact", run.report
    assert [c["launch"]["seq"] for c in t["candidates"]] == [2]
