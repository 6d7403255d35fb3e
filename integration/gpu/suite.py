#!/usr/bin/env python3
"""cdsa on a real GPU: the cases of issue 3 (1-21), the dedicated synchronize case (22) and the driver facts of
issue 7 (23a-23e), run as fresh processes under LD_PRELOAD=libcdsa.so (unless a case says otherwise), checked
against their expectations, with a short table printed last.

Normally started by integration/gpu/run.sh, which enforces the budget and builds libcdsa.so first:
    suite.py --logdir DIR --libcdsa PATH [--rtlib DIR] [--jobs N] [--only 1,11,14] [--skip-cost] [--budget S]
             [--mirror DIR]
    suite.py --list        the cases (no GPU needed)
    suite.py --dry-run     checks the suite itself (scripts compile, markers exist) and prints the plan

Survives overruns and hangs: every run gets a deadline of (suite start + budget - margin) at the latest, runs in
its own session and process group, and its whole tree is killed on timeout (and any stragglers when it exits);
results.json and table.md are rewritten after every case and on SIGTERM/SIGINT, so whatever ends the suite, the
finished verdicts are on disk. Every case writes KEY.cmd / KEY.out / KEY.err (and its trace files under
runs/KEY/) into the log directory. Exit status: 0 all passed, 1 some case failed or timed out, 2 setup error or
no GPU, 124 stopped by a signal (run.sh's budget).
"""
import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASES = HERE / "cases"
sys.path.insert(0, str(ROOT / "tests" / "support"))  # part of the checkout, standard library only
# How a report is read: one module with the e2e and wheel tests (tests/support/cdsa_report.py).
from cdsa_report import BANNER, ReadsReport, hint_lines, kernel_name, marker_line, py_frames  # noqa: E402
WALL_BUDGET_S = 480  # the whole suite, libcdsa.so build and nvcc included (run.sh's default --budget)
MARGIN_S = 15  # kept back from the budget for writing results and killing what is left
RUN_S = 60  # default per-run limit; the compile cases get more (see all_cases)
RUN_ID_VAR = "GPU_SUITE_RUN_ID"  # set in every run's environment: finds descendants that left the process group

# The CUPTI backend's fallback messages (cupti_tracer/backend.cc and stub.cc): each means "CDSA_BACKEND=cupti did
# not run". Other lines starting "cdsa: CDSA_BACKEND=cupti:" are informational (e.g. CUPTI missed a launch that
# interposition recorded) and are no fallback. test_suite_cpu.py checks this table against the backend's sources.
CUPTI_FALLBACKS = [
    r"CDSA_BACKEND=cupti: libcupti not found",
    r"CDSA_BACKEND=cupti: .* lacks cuptiSubscribe/cuptiEnableDomain",
    r"CDSA_BACKEND=cupti: the one CUPTI subscriber slot is taken",
    r"CDSA_BACKEND=cupti: cuptiSubscribe failed",
    r"CDSA_BACKEND=cupti: cuptiEnableDomain\(driver API\) failed",
    r"CDSA_BACKEND=cupti: this libcdsa.so was built without CUPTI headers",
]
_FALLBACK_RE = re.compile(r"^cdsa: (?:" + "|".join(CUPTI_FALLBACKS) + ")")


def is_cupti_fallback(line):
    return bool(_FALLBACK_RE.match(line))


# ---------------------------------------------------------------------------------------------- processes
def proc_state(pid):
    """(pgid, state) of a live process, None when it is gone. Zombies count as gone: nobody may reap them here."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[2])


def group_members(pgid):
    """Live (non-zombie) processes of process group pgid."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and proc_state(int(d)) == pgid:
            out.append(int(d))
    return out


