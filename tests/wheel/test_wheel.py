"""The wheel, as a user gets it: built by tools/build_wheel.sh, installed into a fresh venv, run against the
simulated driver (build/lib/sim from the normal build).

WHEEL_UNDER_TEST names the wheel (tools/test.sh builds it once); without it the wheel is built here.
WHEEL_ARCH=aarch64 (tools/test.sh --aarch64-wheel): the aarch64 wheel, installed into a venv of WHEEL_PYTHON (Debian's
arm64 CPython, .aarch64-python/) and run under qemu through binfmt_misc, over the aarch64 build's simulated driver
(TEST_BUILD_DIR=build-aarch64).
The cases that hide the system's libunwind and libdw run in a private mount namespace (`unshare -m`, needs root or
user namespaces) where /dev/null is bind-mounted over those files: only the copies inside the wheel remain.
"""
import glob
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from cdsa_report import count_reports, launch_part, marker_line, report_block, trace_files  # noqa: E402
BUILD = pathlib.Path(os.environ.get("TEST_BUILD_DIR", ROOT / "build")).resolve()
SIMDIR = BUILD / "lib" / "sim"
SCRIPTS = ROOT / "tests" / "e2e" / "scripts"
VENDORED = ["libunwind.so.8", "libdw.so.1", "libelf.so.1", "libz.so.1", "liblzma.so.5", "libbz2.so.1.0"]
ARCH = os.environ.get("WHEEL_ARCH") or platform.machine()
CROSS = ARCH != platform.machine()  # another architecture's wheel: its programs run under qemu (binfmt_misc)
PYTHON = os.environ.get("WHEEL_PYTHON") or sys.executable  # the interpreter whose venv gets the wheel
assert PYTHON != sys.executable or not CROSS, "WHEEL_ARCH of another architecture needs WHEEL_PYTHON of it"
LDSO = {"x86_64": "ld-linux-x86-64.so.2", "aarch64": "ld-linux-aarch64.so.1"}[ARCH]
LDCONFIG_TAG = {"x86_64": "x86-64", "aarch64": "AArch64"}[ARCH]  # how `ldconfig -p` marks a native file's arch
CC = {"x86_64": "cc", "aarch64": "aarch64-linux-gnu-gcc"}[ARCH] if CROSS else "cc"


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    given = os.environ.get("WHEEL_UNDER_TEST")
    if given:
        return pathlib.Path(given).resolve()
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run([str(ROOT / "tools" / "build_wheel.sh"), *(["--arch", ARCH] if CROSS else []), str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    return pathlib.Path(res.stdout.strip().splitlines()[-1])


def make_venv(wheel, where, python=PYTHON, system_site=False):
    site = ["--system-site-packages"] if system_site else []
    if not CROSS:
        subprocess.run([python, "-m", "venv", *site, str(where)], check=True)
        subprocess.run([str(where / "bin" / "pip"), "install", "-q", "--no-index", "--disable-pip-version-check",
                        str(wheel)], check=True)
        return where
    # Under emulation ensurepip takes minutes: the venv without pip, and the wheel installed by this interpreter's
    # pip (pure Python) run by the venv's own interpreter, so the install is the target Python's: its tags, its
    # site-packages, its console-script shebang.
    import pip
    subprocess.run([python, "-m", "venv", "--without-pip", *site, str(where)], check=True)
    subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
                    "--disable-pip-version-check", str(wheel)],
                   env={**os.environ, "PYTHONPATH": str(pathlib.Path(pip.__file__).parents[1])}, check=True)
    return where


@pytest.fixture(scope="session")
def venv(wheel, tmp_path_factory):
    return make_venv(wheel, tmp_path_factory.mktemp("venv") / "v")


def site_package(venv):
    (pkg,) = glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "cdsa"))
    return pathlib.Path(pkg)


