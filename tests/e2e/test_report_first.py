"""End-to-end: the report comes out before the job's own death (other threads' failing calls wait for it; a signal
mid-report prints what was prepared), and hostile outputs neither hang, crash nor change the exit status."""
import concurrent.futures
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cdsa_report import raw_report, report_span
from conftest import BANNER, LIBCDSA, PROGRAMS, SANITIZED, SCRIPTS, clean_env, marker_line, run_program, run_python

PROGRAM = PROGRAMS / "e2e_report_first"
WATCHDOG = SCRIPTS / "watchdog_abort.py"
PROGRAM_LINES = ("watchdog:", "program:", "Fatal Python error")


def first_report_is_complete_and_first(err):
    """One report, whole (banner to closing rule), before any line the program (or faulthandler) printed."""
    assert err.count(BANNER) == 1, err
    span = report_span(err)
    assert span.closed, f"the report never ended:\n{err}"
    own = [err.find(p) for p in PROGRAM_LINES if p in err]
    assert own, f"the program printed nothing of its own:\n{err}"
    assert span.close < min(own), f"the program's own error line came before the report's end:\n{err}"
    report = err[span.banner:span.close]
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in report, report
    line, _ = marker_line(WATCHDOG, "LAUNCH-SITE")
    assert f'watchdog_abort.py", line {line}, in <module>' in report, report
    return report


def run_watchdog(tmp, env=None, pin=False, mode="abort"):
    argv = [sys.executable, str(WATCHDOG), mode]
    if pin:
        argv = ["taskset", "-c", "0"] + argv
    e = {"CDSA_TRACE": "off"}
    e.update(env or {})
    tmp.mkdir(parents=True, exist_ok=True)
    return subprocess.run(argv, cwd=tmp, env=clean_env(e), capture_output=True, text=True, timeout=120)


def run_many(tmp_path, runs, **kw):
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda i: run_watchdog(tmp_path / str(i), **kw), range(runs)))


def test_watchdog_abort_report_comes_first_every_time(tmp_path):
    # PyTorch DDP's death: the main thread's synchronize fails and it makes more failing calls while a watchdog
    # thread polling cuEventQuery sees the error, prints its line and calls abort(). Whichever thread sees the
    # fault first reports; the other one's failing call waits for the report.
    runs = 20 if SANITIZED else 100
    for p in run_many(tmp_path, runs):
        assert p.returncode == -signal.SIGABRT, p.stderr
        first_report_is_complete_and_first(p.stderr)


@pytest.mark.skipif(shutil.which("taskset") is None, reason="no taskset")
def test_watchdog_abort_on_one_core_with_slow_symbolization(tmp_path):
    # One core: the watchdog thread may run long before the reporter gets the CPU again; CDSA_NATIVE_FULL=1 makes
    # the symbolization (the native frames down to _start of every stack) the slow part it is.
    runs = 5 if SANITIZED else 30
    for p in run_many(tmp_path, runs, env={"CDSA_NATIVE_FULL": "1", "CDSA_TRACE": "fault"}, pin=True):
        assert p.returncode == -signal.SIGABRT, p.stderr
        first_report_is_complete_and_first(p.stderr)


def test_sigterm_from_a_launcher_after_the_failing_calls(tmp_path):
    p = run_watchdog(tmp_path, mode="term")
    assert p.returncode == -signal.SIGTERM, p.stderr
    first_report_is_complete_and_first(p.stderr)


@pytest.mark.parametrize("where", ["self", "other"])
def test_sigterm_mid_report(tmp_path, where):
    # SIGTERM arrives while the report is being built (from the report's own cudaRuntimeGetVersion lookup, which
    # this program defines): on the reporting thread itself, which cannot wait on itself, the text prepared
    # before symbolization comes out; on another thread the handler lets the reporter finish. Either way one
    # report, complete, and the process ends by SIGTERM as it would have.
    run = run_program([PROGRAM, "term", where], cwd=tmp_path)
    assert run.rc == -signal.SIGTERM, (run.rc, run.err, run.out)
    assert run.reports == 1, run.err
    report = raw_report(run.err)
    assert "cdsa: the failing launch" in report, report
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in report, report
    assert "surfaced at cuCtxSynchronize" in report, report
    assert "the process should have ended" not in run.out
    if where == "self":
        assert "SIGTERM arrived before the report was finished" in report, report
        assert "e2e_report_first+0x" in report, report  # the launch's native frames, as module+offset
    else:
        assert "SIGTERM arrived" not in run.err, run.err
        assert "launch_bad_loss(" in report, report  # symbolized: the full report


