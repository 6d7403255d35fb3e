#!/usr/bin/env python3
"""cdsa on a real GPU: the 21 cases of issue 3, run as fresh processes under LD_PRELOAD=libcdsa.so (unless a
case says otherwise), checked against their expectations, with a short table printed last.

Normally started by integration/gpu/run.sh, which builds libcdsa.so first:
    suite.py --logdir DIR --libcdsa PATH [--rtlib DIR] [--jobs N] [--only 1,11,14] [--skip-cost]
    suite.py --list        the cases (no GPU needed)
    suite.py --dry-run     checks the suite itself (scripts compile, markers exist) and prints the plan

Every case writes KEY.cmd / KEY.out / KEY.err (and its trace files under KEY/) into the log directory;
results.json and table.md hold the results. Exit status: 0 all passed, 1 some case failed, 2 setup error.
"""
import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASES = HERE / "cases"
BANNER = "cdsa: asynchronous CUDA fault"
FALLBACK = "cdsa: CDSA_BACKEND=cupti"  # the one line the CUPTI backend prints when it does not run
WALL_BUDGET_S = 480


# ---------------------------------------------------------------------------------------------- running
@dataclasses.dataclass
class Run:
    argv: list
    rc: int
    out: str
    err: str
    secs: float
    timed_out: bool
    cwd: pathlib.Path

    @property
    def reports(self):
        return self.err.count(BANNER)

    @property
    def report(self):
        i = self.err.find(BANNER)
        if i < 0:
            return ""
        j = self.err.find("\n=====", i + len(BANNER) + 30)
        return dedent(self.err[i:j if j > 0 else len(self.err)])

    def launch_part(self):
        r = self.report
        starts = [k for k in (r.find("cdsa: the failing launch"), r.find("cdsa: AMBIGUOUS")) if k >= 0]
        return r[min(starts):] if starts else ""

    def surfaced_part(self):
        r = self.report
        k = self.launch_part()
        return r[: len(r) - len(k)] if k else r

    def kernel_line(self):
        for line in self.launch_part().splitlines():
            line = re.sub(r"^\[\d+\] ", "", line)
            if line.startswith("kernel ") or line.startswith("graph "):
                return line
        return ""

    def traces(self):
        return sorted(self.cwd.glob("cdsa-*.json"))

    def fallback_lines(self):
        return [l for l in self.err.splitlines() if l.startswith(FALLBACK)]


def dedent(text):
    return "\n".join(line.strip() for line in text.splitlines())


