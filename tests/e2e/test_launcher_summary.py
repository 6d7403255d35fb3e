"""The launcher summary: a launcher run under cdsa (here fake_launcher.py, which starts ranks as torchrun does) prints
at its own exit the merged verdict of the traces its ranks wrote: the faulting rank and its launch line first by
each rank's own evidence (not by the clock), the others clean, failed later or without a trace (killed). Nothing
from the ranks themselves, nothing when nothing faulted, the launcher's exit status unchanged."""
import json
import os
import subprocess
import sys

from conftest import BUILD, CDSA, LIBCDSA, SCRIPTS, clean_env, marker_line, run_cli
SUMMARY = "cdsa: launcher summary"


def launch(tmp_path, *modes, under_run=True, env=None, preload_cdsa=True):
    """fake_launcher.py MODES..., under `cdsa run` (else plain LD_PRELOAD): (returncode, stderr)."""
    e = clean_env(env, preload=preload_cdsa and not under_run)
    argv = [sys.executable, str(SCRIPTS / "fake_launcher.py"), *modes]
    if under_run:
        argv = [str(CDSA), "run", "--", *argv]
    p = subprocess.run(argv, cwd=tmp_path, env=e, capture_output=True, text=True, timeout=180)
    return p.returncode, p.stderr


def summary_of(err):
    i = err.find(SUMMARY)
    assert i >= 0, err
    assert err.count(SUMMARY) == 1, err  # only the launcher prints it, once
    return err[i:]


def test_the_summary_names_the_faulting_rank_first(tmp_path):
    # Rank 1's collective faults first by the clock; rank 2's own assert is the cause; rank 0 is clean; rank 3 is
    # killed by the launcher. CDSA_TRACE=always: the clean rank writes a trace at its exit.
    rc, err = launch(tmp_path, "clean", "collective", "assert", "hang", env={"CDSA_TRACE": "always"})
    assert rc == 1, err  # the launcher's own status
    assert "launcher: ranks [2] failed" in err or "launcher: ranks [1, 2] failed" in err, err
    s = summary_of(err)
    assert err.rstrip().endswith("=" * 71), err  # the last thing on stderr, framed as the report is
    assert err.index("launcher: ranks") < err.index(SUMMARY)  # after the launcher's own lines
    # Each faulting rank printed its own report, named by its rank; the summary came from the launcher alone.
    assert "cdsa[rank 2]: CUDA error 710" in err and "cdsa[rank 1]: CUDA error 700" in err, err
    assert "cdsa: this run's 3 trace files: 2 faulted, 0 saw only the aftermath, 1 clean" in s, s
    first = s.split("\n\n")[1]
    assert first.startswith("First fault: rank 2 "), s
    assert "CUDA error 710 CUDA_ERROR_ASSERT" in first
    n, src = marker_line(SCRIPTS / "rank_job.py", "LAUNCH-SITE")
    assert "failing launch: kernel nll_loss_forward_reduce_cuda_kernel_2d" in first, first
    assert f"{SCRIPTS / 'rank_job.py'}:{n} in train_step\n" in first, first
    assert src.split("#")[0].strip() in first  # the launch's source line
    assert "the device's assert: Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d" in first
    faulted = s.split("Ranks that faulted")[1].split("\n\n")[0]
    order = [l.split()[1] for l in faulted.splitlines() if l.startswith("  rank")]
    assert order == ["2", "1"], s  # by evidence: rank 1's collective came first by the clock
    assert "its failing launch is a collective" in faulted
    clean = s.split("Clean ranks")[1].split("\n\n")[0]
    assert [l.split()[1] for l in clean.splitlines()[1:]] == ["0"], s
    assert "Rank 3 wrote no trace: killed, or ended without running exit handlers" in s, s
    session = json.loads(next(tmp_path.glob("cdsa-*rank2-*.json")).read_text())["process"]["session"]
    assert f"Again, or later: cdsa merge --session {session} {tmp_path}" in s
    # The same verdict from the files, later (stdout, without the frame).
    again = run_cli("merge", "--session", session, tmp_path, env=clean_env(preload=False), timeout=60)
    assert again.returncode == 0 and again.stdout.split("\n\n")[1] == first, again.stdout


