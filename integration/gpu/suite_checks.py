"""The GPU suite's checks (part of suite.py; see README.md): judges that read one Run's output (its report,
through tests/support/cdsa_report.py) and return (verdict, evidence). test_suite_cpu.py feeds them canned output."""
import pathlib
import re
import statistics

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


INFO = "info"  # a case that records facts returns (INFO, evidence)


# ---- issue 16 (b): programmatic dependent launch (cases/pdl_pairs.cu)
PDL_TIME = re.compile(r"pdl-time pairs (\d+) us_per_pair ([\d.]+) overlapped (\d+) broken_waits (\d+)")
PDL_MEMOP = re.compile(r"memop-wait overlapped (\S+) memop_waits_for_primary (\S+) event_waits_for_primary (\S+) "
                       r"kernel_waits_for_primary (\S+) memop_ms (\S+) sync (\S+)(?: placement (\S+))?")
FREED_COPY = re.compile(r"freed-copy (\S+) call (\S+) sync (\S+) ctx (\S+)")


def pdl_time(r):
    """(us per pair, secondaries that overlapped their primary, pairs, broken waits) of `pdl_pairs time N`, or None."""
    m = PDL_TIME.search(r.out) if r.rc == 0 and not r.timed_out else None
    return (float(m.group(2)), int(m.group(3)), int(m.group(1)), int(m.group(4))) if m else None


def check_pdl_pairs(runs, between=()):
    """Case 25b's judge over interleaved (bare, cdsa) runs of `pdl_pairs time N`: under cdsa the secondaries must
    overlap their primaries as often as bare (at least 90 % of bare's median count) and no wait may break; the time
    per pair is told (median cdsa/bare ratio and its spread). INFO when bare never overlapped: nothing to keep.
    `between`: (label, run) of bare runs with an operation between each pair's kernels, told for their cost."""
    got = [(pdl_time(a), pdl_time(b)) for a, b in runs]
    pairs = [(a, b) for a, b in got if a and b]
    if not pairs:
        return False, f"no timing in {len(runs)} interleaved pair(s) of runs"
    n = pairs[0][0][2]
    bare_us = statistics.median(a[0] for a, _ in pairs)
    ratios = [b[0] / a[0] for a, b in pairs if a[0] > 0]
    bare_ov = statistics.median(a[1] for a, _ in pairs)
    cdsa_ov = statistics.median(b[1] for _, b in pairs)
    broken = sum(a[3] + b[3] for a, b in pairs)
    ratio = (f"cdsa {statistics.median(ratios):.3f}x [{min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} pairs]"
             if ratios else "cdsa n/a")
    text = (f"{n} PDL pairs: {bare_us:.2f} us/pair bare, {ratio}; secondaries overlapping their primary: bare "
            f"{bare_ov:.0f}/{n}, cdsa {cdsa_ov:.0f}/{n}; broken waits {broken}")
    for label, r in between:
        t = pdl_time(r)
        text += (f"; {label} between the kernels (bare): {t[0]:.2f} us/pair, overlapped {t[1]}/{t[2]}" if t else
                 f"; {label} between: no timing (rc {r.rc})")
    if broken:
        return False, text
    if bare_ov == 0:
        return INFO, text + " (no overlap even bare: nothing to keep)"
    return cdsa_ov >= 0.9 * bare_ov, text


def check_pdl_memop_wait(r, waited=None):
    """Case 25b2. `r` (info): the answer kLandedPdlMarkProvesPrimary (shim/record/breadcrumbs.h) waits for; 'yes' on
    every machine the suite ran on is what flipping it needs; 'untested' when the secondary did not overlap.
    `waited` (a check): the same pair with cdsa's placement of a PDL group's mark (an event recorded on the stream and
    waited on, then the memop; shim/record/breadcrumbs.cc): cdsa takes that landed mark as proof that the primary
    finished, so its memop must wait for the primary. 'no' there fails: a wrong certainty."""
    m = PDL_MEMOP.search(r.out)
    if not m:
        return False, f"no answer (rc {r.rc}): {short(r.out + r.err, 80)}"
    ov, memop, event, kernel, ms, sync, _ = m.groups()
    text = (f"secondary overlapped its primary: {ov}; memop_waits_for_primary {memop}; event_waits_for_primary "
            f"{event}; kernel_waits_for_primary {kernel}; memop seen at {ms} ms (primary ~200 ms); sync {sync}")
    if memop == "yes":
        text += " -> kLandedPdlMarkProvesPrimary may become true here"
    elif memop == "no":
        text += " -> kLandedPdlMarkProvesPrimary must stay false"
    if waited is None:
        return INFO, text
    w = PDL_MEMOP.search(waited.out)
    if not w or w.group(7) != "waited":
        return False, text + f"; cdsa's placement: no answer (rc {waited.rc}): {short(waited.out + waited.err, 80)}"
    wov, wmemop = w.group(1), w.group(2)
    text += f"; cdsa's placement (event record + wait, then the memop): overlapped {wov}, memop_waits_for_primary {wmemop}"
    if wmemop == "yes":
        return True, text
    if wmemop == "no":
        return False, text + " -> a proven PDL mark would be a wrong certainty"
    return INFO, text + " (nothing asked: the secondary did not overlap)"


