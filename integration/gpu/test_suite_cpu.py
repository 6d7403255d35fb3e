"""CPU-side checks of the GPU suite (integration/gpu), run in CI where there is no GPU: the scripts parse and
compile, the case list covers issue 3's 21 cases (1, 11 and 14 under both backends), the report checks accept a
report of the real format and reject a wrong one, and the native cases build with nvcc when it is installed."""
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SUITE = HERE / "suite.py"


def load_suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", SUITE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("script", ["run.sh", "prepare_carry.sh"])
def test_shell_scripts_parse(script):
    p = subprocess.run(["bash", "-n", str(HERE / script)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_python_files_compile():
    files = [SUITE, *sorted((HERE / "cases").glob("*.py"))]
    assert len(files) >= 15
    for f in files:
        p = subprocess.run([sys.executable, "-m", "py_compile", str(f)], capture_output=True, text=True)
        assert p.returncode == 0, f"{f}: {p.stderr}"


def test_list_has_the_21_cases_and_both_backends():
    p = subprocess.run(["bash", str(HERE / "run.sh"), "--list"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = [l.split() for l in p.stdout.splitlines() if re.match(r"^\s*\d+\s", l)]
    assert sorted({int(r[0]) for r in rows}) == list(range(1, 22))
    keys = {r[1] for r in rows}
    for k in ("1/cupti", "11a/cupti", "11b/cupti", "14/cupti"):
        assert k in keys, k
    assert p.stdout.strip().splitlines()[-1].startswith("21 cases")


def test_dry_run_self_check_passes():
    p = subprocess.run([sys.executable, str(SUITE), "--dry-run"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "suite self-check: OK" in p.stdout
    assert p.stdout.count("would run") == len(load_suite().all_cases())


def test_run_sh_needs_a_logdir():
    p = subprocess.run(["bash", str(HERE / "run.sh")], capture_output=True, text=True)
    assert p.returncode == 2 and "usage" in p.stderr


def fake_run(suite, err, out="", rc=1):
    return suite.Run(["x"], rc, out, err, 0.1, False, pathlib.Path("/nonexistent"))


def report_text(suite, script, marker, kernel="void at::native::nll_loss_forward_reduce_cuda_kernel_2d<float, long>(float*)"):
    n, text = suite.marker_line(suite.CASES / script, marker)
    return f"""Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [2,0,0] Assertion failed.

==================== cdsa: asynchronous CUDA fault ====================
cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered
cdsa: surfaced at cuMemcpyDtoH_v2 (thread 7), called from (most recent call last):
    File "{suite.CASES / script}", line {n + 2}, in <module>
      print("loss", loss.item())
cdsa: the failing launch (the first launch on its stream whose completion never landed):
  kernel {kernel}  grid (1,1,1) block (32,1,1) shared 0 B  stream 1  launch #3 (#3 on its stream)  thread 7
  Launched from (most recent call last):
    File "{suite.CASES / script}", line {n}, in <module>
      {text}
    at::native::nll_loss_forward (libtorch_cuda.so+0x1234)
cdsa: trace written to cdsa-h-1.json
=======================================================================
Traceback (most recent call last):
RuntimeError: CUDA error: device-side assert triggered
"""


def test_report_checks_accept_the_real_format_and_reject_a_wrong_line():
    suite = load_suite()
    good = fake_run(suite, report_text(suite, "c01_cross_entropy.py", "LOSS-LINE"))
    ok, ev = suite.check_named(good, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss")
    assert ok, ev
    assert "c01_cross_entropy.py:" in ev and "named" in ev
    wrong_line = fake_run(suite, report_text(suite, "c01_cross_entropy.py", "SURFACE-LINE"))
    ok, ev = suite.check_named(wrong_line, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss")
    assert not ok and "NOT named" in ev
    wrong_kernel = fake_run(suite, report_text(suite, "c01_cross_entropy.py", "LOSS-LINE", kernel="vectorized_elementwise"))
    assert not suite.check_named(wrong_kernel, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss")[0]
    two = fake_run(suite, good.err + good.err)
    assert not suite.check_named(two, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss")[0]
    fell_back = fake_run(suite, "cdsa: CDSA_BACKEND=cupti: the one CUPTI subscriber slot is taken\n" + good.err)
    assert suite.check_named(fell_back, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss", "driver")[0]
    ok, ev = suite.check_named(fell_back, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss", "cupti")
    assert not ok and "CUPTI backend did not run" in ev
    ok, ev = suite.check_no_report(fake_run(suite, "", out="loss 0.5 finite\n", rc=0), r"loss \S+ finite")
    assert ok, ev
    assert not suite.check_no_report(good)[0]


def test_native_check_wants_function_and_file_line():
    suite = load_suite()
    n, _ = suite.marker_line(suite.CASES / "native_faults.cu", "LAUNCH-LINE")
    err = f"""==================== cdsa: asynchronous CUDA fault ====================
cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered
cdsa: the failing launch (the first launch on its stream whose completion never landed):
  kernel assert_kernel(int)  grid (1,1,1) block (32,1,1) shared 0 B  stream 13  launch #6 (#6 on its stream)  thread 1
  Launched from (most recent call last):
    main (nf_static+0x9e1f) at /x/native_faults.cu:140
    launch_bad(CUstream_st*) (nf_static+0x9b2a) at /x/native_faults.cu:{n}
=======================================================================
"""
    ok, ev = suite.check_native(fake_run(suite, err), "launch_bad", "native_faults.cu", "LAUNCH-LINE", "assert_kernel")
    assert ok, ev
    ok, _ = suite.check_native(fake_run(suite, err.replace(f":{n}\n", ":1\n")), "launch_bad", "native_faults.cu",
                               "LAUNCH-LINE", "assert_kernel")
    assert not ok
    ok, ev = suite.check_native(fake_run(suite, err), "launch_bad", "native_faults.cu", "LAUNCH-LINE", "assert_kernel",
                                code=700)
    assert not ok and "700" in ev


NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if pathlib.Path("/usr/local/cuda/bin/nvcc").exists() else None)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_native_cases_build(tmp_path):
    cases = HERE / "cases"
    stubs = "-L" + str(pathlib.Path(NVCC).resolve().parent.parent / "lib64" / "stubs")
    builds = [
        [NVCC, "-g", "-O0", "-arch=sm_90", str(cases / "native_faults.cu"), "-o", str(tmp_path / "nf_static"), stubs, "-lcuda"],
        [NVCC, "-g", "-O0", "-arch=sm_90", "-cudart", "shared", str(cases / "native_faults.cu"), "-o", str(tmp_path / "nf_shared"), stubs, "-lcuda"],
        [NVCC, "-ptx", "-arch=compute_90", str(cases / "assert_kernel.cu"), "-o", str(tmp_path / "k.ptx")],
        [NVCC, "-g", "-O0", "-x", "c", str(cases / "driver_api.c"), "-o", str(tmp_path / "driver_api"), stubs, "-lcuda"],
    ]
    for argv in builds:
        p = subprocess.run(argv, capture_output=True, text=True)
        assert p.returncode == 0, " ".join(argv) + "\n" + p.stdout + p.stderr
    assert "driver_assert_kernel" in (tmp_path / "k.ptx").read_text()


def test_every_case_function_runs_to_a_verdict(tmp_path):
    """Each case's code, fed canned process results, returns (bool, evidence) without raising: a typo in a case
    must not first show on the GPU machine, where each minute counts."""
    suite = load_suite()

    class FakeCtx:
        python, sanitizer, logdir = sys.executable, "/usr/bin/true", tmp_path

        def __init__(self):
            self.calls = []

        def py(self, script, *args):
            assert (suite.CASES / script).exists(), script
            return [sys.executable, str(suite.CASES / script), *map(str, args)]

        def bin(self, name):
            return "/usr/bin/true"

        def run(self, key, argv, **kw):
            self.calls.append((key, kw))
            cwd = tmp_path / key.replace("/", "_") / kw.get("tag", "")
            cwd.mkdir(parents=True, exist_ok=True)
            (cwd / "cdsa-h-1.json").write_text('{"launches": []}')
            out = ("elapsed_s 0.5 loss 1.0\nloss 0.5 finite\nloss nan\ndtype error: x\ncontext alive 1.0\n"
                   "epoch ok\nsecond failed: x\ncuda kernel events: 3\nlaunched\n"
                   "memop-cost launch host_us 2.0 gpu_us 1.5\nmemop-cost launch+memop host_us 2.5 gpu_us 1.9\n"
                   "memop-cost slot 99999 (expect 99999)\n")
            return suite.Run(argv, 1, out, report_text(suite, "c01_cross_entropy.py", "LOSS-LINE"), 0.5, False, cwd)

    for case in suite.all_cases():
        ctx = FakeCtx()
        verdict = case.fn(ctx, case.key, case.backend)
        assert isinstance(verdict, tuple) and isinstance(verdict[0], bool) and isinstance(verdict[1], str), case.key
        assert ctx.calls, f"{case.key} ran nothing"
        if case.backend == "cupti":
            assert all(kw.get("backend") == "cupti" or "CDSA_BACKEND" in (kw.get("env") or {})
                       for _, kw in ctx.calls if kw.get("preload", True)), case.key