def test_sigterm_mid_report_chains_to_the_programs_handler(tmp_path):
    # The program's SIGTERM handler, installed before the fault, runs after cdsa's part and sets the exit status.
    run = run_program([PROGRAM, "term", "handler"], cwd=tmp_path)
    assert run.rc == 7, (run.rc, run.err, run.out)
    assert "program: my SIGTERM handler ran" in run.out
    assert run.reports == 1, run.err
    assert "SIGTERM arrived before the report was finished" in run.err
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in run.report


def test_sigterm_chained_to_a_oneshot_handler_as_the_kernel_runs_it(tmp_path):
    # The program's handler has SA_RESETHAND | SA_NODEFER and SIGUSR1 in sa_mask: run after cdsa's part, it must
    # see what it sees without cdsa (disposition back to default, the signal itself not blocked, SIGUSR1 blocked,
    # none of cdsa's own signals blocked), and its re-raise must end the process at once.
    bare = run_program([PROGRAM, "term", "oneshot"], cwd=tmp_path, preload=False)
    assert bare.rc == -signal.SIGTERM, (bare.rc, bare.out, bare.err)
    line = "program: oneshot handler: disposition default 1, blocked: SIGTERM 0 SIGUSR1 1 SIGINT 0 SIGABRT 0"
    assert line in bare.out, bare.out
    run = run_program([PROGRAM, "term", "oneshot"], cwd=tmp_path)
    assert run.rc == -signal.SIGTERM, (run.rc, run.out, run.err)
    assert run.reports == 1, run.err
    assert "kernel nll_loss_forward_reduce_cuda_kernel_2d" in run.report, run.report
    assert [l for l in run.out.splitlines() if "oneshot" in l] == [line], run.out
    assert "raise returned" not in run.out and "should have ended" not in run.out, run.out


# ---- hostile outputs: the 700 case (the driver prints nothing; the program's own lines go to stdout) ----

def run_hostile(tmp_path, stderr, env=None, timeout=60, preexec=None):
    e = clean_env(env)
    t0 = time.monotonic()
    p = subprocess.run([str(PROGRAM), "illegal-address"], cwd=tmp_path, env=e, stdout=subprocess.PIPE,
                       stderr=stderr, text=True, timeout=timeout, preexec_fn=preexec)
    return p, time.monotonic() - t0


def trace_report(tmp_path):
    files = sorted(tmp_path.glob("cdsa-*.json"))
    assert len(files) == 1, files
    t = json.loads(files[0].read_text())
    assert t["reason"] == "fault" and t["report"]["code"] == 700, t["report"]
    assert [c["launch"]["kernel"] for c in t["report"]["candidates"]] == ["illegal_address"], t["report"]
    return t


def test_stderr_closed(tmp_path):
    p = subprocess.run(["sh", "-c", f"exec 2>&-; exec {PROGRAM} illegal-address"], cwd=tmp_path, env=clean_env(),
                       stdout=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 3, p.stdout
    assert "cuCtxSynchronize returned 700" in p.stdout
    trace_report(tmp_path)


def full_pipe():
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)  # the program gets its ordinary blocking stderr, full
    return r, w


def test_stderr_a_full_pipe_nobody_reads(tmp_path):
    r, w = full_pipe()
    try:
        p, took = run_hostile(tmp_path, w)
    finally:
        os.close(w)
        os.close(r)
    assert p.returncode == 3, p.stdout
    assert took < 30, took
    trace_report(tmp_path)


def test_stderr_a_pipe_whose_reader_is_gone(tmp_path):
    # The write fails with EPIPE and raises SIGPIPE, whose default action would end the program: cdsa takes it back.
    r, w = os.pipe()
    os.close(r)
    try:
        p, _ = run_hostile(tmp_path, w)
    finally:
        os.close(w)
    assert p.returncode == 3, p.stdout
    trace_report(tmp_path)


