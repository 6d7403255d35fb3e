"""Other interposers beside libcdsa.so, in either order (issue 17), and the device text under RTLD_DEEPBIND.

  * a GPU-sharing hook built like HAMi-core's (programs/gpu_share_hook.c: it interposes dlsym and the launch calls
    and finds "the real dlsym" with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5")), preloaded before and after cdsa:
    the hook counts every launch, and cdsa records and reports every launch too;
  * Debian's jemalloc and tcmalloc before and after libcdsa.so;
  * libcdsa.so preloaded twice (one file, two files) or preloaded and also dlopen'ed: one copy records;
  * libcuda dlopen'ed with RTLD_NOW | RTLD_DEEPBIND: its fprintf binds to libc first, and the device's assert text
    is still captured (the two-stream case stays exact), the program's bytes unchanged."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from cdsa_report import report_span
from conftest import LIBCDSA, PROGRAMS, SANITIZED, SIMDIR, py_frame, run_program, run_python

CASES = PROGRAMS / "e2e_driver_cases"
SOURCE = pathlib.Path(__file__).resolve().parent / "programs" / "driver_cases.cc"
HOOK = PROGRAMS / "libe2e_gpu_share_hook.so"
STDIO_HOOK = PROGRAMS / "libe2e_stdio_hook.so"
INTERPOSE_CASES = PROGRAMS / "e2e_interpose_cases"
ROUTES = ["linked", "dlsym", "proc_address"]
NLL = "nll_loss_forward_reduce_cuda_kernel_2d"
ALLOCATORS = {"jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
              "tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"}


def preload(order, other):
    """LD_PRELOAD with `other` before libcdsa.so ("other-first") or after it ("cdsa-first")."""
    return f"{other}:{LIBCDSA}" if order == "other-first" else f"{LIBCDSA}:{other}"


def hook_count(err):
    counts = re.findall(r"^gpu-share-hook: (\d+) launches$", err, re.M)
    assert len(counts) == 1, err
    return int(counts[0])


def traced_kernels(run):
    return [launch["kernel"] for launch in run.trace()["launches"]]


# ---- a GPU-sharing hook --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["other-first", "cdsa-first"])
def test_gpu_share_hook_and_cdsa_both_see_every_launch(tmp_path, order):
    """Three launches, one per route to the driver (-lcuda, dlsym on the libcuda handle, cuGetProcAddress_v2)."""
    run = run_program([CASES, "routes"], cwd=tmp_path,
                      env={"LD_PRELOAD": preload(order, HOOK), "CDSA_TRACE": "always"})
    assert run.rc == 0, run.err
    assert run.err == "gpu-share-hook: 3 launches\n", run.err
    t = run.trace()
    assert [launch["kernel"] for launch in t["launches"]] == ["fill_f32"] * 3
    stacks = {s["id"]: s["stack"] for s in t["stacks"]}
    for launch, route in zip(t["launches"], ROUTES):
        names = [f["function"] for f in stacks[launch["stack_id"]]["native"]]
        assert any(n.startswith(f"(anonymous namespace)::launch_via_{route}(") for n in names), (route, names)


def launches_made(out_err):
    """The program stops at the first launch that fails (the fault surfaced there), else makes all three."""
    failed = re.search(r"^program: (\w+) failed", out_err, re.M)
    return ROUTES.index(failed.group(1)) + 1 if failed else 3


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("order", ["other-first", "cdsa-first"])
def test_gpu_share_hook_and_the_report_of_each_route(tmp_path, order, route):
    run = run_program([CASES, "routes", route], cwd=tmp_path, env={"LD_PRELOAD": preload(order, HOOK)})
    assert run.rc in (1, 3), run.err
    assert hook_count(run.err) == launches_made(run.err)
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert f"launch_via_{route}(" in part, part
    assert f"kernel {NLL}" in part
    assert "the failing launch (the first launch on its stream" in part


@pytest.mark.parametrize("order", ["other-first", "cdsa-first"])
def test_gpu_share_hook_under_python_ctypes(tmp_path, order):
    """ctypes resolves every call with dlsym on the libcuda handle: 1,002 launches through both."""
    run = run_python("many_launches.py", cwd=tmp_path, env={"LD_PRELOAD": preload(order, HOOK)})
    assert hook_count(run.err) == 1002
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert py_frame("many_launches.py", "LAUNCH-SITE", "<module>") in part, part
    assert "1001 launches on it had not completed" in part, part


def libc_path():
    maps = pathlib.Path("/proc/self/maps").read_text().splitlines()
    return next(line.split()[-1] for line in maps if re.search(r"/libc\.so\.6$", line))


def versions(path):
    """{name: {"@@VERSION" (the default) or "@VERSION" or "", ...}} of the functions `path` exports."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"^\S+ [TWiV] ([^@\s]+)((?:@@?)\S+)?$", line)
        if m:
            found.setdefault(m.group(1), set()).add(m.group(2) or "")
    return found