def check_freed_copy(runs):
    """Case 25b3 (info): where an async copy from a freed allocation fails (at the call, or at the sync)."""
    out = []
    for r in runs:
        m = FREED_COPY.search(r.out)
        out.append(f"{m.group(1)}: call {m.group(2)}, sync {m.group(3)}, ctx {m.group(4)}" if m else
                   f"no answer (rc {r.rc}): {short(r.out + r.err, 60)}")
    return INFO, "; ".join(out)


# ---- issue 16 (c): coredumps through the driver API (cases/coredump.cu)
def coredump_facts(r):
    """The `coredump-*` lines of a run of cases/coredump.cu, by their first word."""
    facts = {}
    for line in r.out.splitlines():
        if line.startswith("coredump-"):
            key, _, rest = line.partition(" ")
            facts.setdefault(key, []).append(rest)
    return facts


def check_coredump(bare, under):
    """Case 25c (info): what the driver printed or logged (and whether it names the kernel), survival, time, the
    13.2 callbacks; and under cdsa whether the report still comes and names the kernel."""
    ev = []
    for label, r in (("bare", bare), ("cdsa", under)):
        f = coredump_facts(r)
        if not f:
            ev.append(f"{label}: no facts (rc {r.rc}{', timed out' if r.timed_out else ''}): {short(r.out + r.err, 60)}")
            continue
        logs = f.get("coredump-log", [])
        named = any("illegal_address_kernel" in l for l in logs) or "illegal_address_kernel" in r.err.replace(
            "kernel illegal_address_kernel", "")  # the driver's own text, not cdsa's report line
        part = [f"flags {short(' '.join(f.get('coredump-flags', ['?'])), 70)}",
                f"callbacks {short(' '.join(f.get('coredump-callbacks', ['?'])), 60)}",
                f"fault {' '.join(f.get('coredump-fault', ['?']))}",
                f"fired {'; '.join(f.get('coredump-callback', [])) or 'none'}",
                f"dump {' '.join(f.get('coredump-file', ['?']))}",
                f"{len(logs)} driver log line(s), kernel named by the driver: {'yes' if named else 'no'}",
                f"survived {'yes' if f.get('coredump-survived') else 'no'} (rc {r.rc}, {r.secs:.1f} s)"]
        if label == "cdsa":
            part.append(f"{r.reports} cdsa report(s)" + (", kernel named" if r.reports and
                                                        "illegal_address_kernel" in r.launch_part() else ""))
        ev.append(f"{label}: " + ", ".join(part))
    return INFO, " | ".join(ev)


# ---- the PCI bus id (case 27, cases/c27_pci_bus_id.py): the report header prints cuDeviceGetPCIBusId's answer
PCI_DRIVER = re.compile(r"^pci-driver rc (-?\d+) id (\S+)", re.M)
PCI_HEADER = re.compile(r"\(PCI ([^)\s]*)\)")


def letter_case(s):
    """'upper', 'lower', 'mixed' or 'no letters' (a bus id of digits only cannot tell) of a hex string's letters."""
    letters = [ch for ch in s if ch.isalpha()]
    if not letters:
        return "no letters"
    return "upper" if s == s.upper() else "lower" if s == s.lower() else "mixed"


def xid_form(bus_id):
    """The form the kernel's NVRM Xid lines print, 'PCI:0000:3b:00' (lower case, no function), of e.g. '0000:3B:00.0'."""
    m = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.[0-7]", bus_id)
    if not m:
        return None
    return f"PCI:{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}"


def check_pci_bus_id(probe, under=None):
    """Case 27 (info): the driver's bus id string, its letter case and format, whether cdsa's report header (the
    faulting run `under`, may be None) shows the same string, the Xid-style form, and what nvidia-smi and torch
    say. False only when the probe crashed (no pci-driver line, or it died by a signal)."""
    m = PCI_DRIVER.search(probe.out)
    if not m or probe.timed_out or probe.rc < 0:
        return False, f"probe crashed (rc {probe.rc}{', timed out' if probe.timed_out else ''}): {short(probe.out + probe.err, 100)}"
    rc, bus = int(m.group(1)), m.group(2)
    if rc != 0:
        ev = [f"cuDeviceGetPCIBusId refused: rc {rc}"]
    else:
        xid = xid_form(bus)
        ev = [f"driver '{bus}', {letter_case(bus)} case, "
              + ("format DDDD:BB:DD.F" if re.fullmatch(r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]", bus)
                 else "format not DDDD:BB:DD.F"),
              f"Xid-style {xid or 'n/a (unexpected format)'}"]
    if under is None:
        ev.append("cdsa header: no faulting run")
    else:
        h = PCI_HEADER.search(under.err)
        if not h:
            ev.append(f"cdsa header: no PCI id ({under.reports} report(s), rc {under.rc})")
        else:
            same = "same string" if rc == 0 and h.group(1) == bus else \
                "same but for letter case" if rc == 0 and h.group(1).lower() == bus.lower() else "differs"
            ev.append(f"cdsa header '(PCI {h.group(1)})': {same}")
    for what in ("smi", "torch"):
        t = re.search(rf"^pci-{what} (.*)$", probe.out, re.M)
        ev.append(f"{'nvidia-smi' if what == 'smi' else 'torch'}: {short(t.group(1), 60) if t else '?'}")
    return INFO, "; ".join(ev)