def tagged_processes(run_id):
    """Live processes whose environment carries RUN_ID_VAR=run_id (descendants that changed group or session)."""
    needle = f"{RUN_ID_VAR}={run_id}".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            env = pathlib.Path(f"/proc/{d}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and proc_state(int(d)) is not None:
            out.append(int(d))
    return out


def kill_tree(pgid, run_id, grace=2.0):
    """SIGTERM the process group (and tagged escapees), SIGKILL what is left after `grace` s. Returns how many
    processes had to be killed."""
    victims = set(group_members(pgid)) | set(tagged_processes(run_id))
    if not victims:
        return 0
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
        for pid in tagged_processes(run_id):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        t_end = time.time() + grace
        while time.time() < t_end and (group_members(pgid) or tagged_processes(run_id)):
            time.sleep(0.05)
        if not group_members(pgid) and not tagged_processes(run_id):
            break
    return len(victims)


@dataclasses.dataclass
class Run(ReadsReport):
    """One process's result; its report is read by ReadsReport (not strict: a missing part reads as "")."""
    argv: list
    rc: int
    out: str
    err: str
    secs: float
    timed_out: bool
    cwd: pathlib.Path
    limit: float = 0.0
    strays: int = 0

    def fallback_lines(self):
        return [l for l in self.err.splitlines() if is_cupti_fallback(l)]


def cuda_home():
    """CUDA_HOME, else the toolkit that the nvcc on PATH belongs to, else /usr/local/cuda."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(pathlib.Path(nvcc).resolve().parent.parent)
    return "/usr/local/cuda"


class Stopped(Exception):
    """The suite is stopping (signal or budget): the case ends without a verdict of its own."""


class Skip(Exception):
    """A case that cannot run here (missing tool or build): reported as SKIP with the reason."""


class Ctx:
    def __init__(self, args, start):
        self.logdir = pathlib.Path(args.logdir).resolve() if args.logdir else None
        self.libcdsa = args.libcdsa
        self.rtlib = args.rtlib
        self.python = args.python
        self.start = start
        self.budget = args.budget
        self.deadline = start + args.budget - min(MARGIN_S, args.budget / 5)
        self.cuda_home = cuda_home()
        self.arch = os.environ.get("NVCC_ARCH", "sm_90")
        self.nvcc = shutil.which("nvcc") or (f"{self.cuda_home}/bin/nvcc" if os.path.exists(f"{self.cuda_home}/bin/nvcc") else None)
        self.sanitizer = shutil.which("compute-sanitizer") or next(
            (p for p in (f"{self.cuda_home}/bin/compute-sanitizer", f"{self.cuda_home}/compute-sanitizer/compute-sanitizer") if os.path.exists(p)), None)
        self.bins = {}
        self.build_errors = {}
        self.stopping = False
        self.lock = threading.Lock()
        self.active = {}  # pgid -> run id, for the signal handler
        self.local = threading.local()  # .runs: the Runs of the case this thread is running

    def left(self):
        return self.deadline - time.time()

    def env(self, preload, backend="driver", extra=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CDSA_") and k != "LD_PRELOAD"}
        env["PYTHONUNBUFFERED"] = "1"
        env["CUDA_HOME"] = self.cuda_home
        # Inductor: compile in-process (no 16-worker sidecar pool per process, which would also initialise CUDA
        # with LD_PRELOAD inherited and write to the case's stderr).
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        if preload:
            env["LD_PRELOAD"] = self.libcdsa
            if self.rtlib and any(pathlib.Path(self.rtlib).iterdir()):
                env["LD_LIBRARY_PATH"] = self.rtlib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            if backend == "cupti":
                env["CDSA_BACKEND"] = "cupti"
        if extra:
            env.update(extra)
        return env

    def run(self, key, argv, *, preload=True, backend="driver", env=None, timeout=RUN_S, tag="", may_time_out=False):
        """One process, in its own session, stdout/stderr to files (a grandchild holding a pipe cannot block us),
        limited to min(timeout, time left before the deadline); its whole tree is killed when it ends."""
        if self.stopping:
            raise Stopped()
        name = key.replace("/", "_") + (f".{tag}" if tag else "")
        cwd = self.logdir / "runs" / name
        cwd.mkdir(parents=True, exist_ok=True)
        for old in cwd.glob("cdsa-*.json"):
            old.unlink()
        run_id = uuid.uuid4().hex[:12]
        full_env = self.env(preload, backend, env)
        full_env[RUN_ID_VAR] = run_id
        shown = {k: v for k, v in full_env.items() if k.startswith(("CDSA_", "LD_", "CUDA_LAUNCH", "TRITON", "CUDA_HOME", "TORCHINDUCTOR"))}
        limit = max(0.0, min(timeout, self.left()))
        (self.logdir / f"{name}.cmd").write_text(
            " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items())) + " " + shlex.join(map(str, argv))
            + f"\n(cwd {cwd}; limit {limit:.0f} s)\n")
        out_p, err_p = self.logdir / f"{name}.out", self.logdir / f"{name}.err"
        t0 = time.perf_counter()
        if limit < 2:
            r = Run(argv, -1, "", "[suite: not started: the suite's time budget is spent]\n", 0.0, True, cwd, limit)
            err_p.write_text(r.err)
            out_p.write_text("")
            self._note(r, may_time_out)
            return r
        timed_out = False
        with open(out_p, "wb") as fo, open(err_p, "wb") as fe:
            try:
                p = subprocess.Popen([str(a) for a in argv], cwd=cwd, env=full_env, stdin=subprocess.DEVNULL,
                                     stdout=fo, stderr=fe, start_new_session=True)
            except OSError as e:
                fe.write(f"[suite: could not start: {e}]\n".encode())
                r = Run(argv, 127, "", f"[suite: could not start: {e}]\n", 0.0, False, cwd, limit)
                self._note(r, may_time_out)
                return r
            with self.lock:
                self.active[p.pid] = run_id
            try:
                p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                strays = kill_tree(p.pid, run_id)
                p.wait()
                with self.lock:
                    self.active.pop(p.pid, None)
        secs = time.perf_counter() - t0
        if timed_out:
            with open(err_p, "a") as fe:
                fe.write(f"\n[suite: timed out after {limit:.0f} s; process tree killed]\n")
        elif strays:
            with open(err_p, "a") as fe:
                fe.write(f"\n[suite: {strays} process(es) of this run outlived it and were killed]\n")
        r = Run(argv, -9 if timed_out else p.returncode, out_p.read_text(errors="replace"),
                err_p.read_text(errors="replace"), secs, timed_out, cwd, limit, 0 if timed_out else strays)
        self._note(r, may_time_out)
        if self.stopping:
            raise Stopped()
        return r

    def _note(self, r, may_time_out):
        runs = getattr(self.local, "runs", None)
        if runs is not None:
            runs.append((r, may_time_out))

    def kill_all(self):
        with self.lock:
            active = dict(self.active)
        for pgid, run_id in active.items():
            kill_tree(pgid, run_id, grace=1.0)

    def py(self, script, *args):
        return [self.python, str(CASES / script), *map(str, args)]

    def bin(self, name):
        if name not in self.bins:
            raise Skip(f"{name} not built: {self.build_errors.get(name, 'nvcc missing')}")
        return self.bins[name]


def cudart_libdir(home):
    for d in ("lib64", "targets/x86_64-linux/lib", "lib"):
        if (pathlib.Path(home) / d).is_dir() and list((pathlib.Path(home) / d).glob("libcudart.so*")):
            return str(pathlib.Path(home) / d)
    return f"{home}/lib64"


def native_jobs(ctx, out):
    """The nvcc builds: native_faults.cu with static cudart (nvcc's default) and -cudart shared (with an rpath to
    the toolkit's cudart, so it runs whatever the loader path), both -g; the driver-API program and its PTX;
    driver_facts.cu (issue 7 facts) and the preloaded logger fact_logger.c."""
    stubs = f"-L{ctx.cuda_home}/lib64/stubs"
    src = str(CASES / "native_faults.cu")
    arch = f"-arch={ctx.arch}"
    return {
        "nf_static": [ctx.nvcc, "-g", "-O0", arch, src, "-o", str(out / "nf_static"), stubs, "-lcuda"],
        "nf_shared": [ctx.nvcc, "-g", "-O0", arch, "-cudart", "shared", "-Xlinker", f"-rpath={cudart_libdir(ctx.cuda_home)}",
                      src, "-o", str(out / "nf_shared"), stubs, "-lcuda"],
        "driver_api.ptx": [ctx.nvcc, "-ptx", f"-arch={ctx.arch.replace('sm_', 'compute_')}", str(CASES / "assert_kernel.cu"),
                           "-o", str(out / "driver_api.ptx")],
        "driver_api": [ctx.nvcc, "-g", "-O0", "-x", "c", str(CASES / "driver_api.c"), "-o", str(out / "driver_api"), stubs, "-lcuda"],
        "driver_facts": [ctx.nvcc, "-g", "-O0", arch, str(CASES / "driver_facts.cu"), "-o", str(out / "driver_facts"), stubs, "-lcuda"],
        "graph_update": [ctx.nvcc, "-g", "-O0", arch, str(CASES / "graph_node_update.cu"), "-o", str(out / "graph_update"),
                         stubs, "-lcuda"],
        "fact_logger.so": [ctx.nvcc, "-O1", "-shared", "-Xcompiler", "-fPIC", "-x", "c", str(CASES / "fact_logger.c"),
                           "-o", str(out / "fact_logger.so"), "-ldl"],
    }


def build_natives(ctx):
    """All nvcc builds in parallel, each in its own process group, limited like any run."""
    jobs_all = ("nf_static", "nf_shared", "driver_api.ptx", "driver_api", "driver_facts", "fact_logger.so", "graph_update")
    if not ctx.nvcc:
        ctx.build_errors = {n: "nvcc not found" for n in jobs_all}
        return
    out = ctx.logdir / "bin"
    out.mkdir(exist_ok=True)
    jobs = native_jobs(ctx, out)
    limit = max(1.0, min(150.0, ctx.left()))
    procs = {n: subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for n, a in jobs.items()}
    with ctx.lock:  # a signal now kills them too
        ctx.active.update({p.pid: "-" for p in procs.values()})
    log = []
    t_end = time.time() + limit
    for n, p in procs.items():
        try:
            text, _ = p.communicate(timeout=max(0.1, t_end - time.time()))
        except subprocess.TimeoutExpired:
            kill_tree(p.pid, "-")
            text = (p.communicate()[0] or "") + f"\n[suite: nvcc timed out after {limit:.0f} s]"
        log.append(f"$ {shlex.join(jobs[n])}\n{text}")
        if p.returncode == 0:
            ctx.bins[n] = str(out / n)
        else:
            ctx.build_errors[n] = f"nvcc failed (see {ctx.logdir / 'nvcc.log'})"
    with ctx.lock:
        for p in procs.values():
            ctx.active.pop(p.pid, None)
    (ctx.logdir / "nvcc.log").write_text("\n".join(log))


# ---------------------------------------------------------------------------------------------- checks
def py_site(script, marker):
    """What the report prints for a Python frame at the marker: the File line and the source text."""
    n, text = marker_line(CASES / script, marker)
    return f'File "{CASES / script}", line {n}', text


def names_py(part, script, marker):
    where, text = py_site(script, marker)
    return where in part and text in part


def short(s, n=90):
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


def surfaced(r):
    """'surfaced at X' for every verdict that has a report: which driver call returned the fault first."""
    return f"surfaced at {r.surfaced_at() or '?'}"


def not_one_report(r):
    return f"{r.reports} reports (rc {r.rc}); stderr tail: {short(r.err[-200:])}"


def one_report(r, backend="driver", timeout_text="timed out"):
    """Why `r` cannot be judged (timed out, the CUPTI backend did not run, not exactly one report), or None."""
    if r.timed_out:
        return timeout_text
    if backend == "cupti" and r.fallback_lines():
        return "CUPTI backend did not run: " + short(r.fallback_lines()[0], 100)
    if r.reports != 1:
        return not_one_report(r)
    return None


def check_named(r, script, marker, kernel, backend="driver"):
    """One report; it names the launch's Python line (File + source text) and a kernel containing `kernel`."""
    why = one_report(r, backend, f"timed out after {r.secs:.0f} s")
    if why:
        return False, why
    part = r.launch_part()
    n, _ = marker_line(CASES / script, marker)
    kname = kernel_name(r.report)
    ok_k = kernel.lower() in kname.lower()
    ok_l = names_py(part, script, marker)
    what = f"kernel {short(kname, 48)}; {script}:{n} {'named' if ok_l else 'NOT named'}; {surfaced(r)}"
    return ok_k and ok_l, what + ("" if ok_k else f" (expected kernel ~{kernel})")


def check_no_report(r, must_out=None):
    if r.timed_out:
        return False, "timed out"
    if r.reports:
        return False, f"{r.reports} unexpected report(s): {short(r.kernel_line())}; {surfaced(r)}"
    if must_out and not re.search(must_out, r.out):
        return False, f"stdout lacks /{must_out}/: {short(r.out[-160:])} {short(r.err[-160:])}"
    m = re.search(must_out, r.out) if must_out else None
    return True, f"no report; {short(m.group(0) if m else r.out.strip().splitlines()[-1] if r.out.strip() else '')}"


def check_native(r, fn, src, marker, kernel, backend="driver", code=None):
    why = one_report(r, backend)
    if why:
        return False, why
    part = r.launch_part()
    n, _ = marker_line(CASES / src, marker)
    site = f"{src}:{n}"
    ok = fn in part and site in part and kernel in kernel_name(r.report)
    if code and f"CUDA error {code}" not in r.report:
        return False, f"expected error {code}: {short(r.report.splitlines()[1] if r.report else '')}"
    return ok, (f"kernel {short(kernel_name(r.report), 30)}; {fn} {'and' if ok else '/'} {site} "
                f"{'named' if ok else 'NOT both named'}; {surfaced(r)}")


def traceback_block(err):
    """The Python traceback printed for the uncaught exception: from 'Traceback (most recent call last):' to the
    end of the exception text (a blank line, a cdsa line or the end of stderr)."""
    i = err.rfind("Traceback (most recent call last):")
    if i < 0:
        return ""
    lines = []
    for line in err[i:].splitlines():
        if lines and (not line.strip() or line.startswith(("cdsa:", "=====", "[suite:"))):
            break
        lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- cases
@dataclasses.dataclass
class Case:
    num: int
    key: str
    title: str
    expect: str
    fn: object
    backend: str = "driver"
    cost: bool = False
    first: bool = False  # run before the others (the torch.compile cases: the slowest, started at once)
    expect_s: float = 0.0  # seconds the case is expected to take on the GPU machine (the cases of issue 16 on state it)


INFO = "info"  # a case that records facts returns (INFO, evidence)


def c_ce(label):
    def run(ctx, key, backend):
        r = ctx.run(key, ctx.py("c01_cross_entropy.py", label), backend=backend)
        ok, ev = check_named(r, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss", backend)
        if not ok or label != 10:
            return ok, ev
        if "loss call returned" not in r.out:
            return False, ev + "; stdout changed"
        bare = ctx.run(key, ctx.py("c01_cross_entropy.py", label), preload=False, tag="bare")
        tb, bare_tb = traceback_block(r.err), traceback_block(bare.err)
        same = bool(bare_tb) and tb == bare_tb
        return same, ev + ("; Python traceback unchanged" if same else "; Python traceback DIFFERS from the bare run's")
    return run


def c_nll(ctx, key, backend):
    return check_named(ctx.run(key, ctx.py("c03_nll_log_softmax.py"), backend=backend), "c03_nll_log_softmax.py", "LOSS-LINE", "nll_loss")


def c_ignore(ctx, key, backend):
    r = ctx.run(key, ctx.py("c04_ignore_index.py"), backend=backend)
    return check_no_report(r, r"loss \S+ finite")


def c_embedding(ctx, key, backend):
    return check_named(ctx.run(key, ctx.py("c05_embedding.py"), backend=backend), "c05_embedding.py", "EMB-LINE", "index")


def c_catch(ctx, key, backend):
    r = ctx.run(key, ctx.py("c06_catch_and_continue.py"), backend=backend)
    ok, ev = check_named(r, "c06_catch_and_continue.py", "LOSS-LINE", "nll_loss")
    still = "second failed:" in r.out
    return ok and still, ev + ("; torch.zeros still failed" if still else "; torch.zeros did NOT fail")


def c_infnan(ctx, key, backend):
    r = ctx.run(key, ctx.py("c07_inf_nan.py"), backend=backend)
    ok, ev = check_no_report(r, r"loss nan")
    return ok and r.rc == 0, ev


def c_float64(ctx, key, backend):
    r = ctx.run(key, ctx.py("c08_float64_labels.py"), backend=backend)
    ok, ev = check_no_report(r, r"dtype error: .*")
    return ok and "context alive" in r.out, ev


def c_thousand(ctx, key, backend):
    return check_named(ctx.run(key, ctx.py("c09_thousand_ops_later.py"), backend=backend), "c09_thousand_ops_later.py", "LOSS-LINE", "nll_loss")


def judge_one_report(script, *args):
    """A case that runs `script` (with `args`) and judges its one report by check(r, launch part) -> (verdict,
    evidence); a run without exactly one report fails."""
    def wrap(check):
        def run(ctx, key, backend):
            r = ctx.run(key, ctx.py(script, *args), backend=backend)
            if r.reports != 1:
                return False, not_one_report(r)
            return check(r, r.launch_part())
        return run
    return wrap


@judge_one_report("c10_backward_only.py")
def c_backward(r, part):
    frames = py_frames(part)
    fwd, bwd = names_py(part, "c10_backward_only.py", "FORWARD-LINE"), names_py(part, "c10_backward_only.py", "BACKWARD-LINE")
    where = "backward line" if bwd else "forward line" if fwd else f"{len(frames)} Python frames" if frames else "native frames only (autograd thread)"
    return True, f"kernel {short(kernel_name(r.report), 40)}; named: {where}; {surfaced(r)}"


def c_report_view(script, marker, kernel, hint):
    """Case 24a/b: the report's hint line for the seed's asserts, and one interleaved stack without interpreter
    internals (report/hints.cc, report/hybrid_stack.h)."""
    def run(ctx, key, backend):
        r = ctx.run(key, ctx.py(script), backend=backend)
        ok, ev = check_named(r, script, marker, kernel, backend)
        h = hint_lines(r.report)
        has_hint = bool(h) and h[0].startswith(hint)
        folded = "_PyEval_EvalFrameDefault" not in r.report and "Native frames" not in r.launch_part()
        ev += f"; hint: {short(h[0], 70) if h else 'NONE'}; interpreter frames {'folded' if folded else 'SHOWN'}"
        return ok and has_hint and folded, ev
    return run


@judge_one_report("c10_backward_only.py")
def c_autograd_node(r, part):
    """Case 24c: the backward-only fault (case 10's script) names its autograd node and lists the forward
    index_select line as a candidate, never as certain."""
    m = re.search(r"running the backward node (\w+)", part)
    cands = part[part.find("CANDIDATES, not certain"):] if "CANDIDATES, not certain" in part else ""
    fwd = bool(cands) and names_py(cands, "c10_backward_only.py", "FORWARD-LINE")
    return bool(m) and fwd, (f"node {m.group(1) if m else 'NOT named'}; forward line "
                             f"{'listed as a candidate' if fwd else 'NOT listed'}; {surfaced(r)}")


def c_sanitizer_hint(ctx, key, backend):
    """Case 24d: a fault without assert text (700) gets the compute-sanitizer command for that launch only; it is
    run, and must report the illegal access in illegal_kernel."""
    r = ctx.run(key, [ctx.bin("nf_static"), "illegal"], backend=backend)
    cmd = [l for l in hint_lines(r.report) if "compute-sanitizer --tool memcheck --kernel-name kns=" in l]
    if r.reports != 1 or not cmd:
        return False, f"{r.reports} reports; sanitizer command {'given' if cmd else 'MISSING'}"
    command = cmd[0][cmd[0].index("compute-sanitizer --tool"):]
    argv = shlex.split(command)
    san = ctx.sanitizer
    if not san:
        return INFO, f"command given: {short(command, 90)}; no compute-sanitizer here"
    s = ctx.run(key, [san] + argv[1:], preload=False, tag="sanitizer", timeout=120)
    text = s.out + s.err
    found = "illegal_kernel" in text and "ERROR SUMMARY:" in text and "ERROR SUMMARY: 0 errors" not in text
    return found, f"command given and run: {'reports the access in illegal_kernel' if found else 'did NOT report it'}"


def c_triton(ctx, key, backend):
    r = ctx.run(key, ctx.py("c11_triton_assert.py"), backend=backend, env={"TRITON_DEBUG": "1"}, timeout=90)
    return check_named(r, "c11_triton_assert.py", "TRITON-CALL", "check_range", backend)


def c_compile(ctx, key, backend):
    r = ctx.run(key, ctx.py("c11_compile_oob.py"), backend=backend, timeout=150)
    return check_named(r, "c11_compile_oob.py", "COMPILED-CALL", "", backend)


def graph_verdict(r, part):
    rep = names_py(part, "c12_graph_replay.py", "REPLAY-LINE")
    cap = names_py(part, "c12_graph_replay.py", "CAPTURE-LINE")
    return rep and cap, (f"{short(r.kernel_line(), 40)}; replay line {'named' if rep else 'NOT named'}, capture line "
                         f"{'named' if cap else 'NOT named'}; {surfaced(r)}")


c_graph = judge_one_report("c12_graph_replay.py")(graph_verdict)
# 12b: the graph is reset (its exec destroyed: cudaGraphExecDestroy) right after the faulting replay was launched;
# the driver frees an in-flight exec when it is done. The report, wherever the fault surfaces, still lists the
# captured node (cdsa retires a destroyed capture's nodes instead of dropping them).
c_graph_reset = judge_one_report("c12_graph_replay.py", "reset")(graph_verdict)


@judge_one_report("c13_side_stream.py")
def c_side(r, part):
    named = names_py(part, "c13_side_stream.py", "SIDE-LOSS-LINE")
    amb = "cdsa: AMBIGUOUS" in r.report
    return named, (("ambiguity stated, " if amb else "exact, ") + ("side-stream loss line named" if named else "loss line NOT named")
                   + f"; {short(kernel_name(r.report), 40)}; {surfaced(r)}")


# 13d: libcuda dlopen'ed RTLD_NOW | RTLD_DEEPBIND first: its fprintf binds to libc, past cdsa's stdio hooks, unless
# cdsa binds libcuda's stdio imports when it starts (shim/record/driver_stdio.cc). The device text must be in the
# report and the side-stream line named exactly.
@judge_one_report("c13_side_stream.py", "deepbind")
def c_side_deepbind(r, part):
    named = names_py(part, "c13_side_stream.py", "SIDE-LOSS-LINE")
    text = "cdsa: the device reported:" in r.report
    amb = "cdsa: AMBIGUOUS" in r.report
    return named and text and not amb, (("ambiguity stated, " if amb else "exact, ")
                                        + ("device text captured, " if text else "device text NOT captured, ")
                                        + ("side-stream loss line named" if named else "loss line NOT named")
                                        + f"; {surfaced(r)}")


def c_native(binname):
    def run(ctx, key, backend):
        r = ctx.run(key, [ctx.bin(binname), "assert"], backend=backend)
        return check_native(r, "launch_bad", "native_faults.cu", "LAUNCH-LINE", "assert_kernel", backend)
    return run


def c_driver_api(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("driver_api"), ctx.bin("driver_api.ptx")], backend=backend)
    return check_native(r, "launch_via_driver", "driver_api.c", "DRIVER-LAUNCH-LINE", "driver_assert_kernel", backend)


def check_graph_update(r, backend="driver"):
    """Case 25a's judge: one report; the replay's stack holds REPLAY-LINE; of the graph's kernel nodes, the one
    named is the asserting kernel, changed by cuGraphExecKernelNodeSetParams at UPDATE-LINE (not the fill kernel
    it was added as, nor the ADD-LINE)."""
    why = one_report(r, backend)
    if why:
        return False, why
    part = r.launch_part()
    src = "graph_node_update.cu"
    replay_site = f"{src}:{marker_line(CASES / src, 'REPLAY-LINE')[0]}"
    update_site = f"{src}:{marker_line(CASES / src, 'UPDATE-LINE')[0]}"
    i = part.find("The graph holds")
    launched, nodes = (part[:i], part[i:]) if i >= 0 else (part, "")
    ok_replay = "graph launch" in launched and replay_site in launched
    ok_kernel = "checked_index_kernel" in nodes and "fill_kernel" not in nodes
    ok_update = "Changed by cuGraphExecKernelNodeSetParams" in nodes and update_site in nodes
    exact = part.startswith("cdsa: the failing launch")
    ev = (f"replay {replay_site} {'named' if ok_replay else 'NOT named'}; node kernel "
          f"{'checked_index_kernel' if ok_kernel else 'NOT checked_index_kernel alone'}; update {update_site} "
          f"{'named' if ok_update else 'NOT named'}; {'exact' if exact else 'not exact'}; {surfaced(r)}")
    return ok_replay and ok_kernel and ok_update and exact, ev


def c_graph_update(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("graph_update")], backend=backend)
    return check_graph_update(r, backend)


def c_illegal(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("nf_static"), "illegal"], backend=backend)
    return check_native(r, "launch_illegal", "native_faults.cu", "ILLEGAL-LINE", "illegal_kernel", backend, code=700)


