"""Shared helpers for the end-to-end tests: run a program under LD_PRELOAD=libcdsa.so
against the simulated driver and pick the report apart."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BUILD = pathlib.Path(os.environ.get("TEST_BUILD_DIR", ROOT / "build")).resolve()
LIBCDSA = BUILD / "lib" / "libcdsa.so"
CDSA = BUILD / "bin" / "cdsa"
SIMDIR = BUILD / "lib" / "sim"
SCRIPTS = HERE / "scripts"
PROGRAMS = BUILD / "tests" / "e2e"
sys.path.insert(0, str(ROOT / "tests" / "support"))
# The report is read by one module for these tests, the wheel's and the GPU suite's; the test files import it too.
from cdsa_report import BANNER, ReadsReport, marker_line  # noqa: E402,F401


def clean_env(extra=None, preload=True, dll="cdll"):
    # No CDSA_ variable from outside: the developer's own settings would change the reports.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDSA_") and k != "LD_PRELOAD"}
    env["PYTHONPATH"] = str(SCRIPTS)
    env["LD_LIBRARY_PATH"] = str(SIMDIR) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["SIMCUDA_DLL"] = dll
    env["PYTHONUNBUFFERED"] = "1"
    if preload:
        env["LD_PRELOAD"] = str(LIBCDSA)
    if extra:
        env.update(extra)
    # Sanitizer builds: the sanitizer runtime comes first in LD_PRELOAD (tools/test.sh sets it), also for runs
    # without cdsa, since the simulated driver and the test programs are instrumented too.
    first = os.environ.get("E2E_PRELOAD_FIRST")
    if first:
        env["LD_PRELOAD"] = first + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env.setdefault("E2E_SLOW", "10")  # scripts that queue work behind a busy kernel keep it busy longer
    return env


# A cross build's programs run under an emulator (the aarch64 build under qemu-user: tools/test.sh's aarch64 step sets
# E2E_EMULATOR to CMake's CMAKE_CROSSCOMPILING_EMULATOR, space-separated). Without binfmt_misc the host kernel cannot
# exec an aarch64 program, so each one is started as an argument of qemu, and what the program itself must see in its
# environment, LD_PRELOAD and LD_LIBRARY_PATH (for the x86-64 qemu they would name libraries of the wrong
# architecture), goes to it through QEMU_SET_ENV. A program that execs another aarch64 program (cdsa run, a
# launcher) still fails here: only the first one is emulated.
EMULATOR = os.environ.get("E2E_EMULATOR", "").split()


def emulated(argv, env):
    """argv and env as they are, or, under E2E_EMULATOR, the emulator's command line and environment."""
    if not EMULATOR:
        return argv, env
    env = dict(os.environ if env is None else env)
    guest = [f"{k}={env.pop(k)}" for k in ("LD_PRELOAD", "LD_LIBRARY_PATH") if k in env]
    if guest:
        env["QEMU_SET_ENV"] = ",".join(guest)
    return EMULATOR + list(argv), env


_EXECS_DIRECTLY = []


def execs_directly():
    """Whether a program of the build under test can exec another one of its architecture (cdsa run, a launcher):
    always natively; under E2E_EMULATOR only where binfmt_misc hands the target's programs to qemu (tools/setup.sh
    registers Debian's qemu-user-static handler where it can), tried once by starting PYTHON directly."""
    if not EMULATOR:
        return True
    if not _EXECS_DIRECTLY:
        try:
            ok = subprocess.run([PYTHON, "-c", "pass"], capture_output=True, timeout=60).returncode == 0
        except OSError:  # ENOEXEC: no handler for the target's ELF files
            ok = False
        _EXECS_DIRECTLY.append(ok)
    return _EXECS_DIRECTLY[0]


def run_cli(*args, cwd=None, env=None, timeout=120):
    """The cdsa CLI of the build under test with `args` (each made a string), its output captured as text. `env`: the
    environment to run it in (None: this process's own; clean_env(preload=False) for one without CDSA_ settings)."""
    argv, env = emulated([str(CDSA), *map(str, args)], env)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


