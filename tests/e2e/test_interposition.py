"""The interposition layer end to end: the assert text printed through stdio (from
another thread), dlsym(RTLD_DEFAULT) in the caller's RTLD_LOCAL group (8), a second
driver layer (9), and every driver name reached with dlsym."""
import os
import subprocess

import pytest

from conftest import BANNER, BUILD, PROGRAMS, run_program

CASES = PROGRAMS / "e2e_interpose_cases"
SCOPE = PROGRAMS / "e2e_scope_case"
STUB = os.path.join(os.environ.get("TEST_CUDA_ROOT", "/usr/local/cuda"), "lib64", "stubs", "libcuda.so")
EXEMPT = {"cuGetErrorString", "cuGetErrorName", "cuDriverGetVersion", "cuGetExportTable"}
ASSERT_LINES = [
    f"Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [{i},0,0] "
    "Assertion `t >= 0 && t < n_classes` failed." for i in (2, 3)]


def run(argv, tmp_path, preload=True, env=None):
    e = {"LD_LIBRARY_PATH": f"{BUILD / 'lib' / 'sim'}:{PROGRAMS}"}
    e.update(env or {})
    return run_program(argv, cwd=tmp_path, preload=preload, env=e)


def test_stdio_printed_inside_driver_calls_reaches_stderr_unchanged(tmp_path):
    bare = run([CASES, "stdio-quiet"], tmp_path, preload=False)
    run_ = run([CASES, "stdio-quiet"], tmp_path)
    assert bare.rc == 0 and run_.rc == 0, run_.err
    assert bare.err.count("driver: fprintf 42 x|fputs|fwrite|cp\n") == 2, bare.err
    assert run_.err == bare.err and run_.out == bare.out
    assert run_.traces() == []


def test_assert_text_printed_by_another_threads_call_is_in_the_report(tmp_path):
    bare = run([CASES, "stdio-assert"], tmp_path, preload=False)
    run_ = run([CASES, "stdio-assert"], tmp_path)
    assert bare.rc == 3 and run_.rc == 3, run_.err
    assert bare.err == "".join(line + "\n" for line in ASSERT_LINES)
    assert run_.reports == 1, run_.err
    # What the program printed is unchanged; the report comes after it.
    assert run_.err.startswith(bare.err) and BANNER in run_.err[len(bare.err):]
    assert f"the device reported: {ASSERT_LINES[0]}" in run_.report
    assert "(and 1 more assert line)" in run_.report
    assert run_.trace()["report"]["device_messages"] == ASSERT_LINES


def test_rtld_default_resolves_in_the_callers_local_group(tmp_path):
    argv = [SCOPE, PROGRAMS / "libe2e_scope_user.so"]
    bare = run(argv, tmp_path, preload=False)
    run_ = run(argv, tmp_path)
    assert bare.rc == 0 and run_.rc == 0, run_.err
    assert "cudaRuntimeGetVersion: found, the group's own" in bare.out
    assert "cuInit: found, call returns 0" in bare.out
    assert run_.out == bare.out  # the same lookups succeed, in the library's own group
    assert "cuInit from libcuda.so.1" in bare.err
    assert "cuInit from libcdsa.so" in run_.err  # ... and the driver entry point comes back wrapped
    assert "cuDriverGetVersion from libcuda.so.1" in run_.err  # exempt: the driver's own


@pytest.mark.parametrize("n", [1, 5])
def test_a_second_driver_layer_records_each_launch_once(tmp_path, n):
    run_ = run([CASES, "layers", n], tmp_path, env={"CDSA_TRACE": "always"})
    assert run_.rc == 0 and run_.err == "", run_.err
    assert f"forwarded by the layer: {n}" in run_.out
    assert [l["kernel"] for l in run_.trace()["launches"]] == ["fill_f32"] * n


def test_a_fault_through_a_second_driver_layer_is_reported_once(tmp_path):
    run_ = run([CASES, "layers", 2, "fault"], tmp_path)
    assert run_.rc == 3, run_.err
    assert "forwarded by the layer: 3" in run_.out
    assert run_.reports == 1, run_.err
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in run_.launch_part()
    assert [l["kernel"] for l in run_.trace()["launches"]] == ["fill_f32"] * 2 + [
        "nll_loss_forward_reduce_cuda_kernel_2d"]


def stub_names():
    if not os.path.exists(STUB):
        pytest.skip(f"no stub libcuda.so at {STUB}")
    out = subprocess.run(["nm", "-D", "--defined-only", STUB], capture_output=True, text=True, check=True).stdout
    return sorted({l.split()[-1] for l in out.splitlines() if l.split() and l.split()[-1].startswith("cu")})


def test_libcdsa_exports_every_stub_name_but_the_exempt_ones():
    out = subprocess.run(["nm", "-D", "--defined-only", str(BUILD / "lib" / "libcdsa.so")], capture_output=True,
                         text=True, check=True).stdout
    # "cuInit@@CDSA": the name without its version (shim/exports.map.in); no version-node ("A") entries.
    ours = {l.split()[-1].split("@")[0] for l in out.splitlines() if len(l.split()) == 3 and l.split()[1] != "A"}
    names = set(stub_names())
    assert names - ours == EXEMPT
    assert not (ours & EXEMPT)


def test_every_stub_name_through_dlsym_comes_back_wrapped(tmp_path):
    names = stub_names()
    (tmp_path / "names").write_text("\n".join(names) + "\n")
    run_ = run([CASES, "dlsym-all", tmp_path / "names"], tmp_path)
    assert run_.rc == 0, run_.err
    where = dict(line.split() for line in run_.out.splitlines())
    assert set(where) == set(names)
    found = {n for n, w in where.items() if w != "null"}
    assert found, "the driver exports none of the stub's names"
    wrong = sorted(n for n in found if (where[n] == "cdsa") == (n in EXEMPT))
    assert not wrong, f"not wrapped (or exempt but wrapped): {wrong}"
    print(f"dlsym: {len(names)} stub names, {len(found)} found in the driver, "
          f"{sum(w == 'cdsa' for w in where.values())} wrapped, {len(found & EXEMPT)} exempt")