def c_dataloader(ctx, key, backend):
    r = ctx.run(key, ctx.py("c18_dataloader.py"), backend=backend)
    ok, ev = check_named(r, "c18_dataloader.py", "LOSS-LINE", "nll_loss", backend)
    epoch = "epoch ok" in r.out
    return ok and epoch, ("epoch with 2 workers ok; " if epoch else "epoch FAILED; ") + ev


def c_profiler(ctx, key, backend):
    r = ctx.run(key, ctx.py("c19_profiler.py"), backend=backend)
    m = re.search(r"cuda kernel events: (\d+)", r.out)
    n = int(m.group(1)) if m else -1
    if backend == "cupti":  # informational: who holds the one CUPTI subscriber slot
        fb = r.fallback_lines()
        return (INFO if r.rc == 0 else False), f"profiler saw {n} kernel events; cdsa: {short(fb[0][6:], 60) if fb else 'CUPTI backend ran'}"
    return n > 0 and r.reports == 0, f"profiler saw {n} CUDA kernel events under cdsa (rc {r.rc})"


def c_fact_breadcrumbs(ctx, key, backend):
    """Read back from the breadcrumbs, not from kernel names: the report is exact and names launch #6 on its
    stream and the launch's file:line."""
    ev, ok = [], True
    for mode, fn, marker, code in (("assert", "launch_bad", "LAUNCH-LINE", 710), ("illegal", "launch_illegal", "ILLEGAL-LINE", 700)):
        r = ctx.run(key, [ctx.bin("nf_static"), mode], tag=mode)
        n, _ = marker_line(CASES / "native_faults.cu", marker)
        exact = "the failing launch (the first launch on its stream" in r.report
        right = "(#6 on its stream)" in r.kernel_line() and f"native_faults.cu:{n}" in r.launch_part()
        ok &= exact and right and r.reports == 1
        ev.append(f"{code}: {'launch #6 read back' if exact and right else 'WRONG: ' + short(r.kernel_line() or 'no report', 50)}")
    return ok, "; ".join(ev)


