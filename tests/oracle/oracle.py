#!/usr/bin/env python3
"""The generated-program oracle's driver (tests/oracle/README.md): generates programs, runs each under libcdsa.so
on the simulated driver, classifies cdsa's verdict against the ground truth the program carries, prints per-class
and per-feature counts, shrinks failures into regression cases, and gates CI.

    oracle.py --seeds 0:300 [--jobs N] [--runner c|py|both|mix] [--shrink] [--lib PATH] [--build DIR]
    oracle.py --regressions [DIR]          replay the regression cases
    oracle.py --gate floors.json ...       also fail on an exact rate below its floor (CI)
    oracle.py --program FILE [--keep]      run one program, print its classification and where it ran
"""
import argparse
import collections
import concurrent.futures
import json
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import gen  # noqa: E402
import program as P  # noqa: E402

BANNER = "==================== cdsa: asynchronous CUDA fault"
OK_CLASSES = ("exact-right", "ambiguous-listed", "unknown-listed", "unrecorded-hedged")
# The faulting work never ran (the sim logged no fault, no call returned one, no report): work still queued when the
# process exited is discarded (tests/sim/README.md, Process exit), e.g. when the program's only wait was refused
# by another thread's capture. Not a test of cdsa; neither a pass nor a failure (the gate bounds how many).
NOT_RUN = "not-run"
NOT_RUN_MAX = 0.05
FAIL_CLASSES = ("wrong-certainty", "missed", "no-report", "crash", "timeout", "invalid", "oracle-error")
MATCH_TEXT = "only this kernel matches the device's assert"


# ---- capabilities of the simulated driver ------------------------------------------------------------------------

PROBE = r'''
import ctypes, json, os, sys
caps = {}
lib = ctypes.CDLL("libcuda.so.1")
lib.cuInit(0)
n = ctypes.c_int()
lib.cuDeviceGetCount(ctypes.byref(n))
caps["devices"] = n.value
ctx = ctypes.c_void_p()
lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
lib.cuCtxSetCurrent(ctx)
d = ctypes.c_uint64()
caps["stream_alloc"] = int(lib.cuMemAllocAsync(ctypes.byref(d), ctypes.c_size_t(64), None) == 0 and
                           lib.cuMemFreeAsync(d, None) == 0)
data = open(sys.argv[1], "rb").read()
for var, cap in ((b"SIM_CUDA_SCHED_SEED", "sched_seed"), (b"SIM_CUDA_FAULT_LOG", "fault_log"),
                 (b"SIM_CUDA_CTX_CURRENT_AFTER_FAULT", "ctx_current_after_fault"),
                 (b"SIM_CUDA_DEVICES", "devices_env"), (b"SIM_CUDA_ASSERT_BLOCK", "assert_block")):
    caps[cap] = int(var in data)
# Per-context sticky errors: a fault in the primary context leaves a created context usable.
ctx2, mod, f = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
if lib.cuCtxCreate_v2(ctypes.byref(ctx2), 0, 0) == 0:
    lib.cuCtxSetCurrent(ctx)
    lib.cuModuleLoadData(ctypes.byref(mod), b"image")
    lib.cuModuleGetFunction(ctypes.byref(f), mod, b"illegal_address")
    lib.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    lib.cuCtxSynchronize()
    lib.cuCtxSetCurrent(ctx2)
    caps["ctx_sticky"] = int(lib.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(64)) == 0)
print(json.dumps(caps))
'''


def probe_caps(build):
    """What the simulated driver offers beyond its base contract (the generator uses each behind its flag)."""
    simdir = build / "lib" / "sim"
    env = dict(os.environ, LD_LIBRARY_PATH=str(simdir))
    env.pop("LD_PRELOAD", None)
    if os.environ.get("E2E_PRELOAD_FIRST"):
        env["LD_PRELOAD"] = os.environ["E2E_PRELOAD_FIRST"]
    out = subprocess.run([sys.executable, "-c", PROBE, str(simdir / "libcuda.so.1")], env=env, capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"oracle: probing the simulated driver failed:\n{out.stderr}")
    caps = json.loads(out.stdout)
    if caps.get("devices_env"):
        env2 = dict(env, SIM_CUDA_DEVICES="2")
        out2 = subprocess.run([sys.executable, "-c", PROBE, str(simdir / "libcuda.so.1")], env=env2,
                              capture_output=True, text=True, timeout=60)
        caps["devices"] = json.loads(out2.stdout)["devices"] if out2.returncode == 0 else 1
    return {k: v for k, v in caps.items() if k != "devices_env" and v and not (k == "devices" and v < 2)}


# ---- one run -----------------------------------------------------------------------------------------------------

