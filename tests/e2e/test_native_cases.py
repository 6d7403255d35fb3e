"""End-to-end: C++ programs and the preload environment itself, on the simulated driver."""
import os
import pathlib
import stat
import subprocess
import sys

import pytest

from conftest import (BANNER, BUILD, LIBCDSA, PROGRAMS, SANITIZED, SIMDIR, clean_env, marker_line, run_cli, run_program,
                      run_python)

HERE = pathlib.Path(__file__).resolve().parent
CASES = PROGRAMS / "e2e_driver_cases"
OTHER = PROGRAMS / "libe2e_other_preload.so"
SOURCE = HERE / "programs" / "driver_cases.cc"


def native_frame(function):
    n, _ = marker_line(SOURCE, "LAUNCH-SITE") if function == "launch_loss" else (None, None)
    return function


def test_cpp_loss_names_the_native_launch_site(tmp_path):
    run = run_program([CASES, "nll", 10], cwd=tmp_path)
    assert run.rc == 3, run.err
    assert run.reports == 1, run.err
    r = run.report
    assert "surfaced at cuMemcpyDtoH_v2" in r
    surfaced = run.surfaced_part()
    assert "read_loss(" in surfaced and "e2e_driver_cases+0x" in surfaced
    part = run.launch_part()
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in part
    assert "launch_loss(" in part
    line, _ = marker_line(SOURCE, "LAUNCH-SITE")
    assert f"driver_cases.cc:{line}" in part, part
    assert "main (e2e_driver_cases+0x" in part
    assert run.err.index(BANNER) < run.err.index("program:") if "program:" in run.err else True
    assert "read_loss: CUDA_ERROR_ASSERT" in run.out


def test_cpp_ignored_target_is_silent(tmp_path):
    run = run_program([CASES, "nll", -100], cwd=tmp_path)
    assert run.rc == 0 and run.err == "", run.err
    assert run.traces() == []


