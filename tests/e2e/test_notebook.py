"""A real Jupyter kernel (ipykernel and jupyter_client from PyPI, tools/setup.sh) over the simulated driver: cells
named as IPython names them, the kernel's machinery folded, the report in the output of the cell that surfaced the
fault before its error, the note at the end of that error, and the restart pointer in a later cell (docs/python.md).
Both ways to turn cdsa on: libcdsa.so preloaded into Jupyter's own kernelspec, and `cdsa jupyter install`'s
kernelspec (the build tree's cdsa; tests/wheel runs the wheel's). The kernel runner and the check are shared with
tests/wheel (tests/support/jupyter_kernel.py)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import BUILD, CDSA, PROGRAMS, SANITIZED, clean_env, run_cli

jupyter_client = pytest.importorskip("jupyter_client") if not os.environ.get("CI") else __import__("jupyter_client")
if not os.environ.get("CI"):
    pytest.importorskip("ipykernel")

from jupyter_kernel import CELLS, check_fault_cells, run_cells  # noqa: E402  (tests/support)

def cdsa(*args, env=None, cwd=None):
    return run_cli(*args, cwd=cwd, env=env if env is not None else clean_env(preload=False))


def test_notebook_cells_report_note_and_restart_pointer(tmp_path):
    env = clean_env({"CDSA_TRACE_FILE": str(tmp_path / "cdsa-%p.json")})
    check_fault_cells(run_cells(CELLS, env=env, cwd=tmp_path))


def test_cdsa_jupyter_install_kernel_runs_under_cdsa_and_keeps_the_users_preload(tmp_path):
    prefix = tmp_path / "prefix"
    # `cdsa run` options after "--" go into the kernel's argv: the trace file goes where the kernelspec says.
    pattern = str(tmp_path / "kernel-%p.json")
    res = cdsa("jupyter", "install", "--prefix", prefix, "--name", "cdsa-e2e", "--python", sys.executable, "--",
               "--trace-file", pattern)
    assert res.returncode == 0, res.stderr
    kernels = prefix / "share" / "jupyter" / "kernels"
    spec = json.loads((kernels / "cdsa-e2e" / "kernel.json").read_text())
    assert spec["argv"] == [os.path.realpath(CDSA), "run", "--trace-file", pattern, "--", sys.executable, "-m",
                            "ipykernel_launcher", "-f", "{connection_file}"], spec
    assert spec["metadata"]["cdsa"]["run_options"] == ["--trace-file", pattern], spec
    assert spec["display_name"] == "Python 3 (cdsa)" and spec["language"] == "python"
    assert "env" not in spec and spec["metadata"]["cdsa"]["python"] == sys.executable, spec
    assert (kernels / "cdsa-e2e" / "logo-64x64.png").is_file()  # ipykernel's logos, as its own install copies
    assert f"Installed kernelspec cdsa-e2e (\"Python 3 (cdsa)\") in {kernels / 'cdsa-e2e'}" in res.stdout

    # The kernel is started by jupyter_client from that directory alone, without LD_PRELOAD=libcdsa.so: the
    # kernelspec's `cdsa run` adds it, and the user's own preload (an allocator) stays.
    env = clean_env({"CDSA_TRACE_FILE": str(tmp_path / "cdsa-%p.json")}, preload=False)
    users = "" if SANITIZED else str(PROGRAMS / "libe2e_other_preload.so")
    if users:
        env["LD_PRELOAD"] = users
    cells = CELLS + ["import os; print('PRELOAD=' + os.environ.get('LD_PRELOAD', ''))"]
    outputs = run_cells(cells, env=env, cwd=tmp_path, kernel_name="cdsa-e2e", kernel_dirs=[kernels])
    check_fault_cells(outputs)
    assert list(tmp_path.glob("kernel-*.json")) and not list(tmp_path.glob("cdsa-*.json")), list(tmp_path.iterdir())
    preload = "".join(t for _, t in outputs[-1]).strip()[len("PRELOAD="):].split(":")
    assert str(BUILD / "lib" / "libcdsa.so") in preload, preload
    if users:
        assert preload[-1] == users, preload

    res = cdsa("jupyter", "uninstall", "cdsa-e2e", "--prefix", prefix)
    assert res.returncode == 0 and not (kernels / "cdsa-e2e").exists(), res.stderr
    assert res.stdout == f"Removed kernelspec cdsa-e2e (\"Python 3 (cdsa)\") from {kernels}\n", res.stdout


# --- cdsa jupyter: every bad input gets one clear message ---------------------------------------------------------

def python_without_ipykernel(tmp_path):
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


def test_jupyter_install_refuses_bad_input(tmp_path):
    p = tmp_path / "p"
    cases = [
        (["install", "--bogus"], 2, "cdsa jupyter install: unknown option --bogus (see cdsa jupyter --help)"),
        (["install", "--name"], 2, "cdsa jupyter install: --name needs a kernel name"),
        (["install", "extra"], 2, "cdsa jupyter install: unexpected argument extra (the name goes after --name)"),
        (["install", "--user", "--prefix", p], 2, "--user, --sys-prefix and --prefix exclude each other"),
        (["install", "--prefix", p, "--name", "my kernel"], 1,
         "cdsa jupyter install: 'my kernel' is not a Jupyter kernel name (letters, digits, '.', '_' and '-' only)"),
        (["install", "--prefix", p, "--name", "../Up"], 1, "'../Up' is not a Jupyter kernel name"),
        (["install", "--prefix", p, "--name", ""], 1, "'' is not a Jupyter kernel name"),
        (["uninstall", "a:b", "--prefix", p], 1, "cdsa jupyter uninstall: 'a:b' is not a Jupyter kernel name"),
        (["install", "--prefix", p, "--python", tmp_path / "nowhere"], 1,
         f"cdsa jupyter install: --python {tmp_path / 'nowhere'}: cannot run it (no such program)"),
        (["install", "--prefix", p, "--python", python_without_ipykernel(tmp_path)], 1,
         f"--python {tmp_path / 'bare' / 'bin' / 'python'}: it has no ipykernel; install it"),
        (["uninstall"], 2, "cdsa jupyter uninstall: no kernel name given"),
        (["uninstall", "a", "b", "--prefix", p], 2, "cdsa jupyter uninstall: one name at a time"),
        (["uninstall", "nope", "--prefix", p], 1,
         f"cdsa jupyter uninstall: no kernelspec nope in {p / 'share' / 'jupyter' / 'kernels'}"),
        (["install", "--prefix", p, "--", "--bogus"], 2,
         "cdsa jupyter install: unknown option --bogus (see cdsa run --help)"),
        (["install", "--prefix", p, "--", "--ring-size"], 2, "cdsa jupyter install: --ring-size needs"),
        (["install", "--prefix", p, "--", "--quiet", "python3"], 2,
         "cdsa jupyter install: python3 is not a cdsa run option (see cdsa run --help)"),
        (["install", "--prefix", p, "--", "--lib", tmp_path / "nope.so"], 2,
         f"cdsa jupyter install: --lib {tmp_path / 'nope.so'}: no such file"),
        (["install", "--prefix", p, "--", "--"], 2, "cdsa jupyter install: -- is not a cdsa run option to pass on"),
        (["frobnicate"], 2, "cdsa jupyter: unknown subcommand 'frobnicate': install or uninstall"),
        ([], 2, "cdsa jupyter: install or uninstall?"),
    ]
    for args, rc, message in cases:
        res = cdsa("jupyter", *args)
        assert res.returncode == rc and message in res.stderr, (args, res.returncode, res.stderr)
        assert res.stderr.count("\n") == 1 and res.stdout == "", (args, res.stderr, res.stdout)
    assert not p.exists()  # nothing written by any of them


def test_jupyter_install_never_touches_a_kernelspec_that_is_not_cdsas(tmp_path):
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    theirs = kernels / "python3"
    theirs.mkdir(parents=True)
    original = json.dumps({"argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                           "display_name": "Python 3 (ipykernel)", "language": "python"})
    (theirs / "kernel.json").write_text(original)
    res = cdsa("jupyter", "install", "--prefix", tmp_path, "--name", "python3", "--python", sys.executable)
    assert res.returncode == 1, res.stderr
    assert f"{theirs} exists and is not a cdsa kernelspec (no metadata.cdsa); not touched" in res.stderr
    res = cdsa("jupyter", "uninstall", "python3", "--prefix", tmp_path)
    assert res.returncode == 1, res.stderr
    assert f"{theirs} is not a cdsa kernelspec (no metadata.cdsa in its kernel.json); not removed" in res.stderr
    assert (theirs / "kernel.json").read_text() == original

    # A second install of cdsa's own replaces it (a new display name); upper case is lowered as Jupyter does.
    for display, verb in (("first", "Installed"), ("second", "Replaced")):
        res = cdsa("jupyter", "install", "--prefix", tmp_path, "--name", "Mine", "--display-name", display,
                   "--python", sys.executable)
        assert res.returncode == 0 and res.stdout.startswith(f"{verb} kernelspec mine (\"{display}\")"), res
    assert json.loads((kernels / "mine" / "kernel.json").read_text())["display_name"] == "second"


def test_jupyter_install_places_follow_jupyters_rules(tmp_path):
    from jupyter_core.paths import jupyter_data_dir

    # --user: where this Python's jupyter_core puts the user's data ($JUPYTER_DATA_DIR here).
    env = clean_env({"JUPYTER_DATA_DIR": str(tmp_path / "data")}, preload=False)
    res = cdsa("jupyter", "install", "--user", "--python", sys.executable, env=env)
    assert res.returncode == 0, res.stderr
    old = os.environ.get("JUPYTER_DATA_DIR")
    os.environ["JUPYTER_DATA_DIR"] = str(tmp_path / "data")
    try:
        assert (pathlib.Path(jupyter_data_dir()) / "kernels" / "python3-cdsa" / "kernel.json").is_file()
    finally:
        if old is None:
            del os.environ["JUPYTER_DATA_DIR"]
        else:
            os.environ["JUPYTER_DATA_DIR"] = old
    # The default is --user too; the same command again replaces it.
    res = cdsa("jupyter", "install", "--python", sys.executable, env=env)
    assert res.returncode == 0 and res.stdout.startswith("Replaced kernelspec python3-cdsa"), res.stdout

    # --sys-prefix: that Python's sys.prefix (a venv that sees this Python's ipykernel); argv keeps the venv's
    # python as sys.executable names it (not the interpreter behind its symbolic link).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    res = cdsa("jupyter", "install", "--sys-prefix", "--python", venv / "bin" / "python")
    assert res.returncode == 0, res.stderr
    spec = json.loads((venv / "share" / "jupyter" / "kernels" / "python3-cdsa" / "kernel.json").read_text())
    assert spec["argv"][3] == str(venv / "bin" / "python"), spec

    # doctor lists the cdsa kernelspecs on the Jupyter path of the Python it checks: the venv's (its
    # sys.prefix) and JUPYTER_PATH's, not the one that is not cdsa's; one whose Python is gone gets a warning.
    other = tmp_path / "other" / "share" / "jupyter" / "kernels" / "theirs"
    other.mkdir(parents=True)
    (other / "kernel.json").write_text(json.dumps({"argv": ["x"], "display_name": "theirs"}))
    gone = tmp_path / "gone"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(gone)], check=True)
    assert cdsa("jupyter", "install", "--prefix", tmp_path / "other", "--name", "stale", "--python",
                gone / "bin" / "python").returncode == 0
    (gone / "bin" / "python").unlink()
    env = clean_env({"JUPYTER_PATH": str(tmp_path / "other" / "share" / "jupyter"),
                     "JUPYTER_DATA_DIR": str(tmp_path / "empty")}, preload=False)
    res = cdsa("doctor", "--python", venv / "bin" / "python", env=env)
    lines = [l for l in res.stdout.splitlines() if " Jupyter " in l]
    assert lines == [
        f"  warn  Jupyter       kernelspec stale (\"Python 3 (cdsa)\") in {other.parent}: {gone / 'bin' / 'python'} is gone: "
        "`cdsa jupyter uninstall stale`, or install it again with another --python",
        f"  ok    Jupyter       kernelspec python3-cdsa (\"Python 3 (cdsa)\") in "
        f"{venv / 'share' / 'jupyter' / 'kernels'}: {venv / 'bin' / 'python'}",
    ], res.stdout
    assert cdsa("jupyter", "uninstall", "python3-cdsa", "--sys-prefix", "--python", venv / "bin" / "python").returncode == 0
    (other.parent / "stale" / "kernel.json").unlink()
    res = cdsa("doctor", "--python", venv / "bin" / "python", env=env)
    lines = [l for l in res.stdout.splitlines() if " Jupyter " in l]
    assert lines == ["  info  Jupyter       no cdsa kernelspec on the Jupyter path (`cdsa jupyter install` adds one)"], \
        res.stdout