class Setup:
    def __init__(self, build, lib, timeout, keep=False, workdir=None, caps=None):
        self.caps = caps or {}
        self.build = build
        self.lib = lib
        self.timeout = timeout
        self.keep = keep
        self.workdir = workdir
        if workdir:
            os.makedirs(workdir, exist_ok=True)  # --workdir names a folder that need not exist yet
        self.c_runner = build / "tests" / "oracle" / "oracle_runner"
        self.support = build / "tests" / "oracle" / "liboracle_support.so"
        self.fake_home = build / "tests" / "fake_cuda_home"
        for need in (self.lib, self.support, build / "lib" / "sim" / "libcuda.so.1"):
            if not need.exists():
                raise SystemExit(f"oracle: {need} is missing: build first (cmake --build {build})")

    def env(self, prog, cwd):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CDSA_", "SIM_CUDA_", "ORACLE_"))}
        env.pop("LD_PRELOAD", None)
        env["LD_LIBRARY_PATH"] = str(self.build / "lib" / "sim")
        env.update(ORACLE_RESULT=str(cwd / "result.json"), ORACLE_SUPPORT=str(self.support),
                   ORACLE_LIBCDSA=str(self.lib), ORACLE_FAKE_CUPTI=str(self.fake_home / "lib64" / "libcupti.so.13"),
                   CDSA_TRACE_FILE=str(cwd / "trace.json"), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        backend = prog.get("backend", "driver")
        preload = []
        if os.environ.get("E2E_PRELOAD_FIRST"):
            preload.append(os.environ["E2E_PRELOAD_FIRST"])
            env["ORACLE_GATE_TIMEOUT_MS"] = "10000"
        if backend != "inject":
            preload.append(str(self.lib))
        if backend in ("cupti", "inject"):
            env.update(CUDA_HOME=str(self.fake_home), FAKE_CUPTI_MODE="ok")
        if backend == "cupti":
            env["CDSA_BACKEND"] = "cupti"
        if preload:
            env["LD_PRELOAD"] = ":".join(preload)
        if self.caps.get("fault_log"):  # the sim's own record of which launch faulted, kept with the run
            env["SIM_CUDA_FAULT_LOG"] = str(cwd / "sim-fault.log")
        env.update(prog.get("env", {}))
        return env


def run_program(setup, prog, runner):
    """Runs `prog` with runner "c" or "py"; returns dict(rc, out, err, trace, result, seconds, dir)."""
    base = setup.workdir or None
    cwd = pathlib.Path(tempfile.mkdtemp(prefix="oracle-", dir=base))
    (cwd / "program.json").write_text(json.dumps(prog))
    if runner == "c":
        argv = [str(setup.c_runner), str(cwd / "program.json")]
    else:
        argv = [sys.executable, str(HERE / "runner.py"), str(cwd / "program.json")]
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=setup.env(prog, cwd), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    except OSError as e:
        raise RuntimeError(f"cannot start {argv[0]}: {e}") from e
    timed_out = False
    try:
        out, err = proc.communicate(timeout=setup.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    run = {"rc": proc.returncode, "timed_out": timed_out, "out": out, "err": err,
           "seconds": time.monotonic() - t0, "dir": str(cwd), "runner": runner}
    (cwd / "stdout.txt").write_text(out)
    (cwd / "stderr.txt").write_text(err)
    traces = sorted(cwd.glob("trace*.json"))
    run["traces"] = len(traces)
    run["trace"] = None
    if traces:
        try:
            run["trace"] = json.loads(traces[0].read_text())
        except ValueError as e:
            run["trace_error"] = str(e)
    try:
        run["result"] = json.loads((cwd / "result.json").read_text())
    except (OSError, ValueError):
        run["result"] = None
    try:
        run["sim_fault_log"] = (cwd / "sim-fault.log").read_text()[:2000]
    except OSError:
        run["sim_fault_log"] = None
    if not setup.keep:
        shutil.rmtree(cwd, ignore_errors=True)
    return run


# ---- classification ----------------------------------------------------------------------------------------------

def map_records(trace, result):
    """seq -> (op, grid, kind) for every launch record of the trace: each thread's records, in launch order, are a
    run of consecutive launches the runner logged on that thread (cdsa records a launch on the thread that made it,
    after the call returned; the oldest may have left the ring, and launches into a healthy context may follow the
    report): the run where the records' kinds and kernel grids agree with the log, the latest of equals. Also the
    number of records whose kernel grid or kind disagrees with the log."""
    by_tid = collections.defaultdict(list)
    for rec in trace.get("launches", []):
        by_tid[rec["tid"]].append(rec)
    seq2op, mismatches = {}, 0
    for t, tid in result.get("tids", {}).items():
        log = result.get("launches", {}).get(t, [])
        recs = sorted(by_tid.pop(tid, []), key=lambda r: r["seq"])
        if len(recs) > len(log):
            mismatches += len(recs) - len(log)
            recs = recs[len(recs) - len(log):]
        def bad(rec, entry):
            _, grid, kind = entry
            return (kind == "g") != (rec["kind"] == "graph") or (kind == "k" and rec["grid"][0] != grid)

        def cost(o):
            return sum(bad(rec, log[o + j]) for j, rec in enumerate(recs))

        off = len(log) - len(recs)  # the tail, as almost always
        if cost(off):
            off = min(range(off, -1, -1), key=cost)
        for j, rec in enumerate(recs):
            mismatches += bad(rec, log[off + j])
            seq2op[rec["seq"]] = tuple(log[off + j])
    mismatches += sum(len(v) for v in by_tid.values())  # records of threads the runner does not know
    return seq2op, mismatches


def classify(prog, truth, run):
    """dict(cls, why, attribution, candidates, ...) for one run."""
    out = {"cls": None, "why": "", "attribution": None, "ncand": 0, "seconds": round(run["seconds"], 3)}
    res = run.get("result")
    err = run.get("err", "")
    if run["timed_out"]:
        return dict(out, cls="timeout", why=f"no exit within the per-program timeout ({run['seconds']:.0f} s)")
    if run["rc"] not in (0, 1) or "AddressSanitizer" in err or "runtime error:" in err:
        return dict(out, cls="crash", why=f"exit status {run['rc']}: " + err.strip().splitlines()[-1][:200]
                    if err.strip() else f"exit status {run['rc']}")
    if res is None:
        return dict(out, cls="crash", why="the runner wrote no result")
    if res["errors"]:
        # The faulting copy or memop refused at its call with CUDA_ERROR_INVALID_VALUE: its block, freed in stream
        # order, was already gone (another thread's synchronous copy on the legacy stream drained the free first).
        # A timing the generator cannot rule out; the fault never ran, so there is nothing to attribute.
        faulting = {i for i, o in enumerate(prog["ops"]) if o.get("fault") and o["op"] in ("memop", "copy")}
        if not res["fault_launched"] and all(e["op"] in faulting and e["code"] == 1 for e in res["errors"]):
            return dict(out, cls=NOT_RUN, why="the faulting work was refused at its call (its block already freed)")
        return dict(out, cls="invalid", why=f"unexpected driver errors: {res['errors'][:3]}")
    if not res["fault_launched"]:
        return dict(out, cls="invalid", why="the faulting op did not run")
    banners = err.count(BANNER)
    trace = run.get("trace")
    if trace is None or trace.get("report") is None:
        if banners:
            return dict(out, cls="no-report", why="a report on stderr but no trace file")
        return dict(out, cls="no-report", why=f"no report (sticky error seen by the program: {res['sticky']})")
    rep = trace["report"]
    out["attribution"] = rep["attribution"]
    cands = rep.get("candidates", [])
    out["ncand"] = len(cands)
    seq2op, mism = map_records(trace, res)
    if mism:
        out["mapping_mismatches"] = mism
    grid2op = {}
    for t, log in res.get("launches", {}).items():
        for op, grid, kind in log:
            if kind == "k":
                grid2op.setdefault(grid, op)

    def ident(c):
        launch = c["launch"]
        hit = seq2op.get(launch.get("seq"))
        if hit is None and launch.get("kind") not in ("graph", "") and launch.get("grid"):
            g = launch["grid"][0]
            if g in grid2op:
                hit = (grid2op[g], g, "k")
        return hit

    culprit_op, culprit_grid = truth["op"], truth["grid"]

    def is_culprit(c):
        hit = ident(c)
        if hit is None or truth["kind"] == "unrecorded":
            return False
        op, grid, kind = hit
        if truth["kind"] == "launch":
            return op == culprit_op and kind == "k" and grid == culprit_grid
        return op == culprit_op and kind == "g"

    def nodes_of(c):
        return [n["launch"]["grid"][0] for n in c.get("graph_nodes", [])]

    described = []
    for c in cands:
        hit = ident(c)
        described.append({"op": hit[0] if hit else None, "grid": c["launch"].get("grid", [0])[0],
                          "kind": c["launch"].get("kind"), "nodes": nodes_of(c),
                          "pick": c.get("graph_node_pick", -1)})
    out["candidates"] = described[:8]
    # A candidate that is not the culprit but is said to be the only one matching the assert: a wrong certainty.
    for c in cands:
        if MATCH_TEXT in c.get("why", "") and not is_culprit(c):
            return dict(out, cls="wrong-certainty", why="an innocent launch is 'the only one matching the assert'")
    if truth["kind"] == "unrecorded":
        if rep["attribution"] == "exact":
            return dict(out, cls="wrong-certainty", why=f"exact on a launch; the fault was {truth['what']} work")
        if rep["attribution"] == "unknown":
            return dict(out, cls="unknown-listed")
        if rep.get("candidates_complete", True):
            return dict(out, cls="missed", why=f"AMBIGUOUS list said complete; the fault was {truth['what']} work")
        return dict(out, cls="unrecorded-hedged")
    right = [c for c in cands if is_culprit(c)]
    if rep["attribution"] == "unknown":
        return dict(out, cls="unknown-listed", why="listed" if right else "not listed")
    if not right:
        if rep["attribution"] == "exact":
            return dict(out, cls="wrong-certainty", why="exact on another launch")
        return dict(out, cls="missed", why="the failing launch is not among the candidates")
    c = right[0]
    exact = rep["attribution"] == "exact"
    named = c["launch"].get("kernel") or ""
    if truth["kind"] == "launch" and named and named != truth["kernel"]:
        # The right launch under another kernel's name (a name kept for a handle address the driver reused: issue
        # 26 item 6): a certain verdict names the wrong kernel; in a list, the culprit is not recognisable.
        if exact:
            return dict(out, cls="wrong-certainty", why=f"exact on the right launch named {named}, the kernel is "
                        f"{truth['kernel']} (a stale name)")
        return dict(out, cls="missed", why=f"the failing launch is listed as {named}, the kernel is {truth['kernel']}"
                    " (a stale name)")
    if truth["kind"] == "replay":
        nodes = nodes_of(c)
        if not nodes:
            # The replay is named, its nodes are not known to cdsa (no graph bookkeeping, e.g. CUPTI alone): it
            # claims nothing about which node failed.
            return dict(out, cls="ambiguous-listed", why="the replay is listed without its nodes")
        pick = c.get("graph_node_pick", -1)
        node_certain = pick >= 0 or (len(nodes) == 1 and not c.get("graph_nodes_ambiguous"))
        named = nodes[pick] if pick >= 0 and pick < len(nodes) else (nodes[0] if len(nodes) == 1 else None)
        if node_certain and named != culprit_grid:
            return dict(out, cls="wrong-certainty",
                        why=f"the replay's node named as certain is grid {named}, the failing node is {culprit_grid}")
        if culprit_grid not in nodes:
            return dict(out, cls="missed",
                        why=f"the failing node (grid {culprit_grid}) is not among the replay's nodes")
        if exact and node_certain:
            nodes_named = [n["launch"].get("kernel") or "" for n in c.get("graph_nodes", [])]
            name = nodes_named[pick] if 0 <= pick < len(nodes_named) else nodes_named[0]
            if name and name != truth["kernel"]:
                return dict(out, cls="wrong-certainty", why=f"exact on the right node named {name}, the kernel is "
                            f"{truth['kernel']} (a stale name)")
            return dict(out, cls="exact-right")
        return dict(out, cls="ambiguous-listed")
    return dict(out, cls="exact-right" if exact else "ambiguous-listed")


def runners_for(seed, choice):
    if choice == "both":
        return ["c", "py"]
    if choice == "mix":
        return ["c" if seed % 2 else "py"]
    return [choice]


def evaluate_retrying(setup, prog, runner, retries):
    """evaluate(), and where it fails, the same program again up to `retries` times: a failure the next run does not
    repeat is timing (the 2-core VM's load decides which kernel runs when), kept as `flaky` with the classes it had;
    one every run repeats is the verdict. With retries=0, evaluate() alone."""
    c, run = evaluate(setup, prog, runner)
    failed = []
    while c["cls"] in FAIL_CLASSES and len(failed) < retries:
        failed.append(c["cls"])
        c, run = evaluate(setup, prog, runner)
    if failed and c["cls"] not in FAIL_CLASSES:
        c["flaky"] = failed
    elif failed:
        c["attempts"] = len(failed) + 1
    return c, run


def evaluate(setup, prog, runner):
    truth = P.ground_truth(prog)
    if not truth["valid"]:
        return {"cls": "invalid", "why": truth["why"]}, None
    try:
        run = run_program(setup, prog, runner)
        c = classify(prog, truth, run)
    except Exception as e:  # the oracle's own failure (a runner it cannot start, a trace it cannot read): never a pass
        return {"cls": "oracle-error", "why": f"{type(e).__name__}: {e}", "dir": None}, None
    c["dir"] = run["dir"]
    if run.get("sim_fault_log") is not None:
        c["sim_fault_log"] = run["sim_fault_log"].strip().splitlines()[:3]
    if setup.caps.get("fault_log") and c["cls"] not in ("crash", "timeout", "oracle-error"):
        # The sim's own record of the faults is a second ground truth: it must agree with the generator's. When it
        # does not, the program did not do what the generator meant (an oracle bug): invalid, whatever cdsa said.
        problem = P.check_fault_log(truth, run.get("sim_fault_log"))
        res = run.get("result") or {}
        if problem and not P.parse_fault_log(run.get("sim_fault_log")) and not res.get("sticky") and \
                c["cls"] == "no-report":
            c = dict(c, cls=NOT_RUN, why="the faulting work never ran (queued at exit, discarded)", fault_log="none")
        else:
            c["fault_log"] = "disagrees" if problem else "agrees"
        if problem and c["cls"] != NOT_RUN:
            c = dict(c, cls="invalid", why="fault log: " + problem, cdsa_cls=c["cls"], cdsa_why=c.get("why", ""))
    if c["cls"] in ("crash", "timeout", "oracle-error", "invalid"):
        c["stderr_tail"] = run.get("err", "")[-6000:]  # the evidence, also when the run's directory is gone
    return c, run


# ---- shrinking ---------------------------------------------------------------------------------------------------

def shrink(setup, prog, runner, cls, jobs, log=print, budget=400, repeats=2):
    """Delta debugging over the op list: the smallest program found (within `budget` runs) that keeps the fault op
    and the failure class, `repeats` runs in a row (timing decides some classes: a case must reproduce)."""
    runs = [0]

    def fails(ops):
        cand = dict(prog, ops=ops)
        if P.fault_op_index(cand) is None or not P.ground_truth(cand)["valid"]:
            return False
        for _ in range(repeats):
            runs[0] += 1
            c, _ = evaluate(setup, cand, runner)
            if c["cls"] != cls:
                return False
        return True

    ops = list(prog["ops"])
    n = 2
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        while len(ops) >= 2 and runs[0] < budget:
            size = max(1, len(ops) // n)
            chunks = [ops[i:i + size] for i in range(0, len(ops), size)]
            complements = [[o for j, ch in enumerate(chunks) if j != k for o in ch] for k in range(len(chunks))]
            results = list(pool.map(fails, complements))
            hit = next((k for k, r in enumerate(results) if r), None)
            if hit is not None:
                ops = complements[hit]
                n = max(n - 1, 2)
                continue
            if n >= len(ops):
                break
            n = min(len(ops), 2 * n)
    # Then smaller counts (bursts, cycles) where the class survives.
    for i, op in enumerate(ops):
        for key in ("n",):
            if op["op"] not in ("burst", "cycles") or runs[0] >= budget:
                continue
            while op[key] > 1 and runs[0] < budget:
                trial = dict(op, **{key: op[key] // 2})
                if trial.get("bad_at", -1) >= trial[key]:
                    break
                cand = ops[:i] + [trial] + ops[i + 1:]
                if not fails(cand):
                    break
                ops[i] = op = trial
    log(f"  shrunk {len(prog['ops'])} -> {len(ops)} ops in {runs[0]} runs")
    return dict(prog, ops=ops)


def write_regression(prog, cls, runner, why, directory):
    case = dict(prog)
    case["expect"] = {"found_as": cls, "runner": runner, "why": why}
    name = f"{cls}-{P.short_hash(prog)}.json"
    path = directory / name
    path.write_text(json.dumps(case, indent=1) + "\n")
    return path


# ---- reports -----------------------------------------------------------------------------------------------------

def mean_se(total, squares, n):
    """The standard error of a mean of n values from their sum and their sum of squares (0 for n < 2)."""
    if n < 2:
        return 0.0
    var = max(0.0, (squares - total * total / n) / (n - 1))
    return math.sqrt(var / n)


def summarize(rows):
    """rows: (features, classification). Per class and per feature counts."""
    classes = collections.Counter(c["cls"] for _, c in rows)
    feats = collections.defaultdict(lambda: {"programs": 0, "exactable": 0, "exact": 0, "ambiguous": 0,
                                             "cand_sum": 0, "cand_sq": 0, "failures": 0})
    for fs, c in rows:
        for f in fs + ["all"]:
            s = feats[f]
            s["programs"] += 1
            if c["cls"] in FAIL_CLASSES:
                s["failures"] += 1
            if {"fault_memop", "fault_thunk", "api_thunk"} & set(fs) or c["cls"] == NOT_RUN:
                continue  # no launch can be named as certain (or nothing faulted): not in the exact rate
            s["exactable"] += 1
            if c["cls"] == "exact-right":
                s["exact"] += 1
            elif c["cls"] == "ambiguous-listed":
                s["ambiguous"] += 1
                s["cand_sum"] += c.get("ncand", 0)
                s["cand_sq"] += c.get("ncand", 0) ** 2
    table = {}
    for f, s in feats.items():
        table[f] = {"programs": s["programs"], "failures": s["failures"], "exactable": s["exactable"],
                    "exact_rate": round(s["exact"] / s["exactable"], 4) if s["exactable"] else None,
                    "mean_candidates": round(s["cand_sum"] / s["ambiguous"], 2) if s["ambiguous"] else None,
                    "mean_candidates_se": round(mean_se(s["cand_sum"], s["cand_sq"], s["ambiguous"]), 2)
                    if s["ambiguous"] else None}
    return classes, table


def print_summary(classes, table, out=sys.stdout, expected=(), fault_log=None):
    """Per class, then per feature: every feature the driver allows (`expected`) is printed, none too, so a
    feature that left the generator shows."""
    total = sum(classes.values())
    print(f"oracle: {total} runs", file=out)
    for cls in OK_CLASSES + (NOT_RUN,) + FAIL_CLASSES:
        if classes.get(cls):
            print(f"  {cls:18} {classes[cls]:6}", file=out)
    if fault_log:
        print("  the sim's fault log: " + ", ".join(f"{v} {k}" for k, v in sorted(fault_log.items())), file=out)
    print(f"  {'feature':26} {'programs':>8} {'exact%':>7} {'mean cand':>9} {'failures':>8}", file=out)
    empty = {"programs": 0, "failures": 0, "exact_rate": None, "mean_candidates": None}
    for f in sorted(set(table) | set(expected), key=lambda k: (k != "all", k)):
        s = table.get(f, empty)
        rate = "-" if s["exact_rate"] is None else f"{100 * s['exact_rate']:.1f}"
        mc = "-" if s["mean_candidates"] is None else f"{s['mean_candidates']:.2f}"
        print(f"  {f:26} {s['programs']:8} {rate:>7} {mc:>9} {s['failures']:8}", file=out)


def check_gate(classes, table, floors, out=sys.stdout, expected=()):
    """The CI gate's verdict: a list of reasons to fail (empty: pass). `expected`: the features the driver allows,
    each of which must have programs in the range."""
    bad = []
    for cls in FAIL_CLASSES:
        if classes.get(cls):
            bad.append(f"{classes[cls]} run(s) classified {cls}")
    total = sum(classes.values())
    if total and classes.get(NOT_RUN, 0) > NOT_RUN_MAX * total:
        bad.append(f"{classes[NOT_RUN]} of {total} runs never ran their faulting work (> {100 * NOT_RUN_MAX:.0f} %)")
    for f in expected:
        if f not in floors.get("exact_floor", {}) and not table.get(f, {}).get("programs"):
            bad.append(f"feature {f}: no program exercised it (it left the generator?)")
    for f, floor in floors.get("exact_floor", {}).items():
        s = table.get(f)
        if not s or not s["programs"]:
            bad.append(f"feature {f}: no program exercised it (it left the generator?)")
            continue
        if s["exact_rate"] is not None and s["exact_rate"] < floor:
            bad.append(f"feature {f}: exact {100 * s['exact_rate']:.1f}% < floor {100 * floor:.1f}%")
    # A mean over a few ambiguous programs moves with one long list (a PDL chain whose marks landed less far under
    # load: seed 241's 34 candidates, more on a loaded machine): it fails only when above its ceiling by more than two
    # standard errors of this run's mean, as the exact floors allow two binomial ones.
    for f, ceil in floors.get("mean_candidates_ceiling", {}).items():
        s = table.get(f)
        if s and s["mean_candidates"] is not None and s["mean_candidates"] - 2 * (s.get("mean_candidates_se") or 0) > ceil:
            bad.append(f"feature {f}: mean candidates {s['mean_candidates']:.2f} (standard error "
                       f"{s.get('mean_candidates_se') or 0:.2f}) > ceiling {ceil:.2f} by more than two standard errors")
    for f, n in floors.get("min_programs", {}).items():
        if not table.get(f) or table[f]["programs"] < n:
            bad.append(f"feature {f}: {table.get(f, {}).get('programs', 0)} programs < {n}")
    return bad


# ---- main --------------------------------------------------------------------------------------------------------

def parse_seeds(text):
    """A:B (the seeds A..B-1), A (one), or a comma-separated list of either."""
    seeds = []
    for part in text.split(","):
        a, _, b = part.partition(":")
        seeds.extend(range(int(a), int(b)) if b else range(int(a), int(a) + 1))
    return seeds


def run_features(prog, runner):
    """A run's features: its program's and its runner's (the Python runner's also the dll kind)."""
    return P.features(prog) + ["runner_" + runner] + (["runner_py_" + prog.get("dll", "cdll")] if runner == "py" else [])


def generator_fingerprint():
    """What makes a seed's program and its features: gen.py and program.py, hashed (kept in every --json)."""
    import hashlib
    h = hashlib.sha256()
    for name in ("gen.py", "program.py"):
        h.update((HERE / name).read_bytes())
    return h.hexdigest()[:16]


def merge(paths, out_json):
    """The summary of several --json files of generated programs, as if one run had made them all: each record's
    features are computed again from its seed (gen.generate with the pieces' capabilities, which must be the
    same, so the programs are the ones that ran), the per-feature table from those. A seed twice is an error."""
    pieces = [json.loads(pathlib.Path(p).read_text()) for p in paths]
    caps = pieces[0]["caps"]
    for p, d in zip(paths, pieces):
        if d["caps"] != caps:
            raise SystemExit(f"oracle --merge: {p} was run with other capabilities than {paths[0]}")
    mine = generator_fingerprint()
    prints = {d.get("generator") for d in pieces}
    if len(prints) > 1:
        raise SystemExit(f"oracle --merge: the pieces were made by different generators ({sorted(map(str, prints))})")
    (theirs,) = prints
    if theirs is None:
        print("oracle --merge: the pieces carry no generator fingerprint (made before it was kept): their features "
              "are computed with this checkout's gen.py and program.py, which must be the ones they ran with")
    elif theirs != mine:
        raise SystemExit(f"oracle --merge: the pieces were made by generator {theirs}, this checkout's is {mine}: "
                         "run --merge from the commit they ran on")
    rows, records, seen, seconds = [], [], set(), 0.0
    for p, d in zip(paths, pieces):
        seconds += d.get("seconds", 0.0)
        for rec in d["runs"]:
            if not rec["label"].startswith("seed "):
                continue  # regression cases: not in the table
            key = (rec["seed"], rec["runner"])
            if key in seen:
                raise SystemExit(f"oracle --merge: seed {rec['seed']} [{rec['runner']}] is in two pieces")
            seen.add(key)
            rows.append((run_features(gen.generate(rec["seed"], caps), rec["runner"]), rec))
            records.append(rec)
    classes, table = summarize(rows)
    fault_log = collections.Counter(c.get("fault_log") for _, c in rows if c.get("fault_log"))
    seeds = sorted(s for s, _ in seen)
    print(f"oracle --merge: {len(paths)} pieces, seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} runs), "
          f"{seconds:.0f} s of runs")
    print_summary(classes, table, expected=P.features_for(caps), fault_log=fault_log)
    if out_json:
        pathlib.Path(out_json).write_text(json.dumps({"runs": records, "classes": classes, "features": table,
                                                      "fault_log": fault_log, "seconds": seconds, "caps": caps,
                                                      "generator": theirs}, indent=1))
    return 1 if any(classes.get(c) for c in FAIL_CLASSES) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--seeds", help="A:B, the seeds A..B-1; A, one; or a comma-separated list of these")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--runner", default="mix", choices=["c", "py", "both", "mix"],
                    help="mix (default): odd seeds by the C runner, even ones by the Python runner")
    ap.add_argument("--shrink", action="store_true", help="shrink each failure and write it as a regression case")
    ap.add_argument("--shrink-budget", type=int, default=300, help="runs per shrink")
    ap.add_argument("--regressions", nargs="?", const=str(HERE / "regressions"), metavar="DIR",
                    help="replay every regression case in DIR (default tests/oracle/regressions)")
    ap.add_argument("--regressions-out", default=str(HERE / "regressions"), help="where --shrink writes cases")
    ap.add_argument("--skip-open", action="store_true",
                    help="with --regressions: skip the cases still open (their expect names it: \"open\": the issue "
                         "item), and fail when any other case fails (ctest oracle.regressions)")
    ap.add_argument("--program", help="run one program file (a regression case, or gen.py's output)")
    ap.add_argument("--build", default=os.environ.get("TEST_BUILD_DIR", str(ROOT / "build")))
    ap.add_argument("--lib", help="the libcdsa.so to test (default: BUILD/lib/libcdsa.so)")
    ap.add_argument("--retries", type=int, default=0,
                    help="run a failing program again up to N times; one that passes is flaky, not a failure")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("ORACLE_TIMEOUT", 60)))
    ap.add_argument("--gate", metavar="FLOORS", help="fail below the floors of this file (tests/oracle/floors.json)")
    ap.add_argument("--json", metavar="FILE", help="write every run's classification and the summary here")
    ap.add_argument("--keep", action="store_true", help="keep each run's directory")
    ap.add_argument("--workdir", help="make the runs' directories here")
    ap.add_argument("--print-caps", action="store_true")
    ap.add_argument("--caps", help="capabilities as JSON instead of probing (tests that pin them)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per run")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="no runs: the summary of these --json files together (a long run made in pieces; each "
                         "program's features come again from its seed and the pieces' capabilities, which must agree)")
    a = ap.parse_args()
    if a.merge:
        return merge(a.merge, a.json)

    build = pathlib.Path(a.build).resolve()
    lib = pathlib.Path(a.lib).resolve() if a.lib else build / "lib" / "libcdsa.so"
    caps = json.loads(a.caps) if a.caps else probe_caps(build)
    if a.print_caps:
        print(json.dumps(caps))
        return 0
    setup = Setup(build, lib, a.timeout, keep=a.keep, workdir=a.workdir, caps=caps)
    t0 = time.monotonic()
    jobs = []  # (label, program, runner)
    if a.program:
        prog = json.loads(pathlib.Path(a.program).read_text())
        for runner in ([prog.get("expect", {}).get("runner")] if prog.get("expect", {}).get("runner") and
                       a.runner == "mix" else runners_for(prog.get("seed", 0), a.runner)):
            jobs.append((a.program, prog, runner))
    if a.regressions:
        for path in sorted(pathlib.Path(a.regressions).glob("*.json")):
            prog = json.loads(path.read_text())
            if a.skip_open and prog.get("expect", {}).get("open"):
                print(f"oracle: {path.name}: skipped, still open ({prog['expect']['open']})")
                continue
            missing = [c for c in prog.get("requires", []) if not caps.get(c)]
            if missing:
                print(f"oracle: {path.name}: skipped, the simulated driver lacks {missing}")
                continue
            runner = prog.get("expect", {}).get("runner", "py") if a.runner == "mix" else a.runner
            for r in (["c", "py"] if runner == "both" else [runner]):
                jobs.append((f"regressions/{path.name}", prog, r))
    if a.seeds:
        for seed in parse_seeds(a.seeds):
            prog = gen.generate(seed, caps)
            for r in runners_for(seed, a.runner):
                jobs.append((f"seed {seed}", prog, r))
    if not jobs:
        ap.error("nothing to run: give --seeds, --regressions or --program")

    rows, records = [], []
    case_failures = collections.Counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = {pool.submit(evaluate_retrying, setup, prog, runner, a.retries): (label, prog, runner)
                for label, prog, runner in jobs}
        for fut in concurrent.futures.as_completed(futs):
            label, prog, runner = futs[fut]
            c, run = fut.result()
            feats = run_features(prog, runner)
            if not label.startswith("regressions/"):
                rows.append((feats, c))  # the per-feature table and the floors: generated programs only
            else:
                case_failures.update([c["cls"]] if c["cls"] in FAIL_CLASSES else [])
            rec = {"label": label, "runner": runner, "seed": prog.get("seed"), **{k: v for k, v in c.items()
                                                                                  if k != "dir"}}
            records.append(rec)
            if a.verbose or c["cls"] in FAIL_CLASSES or c.get("flaky"):
                where = f" ({c['dir']})" if a.keep else ""
                again = f" (after {', '.join(c['flaky'])}: passed on a re-run)" if c.get("flaky") else ""
                print(f"{label} [{runner}] {c['cls']}: {c.get('why', '')}{again}{where}", flush=True)
    classes, table = summarize(rows)
    expected = [f for f in P.features_for(caps) if not f.startswith("runner_") or
                any(f.startswith("runner_" + r) for r in ("c", "py") if r in runners_for(1, a.runner) +
                    runners_for(2, a.runner))] if a.seeds else []
    fault_log = collections.Counter(c.get("fault_log") for _, c in rows if c.get("fault_log"))
    if rows:
        print_summary(classes, table, expected=expected, fault_log=fault_log)
    ncases = sum(1 for label, _, _ in jobs if label.startswith("regressions/"))
    if ncases:
        print(f"oracle: {ncases} regression case run(s), {sum(case_failures.values())} failing"
              + (f" ({dict(case_failures)})" if case_failures else ""))
    flaky = [r for r in records if r.get("flaky")]
    if flaky:
        print(f"oracle: {len(flaky)} program(s) failed and passed when run again (timing, not counted as failures): "
              + "; ".join(f"{r['label']} [{r['runner']}] {'/'.join(r['flaky'])}" for r in flaky))
    elapsed = time.monotonic() - t0
    print(f"oracle: {len(jobs)} runs in {elapsed:.1f} s with {a.jobs} jobs ({elapsed / len(jobs):.2f} s a run)")
    if a.shrink:
        out_dir = pathlib.Path(a.regressions_out)
        out_dir.mkdir(parents=True, exist_ok=True)
        seen = set()
        for label, prog, runner in jobs:
            rec = next(r for r in records if r["label"] == label and r["runner"] == runner)
            if rec["cls"] not in ("wrong-certainty", "missed", "no-report", "crash", "timeout") or \
                    label.startswith("regressions/"):
                continue
            print(f"oracle: shrinking {label} [{runner}] ({rec['cls']})", flush=True)
            small = shrink(setup, prog, runner, rec["cls"], max(1, a.jobs), budget=a.shrink_budget)
            key = P.short_hash(small)
            if key in seen:
                continue
            seen.add(key)
            c, _ = evaluate(setup, small, runner)
            path = write_regression(small, rec["cls"], runner, c.get("why", rec.get("why", "")), out_dir)
            print(f"oracle: wrote {path}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"runs": records, "classes": classes, "features": table,
                                                    "fault_log": fault_log, "seconds": elapsed, "caps": caps,
                                                    "generator": generator_fingerprint()}, indent=1))
    if a.skip_open and case_failures and not a.gate:  # the gate names them below
        print(f"oracle regressions: FAIL: {sum(case_failures.values())} case run(s) failed ({dict(case_failures)})")
        return 1
    if a.gate:
        floors = json.loads(pathlib.Path(a.gate).read_text())
        bad = check_gate(classes, table, floors, expected=expected)
        bad += [f"{n} regression case run(s) classified {cls}" for cls, n in sorted(case_failures.items())]
        for b in bad:
            print(f"oracle gate: FAIL: {b}")
        if bad:
            return 1
        print("oracle gate: pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
