"""Configuration problems (bad or unknown CDSA_* values) are said where they matter: once in a process that uses
CUDA, never in one that does not (shells, compilers, tools a job starts), and by `cdsa run` before the command."""
import sys

import pytest

from conftest import BUILD, SCRIPTS, clean_env, run_cli, run_program


# Three kinds of problem: a bad integer, a bad choice, a name cdsa does not know.
BAD = {"CDSA_NATIVE_DEPTH": "abc", "CDSA_TRACE": "sometimes", "CDSA_NATIV_DEPTH": "8"}
MESSAGES = [
    "CDSA_NATIVE_DEPTH=abc: expected an integer in 0..256; using the default",
    "CDSA_TRACE=sometimes: expected fault, always or off; using fault",
    "CDSA_NATIV_DEPTH: unknown variable, ignored (`cdsa run --help` lists them)",
]


@pytest.mark.parametrize("argv", [
    ["/bin/true"],
    ["/bin/sh", "-c", "sh -c 'echo child'; /bin/true"],
    [sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', 'print(1)'])"],
])
def test_process_without_cuda_prints_nothing(tmp_path, argv):
    run = run_program(argv, cwd=tmp_path, env=BAD)
    assert run.err == "", run.err
    assert list(tmp_path.iterdir()) == []


def test_cuda_process_prints_each_problem_once(tmp_path):
    # A shell and its non-CUDA child first, then the CUDA-using program: only the last one speaks, once per problem.
    script = f"sh -c true; {sys.executable} {SCRIPTS / 'no_fault.py'} 0"
    run = run_program(["/bin/sh", "-c", script], cwd=tmp_path, env=BAD)
    assert run.rc == 0, run.err
    # (In the environment's order, which the shell may change.)
    assert sorted(run.err.splitlines()) == sorted("cdsa: " + m for m in MESSAGES), run.err
    assert "loss" in run.out


def test_cuda_process_uses_the_defaults(tmp_path):
    run = run_program([sys.executable, SCRIPTS / "nll_loss.py", 10], cwd=tmp_path,
                      env=BAD)
    assert run.reports == 1
    assert run.err.count("CDSA_NATIVE_DEPTH=abc") == 1
    # The default trace mode (fault) and depth (48) are in force.
    assert run.trace()["cdsa"]["config"]["trace"] == "fault"
    assert run.trace()["cdsa"]["config"]["native_depth"] == "48"


def test_disabled_library_stays_silent(tmp_path):
    run = run_program([sys.executable, SCRIPTS / "no_fault.py", 0], cwd=tmp_path,
                      env={**BAD, "CDSA_DISABLE": "1"})
    assert run.rc == 0 and run.err == "", run.err


def test_run_reports_before_the_command_starts(tmp_path):
    env = clean_env({"CDSA_NATIV_DEPTH": "8"}, preload=False)
    proc = run_cli("run", "--trace", "sometimes", "--", "sh", "-c", "echo command-started >&2", cwd=tmp_path, env=env,
                   timeout=60)
    assert proc.returncode == 0
    lines = proc.stderr.splitlines()
    assert lines[-1] == "command-started", proc.stderr
    assert sorted(lines[:-1]) == sorted("cdsa run: " + m for m in MESSAGES[1:]), proc.stderr


def test_run_with_good_configuration_says_nothing(tmp_path):
    env = clean_env({"CDSA_NATIVE_DEPTH": "8"}, preload=False)
    proc = run_cli("run", "--trace", "off", "--quiet", "--", "sh", "-c", "echo ok", cwd=tmp_path, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == "ok\n"
