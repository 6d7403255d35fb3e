"""`cdsa run -- CMD`: sets up the preload and the configuration, returns CMD's status."""
import json
import re
import subprocess

from conftest import BUILD, CDSA, ROOT, SCRIPTS, clean_env, py_frame, run_cli, Run

def cdsa(*args, cwd, env=None):
    return Run(run_cli(*args, cwd=cwd, env=clean_env(env, preload=False), timeout=180), cwd)


def test_run_preloads_and_returns_the_status(tmp_path):
    run = cdsa("run", "--", "python3", SCRIPTS / "nll_loss.py", 10, cwd=tmp_path)
    assert run.rc == 1 and run.reports == 1, run.err
    assert py_frame("nll_loss.py", "LAUNCH-SITE", "compute_loss") in run.launch_part()
    ok = cdsa("run", "--", "python3", SCRIPTS / "no_fault.py", 4, cwd=tmp_path / "..")
    assert ok.rc == 4 and ok.err == ""


def test_run_options_become_configuration(tmp_path):
    run = cdsa("run", "--trace-file", "x-%p.json", "--native-depth", 3, "--", "python3", SCRIPTS / "nll_loss.py", 10,
               cwd=tmp_path)
    assert run.reports == 1
    files = list(tmp_path.glob("x-*.json"))
    assert len(files) == 1 and run.traces() == []
    t = json.loads(files[0].read_text())
    assert t["cdsa"]["config"]["native_depth"] == "3"
    assert all(len(s["stack"]["native"]) <= 3 for s in t["stacks"])


def test_run_usage_errors(tmp_path):
    assert cdsa("run", cwd=tmp_path).rc == 2
    bad = cdsa("run", "--frobnicate", "--", "true", cwd=tmp_path)
    assert bad.rc == 2 and "unknown option --frobnicate" in bad.err
    missing = cdsa("run", "--", "/nonexistent/program", cwd=tmp_path)
    assert missing.rc == 127 and "cannot run /nonexistent/program" in missing.err


def test_help_lists_every_variable(tmp_path):
    out = cdsa("run", "--help", cwd=tmp_path).out
    source = (ROOT / "shim" / "common" / "config_vars.def").read_text()
    names = set(re.findall(r'^CDSA_VAR\((CDSA_[A-Z_]+),', source, re.M))
    assert names, "no variables found in shim/common/config_vars.def"
    for name in names:
        assert name in out, name


def test_run_becomes_the_command(tmp_path):
    """cdsa run execs: the command keeps cdsa's pid, and a signal that kills it is seen as such."""
    e = clean_env(preload=False)
    p = subprocess.Popen([str(CDSA), "run", "--", "sh", "-c", "echo $$"], cwd=tmp_path, env=e, stdout=subprocess.PIPE,
                         text=True)
    out, _ = p.communicate(timeout=60)
    assert int(out.strip()) == p.pid
    killed = subprocess.run([str(CDSA), "run", "--", "sh", "-c", "kill -TERM $$"], cwd=tmp_path, env=e, timeout=60)
    assert killed.returncode == -15
