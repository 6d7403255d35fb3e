"""The GPU suite's cases (part of suite.py; see README.md): what each case runs and how it is judged, all_cases()
(the list --list prints) and fake_cases() (the orchestration test's)."""
import dataclasses
import json
import pathlib
import re
import shlex
import shutil
import statistics
import sys

from suite_checks import (INFO, check_coredump, check_cudart_entry_points, check_entry_pointers, check_freed_copy,
                          check_pci_bus_id, check_pdl_memop_wait, table_typedefs,
                          check_pdl_pairs,
                          check_graph_update, check_named, check_native, check_no_report, check_report_first, names_py,
                          not_one_report, short, surfaced, traceback_block)
from suite_procs import CASES, ROOT, RUN_S, Skip  # first: it puts tests/support on sys.path
from cdsa_report import BANNER, hint_lines, kernel_name, marker_line, py_frames  # noqa: E402


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
# cdsa binds libcuda's stdio imports when it starts (shim/intercept/driver_stdio.cc). The device text must be in the
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


def c_driver_api_reload(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("driver_api"), ctx.bin("driver_api.ptx"), "reload"], backend=backend)
    ok, text = check_native(r, "launch_via_driver", "driver_api.c", "DRIVER-LAUNCH-LINE", "driver_assert_kernel",
                            backend)
    reused = "yes" if "handle reused: yes" in r.out else "no" if "handle reused: no" in r.out else "?"
    if "driver_other_kernel" in r.report:
        return False, f"the unloaded module's kernel is named: {text}; handle reused {reused}"
    return ok, f"{text}; the driver gave the old handle back: {reused}"


def c_graph_update(ctx, key, backend):
    r = ctx.run(key, [ctx.bin("graph_update")], backend=backend)
    return check_graph_update(r, backend)


def c_pdl_pairs(ctx, key, backend):
    b = ctx.bin("pdl_pairs")
    runs = []
    for i in range(3):  # A B A B A B: drift hits both alike
        runs.append((ctx.run(key, [b, "time", 2000], preload=False, tag=f"bare.{i}"),
                     ctx.run(key, [b, "time", 2000], backend=backend, tag=f"cdsa.{i}")))
    between = [(what, ctx.run(key, [b, "time", 2000, what], preload=False, tag=f"bare.{what}"))
               for what in ("memop", "event")]
    return check_pdl_pairs(runs, between)


def c_pdl_memop_wait(ctx, key, backend):
    b = ctx.bin("pdl_pairs")
    return check_pdl_memop_wait(ctx.run(key, [b, "memop-wait"], preload=False, timeout=30),
                                ctx.run(key, [b, "memop-wait", "waited"], preload=False, tag="waited", timeout=30))


def c_freed_copy(ctx, key, backend):
    return check_freed_copy([ctx.run(key, [ctx.bin("pdl_pairs"), "freed-copy", kind], preload=False, tag=kind,
                                     timeout=30) for kind in ("free", "async-free")])


def c_coredump(ctx, key, backend):
    dumps = ctx.logdir / "runs" / "coredumps"
    for d in ("bare", "cdsa"):
        (dumps / d).mkdir(parents=True, exist_ok=True)
    bare = ctx.run(key, [ctx.bin("coredump"), str(dumps / "bare")], preload=False, tag="bare", timeout=60,
                   may_time_out=True)
    under = ctx.run(key, [ctx.bin("coredump"), str(dumps / "cdsa")], backend=backend, tag="cdsa", timeout=60,
                    may_time_out=True)
    return check_coredump(bare, under)


def table_headers(ctx):
    """The headers whose table the entry-point case walks: the pinned CUDA 13.5 set if the checkout or the carry has
    it (tools/cuda_headers.sh; integration/gpu/prepare_carry.sh copies it), else the toolkit's."""
    for d in (ROOT / ".carry" / "cuda-headers", ROOT / ".cuda-headers" / "13.5" / "include",
              pathlib.Path(getattr(ctx, "cuda_home", "/usr/local/cuda")) / "include"):
        if (d / "cudaTypedefs.h").exists():
            return d
    raise Skip("no cudaTypedefs.h (.carry/cuda-headers, .cuda-headers/13.5/include, CUDA_HOME/include)")


def c_entry_pointers(ctx, key, backend):
    typedefs = table_typedefs(table_headers(ctx))
    listing = ctx.logdir / "runs" / "entry_points.txt"
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text("".join(f"{n} {v} {2 if pt else 0}\n" for n, v, pt in sorted(typedefs)))
    r = ctx.run(key, [ctx.bin("entry_point_pointers"), str(listing)], preload=False, timeout=60)
    verdict, ev = check_entry_pointers(r, typedefs)
    return verdict, f"{len(typedefs)} typedefs of {table_headers(ctx)}; " + ev