def c_fact_fd(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("nf_static"), "assert"], preload=False)
    fds = [n for n, text in (("stdout", r.out), ("stderr", r.err)) if "Assertion" in text]
    return fds == ["stderr"], f"assert text on: {', '.join(fds) or 'neither fd'} (design assumes stderr)"


def c_fact_reach(ctx, key, backend):
    ev, ok = [], True
    for b in ("nf_static", "nf_shared"):
        r = ctx.run(key, [ctx.bin(b), "count", 1000], env={"CDSA_TRACE": "always"}, tag=b)
        n = -1
        if r.traces():
            try:
                n = len(json.loads(r.traces()[0].read_text()).get("launches", []))
            except ValueError:
                n = -2
        ok &= n == 1000
        ev.append(f"{b.split('_')[1]} cudart: {n}/1000 <<<>>> launches recorded" + (f" (rc {r.rc})" if n < 0 else ""))
    return ok, "; ".join(ev)


def c_fact_memop(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("nf_static"), "memop-cost"], preload=False)
    vals = dict((m.group(1), (float(m.group(2)), float(m.group(3)))) for m in
                re.finditer(r"memop-cost (\S+) host_us ([\d.]+) gpu_us ([\d.]+)", r.out))
    slot = re.search(r"memop-cost slot (\d+) \(expect (\d+)\)", r.out)
    if len(vals) != 2 or not slot:
        return False, f"no measurement (rc {r.rc}): {short(r.out + r.err, 80)}"
    (h0, g0), (h1, g1) = vals["launch"], vals["launch+memop"]
    ok = slot.group(1) == slot.group(2)
    return ok, f"per launch host {h0:.2f}->{h1:.2f} us, GPU {g0:.2f}->{g1:.2f} us with a breadcrumb; slot {'right' if ok else 'WRONG'}"


# ------------------------------------------------------------------------------ cost: interleaved, with spread
def values(r, name):
    m = re.search(rf"{name} ([\d.]+)", r.out)
    return float(m.group(1)) if m and r.rc == 0 and not r.timed_out else None


def spread_text(name, ratios):
    """median ratio with its min-max over the interleaved pairs"""
    ratios = [x for x in ratios if x]
    if not ratios:
        return f"{name} n/a", None
    med = statistics.median(ratios)
    return f"{name} {med:.3f}x [{min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} pairs]", med


def interleaved(ctx, key, argv_for, metrics, pairs=3, variant=("cdsa", True, None), tag=""):
    """A B A B ...: bare and cdsa processes alternate, so drift (clocks, other load) hits both alike. Returns
    {metric: [(bare, cdsa), ...]}."""
    label, pre, env = variant
    got = {m: [] for m in metrics}
    for i in range(pairs):
        a = ctx.run(key, argv_for(), preload=False, tag=f"{tag}bare.{i}")
        b = ctx.run(key, argv_for(), preload=pre, env=env, tag=f"{tag}{label}.{i}")
        for m in metrics:
            got[m].append((values(a, m), values(b, m)))
    return got