# ---- issue 27: the ceiling's premise (cases/entry_point_pointers.c) and cudart 13.5's new calls
def table_typedefs(include):
    """{(name, version, per_thread): parameter text} of the PFN_ typedefs of include/cudaTypedefs.h (and the
    profiler's): the table cdsa builds from those headers."""
    out = {}
    for h in ("cudaTypedefs.h", "cudaProfilerTypedefs.h"):
        path = pathlib.Path(include) / h
        if not path.exists():
            continue
        text = re.sub(r"/\*.*?\*/", " ", path.read_text(errors="replace"), flags=re.S)
        for name, ver, suffix, params in re.findall(
                r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\s*\)\s*\((.*?)\)\s*;", text,
                re.S):
            # the prototype without parameter names: types only
            types = [re.sub(r"\s*\b\w+\s*(\[[^\]]*\])?$", "", p.strip()) if len(p.split()) > 1 else p.strip()
                     for p in params.split(",")]
            out[(name, int(ver), bool(suffix))] = " ".join(",".join(types).split())
    return out


def prototype_at(typedefs, name, per_thread, version):
    """The parameter types of the newest typedef of `name` at or below `version` (per-thread variant preferred)."""
    fits = [(v, pt) for (n, v, pt) in typedefs if n == name and v <= version and (pt == per_thread or not pt)]
    if not fits:
        return None
    best = max(fits, key=lambda t: (t[0], t[1]))
    return typedefs[(name, best[0], best[1])]


def check_entry_pointers(r, typedefs):
    """Case 29a (info): for each entry, whether the driver's function at the entry's version is the one at 13000
    exactly when the headers give both the same prototype (the ceiling's premise), and what a lookup with no
    function to give answers."""
    driver = re.search(r"^driver (\d+)", r.out, re.M)
    if not driver:
        return False, f"no answer (rc {r.rc}): {short(r.out + r.err, 80)}"
    missing = re.findall(r"^missing (\S+) rc (-?\d+) status (-?\d+) pfn (\S+)", r.out, re.M)
    holds, breaks, unanswered = 0, [], 0
    for name, ver, flags, own, at13, _atdrv in re.findall(r"^ep (\S+) (\d+) (\d+) (\S+) (\S+) (\S+)", r.out, re.M):
        ver, pt = int(ver), int(flags) & 2 != 0
        if not own.startswith("0x"):
            unanswered += 1
            continue
        if ver <= 13000 or not at13.startswith("0x"):
            continue  # the premise is about a version above 13000 against 13000's
        same_proto = typedefs.get((name, ver, pt)) == prototype_at(typedefs, name, pt, 13000)
        if (own == at13) == same_proto:
            holds += 1
        else:
            breaks.append(f"{name}@{ver}/{flags} {'same' if own == at13 else 'other'} function, "
                          f"{'same' if same_proto else 'other'} prototype")
    ev = [f"driver {driver.group(1)}", f"premise holds for {holds}, breaks for {len(breaks)}"
          + (": " + "; ".join(breaks[:4]) if breaks else ""), f"{unanswered} entries not answered at their version",
          "missing: " + ", ".join(f"{k} rc {rc} status {st} pfn {p}" for k, rc, st, p in missing)]
    return INFO, "; ".join(ev)


def check_cudart_entry_points(r, log_text):
    """Case 29b (info): which (name, version, flags) cudart asked for the 13.1+ entry points, what cdsa handed back
    (wrapped, thunk), and what each runtime call returned."""
    if not re.search(r"^cudart \d+", r.out, re.M):
        return False, f"no cudart (rc {r.rc}): {short(r.out + r.err, 80)}"
    asked = [f"{m[0]}@{m[1]}/{m[2]} {m[3]} {m[4]}" for m in re.findall(
        r"^cuGetProcAddress (cuLaunchHostFunc|cuStreamBeginRecaptureToGraph|cuGraphNodeGetParams) (\d+) (\d+) -> "
        r"(\S+) (\S+)$", log_text, re.M)]
    calls = re.findall(r"^call (\S+) (rc -?\d+|missing)", r.out, re.M)
    return INFO, "; ".join([re.search(r"^cudart \d+", r.out, re.M).group(0), "asked: " + (", ".join(asked) or "none"),
                            "calls: " + ", ".join(f"{n} {res}" for n, res in calls),
                            short(re.search(r"^host calls \d+", r.out, re.M).group(0) if "host calls" in r.out else "", 20)])