SANITIZED = bool(os.environ.get("E2E_PRELOAD_FIRST"))


class Run(ReadsReport):
    strict = True  # no report, or no launch named: the test fails saying so

    def __init__(self, proc, cwd):
        self.proc = proc
        self.cwd = pathlib.Path(cwd)
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def trace(self):
        files = self.traces()
        assert len(files) == 1, f"expected one trace file in {self.cwd}, found {files}"
        return json.loads(files[0].read_text())


def pdl_lines(tmp_path):
    """The sim's PDL log of a run in tmp_path (SIM_CUDA_PDL_LOG=tmp_path/pdl.log, tests/sim/README.md): one line per
    PDL launch, "<stream> kept|lost <predecessor>"."""
    p = tmp_path / "pdl.log"
    return p.read_text().splitlines() if p.exists() else []


def lost_after_first(tmp_path):
    """The PDL launches that lost their overlap, but for each stream's first one: a launch on a stream that never
    carried a PDL launch gets its mark at once (shim/record/breadcrumbs.h), so the first pair of each stream has a
    mark between its kernels; no later pair may."""
    seen, out = set(), []
    for l in pdl_lines(tmp_path):
        stream = l.split()[0]
        if stream in seen and " lost " in l:
            out.append(l)
        seen.add(stream)
    return out


# The interpreter the Python programs run under: this one, or E2E_PYTHON (the aarch64 step: Debian's arm64 CPython,
# tools/setup.sh's .aarch64-python/, started under E2E_EMULATOR like every other program of the build under test).
PYTHON = os.environ.get("E2E_PYTHON") or sys.executable
PYTHON_EMULATED = bool(os.environ.get("E2E_PYTHON"))


def run_python(script, *args, cwd, env=None, preload=True, dll="cdll", timeout=180, python=None):
    """`script` of tests/e2e/scripts run by PYTHON (`python`: another interpreter of this host, never emulated)."""
    argv = [str(python or PYTHON), str(SCRIPTS / script), *map(str, args)]
    env = clean_env(env, preload, dll)
    if python is None and PYTHON_EMULATED:
        argv, env = emulated(argv, env)
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return Run(proc, cwd)


def run_program(argv, *, cwd, env=None, preload=True, timeout=180):
    argv, env = emulated([str(a) for a in argv], clean_env(env, preload))
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return Run(proc, cwd)


def other_pythons(*versions):
    """CPython interpreters other than this one (pyenv's, Debian's), by minor version, where installed; none where
    E2E_PYTHON names the interpreter (the host's cannot load a cross build's libcdsa.so)."""
    found = []
    for v in versions:
        if PYTHON_EMULATED:
            found.append(pytest.param(None, id=f"python{v}", marks=pytest.mark.skip(reason="E2E_PYTHON set")))
            continue
        cands = sorted(pathlib.Path("/root/.pyenv/versions").glob(f"{v}.*/bin/python3")) + [pathlib.Path(f"/usr/bin/python{v}")]
        exe = next((c for c in cands if c.exists()), None)
        found.append(pytest.param(exe, id=f"python{v}", marks=pytest.mark.skipif(exe is None, reason=f"no CPython {v} here")))
    return found


def py_frame(script, marker, function):
    """The two traceback lines cdsa prints for a Python frame at the marker (indentation removed)."""
    n, text = marker_line(SCRIPTS / script, marker)
    return f'File "{SCRIPTS / script}", line {n}, in {function}\n{text}'


@pytest.fixture(autouse=True)
def _built():
    assert LIBCDSA.exists(), f"{LIBCDSA} is missing: build first (cmake --build build)"
    assert (SIMDIR / "libcuda.so.1").exists(), f"{SIMDIR}/libcuda.so.1 is missing: build first"