class Ctx:
    def __init__(self, args):
        self.logdir = pathlib.Path(args.logdir).resolve() if args.logdir else None
        self.libcdsa = args.libcdsa
        self.rtlib = args.rtlib
        self.python = args.python
        self.cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        self.arch = os.environ.get("NVCC_ARCH", "sm_90")
        self.nvcc = shutil.which("nvcc") or (f"{self.cuda_home}/bin/nvcc" if os.path.exists(f"{self.cuda_home}/bin/nvcc") else None)
        self.sanitizer = shutil.which("compute-sanitizer") or next(
            (p for p in (f"{self.cuda_home}/bin/compute-sanitizer", f"{self.cuda_home}/compute-sanitizer/compute-sanitizer") if os.path.exists(p)), None)
        self.bins = {}
        self.build_errors = {}

    def env(self, preload, backend="driver", extra=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CDSA_") and k != "LD_PRELOAD"}
        env["PYTHONUNBUFFERED"] = "1"
        if preload:
            env["LD_PRELOAD"] = self.libcdsa
            if self.rtlib and any(pathlib.Path(self.rtlib).iterdir()):
                env["LD_LIBRARY_PATH"] = self.rtlib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            if backend == "cupti":
                env["CDSA_BACKEND"] = "cupti"
        if extra:
            env.update(extra)
        return env

    def run(self, key, argv, *, preload=True, backend="driver", env=None, timeout=180, tag=""):
        name = key.replace("/", "_") + (f".{tag}" if tag else "")
        cwd = self.logdir / "runs" / name
        cwd.mkdir(parents=True, exist_ok=True)
        for old in cwd.glob("cdsa-*.json"):
            old.unlink()
        full_env = self.env(preload, backend, env)
        shown = {k: v for k, v in full_env.items() if k.startswith(("CDSA_", "LD_", "CUDA_LAUNCH", "TRITON", "CUDA_HOME"))}
        (self.logdir / f"{name}.cmd").write_text(
            " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items())) + " " + shlex.join(map(str, argv)) + f"\n(cwd {cwd})\n")
        t0 = time.perf_counter()
        try:
            p = subprocess.run([str(a) for a in argv], cwd=cwd, env=full_env, capture_output=True, text=True,
                               timeout=timeout, errors="replace")
            r = Run(argv, p.returncode, p.stdout, p.stderr, time.perf_counter() - t0, False, cwd)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            r = Run(argv, -9, out, err, time.perf_counter() - t0, True, cwd)
        (self.logdir / f"{name}.out").write_text(r.out)
        (self.logdir / f"{name}.err").write_text(r.err + (f"\n[suite: timed out after {timeout} s]\n" if r.timed_out else ""))
        return r

    def py(self, script, *args):
        return [self.python, str(CASES / script), *map(str, args)]

    def bin(self, name):
        if name not in self.bins:
            raise Skip(f"{name} not built: {self.build_errors.get(name, 'nvcc missing')}")
        return self.bins[name]


class Skip(Exception):
    """A case that cannot run here (missing tool or build): reported as FAIL with the reason."""


def build_natives(ctx):
    """nvcc builds of the native cases, in parallel: static cudart (nvcc's default) and -cudart shared, both -g;
    the driver-API program and its PTX."""
    if not ctx.nvcc:
        ctx.build_errors = {n: "nvcc not found" for n in ("nf_static", "nf_shared", "driver_api")}
        return
    out = ctx.logdir / "bin"
    out.mkdir(exist_ok=True)
    stubs = f"-L{ctx.cuda_home}/lib64/stubs"
    src = str(CASES / "native_faults.cu")
    jobs = {
        "nf_static": [ctx.nvcc, "-g", "-O0", f"-arch={ctx.arch}", src, "-o", str(out / "nf_static"), stubs, "-lcuda"],
        "nf_shared": [ctx.nvcc, "-g", "-O0", f"-arch={ctx.arch}", "-cudart", "shared", src, "-o", str(out / "nf_shared"), stubs, "-lcuda"],
        "driver_api.ptx": [ctx.nvcc, "-ptx", f"-arch={ctx.arch.replace('sm_', 'compute_')}", str(CASES / "assert_kernel.cu"), "-o", str(out / "driver_api.ptx")],
        "driver_api": [ctx.nvcc, "-g", "-O0", "-x", "c", str(CASES / "driver_api.c"), "-o", str(out / "driver_api"), stubs, "-lcuda"],
    }
    procs = {n: subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n, a in jobs.items()}
    log = []
    for n, p in procs.items():
        text, _ = p.communicate(timeout=300)
        log.append(f"$ {shlex.join(jobs[n])}\n{text}")
        if p.returncode == 0:
            ctx.bins[n] = str(out / n)
        else:
            ctx.build_errors[n] = f"nvcc failed (see {ctx.logdir / 'nvcc.log'})"
    (ctx.logdir / "nvcc.log").write_text("\n".join(log))


# ---------------------------------------------------------------------------------------------- checks
def marker_line(path, marker):
    for n, text in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if re.search(r"(#|//|/\*) " + re.escape(marker) + r"\b", text):
            return n, text.strip()
    raise AssertionError(f"marker {marker} not in {path}")


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


def kernel_name(r):
    k = r.kernel_line()
    return k.split("  ")[0][len("kernel "):] if k.startswith("kernel ") else k


def check_named(r, script, marker, kernel, backend="driver"):
    """One report; it names the launch's Python line (File + source text) and a kernel containing `kernel`."""
    if r.timed_out:
        return False, f"timed out after {r.secs:.0f} s"
    if backend == "cupti" and r.fallback_lines():
        return False, "CUPTI backend did not run: " + short(r.fallback_lines()[0], 100)
    if r.reports != 1:
        return False, f"{r.reports} reports (rc {r.rc}); stderr tail: {short(r.err[-200:])}"
    part = r.launch_part()
    n, _ = marker_line(CASES / script, marker)
    kname = kernel_name(r)
    ok_k = kernel.lower() in kname.lower()
    ok_l = names_py(part, script, marker)
    what = f"kernel {short(kname, 48)}; {script}:{n} {'named' if ok_l else 'NOT named'}"
    return ok_k and ok_l, what + ("" if ok_k else f" (expected kernel ~{kernel})")


def check_no_report(r, must_out=None):
    if r.timed_out:
        return False, "timed out"
    if r.reports:
        return False, f"{r.reports} unexpected report(s): {short(r.kernel_line())}"
    if must_out and not re.search(must_out, r.out):
        return False, f"stdout lacks /{must_out}/: {short(r.out[-160:])} {short(r.err[-160:])}"
    m = re.search(must_out, r.out) if must_out else None
    return True, f"no report; {short(m.group(0) if m else r.out.strip().splitlines()[-1] if r.out.strip() else '')}"


def check_native(r, fn, src, marker, kernel, backend="driver", code=None):
    if r.timed_out:
        return False, "timed out"
    if backend == "cupti" and r.fallback_lines():
        return False, "CUPTI backend did not run: " + short(r.fallback_lines()[0], 100)
    if r.reports != 1:
        return False, f"{r.reports} reports (rc {r.rc}); {short(r.err[-200:])}"
    part = r.launch_part()
    n, _ = marker_line(CASES / src, marker)
    site = f"{src}:{n}"
    ok = fn in part and site in part and kernel in kernel_name(r)
    if code and f"CUDA error {code}" not in r.report:
        return False, f"expected error {code}: {short(r.report.splitlines()[1] if r.report else '')}"
    return ok, f"kernel {short(kernel_name(r), 30)}; {fn} {'and' if ok else '/'} {site} {'named' if ok else 'NOT both named'}"


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


def c_ce(label):
    def run(ctx, key, backend):
        r = ctx.run(key, ctx.py("c01_cross_entropy.py", label), backend=backend)
        ok, ev = check_named(r, "c01_cross_entropy.py", "LOSS-LINE", "nll_loss", backend)
        if not ok or label != 10:
            return ok, ev
        if "loss call returned" not in r.out:
            return False, ev + "; stdout changed"
        bare = ctx.run(key, ctx.py("c01_cross_entropy.py", label), preload=False, tag="bare")
        tb = bare.err[bare.err.find("Traceback (most recent call last)"):]
        same = bool(tb) and r.err.endswith(tb) and bare.out == r.out and bare.rc == r.rc
        return same, ev + ("; Python traceback unchanged" if same else "; Python traceback/stdout DIFFERS from bare run")
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


def c_backward(ctx, key, backend):
    r = ctx.run(key, ctx.py("c10_backward_only.py"), backend=backend)
    if r.reports != 1:
        return False, f"{r.reports} reports (rc {r.rc})"
    part = r.launch_part()
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', part)
    fwd, bwd = names_py(part, "c10_backward_only.py", "FORWARD-LINE"), names_py(part, "c10_backward_only.py", "BACKWARD-LINE")
    where = "backward line" if bwd else "forward line" if fwd else f"{len(frames)} Python frames" if frames else "native frames only (autograd thread)"
    return True, f"kernel {short(kernel_name(r), 40)}; named: {where}"


def c_triton(ctx, key, backend):
    r = ctx.run(key, ctx.py("c11_triton_assert.py"), backend=backend, env={"TRITON_DEBUG": "1"}, timeout=240)
    return check_named(r, "c11_triton_assert.py", "TRITON-CALL", "check_range", backend)


def c_compile(ctx, key, backend):
    r = ctx.run(key, ctx.py("c11_compile_oob.py"), backend=backend, timeout=300)
    return check_named(r, "c11_compile_oob.py", "COMPILED-CALL", "", backend)


def c_graph(ctx, key, backend):
    r = ctx.run(key, ctx.py("c12_graph_replay.py"), backend=backend)
    if r.reports != 1:
        return False, f"{r.reports} reports (rc {r.rc}); {short(r.err[-160:])}"
    part = r.launch_part()
    rep = names_py(part, "c12_graph_replay.py", "REPLAY-LINE")
    cap = names_py(part, "c12_graph_replay.py", "CAPTURE-LINE")
    return rep and cap, f"{short(r.kernel_line(), 40)}; replay line {'named' if rep else 'NOT named'}, capture line {'named' if cap else 'NOT named'}"


def c_side(ctx, key, backend):
    r = ctx.run(key, ctx.py("c13_side_stream.py"), backend=backend)
    if r.reports != 1:
        return False, f"{r.reports} reports (rc {r.rc})"
    part = r.launch_part()
    named = names_py(part, "c13_side_stream.py", "SIDE-LOSS-LINE")
    amb = "cdsa: AMBIGUOUS" in r.report
    return named, ("ambiguity stated, " if amb else "exact, ") + ("side-stream loss line named" if named else "loss line NOT named") + f"; {short(kernel_name(r), 40)}"


def c_native(binname, backend_note=""):
    def run(ctx, key, backend):
        r = ctx.run(key, [ctx.bin(binname), "assert"], backend=backend)
        return check_native(r, "launch_bad", "native_faults.cu", "LAUNCH-LINE", "assert_kernel", backend)
    return run


def c_driver_api(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("driver_api"), ctx.bin("driver_api.ptx")], backend=backend)
    return check_native(r, "launch_via_driver", "driver_api.c", "DRIVER-LAUNCH-LINE", "driver_assert_kernel", backend)


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
        return r.rc == 0, f"profiler saw {n} kernel events; cdsa: {short(fb[0][6:], 60) if fb else 'CUPTI backend ran'}"
    return n > 0 and r.reports == 0, f"profiler saw {n} CUDA kernel events under cdsa (rc {r.rc})"


def c_fact_breadcrumbs(ctx, key, backend):
    ev, ok = [], True
    for mode, kernel, code in (("assert", "assert_kernel", 710), ("illegal", "illegal_kernel", 700)):
        r = ctx.run(key, [ctx.bin("nf_static"), mode], tag=mode)
        exact = "the failing launch (the first launch on its stream" in r.report
        right = kernel in kernel_name(r) and "(#6 on its stream)" in r.kernel_line()
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
        ev.append(f"{b.split('_')[1]} cudart: {n}/1000 <<<>>> launches recorded")
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


def elapsed(r):
    m = re.search(r"elapsed_s ([\d.]+)", r.out)
    return float(m.group(1)) if m and r.rc == 0 else None


def ratio_text(name, t, base):
    return f"{name} {t / base:.2f}x" if t and base else f"{name} n/a"


def c_cost_launches(ctx, key, backend):
    b = ctx.bin("nf_static")
    t = {}
    for label, pre, env in (("none", False, None), ("cdsa", True, None), ("cupti", True, {"CDSA_BACKEND": "cupti"}),
                            ("CLB=1", False, {"CUDA_LAUNCH_BLOCKING": "1"})):
        best = None
        for i in range(2):
            v = elapsed(ctx.run(key, [b, "launches", 100000], preload=pre, env=env, timeout=120, tag=f"{label}.{i}"))
            best = v if best is None or (v is not None and v < best) else best
        t[label] = best
    base = t["none"]
    ok = bool(base and t["cdsa"] and t["cdsa"] / base <= 1.5)
    return ok, f"100k tiny kernels {base * 1e6 / 1e5 if base else 0:.2f} us/launch bare; " + ", ".join(
        ratio_text(k, t[k], base) for k in ("cdsa", "cupti", "CLB=1")) + " (target cdsa <= 1.5x; cupti: info)"


def c_cost_mlp(ctx, key, backend):
    t = {}
    t["none"] = elapsed(ctx.run(key, ctx.py("c21_mlp.py", 5), preload=False, tag="none"))
    t["cdsa"] = elapsed(ctx.run(key, ctx.py("c21_mlp.py", 5), tag="cdsa"))
    t["cupti"] = elapsed(ctx.run(key, ctx.py("c21_mlp.py", 5), env={"CDSA_BACKEND": "cupti"}, tag="cupti"))
    t["CLB=1"] = elapsed(ctx.run(key, ctx.py("c21_mlp.py", 1), preload=False, env={"CUDA_LAUNCH_BLOCKING": "1"}, tag="clb"))
    # compute-sanitizer is the slowest run of the suite: it gets what is left of the 8-minute budget, at most 180 s.
    left = int(min(180, WALL_BUDGET_S - 15 - (time.time() - getattr(ctx, "start", time.time()))))
    if ctx.sanitizer and left < 30:
        san = "compute-sanitizer skipped (the suite's time budget is spent)"
    elif ctx.sanitizer:
        r = ctx.run(key, [ctx.sanitizer, "--tool", "memcheck", *ctx.py("c21_mlp.py", 1)], preload=False, timeout=left, tag="sanitizer")
        t["sanitizer"] = elapsed(r) if not r.timed_out else None
        san = ratio_text("compute-sanitizer", t["sanitizer"], t["none"]) if not r.timed_out else f"compute-sanitizer >{left} s (timed out)"
    else:
        san = "compute-sanitizer not found"
    base = t["none"]
    ok = bool(base and t["cdsa"] and t["cdsa"] / base <= 1.02)
    return ok, f"200 MLP steps {base * 1e3 if base else 0:.0f} ms bare; " + ", ".join(
        ratio_text(k, t[k], base) for k in ("cdsa", "cupti", "CLB=1")) + f", {san} (target cdsa <= 1.02x; cupti: info)"


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
        Case(10, "10", "fault only in the backward kernel", "one report; says what is named today", c_backward),
        Case(11, "11a", "Triton tl.device_assert", "the Triton call line named", c_triton),
        Case(11, "11b", "torch.compile'd function indexing OOB", "the compiled call line named", c_compile),
        Case(12, "12", "CUDA graph replay faults after index overwrite", "replay line and capture-time line named", c_graph),
        Case(13, "13", "fault on a side stream, default stream busy", "right line, or candidates + ambiguity", c_side),
        Case(14, "14", "nvcc static cudart <<<>>> assert, -g", "C++ function and file:line named", c_native("nf_static")),
        Case(15, "15", "the same with -cudart shared", "C++ function and file:line named", c_native("nf_shared")),
        Case(16, "16", "driver-API program (cuModuleLoadData+cuLaunchKernel)", "function, file:line, kernel named", c_driver_api),
        Case(17, "17", "illegal-address kernel (700)", "700; kernel and launch line named", c_illegal),
        Case(18, "18", "DataLoader(num_workers=2) epoch, then case 1", "workers unaffected; report correct", c_dataloader),
        Case(19, "19", "torch.profiler CUDA activity, default backend", "profiler still records GPU kernels", c_profiler),
        Case(19, "19/cupti", "torch.profiler under CDSA_BACKEND=cupti (info)", "no crash; who holds the CUPTI slot", c_profiler, "cupti"),
        Case(20, "20a", "fact: breadcrumbs read back after 710 and 700", "launch #6 of 20 named, exactly", c_fact_breadcrumbs),
        Case(20, "20b", "fact: which fd carries the device assert text", "stderr", c_fact_fd),
        Case(20, "20c", "fact: <<<>>> of a CUDA 13 program reach the wrappers", "1000/1000, static and shared cudart", c_fact_reach),
        Case(20, "20d", "fact: cost of one breadcrumb between tiny kernels", "measured; slot reads back", c_fact_memop),
        Case(21, "21a", "cost: 100k tiny kernels, launch-bound", "cdsa <= 1.5x bare; CLB=1 printed", c_cost_launches, cost=True),
        Case(21, "21b", "cost: 200-step MLP training loop", "cdsa <= 1.02x; CLB, sanitizer printed", c_cost_mlp, cost=True),
    ]
    # Cases 1, 11 and 14 again under the CUPTI backend (no fallback line allowed).
    for c in list(cs):
        if c.key in ("1", "11a", "11b", "14"):
            cs.append(Case(c.num, c.key + "/cupti", c.title + " [CUPTI backend]", c.expect + "; CUPTI ran", c.fn, "cupti"))
    order = {c.key: i for i, c in enumerate(cs)}
    return sorted(cs, key=lambda c: (c.cost, c.num, c.backend != "driver", order[c.key]))