def env(sim=True):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("CDSA_") and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "VIRTUAL_ENV")}
    e["PYTHONPATH"] = str(SCRIPTS)
    e["PYTHONUNBUFFERED"] = "1"
    if sim:
        e["LD_LIBRARY_PATH"] = str(SIMDIR)
    return e


def system_unwinder_files():
    """The files the dynamic loader would open for libunwind.so.8 and libdw.so.1 (resolved): from ldconfig's cache,
    or, for another architecture's loader (whose files this machine's ldconfig leaves out of the cache), from the
    multiarch directories it searches by default."""
    files = set()
    if CROSS:
        for d in (f"/lib/{ARCH}-linux-gnu", f"/usr/lib/{ARCH}-linux-gnu"):
            files.update(os.path.realpath(f) for so in ("libunwind.so.8", "libdw.so.1")
                         for f in glob.glob(f"{d}/{so}"))
        return sorted(files)
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in cache.splitlines():
        m = re.match(rf"\s*(libunwind\.so\.8|libdw\.so\.1) \(.*{LDCONFIG_TAG}.*\) => (\S+)", line)
        if m:
            files.add(os.path.realpath(m.group(2)))
    return sorted(files)


def hidden(cmd):
    """cmd, run where the system's libunwind and libdw are /dev/null (a private mount namespace)."""
    mounts = " && ".join(f"mount --bind /dev/null '{f}'" for f in system_unwinder_files())
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", f"{mounts or 'true'} && exec \"$@\"", "sh", *cmd]


def run(cmd, cwd, sim=True):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env(sim), capture_output=True, text=True, timeout=300)


def launch_section(text):
    """The report's launch part (live on stderr, or `cdsa report` on stdout)."""
    launch = launch_part(report_block(text))
    assert launch, text
    return launch


def assert_names_the_launch(res, native=True):
    assert res.returncode == 1, res.stderr  # the program's own status (its CudaError)
    assert count_reports(res.stderr) == 1, res.stderr
    launch = launch_section(res.stderr)
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in launch
    line, _ = marker_line(SCRIPTS / "nll_loss.py", "LAUNCH-SITE")
    assert f"line {line}, in compute_loss" in launch and "LAUNCH-SITE" in launch, launch
    # Native frames were recorded: the interleaved stack folds the interpreter's and ctypes' frames under the
    # Python ones into one line (report/hybrid_stack.h); without an unwinder there are none to fold.
    folded = re.search(r"\(\d+ interpreter and call-machinery frames folded", launch)
    if native:
        assert folded, launch
    else:
        assert not folded and "Native frames" not in launch, launch


def assert_native_file_line(report):
    """A C++ program built with debug info: its launch site by file:line, which takes libunwind (the frames)
    and libdw (DWARF lines; the fallback symbolizer has none)."""
    launch = launch_section(report)
    line, _ = marker_line(ROOT / "tests" / "e2e" / "programs" / "driver_cases.cc", "LAUNCH-SITE")
    assert "launch_loss(" in launch and f"driver_cases.cc:{line}" in launch, launch


def nll_loss(python):
    return [python, SCRIPTS / "nll_loss.py", "10"]


# --- the wheel file ---------------------------------------------------------------------------------------------

def test_wheel_is_one_manylinux_wheel_for_every_python(wheel):
    assert re.fullmatch(rf"cdsa-[0-9.]+-py3-none-manylinux_2_\d+_{ARCH}\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/WHEEL")]
        tags = [l.split(": ", 1)[1] for l in z.read(meta).decode().splitlines() if l.startswith("Tag: ")]
        names = set(z.namelist())
    assert tags and all(re.fullmatch(rf"py3-none-manylinux_2_\d+_{ARCH}", t) for t in tags), tags
    assert {"cdsa/bin/cdsa", "cdsa/lib/libcdsa.so", "cdsa/__main__.py"} <= names
    assert not [n for n in names if n.endswith(".so") and "cpython" in n], "no extension module"
    show = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert re.search(rf'consistent with the\s+following platform tag: "manylinux_2_\d+_{ARCH}"', show.stdout), \
        show.stdout