def ratios(pairs):
    return [b / a for a, b in pairs if a and b]


def c_cost_launches(ctx, key, backend):
    b = ctx.bin("nf_static")
    got = interleaved(ctx, key, lambda: [b, "launches", 100000], ["elapsed_s"], pairs=3)["elapsed_s"]
    bare = [a for a, _ in got if a]
    text, med = spread_text("cdsa", ratios(got))
    info = []
    for label, pre, env in (("cupti", True, {"CDSA_BACKEND": "cupti"}), ("CLB=1", False, {"CUDA_LAUNCH_BLOCKING": "1"})):
        v = values(ctx.run(key, [b, "launches", 100000], preload=pre, env=env, tag=label), "elapsed_s")
        info.append(f"{label} {v / statistics.median(bare):.2f}x" if v and bare else f"{label} n/a")
    ok = med is not None and med <= 1.5
    per = f"{statistics.median(bare) * 1e6 / 1e5:.2f} us/launch bare" if bare else "no bare timing"
    return ok, f"100k tiny kernels, {per}; {text}; {', '.join(info)} (target cdsa <= 1.5x; others: info)"


def mlp_timings(ctx, key):
    """c21_mlp.py both: one process times a GPU-bound step and a launch-bound step; 3 interleaved pairs."""
    if getattr(ctx, "mlp", None) is None:
        ctx.mlp = interleaved(ctx, key, lambda: ctx.py("c21_mlp.py", "both", 3), ["elapsed_s_gpu", "elapsed_s_launch"])
    return ctx.mlp


def c_cost_gpu_bound(ctx, key, backend):
    got = mlp_timings(ctx, key)["elapsed_s_gpu"]
    bare = [a for a, _ in got if a]
    text, med = spread_text("cdsa", ratios(got))
    ok = med is not None and med <= 1.02
    per = f"{statistics.median(bare) * 1e3 / 30:.2f} ms/step bare" if bare else "no bare timing"
    return ok, f"bf16 MLP 8192x4096, 30 steps: {per}; {text} (target cdsa <= 1.02x)"


def c_cost_launch_bound(ctx, key, backend):
    got = mlp_timings(ctx, key)["elapsed_s_launch"]
    bare = [a for a, _ in got if a]
    text, med = spread_text("cdsa", ratios(got))
    base = statistics.median(bare) if bare else None
    info = []
    for label, pre, env, reps in (("cupti", True, {"CDSA_BACKEND": "cupti"}, 3), ("CLB=1", False, {"CUDA_LAUNCH_BLOCKING": "1"}, 1)):
        v = values(ctx.run(key, ctx.py("c21_mlp.py", "launch", reps), preload=pre, env=env, tag=label), "elapsed_s_launch")
        info.append(f"{label} {v / base:.2f}x" if v and base else f"{label} n/a")
    # compute-sanitizer is the slowest run of the suite: it gets what is left of the budget, at most 120 s.
    left = int(min(120, ctx.left() - 10))
    if not ctx.sanitizer:
        info.append("compute-sanitizer not found")
    elif left < 30:
        info.append("compute-sanitizer skipped (budget spent)")
    else:
        r = ctx.run(key, [ctx.sanitizer, "--tool", "memcheck", *ctx.py("c21_mlp.py", "launch", 1)], preload=False,
                    timeout=left, tag="sanitizer", may_time_out=True)
        v = values(r, "elapsed_s_launch")
        info.append(f"compute-sanitizer {v / base:.1f}x" if v and base else f"compute-sanitizer >{left} s (timed out)"
                    if r.timed_out else f"compute-sanitizer n/a (rc {r.rc})")
    ok = med is not None and med <= 1.5
    per = f"{base * 1e3 / 200:.3f} ms/step bare" if base else "no bare timing"
    return ok, f"small MLP, 200 steps: {per}; {text}; {', '.join(info)} (target cdsa <= 1.5x; others: info)"


# ------------------------------------------------------------------------------ 22: synchronize; 23: issue 7 facts
def c_sync(ctx, key, backend):
    """The dedicated synchronize case: the fault surfaces at torch.cuda.synchronize(); the report must name the
    loss line and come before torch's exception (not at exit, after the traceback)."""
    r = ctx.run(key, ctx.py("c22_sync.py"), backend=backend)
    ok, ev = check_named(r, "c22_sync.py", "LOSS-LINE", "nll_loss", backend)
    if r.reports != 1:
        return ok, ev
    b, t = r.err.find(BANNER), r.err.find("Traceback (most recent call last)")
    before = t < 0 or b < t
    return ok and before and t >= 0, ev + ("; report BEFORE torch's exception" if before and t >= 0 else
                                           "; no torch exception" if t < 0 else "; report AFTER torch's exception")


def c_attr122(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("driver_facts"), "attr"], preload=False)
    m = re.search(r"attr 122 (-?\d+) rc (\d+)", r.out)
    if not m:
        return False, f"no answer (rc {r.rc}): {short(r.out + r.err, 100)}"
    m32 = re.search(r"memop32 rc (\d+)", r.out)
    m64 = re.search(r"memop64 rc (\d+)", r.out)
    return INFO, (f"CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (122) = {m.group(1)} (rc {m.group(2)}); "
                  f"cuStreamWriteValue32 rc {m32.group(1) if m32 else '?'}, cuStreamWriteValue64 rc {m64.group(1) if m64 else '?'}")


def read_log(path):
    try:
        return pathlib.Path(path).read_text(errors="replace")
    except OSError:
        return ""


def c_assert_print(ctx, key, backend):
    """Which thread, fd and libc function print the device's assert text: a preloaded logger of the stdio
    functions (and write), and strace -f -e trace=write where the image has it."""
    logger = ctx.bin("fact_logger.so")
    log = ctx.logdir / "runs" / "fact_print.log"
    log.unlink(missing_ok=True)
    r = ctx.run(key, [ctx.bin("driver_facts"), "assert-thread"], preload=False,
                env={"LD_PRELOAD": logger, "FACT_LOG": str(log)})
    text = read_log(log)
    if "main tid" not in r.out:
        return False, f"driver_facts assert-thread did not run (rc {r.rc}): {short(r.err[-120:], 120)}"
    tids = dict(re.findall(r"^(main|helper) tid (\d+)", r.out, re.M))
    who = {v: k for k, v in tids.items()}
    hits = re.findall(r"^print fn=(\S+) fd=(-?\d+) tid=(\d+)", text, re.M)
    facts = []
    for fn, fd, tid in dict.fromkeys(hits):
        facts.append(f"{fn} on fd {fd} by the {who.get(tid, 'other (driver) thread ' + tid)}")
    ev = "assert text printed by: " + ("; ".join(facts) if facts else "no stdio call seen (" + short(text[-120:], 120) + ")")
    chars = re.findall(r"^chars fn=(\S+) fd=2 n=(\d+) tid=(\d+)", text, re.M)
    if chars:
        ev += "; char output on stderr: " + ", ".join(f"{fn} x{n} (last by the {who.get(t, 'thread ' + t)})" for fn, n, t in chars)
    ev += f"; in stderr: {'yes' if 'Assertion' in r.err else 'no'}"
    strace = shutil.which("strace")
    if strace:
        st = ctx.logdir / "runs" / "fact_print.strace"
        ctx.run(key, [strace, "-f", "-e", "trace=write", "-o", str(st), ctx.bin("driver_facts"), "assert-thread"],
                preload=False, tag="strace")
        lines = [l for l in read_log(st).splitlines() if "ssertion" in l]
        ev += "; strace: " + (short(lines[0], 100) if lines else "no write() holds the text")
    else:
        ev += "; strace not on this machine"
    return INFO, ev


def c_func_names(ctx, key, backend):
    """cuFuncGetName vs cuKernelGetName on the handle a cudart <<<>>> launch passes to cuLaunchKernel."""
    log = ctx.logdir / "runs" / "fact_names.log"
    log.unlink(missing_ok=True)
    r = ctx.run(key, [ctx.bin("driver_facts"), "names"], preload=False,
                env={"LD_PRELOAD": ctx.bin("fact_logger.so"), "FACT_LOG": str(log)})
    text = read_log(log)
    launches = re.findall(r"^launch via=(\S+) handle=(\S+) cuFuncGetName=(-?\d+):(\S*) cuKernelGetName=(-?\d+):(\S*)", text, re.M)
    kern = re.search(r"cudaGetKernel (\S+)", r.out)
    func = re.search(r"cudaGetFuncBySymbol (\S+)", r.out)
    if not launches:
        return False, f"the logger saw no launch (rc {r.rc}): {short(text[-100:] + r.err[-100:], 120)}"
    known = {m.group(1) for m in (kern, func) if m}
    pick = [l for l in launches if l[1] in known or "named_kernel" in l[3] + l[5]] or launches
    via, h, frc, fname, krc, kname = pick[0]
    same_k = bool(kern) and kern.group(1) == h
    same_f = bool(func) and func.group(1) == h
    return INFO, (f"{via} handle {'= cudaGetKernel (a CUkernel)' if same_k else '= cudaGetFuncBySymbol' if same_f else 'unlike cudaGetKernel/FuncBySymbol'}; "
                  f"cuFuncGetName rc {frc} {fname or '-'}; cuKernelGetName rc {krc} {kname or '-'}")