@pytest.mark.skipif(SANITIZED, reason="the same library either way")
def test_libc_names_carry_the_versions_libc_gives_them():
    """A lookup by version (dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5")) finds cdsa's definition wherever it finds
    libc's: every version libc defines for a name cdsa interposes, cdsa defines too, and the same one is the default."""
    ours = {n: v for n, v in versions(LIBCDSA).items() if not n.startswith("cu")}
    libc = versions(libc_path())
    interposed = set(ours) - {"InitializeInjection", "cdsa_library_copy"}
    assert {"dlsym", "dlvsym", "dlclose", "fprintf", "__fprintf_chk", "write"} <= interposed, ours
    for name in sorted(interposed):
        assert name in libc, name
        assert ours[name] == libc[name], (name, ours[name], libc[name])
    assert versions(LIBCDSA)["cuLaunchKernel"] == {"@@CDSA"}


# ---- a stdio hook ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["other-first", "cdsa-first"])
def test_stdio_hook_counts_what_it_counts_alone(tmp_path, order):
    """cdsa's stdio hooks forward to the next definition: a stdio hook loaded after cdsa still sees every call
    (the driver's prints inside driver calls included), and one before cdsa reaches it."""
    argv = [INTERPOSE_CASES, "stdio-quiet"]
    env = {"LD_LIBRARY_PATH": f"{SIMDIR}:{PROGRAMS}"}
    alone = run_program(argv, cwd=tmp_path, preload=False, env={**env, "LD_PRELOAD": str(STDIO_HOOK)})
    both = run_program(argv, cwd=tmp_path, env={**env, "LD_PRELOAD": preload(order, STDIO_HOOK)})
    assert alone.rc == 0 and both.rc == 0, both.err
    counts = re.findall(r"^stdio-hook: .*$", alone.err, re.M)
    assert len(counts) == 1 and counts[0] != "stdio-hook: fputs 0 fwrite 0 fputc 0 putc 0", alone.err
    assert both.err == alone.err  # the same bytes, the same counts


# ---- allocators ----------------------------------------------------------------------------------------------------

@pytest.mark.skipif(SANITIZED, reason="a sanitizer runtime brings its own allocator")
@pytest.mark.parametrize("order", ["other-first", "cdsa-first"])
@pytest.mark.parametrize("allocator", sorted(ALLOCATORS))
def test_allocator_preloads_in_either_order(tmp_path, allocator, order):
    lib = ALLOCATORS[allocator]
    if not os.path.exists(lib):
        pytest.skip(f"{lib} is not installed (tools/setup.sh installs it)")
    env = {"LD_PRELOAD": preload(order, lib)}
    native = tmp_path / "native"
    native.mkdir()
    run = run_program([CASES, "routes", "dlsym"], cwd=native, env=env)
    assert run.rc in (1, 3), run.err  # the fault surfaces at the next launch or at the synchronize
    assert run.reports == 1, run.err
    assert "launch_via_dlsym(" in run.launch_part()
    py = run_python("many_launches.py", cwd=tmp_path, env=env)
    assert py.reports == 1, py.err
    assert py_frame("many_launches.py", "LAUNCH-SITE", "<module>") in py.launch_part()
    assert "CudaError: CUDA error: cuMemcpyDtoH_v2 returned 710" in py.err


