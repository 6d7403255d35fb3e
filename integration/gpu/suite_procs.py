"""The GPU suite's process control (part of suite.py; see README.md): every run a fresh process in its own
session, limited to min(its limit, the suite's deadline), its whole tree killed when it ends (Run, Ctx, kill_tree);
the nvcc builds of the native cases. No verdicts here: those are suite_checks.py's and suite_cases.py's."""
import dataclasses
import os
import pathlib
import re
import shlex
import shutil
import signal
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
from cdsa_report import ReadsReport  # noqa: E402
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
    driver_facts.cu (issue 7 facts) and the preloaded logger fact_logger.c; issue 16's graph_node_update.cu,
    pdl_pairs.cu and coredump.cu; issue 27's entry_point_pointers.c."""
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
        "pdl_pairs": [ctx.nvcc, "-g", "-O0", arch, str(CASES / "pdl_pairs.cu"), "-o", str(out / "pdl_pairs"), stubs, "-lcuda"],
        "coredump": [ctx.nvcc, "-g", "-O0", arch, str(CASES / "coredump.cu"), "-o", str(out / "coredump"), stubs, "-lcuda"],
        "entry_point_pointers": [ctx.nvcc, "-g", "-O0", "-x", "c", str(CASES / "entry_point_pointers.c"),
                                 "-o", str(out / "entry_point_pointers"), stubs, "-lcuda"],
        "fact_logger.so": [ctx.nvcc, "-O1", "-shared", "-Xcompiler", "-fPIC", "-x", "c", str(CASES / "fact_logger.c"),
                           "-o", str(out / "fact_logger.so"), "-ldl"],
    }


def build_natives(ctx):
    """All nvcc builds in parallel, each in its own process group, limited like any run."""
    jobs_all = ("nf_static", "nf_shared", "driver_api.ptx", "driver_api", "driver_facts", "fact_logger.so", "graph_update",
                "pdl_pairs", "coredump", "entry_point_pointers")
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