def c_capture_if(ctx, key, backend):
    """cuStreamBeginCaptureToGraph into an IF node's body: instantiates and runs with cdsa loaded (bare: info)."""
    got = {}
    for label, pre in (("bare", False), ("cdsa", True)):
        r = ctx.run(key, [ctx.bin("driver_facts"), "capture-if"], preload=pre, tag=label)
        m = re.search(r"capture-if begin (\d+) end (\d+) instantiate (\d+) launch (\d+) body_ran (-?\d+)", r.out)
        got[label] = tuple(int(x) for x in m.groups()) if m else None
        got[label + "_rc"] = r.rc
    if not got["bare"]:
        return False, f"bare run printed no result (rc {got['bare_rc']})"
    if got["bare"][2] != 0 or got["bare"][4] != 1:
        return INFO, f"fails without cdsa too: {got['bare']} (begin, end, instantiate, launch, body ran)"
    ok = got["cdsa"] is not None and got["cdsa"][2] == 0 and got["cdsa"][4] == 1
    return ok, f"with cdsa: begin/end/instantiate/launch rc, body ran = {got['cdsa'] or 'no result (rc %s)' % got['cdsa_rc']}; bare {got['bare']}"


def c_exit_nosync(ctx, key, backend):
    """A program that faults and exits without synchronizing still gets one report (native static cudart, and
    PyTorch), even when cudart's atexit handlers tear the context down first."""
    ev, ok = [], True
    r = ctx.run(key, [ctx.bin("driver_facts"), "exit-nosync"], tag="native")
    n, _ = marker_line(CASES / "driver_facts.cu", "NOSYNC-LINE")
    site = f"driver_facts.cu:{n}" in r.launch_part()
    ok &= r.reports == 1
    ev.append(f"native: {r.reports} report(s), launch line {'named' if site else 'not named'} (rc {r.rc})")
    p = ctx.run(key, ctx.py("c23_exit_nosync.py"), tag="torch")
    line = names_py(p.launch_part(), "c23_exit_nosync.py", "LOSS-LINE")
    ok &= p.reports == 1
    ev.append(f"torch: {p.reports} report(s), loss line {'named' if line else 'not named'} (rc {p.rc})")
    return ok, "; ".join(ev)


# ------------------------------------------------------------------------------ 26: torch.distributed watchdog
# Lines torch, c10d, NCCL or Python print of their own when the job dies: cdsa's report must end before the first.
JOB_ERROR_LINES = re.compile(r"^(\[rank\d+\]:\[[EW]|.*NCCL WARN|.*NCCL INFO.*[Ee]rror|Traceback \(most recent call last\)|"
                             r"terminate called|Fatal Python error|RuntimeError|torch\.distributed\.|.*ProcessGroupNCCL)",
                             re.M)


def check_report_first(r, script, marker, kernel):
    """One report, whole (banner to its closing rule), ending before the first error line of the job's own, and
    naming the step's line and kernel."""
    ok, ev = check_named(r, script, marker, kernel)
    if r.reports != 1:
        return False, ev
    b = r.err.find(BANNER)
    end = r.err.find("\n=====", b + len(BANNER) + 30)
    own = JOB_ERROR_LINES.search(r.err)
    if end < 0:
        return False, ev + "; the report never ended"
    if own and own.start() < end:
        first = r.err[own.start():].splitlines()[0]
        return False, ev + f"; the job's own line came first: {short(first, 80)}"
    return ok, ev + (f"; report whole before the job's first own line ({short(r.err[own.start():].splitlines()[0], 50)})"
                     if own else "; no error line of the job's own") + f"; rc {r.rc}"


def c_ddp_watchdog(ctx, key, backend):
    """torch.distributed, NCCL, world size 1: the step asserts before an all-reduce; whichever thread surfaces it
    (the main thread's .item() or the NCCL watchdog's event query, which aborts), the report comes first."""
    r = ctx.run(key, ctx.py("c26_ddp_watchdog.py"), backend=backend)
    return check_report_first(r, "c26_ddp_watchdog.py", "STEP-LINE", "nll_loss")


def all_cases():
    cs = [
        Case(1, "1", "CrossEntropyLoss label 10, surfaced at loss.item()", "loss line + source text + NLL kernel named; traceback unchanged", c_ce(10)),
        Case(2, "2", "CrossEntropyLoss label -1", "same as 1", c_ce(-1)),
        Case(3, "3", "NLLLoss on log_softmax, label 10", "same as 1", c_nll),
        Case(4, "4", "labels [3,255,9,1], ignore_index=255", "no report; loss finite", c_ignore),
        Case(5, "5", "Embedding(1000,64), token id 1000", "embedding line + index kernel named", c_embedding),
        Case(6, "6", "catch the assert, then torch.zeros", "still fails; one report, not two", c_catch),
        Case(7, "7", "logits with inf and nan", "no assert, no report", c_infnan),
        Case(8, "8", "float64 labels", "ordinary dtype error, no report", c_float64),
        Case(9, "9", "bad loss, then 1000 ops before .item()", "still the loss line", c_thousand),
        Case(10, "10", "fault only in the backward kernel, surfaced at .item()", "one report; says what is named today", c_backward),
        Case(11, "11a", "Triton tl.device_assert, surfaced at .item()", "the Triton call line named", c_triton),
        Case(11, "11b", "torch.compile'd function indexing OOB", "the compiled call line named", c_compile, first=True),
        Case(12, "12", "CUDA graph replay faults after index overwrite, surfaced at .item()", "replay line and capture-time line named", c_graph),
        Case(12, "12b", "the same, graph reset right after the faulting replay", "replay line and capture-time line named", c_graph_reset),
        Case(13, "13", "fault on a side stream, default stream busy, surfaced at .item()", "right line, or candidates + ambiguity", c_side),
        Case(13, "13d", "case 13 with libcuda dlopen'ed RTLD_NOW|RTLD_DEEPBIND first", "device text captured; side-stream line named exactly", c_side_deepbind),
        Case(14, "14", "nvcc static cudart <<<>>> assert, -g", "C++ function and file:line named", c_native("nf_static")),
        Case(15, "15", "the same with -cudart shared", "C++ function and file:line named", c_native("nf_shared")),
        Case(16, "16", "driver-API program (cuModuleLoadData+cuLaunchKernel)", "function, file:line, kernel named", c_driver_api),
        Case(17, "17", "illegal-address kernel (700)", "700; kernel and launch line named", c_illegal),
        Case(18, "18", "DataLoader(num_workers=2) epoch, then case 1", "workers unaffected; report correct", c_dataloader),
        Case(19, "19", "torch.profiler CUDA activity, default backend", "profiler still records GPU kernels", c_profiler),
        Case(19, "19/cupti", "torch.profiler under CDSA_BACKEND=cupti (info)", "no crash; who holds the CUPTI slot", c_profiler, "cupti"),
        Case(20, "20a", "fact: breadcrumbs read back after 710 and 700", "launch #6 of 20 and its line, exactly", c_fact_breadcrumbs),
        Case(20, "20b", "fact: which fd carries the device assert text", "stderr", c_fact_fd),
        Case(20, "20c", "fact: <<<>>> of a CUDA 13 program reach the wrappers", "1000/1000, static and shared cudart", c_fact_reach),
        Case(20, "20d", "fact: cost of one breadcrumb between tiny kernels", "measured; slot reads back", c_fact_memop),
        Case(21, "21a", "cost: 100k tiny kernels, launch-bound", "cdsa <= 1.5x bare (A/B interleaved); CLB=1 printed", c_cost_launches, cost=True),
        Case(21, "21b", "cost: GPU-bound bf16 MLP training step", "cdsa <= 1.02x bare (A/B interleaved, spread)", c_cost_gpu_bound, cost=True),
        Case(21, "21c", "cost: launch-bound small MLP training loop", "cdsa <= 1.5x; cupti, CLB, sanitizer printed", c_cost_launch_bound, cost=True),
        Case(22, "22", "fault surfaced at torch.cuda.synchronize()", "loss line named; report before torch's exception", c_sync),
        Case(23, "23a", "fact: attribute 122 (64-bit stream memops)", "value recorded (info)", c_attr122),
        Case(23, "23b", "fact: thread, fd and libc function printing the assert text", "recorded (info)", c_assert_print),
        Case(23, "23c", "fact: cuFuncGetName vs cuKernelGetName on a cudart launch", "recorded (info)", c_func_names),
        Case(23, "23d", "cuStreamBeginCaptureToGraph into an IF-node body", "instantiates and runs with cdsa", c_capture_if),
        Case(23, "23e", "fault, then exit without synchronizing", "one report (native and torch)", c_exit_nosync),
        Case(24, "24a", "report view: case 1's hint and one stack", "nll_loss hint; no interpreter frames", c_report_view("c01_cross_entropy.py", "LOSS-LINE", "nll_loss", "cross_entropy / nll_loss:")),
        Case(24, "24b", "report view: case 5's hint", "embedding hint; no interpreter frames", c_report_view("c05_embedding.py", "EMB-LINE", "index", "embedding / index_select:")),
        Case(24, "24c", "case 10's backward fault: autograd node named", "node named; forward line a candidate", c_autograd_node),
        Case(24, "24d", "case 17's 700: the compute-sanitizer command", "given, and it finds the access", c_sanitizer_hint),
        Case(25, "25a", "graph by cuGraphAddKernelNode, node changed by cuGraphExecKernelNodeSetParams to an assert",
             "asserting kernel, replay line and update line named (~2 s)", c_graph_update, expect_s=2.0),
        Case(26, "26", "torch.distributed NCCL job, world size 1: the step asserts before an all-reduce (~15 s)",
             "one report, whole, before torch's and NCCL's own lines; step line named", c_ddp_watchdog, expect_s=15.0),
    ]
    # Cases 1, 11 and 14 again under the CUPTI backend (no fallback line allowed).
    for c in list(cs):
        if c.key in ("1", "11a", "11b", "14"):
            cs.append(Case(c.num, c.key + "/cupti", c.title + " [CUPTI backend]", c.expect + "; CUPTI ran", c.fn, "cupti",
                           first=c.first))
    order = {c.key: i for i, c in enumerate(cs)}
    return sorted(cs, key=lambda c: (c.cost, not c.first, c.num, c.backend != "driver", order[c.key]))