# ---------------------------------------------------------------------------------------------- self-check
SCRIPT_MARKERS = {
    "c01_cross_entropy.py": ["LOSS-LINE", "SURFACE-LINE"], "c03_nll_log_softmax.py": ["LOSS-LINE"],
    "c05_embedding.py": ["EMB-LINE"], "c06_catch_and_continue.py": ["LOSS-LINE"],
    "c09_thousand_ops_later.py": ["LOSS-LINE"], "c10_backward_only.py": ["FORWARD-LINE", "BACKWARD-LINE"],
    "c11_triton_assert.py": ["TRITON-CALL"], "c11_compile_oob.py": ["COMPILED-CALL"],
    "c12_graph_replay.py": ["CAPTURE-LINE", "REPLAY-LINE"], "c13_side_stream.py": ["SIDE-LOSS-LINE"],
    "c18_dataloader.py": ["LOSS-LINE"], "native_faults.cu": ["LAUNCH-LINE", "ILLEGAL-LINE"],
    "driver_api.c": ["DRIVER-LAUNCH-LINE"],
}


def self_check():
    """Everything the suite can check without a GPU: the case scripts compile, markers exist, the cases cover 1..21."""
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
    referenced = set(re.findall(r'"(c\d\d_\w+\.py|\w+\.cu|\w+\.c)"', pathlib.Path(__file__).read_text()))
    for name in sorted(referenced):
        if not (CASES / name).exists():
            problems.append(f"referenced case file missing: {name}")
    nums = sorted({c.num for c in all_cases()})
    if nums != list(range(1, 22)):
        problems.append(f"case numbers {nums} do not cover 1..21")
    for k in ("1/cupti", "11a/cupti", "11b/cupti", "14/cupti"):
        if k not in {c.key for c in all_cases()}:
            problems.append(f"{k} missing: cases 1, 11 and 14 run under both backends")
    return problems


