"""The GPU suite's checks (part of suite.py; see README.md): judges that read one Run's output (its report,
through tests/support/cdsa_report.py) and return (verdict, evidence). test_suite_cpu.py feeds them canned output."""
import re

from suite_procs import CASES  # first: it puts tests/support on sys.path
from cdsa_report import graph_split, kernel_name, marker_line, report_span  # noqa: E402


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
    launched, nodes = graph_split(part)
    ok_replay = "graph launch" in launched and replay_site in launched
    ok_kernel = "checked_index_kernel" in nodes and "fill_kernel" not in nodes
    ok_update = "Changed by cuGraphExecKernelNodeSetParams" in nodes and update_site in nodes
    exact = part.startswith("cdsa: the failing launch")
    ev = (f"replay {replay_site} {'named' if ok_replay else 'NOT named'}; node kernel "
          f"{'checked_index_kernel' if ok_kernel else 'NOT checked_index_kernel alone'}; update {update_site} "
          f"{'named' if ok_update else 'NOT named'}; {'exact' if exact else 'not exact'}; {surfaced(r)}")
    return ok_replay and ok_kernel and ok_update and exact, ev


# Case 26 (torch.distributed watchdog).
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
    span = report_span(r.err)
    own = JOB_ERROR_LINES.search(r.err)
    if not span.closed:
        return False, ev + "; the report never ended"
    end = span.close
    if own and own.start() < end:
        first = r.err[own.start():].splitlines()[0]
        return False, ev + f"; the job's own line came first: {short(first, 80)}"
    return ok, ev + (f"; report whole before the job's first own line ({short(r.err[own.start():].splitlines()[0], 50)})"
                     if own else "; no error line of the job's own") + f"; rc {r.rc}"