def fake_cases(hang_s):
    """--fake-cases: the orchestration without a GPU (test_suite_cpu.py): a quick case, a slow one, one whose
    process tree hangs (a child that ignores SIGTERM, a grandchild in its own session holding stdout), and one
    after it."""
    def sleeper(secs, ok=True, timeout=RUN_S):
        def run(ctx, key, backend):
            r = ctx.run(key, [sys.executable, "-c", f"import time; time.sleep({secs}); print('slept {secs}')"], preload=False, timeout=timeout)
            return ok and r.rc == 0, f"slept {secs} s (rc {r.rc})"
        return run

    hang_src = ("import os, signal, subprocess, sys, time\n"
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)'], start_new_session=True)\n"
                "if os.fork() == 0:\n"
                "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "    time.sleep(1000)\n"
                "print('tree started', os.getpgrp(), flush=True)\n"
                "time.sleep(1000)\n")

    def hang(ctx, key, backend):
        r = ctx.run(key, [sys.executable, "-c", hang_src], preload=False, timeout=hang_s)
        return r.rc == 0, f"rc {r.rc}: {short(r.out, 60)}"

    return [
        Case(1, "f1", "fake: quick", "passes", sleeper(0.1)),
        Case(2, "f2", "fake: slow", "passes after 3 s", sleeper(3)),
        Case(3, "f3", "fake: hangs with a process tree", "reported as timed out, tree killed", hang),
        Case(4, "f4", "fake: after the hang", "passes", sleeper(0.1)),
        Case(5, "f5", "fake: fails", "fails", sleeper(0.1, ok=False)),
        Case(6, "f6", "fake: longer than the budget", "timed out at the deadline", sleeper(1000, timeout=1000), cost=True),
    ]


# ---------------------------------------------------------------------------------------------- self-check
SCRIPT_MARKERS = {
    "c01_cross_entropy.py": ["LOSS-LINE", "SURFACE-LINE"], "c03_nll_log_softmax.py": ["LOSS-LINE"],
    "c05_embedding.py": ["EMB-LINE"], "c06_catch_and_continue.py": ["LOSS-LINE"],
    "c09_thousand_ops_later.py": ["LOSS-LINE"], "c10_backward_only.py": ["FORWARD-LINE", "BACKWARD-LINE"],
    "c11_triton_assert.py": ["TRITON-CALL"], "c11_compile_oob.py": ["COMPILED-CALL"],
    "c12_graph_replay.py": ["CAPTURE-LINE", "REPLAY-LINE"], "c13_side_stream.py": ["SIDE-LOSS-LINE"],
    "c18_dataloader.py": ["LOSS-LINE"], "native_faults.cu": ["LAUNCH-LINE", "ILLEGAL-LINE"],
    "driver_api.c": ["DRIVER-LAUNCH-LINE"], "c22_sync.py": ["LOSS-LINE", "SYNC-LINE"],
    "c23_exit_nosync.py": ["LOSS-LINE"], "driver_facts.cu": ["NOSYNC-LINE"], "c26_ddp_watchdog.py": ["STEP-LINE"],
    "graph_node_update.cu": ["ADD-LINE", "REPLAY-LINE", "UPDATE-LINE"],
}
# Cases whose subject is not the synchronize wrapper: they must not surface the fault at torch.cuda.synchronize().
NO_SYNC_BEFORE_SURFACE = ["c10_backward_only.py", "c11_triton_assert.py", "c12_graph_replay.py", "c13_side_stream.py"]


def self_check():
    """Everything the suite can check without a GPU: the case scripts compile, markers exist, the cases cover 1..24."""
    problems = []
    for f in sorted(CASES.glob("*.py")):
        try:
            compile(f.read_text(), str(f), "exec")
        except SyntaxError as e:
            problems.append(f"{f.name}: {e}")
    for script, markers in SCRIPT_MARKERS.items():
        for m in markers:
            try:
                marker_line(CASES / script, m)
            except (AssertionError, OSError) as e:
                problems.append(str(e))
    for script in NO_SYNC_BEFORE_SURFACE:
        first = min(marker_line(CASES / script, m)[0] for m in SCRIPT_MARKERS[script])
        lines = (CASES / script).read_text().splitlines()
        if any("torch.cuda.synchronize()" in l for l in lines[first - 1:]):
            problems.append(f"{script} calls torch.cuda.synchronize() after its faulting launch: surface the fault at "
                            ".item() (case 22 tests synchronize)")
    referenced = set(re.findall(r'"(c\d\d_\w+\.py|\w+\.cu|\w+\.c)"', pathlib.Path(__file__).read_text()))
    for name in sorted(referenced):
        if not (CASES / name).exists():
            problems.append(f"referenced case file missing: {name}")
    nums = sorted({c.num for c in all_cases()})
    if nums != list(range(1, 27)):
        problems.append(f"case numbers {nums} do not cover 1..26")
    for k in ("1/cupti", "11a/cupti", "11b/cupti", "14/cupti"):
        if k not in {c.key for c in all_cases()}:
            problems.append(f"{k} missing: cases 1, 11 and 14 run under both backends")
    return problems


# ---------------------------------------------------------------------------------------------- results
STATUSES = ("PASS", "FAIL", "TIMEOUT", "INFO", "SKIP", "NOT RUN")