# ---- libcdsa.so twice ----------------------------------------------------------------------------------------------

@pytest.fixture
def second_copy(tmp_path):
    """Another file holding libcdsa.so: the loader keeps both."""
    d = tmp_path / "second"
    d.mkdir()
    shutil.copy2(LIBCDSA, d / "libcdsa.so")
    return d / "libcdsa.so"


@pytest.mark.parametrize("how", ["same-file", "copy-after", "copy-before"])
def test_preloaded_twice_one_copy_records(tmp_path, second_copy, how):
    pre = {"same-file": f"{LIBCDSA}:{LIBCDSA}", "copy-after": f"{LIBCDSA}:{second_copy}",
           "copy-before": f"{second_copy}:{LIBCDSA}"}[how]
    ok = tmp_path / "ok"
    ok.mkdir()
    run = run_program([CASES, "routes"], cwd=ok, env={"LD_PRELOAD": pre, "CDSA_TRACE": "always"})
    assert run.rc == 0 and run.err == "", run.err
    assert traced_kernels(run) == ["fill_f32"] * 3  # one trace file, each launch once
    run = run_program([CASES, "routes", "proc_address"], cwd=tmp_path, env={"LD_PRELOAD": pre})
    assert run.rc == 3, run.err  # the last launch: the fault surfaces at the synchronize
    assert run.reports == 1, run.err
    assert "launch_via_proc_address(" in run.launch_part()
    assert len(run.traces()) == 1


@pytest.mark.parametrize("which,mode", [("same-file", "local"), ("copy", "local"), ("copy", "global")])
def test_preloaded_and_dlopened_one_copy_records(tmp_path, second_copy, which, mode):
    """A program that also dlopens libcdsa.so (the preloaded file, or a copy of its own elsewhere, RTLD_LOCAL or
    RTLD_GLOBAL) and calls cuInit through that handle: the preloaded copy records, the other stays out of the way
    (before, a copy reached that way started too, and reported the fault a second time at exit)."""
    lib = LIBCDSA if which == "same-file" else second_copy
    run = run_python("with_library.py", lib, mode, "many_launches.py", cwd=tmp_path)
    assert "with_library: its cuInit returned" in run.out, run.err
    assert run.reports == 1, run.err
    assert py_frame("many_launches.py", "LAUNCH-SITE", "<module>") in run.launch_part()
    assert len(run.traces()) == 1


# ---- RTLD_DEEPBIND -------------------------------------------------------------------------------------------------

NOTE_LINE = re.compile(r"cdsa(\[rank \d+\])?: (the CUDA fault|cdsa could not name the launch|the CUDA context died)")


def without_report(err):
    """stderr with cdsa's report (the blank line it starts with, its banner line to its closing ===== line) cut out."""
    s = report_span(err)
    assert s is not None and s.closed, err
    before = err[:s.begin + 1]
    if before.endswith("\n\n"):
        before = before[:-1]
    # The note cdsa adds to the end of the program's traceback (docs/python.md) goes too.
    after = "".join(l for l in err[s.end:].splitlines(True) if not NOTE_LINE.match(l))
    return before + after


@pytest.mark.skipif(SANITIZED, reason="a sanitizer runtime refuses RTLD_DEEPBIND (google/sanitizers#611)")
def test_deepbind_libcuda_two_busy_streams_exact_by_the_device_text(tmp_path):
    env = {"SIMCUDA_DEEPBIND": "1"}
    bare = run_python("two_busy_streams.py", cwd=tmp_path, env=env, preload=False)
    assert bare.rc == 1 and "Assertion `" in bare.err, bare.err
    run = run_python("two_busy_streams.py", cwd=tmp_path, env=env)
    assert run.rc == 1, run.err
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert "AMBIGUOUS" not in run.report, run.report
    assert "matches the device's assert" in part, part
    assert py_frame("two_busy_streams.py", "LAUNCH-SITE", "<module>") in part
    assert "OTHER-SITE" not in part
    # The program's own bytes are what they are without cdsa: the driver's line once, then the traceback.
    assert without_report(run.err) == bare.err