def test_the_trace_records_the_session_of_its_tree(tmp_path):
    rc, err = launch(tmp_path, "assert", "assert", env={"CDSA_TRACE_FILE": str(tmp_path / "t-%r-%p.json")})
    traces = [json.loads(f.read_text()) for f in sorted(tmp_path.glob("t-*.json"))]
    assert len(traces) == 2, err
    sessions = {t["process"]["session"] for t in traces}
    assert len(sessions) == 1, sessions
    host, pid, ms = sessions.pop().split(":")
    assert host == traces[0]["process"]["host"] and int(pid) not in [t["process"]["pid"] for t in traces]
    s = summary_of(err)  # the pattern in effect is where the launcher looks
    assert "cdsa: this run's 2 trace files: 2 faulted" in s
    order = [l.split()[1] for l in s.split("Ranks that faulted")[1].split("\n\n")[0].splitlines()
             if l.startswith("  rank")]
    assert order == ["0", "1"], s  # one host: by the time each saw its fault


def test_nothing_when_nothing_faulted(tmp_path):
    rc, err = launch(tmp_path, "clean", "clean", env={"CDSA_TRACE": "always"})
    assert rc == 0 and err == "launcher: all ranks done\n", err
    assert len(list(tmp_path.glob("cdsa-*.json"))) == 2  # the ranks' exit traces, no fault in them


def test_plain_preload_makes_the_first_process_the_root(tmp_path):
    # No `cdsa run`: the launcher is the first process that loads libcdsa.so without a session.
    rc, err = launch(tmp_path, "hang", "assert", under_run=False)
    assert rc == 1
    s = summary_of(err)
    assert "cdsa: this run's 1 trace file: 1 faulted" in s and "First fault: rank 1 " in s, s
    assert "Rank 0 wrote no trace: exited without a fault of its own, or killed" in s


def test_a_single_process_gets_no_summary(tmp_path):
    # The root's own fault has its report: nothing more at its exit.
    p = run_cli("run", "--", sys.executable, SCRIPTS / "rank_job.py", "assert", cwd=tmp_path,
                env=clean_env(preload=False))
    assert p.returncode == 1 and "CUDA error 710" in p.stderr and SUMMARY not in p.stderr, p.stderr


def test_quiet_and_trace_off_print_no_summary(tmp_path):
    for env in ({"CDSA_QUIET": "1"}, {"CDSA_TRACE": "off"}):
        rc, err = launch(tmp_path, "assert", env=env)
        assert rc == 1 and SUMMARY not in err, (env, err)


def test_a_missing_cli_gets_one_line(tmp_path):
    # libcdsa.so copied alone (a container image without the CLI): one line names what to merge.
    lib = tmp_path / "lib"
    lib.mkdir()
    copy = lib / "libcdsa.so"
    copy.write_bytes(LIBCDSA.read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    e = clean_env(preload=False)
    e["LD_PRELOAD"] = ":".join(filter(None, [os.environ.get("E2E_PRELOAD_FIRST"), str(copy)]))
    p = subprocess.run([sys.executable, str(SCRIPTS / "fake_launcher.py"), "assert"], cwd=work, env=e,
                       capture_output=True, text=True, timeout=120)
    last = p.stderr.rstrip().splitlines()[-1]
    assert last.startswith("cdsa: a process this one started faulted (1 trace file of this run); merged: cdsa merge "
                           "--session "), p.stderr
    assert "(the cdsa CLI is not beside libcdsa.so)" in last


LATE_LOAD = """
import ctypes, sys, threading, time
stop = threading.Event()
if sys.argv[2] == "threads":
    threading.Thread(target=stop.wait, daemon=True).start()
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # a copy loaded late, as CUDA_INJECTION64_PATH loads one
getenv = ctypes.CDLL(None).getenv
getenv.restype = ctypes.c_char_p
print("session:", getenv(b"CDSA_SESSION"))
stop.set()
"""


def test_a_copy_loaded_after_threads_started_never_sets_the_session(tmp_path):
    # setenv from a library loaded into a running, threaded process could race with another thread's getenv: such
    # a copy does not start a session. Loaded while the process has one thread, it does (the control).
    out = {}
    for mode in ("threads", "single"):
        p = subprocess.run([sys.executable, "-c", LATE_LOAD, str(LIBCDSA), mode], cwd=tmp_path,
                           env=clean_env(preload=False), capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        out[mode] = p.stdout
    assert "session: None" in out["threads"], out
    assert "session: b'" in out["single"], out