def test_version_comes_from_cmake(wheel, venv):
    version = re.search(r"project\(cdsa VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert wheel.name.startswith(f"cdsa-{version}-")
    out = subprocess.run([venv / "bin" / "cdsa", "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"cdsa {version}"
    py = subprocess.run([venv / "bin" / "python", "-c", "import cdsa; print(cdsa.__version__)"],
                        capture_output=True, text=True, check=True).stdout
    assert py.strip() == version


def test_packaged_libcdsa_links_only_libc_and_unwinders_are_private(venv):
    pkg = site_package(venv)
    dyn = subprocess.run(["readelf", "-dW", pkg / "lib" / "libcdsa.so"], capture_output=True, text=True,
                         check=True).stdout
    needed = {l.split("[")[1].rstrip("]") for l in dyn.splitlines() if "(NEEDED)" in l}
    assert needed <= {"libc.so.6", LDSO}, needed
    cli = subprocess.run(["readelf", "-dW", pkg / "bin" / "cdsa"], capture_output=True, text=True, check=True).stdout
    assert {l.split("[")[1].rstrip("]") for l in cli.splitlines() if "(NEEDED)" in l} <= {
        "libc.so.6", LDSO, "libm.so.6"}, cli
    for so in VENDORED:
        d = subprocess.run(["readelf", "-dW", pkg / "lib" / "vendor" / so], capture_output=True, text=True,
                           check=True).stdout
        assert re.search(r"R(UN)?PATH.*\[\$ORIGIN\]", d), (so, d)


def test_licenses_of_what_is_shipped_are_listed(venv):
    vendor = site_package(venv) / "lib" / "vendor"
    listing = (vendor / "THIRD_PARTY_LICENSES.txt").read_text()
    for so in VENDORED:
        line = next((l for l in listing.splitlines() if l.startswith(so + " ")), None)
        assert line, (so, listing)
        deb = re.search(r"from Debian (\S+) ", line).group(1)
        assert (vendor / f"{deb}.copyright").stat().st_size > 500, deb


# --- running it -------------------------------------------------------------------------------------------------

def test_cdsa_run_names_the_launch(venv, tmp_path):
    res = run([venv / "bin" / "cdsa", "run", "--", *nll_loss(venv / "bin" / "python")], tmp_path)
    assert_names_the_launch(res)
    (trace,) = trace_files(tmp_path)
    rep = run([venv / "bin" / "cdsa", "report", trace], tmp_path)
    assert rep.returncode == 0, rep.stderr
    line, _ = marker_line(SCRIPTS / "nll_loss.py", "LAUNCH-SITE")
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in rep.stdout and f"line {line}" in rep.stdout, rep.stdout


def test_python_m_cdsa_run_is_the_same_command(venv, tmp_path):
    res = run([venv / "bin" / "python", "-m", "cdsa", "run", "--", *nll_loss(venv / "bin" / "python")], tmp_path)
    assert_names_the_launch(res)
    assert len(trace_files(tmp_path)) == 1


def test_bundled_unwinders_are_used_when_the_system_has_none(venv, tmp_path):
    if not system_unwinder_files():
        pytest.skip("this machine has no system libunwind/libdw to hide")
    # Control: the build tree's libcdsa.so (no vendor/ folder) loses its native frames in this view.
    ctl = run(hidden(["env", f"LD_PRELOAD={BUILD / 'lib' / 'libcdsa.so'}", *nll_loss(PYTHON)]), tmp_path)
    assert "no usable libunwind" in ctl.stderr, ctl.stderr
    assert_names_the_launch(ctl, native=False)
    # The wheel's copies: native frames under the Python ones, and a C++ launch site by file:line (bundled
    # libdw), live and offline.
    for f in trace_files(tmp_path):
        f.unlink()
    res = run(hidden([venv / "bin" / "cdsa", "run", "--", *nll_loss(venv / "bin" / "python")]), tmp_path)
    assert "no usable libunwind" not in res.stderr and "libdw unavailable" not in res.stderr, res.stderr
    assert_names_the_launch(res)
    cpp = tmp_path / "cpp"
    cpp.mkdir()
    res = run(hidden([venv / "bin" / "cdsa", "run", "--", BUILD / "tests" / "e2e" / "e2e_driver_cases", "nll", "10"]),
              cpp)
    assert res.returncode == 3, res.stderr  # the program's own status
    assert_native_file_line(res.stderr)
    (trace,) = trace_files(cpp)
    rep = run(hidden([venv / "bin" / "cdsa", "report", trace]), cpp)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert_native_file_line(rep.stdout)
    doc = run(hidden([venv / "bin" / "cdsa", "doctor"]), tmp_path)
    assert re.search(r"unwinder\s+libunwind bundled: \S+/cdsa/lib/vendor/libunwind\.so\.8", doc.stdout), doc.stdout
    assert re.search(r"symbolizer\s+libdw [0-9.]+ \(dlopen \S+/cdsa/lib/vendor/libdw\.so\.1\)", doc.stdout), doc.stdout


# --- cdsa doctor: its verdict in each setup ------------------------------------------------------------------------

def verdict(res):
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("cdsa doctor: "), res.stdout
    return last


def test_doctor_supported_setup(venv, tmp_path):
    res = run([venv / "bin" / "cdsa", "doctor"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert verdict(res).startswith("cdsa doctor: ready"), res.stdout
    assert re.search(r"CUDA driver\s+CUDA 13\.\d+ \(\S*/lib/sim/libcuda\.so\.1\)", res.stdout), res.stdout
    # The venv's Python (the console script's interpreter), not the one first on PATH.
    assert re.search(rf"Python\s+CPython [0-9.]+ \({re.escape(str(venv))}/bin/python[0-9.]*\)", res.stdout), res.stdout
    # `python -m cdsa doctor` checks the Python it runs in, and says the same.
    res2 = run([venv / "bin" / "python", "-m", "cdsa", "doctor"], tmp_path)
    assert res2.returncode == 0 and verdict(res2) == verdict(res), res2.stdout


def test_doctor_never_initializes_cuda(venv, tmp_path):
    # A tripwire driver: cuDriverGetVersion answers, every call that would initialize CUDA or touch a device
    # leaves a mark and aborts.
    src = tmp_path / "tripwire.c"
    src.write_text("""
#include <stdio.h>
#include <stdlib.h>
static void trip(const char* f) { FILE* o = fopen(getenv("TRIPWIRE_MARK"), "w"); if (o) { fputs(f, o); fclose(o); } abort(); }
int cuDriverGetVersion(int* v) { *v = 12080; return 0; }
#define T(f) int f(void) { trip(#f); return 999; }
T(cuInit) T(cuDeviceGet) T(cuDeviceGetCount) T(cuCtxCreate) T(cuCtxCreate_v2) T(cuDevicePrimaryCtxRetain)
T(cuMemAlloc) T(cuMemAlloc_v2) T(cuGetProcAddress) T(cuGetProcAddress_v2)
""")
    drv = tmp_path / "drv"
    drv.mkdir()
    subprocess.run([CC, "-shared", "-fPIC", "-o", drv / "libcuda.so.1", src], check=True)
    e = env(sim=False)
    e["LD_LIBRARY_PATH"] = str(drv)
    e["TRIPWIRE_MARK"] = str(tmp_path / "mark")
    res = subprocess.run([venv / "bin" / "cdsa", "doctor"], env=e, capture_output=True, text=True, cwd=tmp_path)
    assert not (tmp_path / "mark").exists(), (tmp_path / "mark").read_text()
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"CUDA driver\s+CUDA 12\.8 \(\S+/drv/libcuda\.so\.1\)", res.stdout), res.stdout


def test_doctor_without_a_driver(venv, tmp_path):
    probe = subprocess.run([PYTHON, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], env=env(sim=False),
                           capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this machine has a CUDA driver")
    res = run([venv / "bin" / "cdsa", "doctor"], tmp_path, sim=False)
    assert res.returncode == 1, res.stdout
    assert verdict(res) == "cdsa doctor: not usable here: no CUDA driver (libcuda.so.1)"


def old_python(tmp_path):
    """A CPython older than the walker supports: a real one when installed, else a stand-in that answers the
    doctor's probe as CPython 3.9 does."""
    for cand in sorted(glob.glob("/root/.pyenv/versions/3.9*/bin/python3")) + ["/usr/bin/python3.9"]:
        if os.access(cand, os.X_OK):
            return cand
    fake = tmp_path / "python3.9"
    fake.write_text("#!/bin/sh\nprintf 'version=3.9.18\\nmajor=3\\nminor=9\\nimpl=cpython\\ngil_disabled=0\\n"
                    "executable=%s\\ntorch=\\n' \"$0\"\n")
    fake.chmod(0o755)
    return str(fake)


def test_doctor_unsupported_python(venv, tmp_path):
    res = run([venv / "bin" / "cdsa", "doctor", "--python", old_python(tmp_path)], tmp_path)
    assert res.returncode == 0, res.stdout  # the launch is still named, with native frames
    assert re.search(r"usable, with limits: no Python frames \(CPython 3\.9\.\d+ is outside 3\.\d+-3\.\d+\)$",
                     verdict(res)), res.stdout


@pytest.fixture
def venv_without_unwinder(wheel, tmp_path):
    """An install whose bundled libunwind is gone (a stripped-down build), on a view without the system's."""
    if not system_unwinder_files():
        pytest.skip("this machine has no system libunwind to hide")
    v = make_venv(wheel, tmp_path / "stripped")
    (site_package(v) / "lib" / "vendor" / "libunwind.so.8").unlink()
    return v


def test_doctor_and_run_without_an_unwinder(venv_without_unwinder, tmp_path):
    v = venv_without_unwinder
    res = run(hidden([v / "bin" / "cdsa", "doctor"]), tmp_path)
    assert res.returncode == 0, res.stdout
    assert verdict(res) == "cdsa doctor: usable, with limits: no native frames (no libunwind)", res.stdout
    both = run(hidden([v / "bin" / "cdsa", "doctor", "--python", old_python(tmp_path)]), tmp_path)
    assert both.returncode == 1, both.stdout
    assert "not usable here: no frames of any kind" in verdict(both), both.stdout
    # cdsa run says so once and still names the launch by its Python frames.
    run_res = run(hidden([v / "bin" / "cdsa", "run", "--", *nll_loss(v / "bin" / "python")]), tmp_path)
    assert run_res.stderr.count("no usable libunwind") == 1, run_res.stderr
    assert_names_the_launch(run_res, native=False)


def test_doctor_lists_other_preloads_and_conflicts(venv, tmp_path):
    other = BUILD / "tests" / "e2e" / "libe2e_other_preload.so"
    e = env()
    e["LD_PRELOAD"] = str(other)
    e["CUDA_INJECTION64_PATH"] = "/opt/profiler/libToolsInjection64.so"
    e["CDSA_NATIVE_DEPTH"] = "lots"
    res = subprocess.run([venv / "bin" / "cdsa", "doctor"], env=e, capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(rf"LD_PRELOAD\s+other entries kept: {re.escape(str(other))}$", res.stdout, re.M), res.stdout
    assert re.search(r"conflict\s+CUDA_INJECTION64_PATH=/opt/profiler/libToolsInjection64\.so: another CUPTI user",
                     res.stdout), res.stdout
    # The bad CDSA_* value: one doctor line with the message a process using CUDA would print, and no
    # message from the library itself (doctor loads no CUDA).
    assert res.stdout.count("CDSA_NATIVE_DEPTH=lots: expected an integer in 0..256; using the default") == 1, res.stdout
    assert "CDSA_NATIVE_DEPTH=lots" not in res.stderr, res.stderr


# --- a notebook: cdsa jupyter install, then a real kernel from that kernelspec ----------------------------------

def test_jupyter_kernelspec_from_the_wheel_runs_cells_under_cdsa(wheel, tmp_path):
    """The issue-18 check: a fresh venv with the wheel (ipykernel and jupyter_client from this Python's
    site-packages, tools/setup.sh: no network), `cdsa jupyter install --prefix VENV --name N`, then that
    kernelspec started by jupyter_client from the venv's data path, cells over the simulated driver."""
    if CROSS:
        pytest.skip("ipykernel's pyzmq and tornado here are this machine's architecture, not the wheel's")
    if not os.environ.get("CI"):
        pytest.importorskip("jupyter_client")
        pytest.importorskip("ipykernel")
    from jupyter_kernel import CELLS, check_fault_cells, run_cells  # tests/support, shared with tests/e2e

    v = make_venv(wheel, tmp_path / "nb", system_site=True)
    res = run([v / "bin" / "cdsa", "jupyter", "install", "--prefix", v, "--name", "cdsa-wheel"], tmp_path)
    assert res.returncode == 0, res.stderr
    kernels = v / "share" / "jupyter" / "kernels"
    spec = json.loads((kernels / "cdsa-wheel" / "kernel.json").read_text())
    # The wheel's own CLI under the kernel's Python, which is the venv's (the `cdsa` command passes its Python).
    assert spec["argv"][:3] == [str(site_package(v) / "bin" / "cdsa"), "run", "--"], spec
    assert os.path.dirname(spec["argv"][3]) == str(v / "bin") and spec["argv"][4:6] == ["-m", "ipykernel_launcher"]
    assert "env" not in spec and "cdsa" in spec["metadata"], spec
    assert "is not on" not in res.stdout, res.stdout  # VENV/share/jupyter is on the venv Python's Jupyter path
    cells_env = env()
    cells_env["CDSA_TRACE_FILE"] = str(tmp_path / "cdsa-%p.json")
    check_fault_cells(run_cells(CELLS, env=cells_env, cwd=tmp_path, kernel_name="cdsa-wheel", kernel_dirs=[kernels]))
    # doctor (the venv's Python) lists it; uninstall removes it.
    doc = run([v / "bin" / "cdsa", "doctor"], tmp_path)
    assert f"kernelspec cdsa-wheel (\"Python 3 (cdsa)\") in {kernels}:" in doc.stdout, doc.stdout
    res = run([v / "bin" / "cdsa", "jupyter", "uninstall", "cdsa-wheel", "--prefix", v], tmp_path)
    assert res.returncode == 0 and not (kernels / "cdsa-wheel").exists(), res.stderr


def test_python_api_of_the_installed_package(venv, tmp_path):
    res = run([venv / "bin" / "cdsa", "run", "--", *nll_loss(venv / "bin" / "python")], tmp_path)
    (trace,) = trace_files(tmp_path)
    code = ("import cdsa, json, sys; r = cdsa.load_trace(sys.argv[1]); "
            "print(json.dumps([r.kernel, r.trace_path, [list(f) for f in r.frames], cdsa.last_report()]))")
    out = run([venv / "bin" / "python", "-c", code, trace], tmp_path)
    assert out.returncode == 0, out.stderr
    kernel, path, frames, live = json.loads(out.stdout)
    line, source = marker_line(SCRIPTS / "nll_loss.py", "LAUNCH-SITE")
    assert (kernel, path, live) == ("nll_loss_forward_reduce_cuda_kernel_2d", str(trace), None), out.stdout
    assert [str(SCRIPTS / "nll_loss.py"), line, "compute_loss", source] in frames, frames