def test_trace_directory_not_writable(tmp_path):
    # /proc takes no new files, for root too.
    p, _ = run_hostile(tmp_path, subprocess.PIPE, env={"CDSA_TRACE_FILE": "/proc/cdsa-%p.json"})
    assert p.returncode == 3, p.stderr
    assert p.stderr.count(BANNER) == 1, p.stderr
    # One line says the write failed (after the report, which named the file: "trace file X", never "written").
    lines = [l for l in p.stderr.splitlines() if l.startswith("cdsa: trace file /proc") and " not written: " in l]
    assert len(lines) == 1, p.stderr
    assert p.stderr.index(lines[0]) > p.stderr.index(BANNER), p.stderr
    assert "written to" not in p.stderr


def test_trace_directory_full(tmp_path):
    # A file-size limit stands in for a full disk: the trace write fails (EFBIG) and raises SIGXFSZ, whose default
    # action would end the program with a core dump.
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    p, _ = run_hostile(tmp_path, subprocess.PIPE, preexec=limit)
    assert p.returncode == 3, p.stderr
    assert p.stderr.count(BANNER) == 1, p.stderr
    # The report named the file before writing it ("trace file X", never "written"); then one line says it failed.
    lines = [l for l in p.stderr.splitlines() if l.startswith("cdsa: trace file ") and " not written: " in l]
    assert len(lines) == 1, p.stderr
    assert p.stderr.index(lines[0]) > p.stderr.index(BANNER), p.stderr
    assert "written to" not in p.stderr
    assert not list(tmp_path.glob("cdsa-*")), list(tmp_path.iterdir())


def test_trace_file_in_a_directory_that_does_not_exist(tmp_path):
    p, _ = run_hostile(tmp_path, subprocess.PIPE, env={"CDSA_TRACE_FILE": str(tmp_path / "no" / "such" / "t.json")})
    assert p.returncode == 3, p.stderr
    assert p.stderr.count(BANNER) == 1, p.stderr
    lines = [l for l in p.stderr.splitlines() if "no/such" in l]
    assert len(lines) == 1 and "No such file or directory" in lines[0], p.stderr


def test_a_lost_record_is_one_plain_line(tmp_path):
    run = run_program([PROGRAM, "lost-record"], cwd=tmp_path, env={"CDSA_RING_SIZE": "1024"})
    assert run.rc == 3, (run.out, run.err)
    assert run.reports == 1, run.err
    part = run.launch_part()
    lost = [l for l in part.splitlines() if "its record is lost" in l]
    assert len(lost) == 1, part
    assert "launch #2 on stream" in lost[0] and "raise CDSA_RING_SIZE (now 1024)" in lost[0], lost[0]
    for placeholder in ("<unknown>", "grid (0,0,0)", "launch #0", "(no stack recorded)", "<handle"):
        assert placeholder not in part, part


def test_a_stalled_trace_write_does_not_hold_the_report_back(tmp_path):
    """Issue 26: the report comes out before the trace is written, so a file system that stalls in the write (here an
    fsync that sleeps a minute) cannot swallow it; the report names the file ("trace file X"), never "written"."""
    stall = PROGRAMS / "libe2e_stall_fsync.so"
    env = clean_env({"LD_PRELOAD": f"{stall}:{LIBCDSA}"})
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "nll_loss.py"), "10"], cwd=tmp_path, env=env,
                            stderr=subprocess.PIPE, text=True)
    err, deadline = "", time.monotonic() + 60
    try:
        while time.monotonic() < deadline:  # read until the report's closing rule, while the write is stalled
            line = proc.stderr.readline()
            if not line:
                break
            err += line
            span = report_span(err)
            if span and span.closed:
                break
        assert proc.poll() is None, "the program ended: the write did not stall (" + err + ")"
    finally:
        proc.kill()
        proc.wait()
    assert err.count(BANNER) == 1, err
    assert report_span(err) and report_span(err).closed, err
    assert "cdsa: trace file cdsa-" in err and "written to" not in err, err
    assert not list(tmp_path.glob("cdsa-*.json")), list(tmp_path.iterdir())  # not written yet when it was killed