@pytest.mark.parametrize("route", ["linked", "dlsym", "proc_address"])
def test_each_route_to_the_driver_is_recorded(tmp_path, route):
    run = run_program([CASES, "routes", route], cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert f"launch_via_{route}(" in part, part
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in part
    assert "the failing launch (the first launch on its stream" in part


def test_all_routes_appear_in_the_trace(tmp_path):
    run = run_program([CASES, "routes"], cwd=tmp_path, env={"CDSA_TRACE": "always"})
    assert run.rc == 0 and run.err == "", run.err
    t = run.trace()
    assert t["report"] is None and t["reason"] == "exit"
    assert [l["kernel"] for l in t["launches"]] == ["fill_f32"] * 3
    stacks = {s["id"]: s["stack"] for s in t["stacks"]}
    for launch, route in zip(t["launches"], ["linked", "dlsym", "proc_address"]):
        names = [f["function"] for f in stacks[launch["stack_id"]]["native"]]
        assert any(n.startswith(f"(anonymous namespace)::launch_via_{route}(") for n in names), names


def test_exceptions_and_forked_child_unaffected(tmp_path):
    bare = run_program([CASES, "exceptions-fork"], cwd=tmp_path, preload=False)
    run = run_program([CASES, "exceptions-fork"], cwd=tmp_path)
    assert run.rc == bare.rc == 0, run.err
    assert run.err == "" and run.out == bare.out
    assert "caught before 100 after 100; child exit 7; value 2.0" in run.out
    assert "child caught 100" in run.out
    assert run.traces() == []


def test_cpp_no_sync_reported_at_exit(tmp_path):
    run = run_program([CASES, "no-sync"], cwd=tmp_path)
    assert run.rc == 0
    assert run.reports == 1, run.err
    assert "surfaced at exit probe" in run.report
    assert "launch_loss(" in run.launch_part()


@pytest.mark.parametrize("argv", [["/bin/true"], [sys.executable, "-c", "pass"], ["/bin/sh", "-c", "exit 5"]])
def test_non_cuda_programs_untouched(tmp_path, argv):
    run = run_program(argv, cwd=tmp_path)
    bare = run_program(argv, cwd=tmp_path, preload=False)
    assert run.rc == bare.rc and run.out == bare.out and run.err == bare.err == ""
    assert list(tmp_path.iterdir()) == []


def test_bad_configuration_one_message_and_runs_on(tmp_path):
    run = run_program([CASES, "nll", 10], cwd=tmp_path, env={"CDSA_NATIVE_DEPTH": "abc"})
    lines = [l for l in run.err.splitlines() if "CDSA_NATIVE_DEPTH" in l]
    assert lines == ["cdsa: CDSA_NATIVE_DEPTH=abc: expected an integer in 0..256; using the default"], run.err
    assert run.reports == 1 and "launch_loss(" in run.launch_part()


def test_unwritable_trace_directory_one_message_and_runs_on(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    run = run_program([CASES, "nll", 10], cwd=tmp_path, env={"CDSA_TRACE_FILE": f"{blocker}/t.json"})
    lines = [l for l in run.err.splitlines() if "not-a-dir" in l]
    assert len(lines) == 1 and "is not writable" in lines[0], run.err
    assert run.reports == 1 and "trace written" not in run.report
    assert run.rc == 3


@pytest.mark.parametrize("order", ["cdsa-first", "other-first"])
def test_other_preload_resolving_rtld_next_still_works(tmp_path, order):
    libs = [str(LIBCDSA), str(OTHER)] if order == "cdsa-first" else [str(OTHER), str(LIBCDSA)]
    env = {"LD_PRELOAD": ":".join(libs)}
    run = run_program([CASES, "nll", 10], cwd=tmp_path, env=env)
    assert run.rc == 3, run.err
    # (Under ASan its runtime comes first and serves malloc itself: the neighbour then forwards nothing.)
    forwarded = "other-preload: forwarded nothing" if SANITIZED else "other-preload: forwarded mallocs"
    assert forwarded in run.err
    assert run.reports == 1 and "launch_loss(" in run.launch_part()
    py = run_python("nll_loss.py", 10, cwd=tmp_path, env=env)
    assert py.reports == 1 and forwarded in py.err


def test_trace_never_through_a_symlink_or_existing_file(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "trace.json").symlink_to(victim)
    (tmp_path / "trace-1.json").write_text("someone else's")
    run = run_program([CASES, "nll", 10], cwd=tmp_path, env={"CDSA_TRACE_FILE": "trace.json"})
    assert run.reports == 1
    assert victim.read_text() == "precious"
    assert (tmp_path / "trace-1.json").read_text() == "someone else's"
    written = tmp_path / "trace-2.json"
    # The report names the file before it is written; the line after it says the name was taken and where it went.
    assert "cdsa: trace file trace.json" in run.report.splitlines()
    assert "cdsa: trace file trace.json was taken: the trace is trace-2.json" in run.err
    st = os.lstat(written)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


def test_two_processes_never_share_a_trace_file(tmp_path):
    env = {"CDSA_TRACE_FILE": "job.json"}
    procs = [subprocess.Popen([str(CASES), "nll", "10"], cwd=tmp_path, env=clean_env(env), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(4)]
    for p in procs:
        p.wait(timeout=120)
    files = sorted(f.name for f in tmp_path.glob("job*.json"))
    assert files == ["job-1.json", "job-2.json", "job-3.json", "job.json"]
    pids = {__import__("json").loads((tmp_path / f).read_text())["process"]["pid"] for f in files}
    assert pids == {p.pid for p in procs}


@pytest.mark.skipif(SANITIZED, reason="a sanitizer build links its runtime")
def test_libcdsa_links_only_libc_and_keeps_static_tls_small():
    dyn = subprocess.run(["readelf", "-dW", str(LIBCDSA)], capture_output=True, text=True, check=True).stdout
    needed = sorted(l.split("[")[1].rstrip("]") for l in dyn.splitlines() if "(NEEDED)" in l)
    assert set(needed) <= {"libc.so.6", "ld-linux-x86-64.so.2", "libdl.so.2", "libpthread.so.0"}, needed
    seg = subprocess.run(["readelf", "-lW", str(LIBCDSA)], capture_output=True, text=True, check=True).stdout
    tls = [l.split() for l in seg.splitlines() if l.strip().startswith("TLS")]
    memsz = int(tls[0][5], 16) if tls else 0
    # Initial-exec TLS must fit glibc's surplus for libraries dlopen'ed later (CUDA_INJECTION64_PATH): 512 bytes.
    assert memsz <= 512, f"libcdsa.so has {memsz} bytes of TLS"
    syms = subprocess.run(["nm", "-D", "--defined-only", str(LIBCDSA)], capture_output=True, text=True, check=True).stdout
    # Names without their versions ("dlsym@@GLIBC_2.34", "cuInit@@CDSA": shim/exports.map.in), version nodes aside.
    exported = {l.split()[-1].split("@")[0] for l in syms.splitlines() if len(l.split()) == 3 and l.split()[1] != "A"}
    assert exported, syms
    stdio = {"fprintf", "vfprintf", "__fprintf_chk", "__vfprintf_chk", "dprintf", "vdprintf", "fputs",
             "fputs_unlocked", "fwrite", "fwrite_unlocked", "fputc", "putc", "_IO_putc", "fputc_unlocked",
             "putc_unlocked"}  # the assert-text capture (shim/record/assert_capture.h)
    assert all(n.startswith("cu") or n in {"dlsym", "dlvsym", "dlclose", "write", "InitializeInjection",
                                           "cdsa_library_copy"} | stdio for n in exported), exported


@pytest.mark.parametrize("env", [{"CDSA_SYMBOLIZER_NO_LIBDW": "1"}, {"CDSA_LIBDW_PATH": "/nonexistent/libdw.so.1"}],
                         ids=["no_libdw", "libdw_path"])
def test_the_configured_libdw_is_the_one_the_live_report_uses(tmp_path, env):
    """CDSA_SYMBOLIZER_NO_LIBDW / CDSA_LIBDW_PATH (shim/common/config_vars.def) reach the symbolizer: without libdw the
    launch site has no file:line (the default run has it: test_cpp_loss_names_the_native_launch_site), and neither
    variable is called unknown."""
    run = run_program([CASES, "nll", 10], cwd=tmp_path, env=env)
    assert run.reports == 1, run.err
    line, _ = marker_line(SOURCE, "LAUNCH-SITE")
    part = run.launch_part()
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in part, part
    assert f"driver_cases.cc:{line}" not in part, part
    assert "unknown variable" not in run.err, run.err


def test_cdsa_doctor_names_the_configured_libdw(tmp_path):
    """The CLI reads the same table: `cdsa doctor`'s symbolizer line follows CDSA_SYMBOLIZER_NO_LIBDW and
    CDSA_LIBDW_PATH, and lists neither as unknown."""
    seen = {}
    for name, value in [("CDSA_SYMBOLIZER_NO_LIBDW", "1"), ("CDSA_LIBDW_PATH", "/nonexistent/libdw.so.1")]:
        p = run_cli("doctor", cwd=tmp_path, env=clean_env({name: value}, preload=False))
        line = [l for l in p.stdout.splitlines() if "symbolizer" in l]
        assert len(line) == 1, p.stdout
        seen[name] = line[0]
        assert "unknown variable" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert "libdw disabled by CDSA_SYMBOLIZER_NO_LIBDW" in seen["CDSA_SYMBOLIZER_NO_LIBDW"], seen
    assert "dlopen /nonexistent/libdw.so.1" in seen["CDSA_LIBDW_PATH"], seen


def test_cdsa_report_says_once_that_a_configured_value_is_bad(tmp_path):
    """The CLI symbolizes with the table's values too, so a bad one is named once (as libcdsa.so names it), not
    ignored in silence."""
    p = run_cli("report", tmp_path / "missing.json", cwd=tmp_path, env=clean_env({"CDSA_SYMBOLIZER_NO_LIBDW": "2"},
                                                                               preload=False))
    lines = [l for l in p.stderr.splitlines() if "CDSA_SYMBOLIZER_NO_LIBDW" in l]
    assert lines == ["cdsa: CDSA_SYMBOLIZER_NO_LIBDW=2: expected 0 or 1; using the default"], p.stderr
    assert p.returncode == 1 and "missing.json" in p.stderr, p.stderr