# ---------------------------------------------------------------------------------------------- main
def table(rows):
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for r in rows:
        lines.append(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}")
    return "\n".join(lines)


def machine_facts(python):
    facts = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        facts["commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        facts["commit"] = "?"
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        facts["gpu"] = q.stdout.strip().splitlines()[0] if q.stdout.strip() else "?"
    except (OSError, subprocess.TimeoutExpired):
        facts["gpu"] = "nvidia-smi not found"
    try:
        v = subprocess.run([python, "-c", "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])"],
                           capture_output=True, text=True, timeout=120)
        facts["torch"] = v.stdout.strip() or short(v.stderr, 80)
    except (OSError, subprocess.TimeoutExpired):
        facts["torch"] = "?"
    return facts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logdir")
    ap.add_argument("--libcdsa")
    ap.add_argument("--rtlib", default="")
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable))
    ap.add_argument("--jobs", type=int, default=4, help="functional cases run this many at a time (cost cases run alone)")
    ap.add_argument("--only", help="comma-separated case numbers or keys, e.g. 1,11a,14/cupti")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--start", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    cases = all_cases()

    if args.list:
        for c in cases:
            print(f"{c.num:>2}  {c.key:<10} {c.title} [{c.expect}]")
        print(f"{len({c.num for c in cases})} cases ({len(cases)} runs with the CUPTI-backend variants)")
        return 0
    if args.dry_run:
        problems = self_check()
        for c in cases:
            print(f"would run {c.key:<10} backend={c.backend:<6} {'(alone, timed)' if c.cost else ''} {c.title}")
        print("suite self-check: " + ("OK" if not problems else "PROBLEMS:\n  " + "\n  ".join(problems)))
        return 1 if problems else 0

    if not args.logdir or not args.libcdsa:
        ap.error("--logdir and --libcdsa are required (run.sh passes them)")
    start = args.start or time.time()
    ctx = Ctx(args)
    ctx.start = start
    ctx.logdir.mkdir(parents=True, exist_ok=True)
    if args.only:
        want = set(args.only.split(","))
        cases = [c for c in cases if c.key in want or str(c.num) in want]
    if args.skip_cost:
        cases = [c for c in cases if not c.cost]
    facts = machine_facts(ctx.python)
    print(f"suite: {facts}", flush=True)
    build_natives(ctx)
    print(f"suite: native builds {sorted(ctx.bins)} failed: {ctx.build_errors or 'none'} [{time.time() - start:.0f}s]", flush=True)

    results = {}

    def run_one(c):
        t0 = time.time()
        try:
            ok, ev = c.fn(ctx, c.key, c.backend)
        except Skip as e:
            ok, ev = False, f"could not run: {e}"
        except Exception as e:  # a broken case must not stop the suite
            ok, ev = False, f"suite error: {type(e).__name__}: {short(str(e), 70)}"
        results[c.key] = (ok, ev)
        print(f"suite: {c.key:<10} {'PASS' if ok else 'FAIL'} ({time.time() - t0:.0f}s) {ev}", flush=True)

    functional = [c for c in cases if not c.cost]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(run_one, functional))
    for c in cases:
        if c.cost:
            run_one(c)

    wall = time.time() - start
    rows = [("case", "expectation", "result", "evidence")]
    for c in cases:
        ok, ev = results.get(c.key, (False, "not run"))
        rows.append((c.key, short(c.expect, 58), "PASS" if ok else "FAIL", short(ev, 150)))
    failed = [c.key for c in cases if not results.get(c.key, (False,))[0]]
    md = ["| case | expectation | result | evidence |", "|---|---|---|---|"] + [
        f"| {r[0]} | {r[1]} | {r[2]} | {r[3].replace('|', '/')} |" for r in rows[1:]]
    (ctx.logdir / "table.md").write_text(
        f"Run {facts['date']}, commit {facts['commit']}, GPU {facts['gpu']}, torch/CUDA/Python {facts['torch']}, "
        f"wall {wall:.0f} s\n\n" + "\n".join(md) + "\n")
    (ctx.logdir / "results.json").write_text(json.dumps(
        {"facts": facts, "wall_s": wall, "results": {k: {"pass": v[0], "evidence": v[1]} for k, v in results.items()}}, indent=1))
    print()
    print(f"cdsa GPU suite: {facts['gpu']}; torch {facts['torch']}; commit {facts['commit']}; logs in {ctx.logdir}")
    print(f"{len(cases) - len(failed)}/{len(cases)} passed in {wall:.0f} s" + (" (over the 8-minute budget)" if wall > WALL_BUDGET_S else "")
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    print(table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
