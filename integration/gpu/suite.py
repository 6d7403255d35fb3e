#!/usr/bin/env python3
"""cdsa on a real GPU: the cases of issue 3 (1-21), the dedicated synchronize case (22), the driver facts of
issue 7 (23a-23e) and the PCI bus id fact (27), run as fresh processes under LD_PRELOAD=libcdsa.so (unless a
case says otherwise), checked against their expectations, with a short table printed last.

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
import datetime
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the suite's parts: suite_procs.py (processes), suite_checks.py, suite_cases.py
# The suite's parts; test_suite_cpu.py reads the names it tests off suite.py, so they are imported here too.
from suite_procs import (CASES, MARGIN_S, ROOT, Ctx, Run, Skip, Stopped, build_natives, cudart_libdir,  # noqa: E402,F401
                         group_members, is_cupti_fallback, native_jobs)
from suite_checks import (check_graph_update, check_named, check_native, check_no_report,  # noqa: E402,F401
                          check_report_first, short, traceback_block, check_pdl_pairs, check_pdl_memop_wait,
                          check_freed_copy, check_coredump, check_pci_bus_id, letter_case, xid_form,
                          check_entry_pointers, check_cudart_entry_points)
from suite_cases import INFO, all_cases, fake_cases  # noqa: E402
from cdsa_report import marker_line  # noqa: E402
WALL_BUDGET_S = 480  # the whole suite, libcdsa.so build and nvcc included (run.sh's default --budget)


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
    referenced = set()
    for part in sorted(HERE.glob("suite*.py")):  # suite.py and its parts
        referenced |= set(re.findall(r'"(c\d\d_\w+\.py|\w+\.cu|\w+\.c)"', part.read_text()))
    for name in sorted(referenced):
        if not (CASES / name).exists():
            problems.append(f"referenced case file missing: {name}")
    nums = sorted({c.num for c in all_cases()})
    if nums != list(range(1, 30)):
        problems.append(f"case numbers {nums} do not cover 1..29")
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