def c_cudart_entry_points(ctx, key, backend):
    log = ctx.logdir / "runs" / "29b.entry_points.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    r = ctx.run(key, ctx.py("c29_cudart_entry_points.py"), env={"CDSA_DEBUG_ENTRY_POINTS": str(log)}, timeout=60)
    return check_cudart_entry_points(r, log.read_text() if log.exists() else "")


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
def c_ddp_watchdog(ctx, key, backend):
    """torch.distributed, NCCL, world size 1: the step asserts before an all-reduce; whichever thread surfaces it
    (the main thread's .item() or the NCCL watchdog's event query, which aborts), the report comes first."""
    r = ctx.run(key, ctx.py("c26_ddp_watchdog.py"), backend=backend)
    return check_report_first(r, "c26_ddp_watchdog.py", "STEP-LINE", "nll_loss")


# ------------------------------------------------------------------------------ 27: the PCI bus id (info)
def c_python_walker(ctx, key, backend):
    """The CPython walker and its verified chain cache under this machine's Python (the one with torch): the unit
    test that takes every capture through the cache and compares it with the walk, run here with the probe built
    beside libcdsa.so. It checks the by-instruction check and the count of code frees on an interpreter build
    other than the CI's."""
    build = pathlib.Path(ctx.libcdsa).resolve().parent.parent
    probe = build / "tests" / "unit" / "python_stack" / "libpystack_probe.so"
    if not probe.is_file():
        return False, f"no probe at {probe} (built with libcdsa.so on this machine only; see build.log)"
    r = ctx.run(key, [ctx.python, str(ROOT / "tests" / "unit" / "python_stack" / "test_python_stack.py"),
                      "--probe", str(probe)], preload=False)
    ok = r.rc == 0 and "OK:" in r.out
    m = re.search(r"OK: (.*)", r.out)
    return ok, (m.group(1) if m else f"rc {r.rc}: {short(r.out + r.err, 160)}")


def c_pci_bus_id(ctx, key, backend):
    """The letter case and format of cuDeviceGetPCIBusId's answer (cases/c27_pci_bus_id.py, bare; nvidia-smi's
    and torch's too), and whether cdsa's report header of a faulting run (case 14's program) shows the same
    string: users match it with the kernel's Xid lines ('PCI:0000:3b:00')."""
    probe = ctx.run(key, ctx.py("c27_pci_bus_id.py"), preload=False, tag="probe", timeout=60)
    try:
        under = ctx.run(key, [ctx.bin("nf_static"), "assert"], backend=backend, tag="cdsa", timeout=30)
    except Skip:  # no faulting program: the driver's answer is still told
        under = None
    return check_pci_bus_id(probe, under)


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
        Case(16, "16b", "the same after cuModuleUnload + reload: another kernel may get the old CUfunction (~1 s)",
             "the new module's asserting kernel named, never the unloaded one's", c_driver_api_reload, expect_s=1.0),
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
        Case(25, "25b", "PDL pairs: cuLaunchKernelEx with programmatic serialization, the secondary waits with "
             "cudaGridDependencySynchronize; 2,000 pairs bare vs cdsa, interleaved (~8 s)",
             "secondaries overlap their primaries under cdsa as often as bare; time per pair told", c_pdl_pairs,
             expect_s=8.0),
        Case(25, "25b2", "after a PDL secondary that never waits: does a memop (an event, the next kernel) wait for "
             "the primary, and does one behind cdsa's event record + wait? (~3 s)",
             "cdsa's placement waits for the primary (pass); the plain memop's answer recorded for "
             "kLandedPdlMarkProvesPrimary", c_pdl_memop_wait, expect_s=3.0),
        Case(25, "25b3", "fact: an async copy from freed memory fails at the call or later? (~2 s)", "recorded (info)",
             c_freed_copy, expect_s=2.0),
        Case(25, "25c", "fact: coredumps via cuCoredumpSetAttributeGlobal (lightweight, no abort, capped), a 700 (~20 s)",
             "recorded (info): driver's text, survival, time, the 13.2 callbacks; cdsa's report", c_coredump,
             expect_s=20.0),
        Case(26, "26", "torch.distributed NCCL job, world size 1: the step asserts before an all-reduce (~15 s)",
             "one report, whole, before torch's and NCCL's own lines; step line named", c_ddp_watchdog, expect_s=15.0),
        Case(28, "28", "the CPython walker's unit test under this machine's Python (every capture through the chain "
             "cache, compared with the walk; ~2 s)", "passes: the by-instruction check and the code-free count hold "
             "on this interpreter build", c_python_walker, expect_s=2.0),
        Case(29, "29a", "fact: every table entry's driver function at its version, at 13000 and at the driver's "
             "(the ceiling's premise: same pointer <=> same prototype); lookups with nothing to give (~3 s)",
             "recorded (info): premise holds/breaks per entry; unknown and too-old answers", c_entry_pointers,
             expect_s=3.0),
        Case(29, "29b", "fact: how cudart 13.5's cudaLaunchHostFunc_v2, cudaStreamBeginRecaptureToGraph and "
             "cudaGraphNodeGetParams reach the driver, under cdsa (~3 s)",
             "recorded (info): the (name, version) asked, wrapped or thunk, each call's result", c_cudart_entry_points,
             expect_s=3.0),
        Case(27, "27", "fact: letter case and format of cuDeviceGetPCIBusId's answer, as cdsa's header prints it (~2 s)",
             "recorded (info): driver's string, its case, cdsa's header, Xid-style form; nvidia-smi, torch",
             c_pci_bus_id, expect_s=2.0),
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