class Results:
    """The verdicts so far; results.json and table.md are rewritten (atomically) after every case."""

    def __init__(self, logdir, cases, facts, start, mirror=None):
        self.logdir, self.cases, self.facts, self.start = logdir, cases, facts, start
        self.dirs = [logdir] + ([pathlib.Path(mirror)] if mirror else [])
        self.v = {}  # key -> (status, evidence, secs)
        self.lock = threading.Lock()
        self.note = ""

    def record(self, key, status, evidence, secs=0.0):
        with self.lock:
            self.v[key] = (status, evidence, secs)
            self.write()

    def rows(self):
        rows = [("case", "expectation", "result", "evidence")]
        for c in self.cases:
            status, ev, _ = self.v.get(c.key, ("NOT RUN", self.note or "not reached", 0.0))
            rows.append((c.key, short(c.expect, 58), status, short(ev, 170)))
        return rows

    def failed(self):
        return [c.key for c in self.cases if self.v.get(c.key, ("NOT RUN",))[0] in ("FAIL", "TIMEOUT", "NOT RUN")]

    def write(self):
        wall = time.time() - self.start
        md = ["| case | expectation | result | evidence |", "|---|---|---|---|"] + [
            f"| {r[0]} | {r[1]} | {r[2]} | {r[3].replace('|', '/')} |" for r in self.rows()[1:]]
        done = sum(1 for c in self.cases if c.key in self.v)
        f = self.facts
        head = (f"Run {f.get('date')}, commit {f.get('commit')}, GPU {f.get('gpu')}, torch/CUDA/Python {f.get('torch')}, "
                f"wall {wall:.0f} s, {done}/{len(self.cases)} cases finished" + (f" ({self.note})" if self.note else ""))
        data = {"facts": f, "wall_s": round(wall, 1), "finished": done, "total": len(self.cases), "note": self.note,
                "results": {k: {"status": s, "pass": s in ("PASS", "INFO"), "evidence": e, "secs": round(t, 1)}
                            for k, (s, e, t) in self.v.items()}}
        for d in self.dirs:
            for name, text in (("table.md", head + "\n\n" + "\n".join(md) + "\n"), ("results.json", json.dumps(data, indent=1))):
                tmp = d / f".{name}.{threading.get_ident()}.tmp"
                try:
                    tmp.write_text(text)
                    os.replace(tmp, d / name)
                except OSError as e:  # a full or vanished mirror must not stop the suite
                    print(f"suite: cannot write {d / name}: {e}", file=sys.stderr)


def table(rows):
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}" for r in rows)


def run_cmd(argv, timeout):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=max(1, timeout), stdin=subprocess.DEVNULL,
                           start_new_session=True)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, "", str(e)


GPU_PROBE = r"""
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("no libcuda.so.1:", e); sys.exit(1)
r = cu.cuInit(0)
n = ctypes.c_int(0)
if r == 0:
    r = cu.cuDeviceGetCount(ctypes.byref(n))
print("cuInit/cuDeviceGetCount rc", r, "devices", n.value)
sys.exit(0 if r == 0 and n.value > 0 else 1)
"""


def gpu_present():
    """(True, '') when libcuda initialises and sees a device, else (False, why): no GPU, every case skips."""
    rc, out, err = run_cmd([sys.executable, "-c", GPU_PROBE], 30)
    return rc == 0, short(out + err, 120)


def machine_facts(python, with_gpu, deadline):
    facts = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    rc, out, _ = run_cmd(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], 10)
    facts["commit"] = out.strip() or "?"
    if not with_gpu:
        facts["gpu"], facts["torch"] = "none", "not asked (no GPU)"
        return facts
    rc, out, err = run_cmd(["nvidia-smi", "--query-gpu=name,driver_version,compute_mode", "--format=csv,noheader"], 20)
    facts["gpu"] = out.strip().splitlines()[0] if out.strip() else short(err, 60) or "?"
    rc, out, err = run_cmd([python, "-c", "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])"],
                           min(90, deadline - time.time()))
    facts["torch"] = out.strip() or short(err, 80)
    return facts


# ---------------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logdir")
    ap.add_argument("--libcdsa")
    ap.add_argument("--rtlib", default="")
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable))
    ap.add_argument("--jobs", type=int, default=6, help="functional cases run this many at a time (cost cases run alone; "
                    "1 when the GPU's compute mode is exclusive)")
    ap.add_argument("--only", help="comma-separated case numbers or keys, e.g. 1,11a,14/cupti")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--budget", type=float, default=WALL_BUDGET_S,
                    help=f"seconds for the whole suite from --start (default {WALL_BUDGET_S}); no run outlives start+budget-{MARGIN_S}")
    ap.add_argument("--mirror", metavar="DIR", help="also keep results.json and table.md up to date in DIR (e.g. $OUT)")
    ap.add_argument("--start", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--fake-cases", type=float, default=None, metavar="HANG_S", help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    cases = all_cases() if args.fake_cases is None else fake_cases(args.fake_cases)

    if args.list:
        for c in cases:
            print(f"{c.num:>2}  {c.key:<10} {c.title} [{c.expect}]")
        print(f"{len({c.num for c in cases})} cases ({len(cases)} runs with the CUPTI-backend variants)")
        return 0
    if args.dry_run:
        problems = self_check()
        for c in cases:
            print(f"would run {c.key:<10} backend={c.backend:<6} {'(alone, timed)' if c.cost else '(first)' if c.first else ''} {c.title}")
        print("suite self-check: " + ("OK" if not problems else "PROBLEMS:\n  " + "\n  ".join(problems)))
        return 1 if problems else 0

    if not args.logdir or (not args.libcdsa and args.fake_cases is None):
        ap.error("--logdir and --libcdsa are required (run.sh passes them)")
    start = args.start or time.time()
    ctx = Ctx(args, start)
    ctx.logdir.mkdir(parents=True, exist_ok=True)
    if args.only:
        want = set(args.only.split(","))
        cases = [c for c in cases if c.key in want or str(c.num) in want]
    if args.skip_cost:
        cases = [c for c in cases if not c.cost]
    has_gpu, why = (True, "") if args.fake_cases is not None else gpu_present()
    facts = machine_facts(ctx.python, has_gpu and args.fake_cases is None, ctx.deadline) if args.fake_cases is None else \
        {"date": "-", "commit": "-", "gpu": "fake cases", "torch": "-"}
    if args.mirror:
        pathlib.Path(args.mirror).mkdir(parents=True, exist_ok=True)
    res = Results(ctx.logdir, cases, facts, start, args.mirror)
    res.write()
    if "exclusive" in facts.get("gpu", "").lower() and args.jobs > 1:
        print(f"suite: the GPU's compute mode is exclusive ({facts['gpu']}): cases run one at a time", flush=True)
        args.jobs = 1
    print(f"suite: {facts}; budget {args.budget:.0f} s, {ctx.left():.0f} s left for the cases", flush=True)

    def finish(note=""):
        res.note = note
        res.write()
        rows = res.rows()
        failed = res.failed()
        wall = time.time() - start
        print()
        print(f"cdsa GPU suite: {facts['gpu']}; torch {facts['torch']}; commit {facts['commit']}; logs in {ctx.logdir}")
        counts = {s: sum(1 for r in rows[1:] if r[2] == s) for s in STATUSES}
        print(f"{counts['PASS']} passed, {counts['INFO']} info, {counts['FAIL']} failed, {counts['TIMEOUT']} timed out, "
              f"{counts['SKIP']} skipped, {counts['NOT RUN']} not run, in {wall:.0f} s of a {args.budget:.0f} s budget"
              + (f" ({note})" if note else "") + (f"; FAILED: {', '.join(failed)}" if failed else ""))
        print(table(rows), flush=True)
        return failed

    if not has_gpu:
        for c in cases:
            res.record(c.key, "SKIP", f"no GPU: {why}")
        finish("no GPU")
        return 2

    def on_signal(signum, frame):
        ctx.stopping = True
        try:
            ctx.kill_all()
        finally:
            try:
                finish(f"stopped by {signal.Signals(signum).name}")  # results first, then the printed table
                sys.stdout.flush()
            except Exception:  # e.g. a print interrupted mid-write: the files are written already
                pass
            os._exit(124)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    if args.fake_cases is None:
        build_natives(ctx)
        print(f"suite: native builds {sorted(ctx.bins)} failed: {ctx.build_errors or 'none'} [{time.time() - start:.0f}s]", flush=True)

    def run_one(c):
        t0 = time.time()
        ctx.local.runs = []
        if ctx.left() < 2:
            status, ev = "NOT RUN", "the suite's time budget is spent"
        else:
            try:
                ok, ev = c.fn(ctx, c.key, c.backend)
                status = "INFO" if ok == INFO else "PASS" if ok else "FAIL"
            except Skip as e:
                status, ev = "SKIP", f"could not run: {e}"
            except Stopped:
                return
            except Exception as e:  # a broken case must not stop the suite
                status, ev = "FAIL", f"suite error: {type(e).__name__}: {short(str(e), 70)}"
            late = [r for r, may in ctx.local.runs if r.timed_out and not may]
            if late:
                r = late[0]
                status = "TIMEOUT"
                ev = (f"not started, budget spent; " if r.limit < 2 else f"timed out after {r.limit:.0f} s; ") + ev
        res.record(c.key, status, ev, time.time() - t0)
        print(f"suite: {c.key:<10} {status} ({time.time() - t0:.0f}s) {ev}", flush=True)

    functional = [c for c in cases if not c.cost]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(run_one, functional))  # in order: the 'first' cases (torch.compile) start at once
    for c in cases:
        if c.cost:
            run_one(c)
    failed = finish("budget spent" if ctx.left() < 2 else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
