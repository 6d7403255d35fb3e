"""Reading cdsa's report out of a program's output: one module for the end-to-end tests (tests/e2e/conftest.py and
the test files), the wheel's tests (tests/wheel) and the GPU suite (integration/gpu/suite*.py). The GPU machine gets
only the checkout, so this file uses the standard library alone and imports nothing else from tests/.

The report as report/format_text.cc prints it: a blank line, the banner line, the report's lines, the closing rule.

    ==================== cdsa: asynchronous CUDA fault ====================
    cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered
    cdsa: surfaced at cuMemcpyDtoH_v2 (thread 7), called from (most recent call last):
      ...
    cdsa: the failing launch (...):          (or "cdsa: AMBIGUOUS ...", then the candidates)
      kernel NAME  grid (...) ...
      Launched from (most recent call last):
        File "...", line N, in F
      ...
    cdsa: hint: ...
    cdsa: trace file cdsa-HOST-PID.json
    =======================================================================

Functions taking REPORT expect report_block's text (the first report, lines stripped); ERR is raw output."""
import dataclasses
import pathlib
import re

BANNER = "cdsa: asynchronous CUDA fault"
RULE = "=" * 71  # the report's closing line
LAUNCH_STARTS = ("cdsa: the failing launch", "cdsa: AMBIGUOUS")
HINT = "cdsa: hint: "
GRAPH_NODES = "The graph holds"  # a graph launch's kernel nodes, after the launch and its stack
TRACE_GLOB = "cdsa-*.json"  # the default trace names (CDSA_TRACE unset), in the run's working directory


# ---- the report in raw output ----------------------------------------------------------------------------------

def count_reports(err):
    return err.count(BANNER)


@dataclasses.dataclass
class Span:
    """Where the first report lies in raw output (indices into it)."""
    begin: int   # the newline before the banner line (a report opens with a blank line)
    banner: int  # the banner text
    close: int   # the newline before the first ===== line after the banner line (the closing rule); -1: none
    end: int     # just past the closing line; len(err) when there is none
    closed: bool  # that line is the closing rule: the report is whole


def report_span(err):
    """The first report's Span in ERR, None when ERR holds no banner."""
    i = err.find(BANNER)
    if i < 0:
        return None
    begin = max(err.rfind("\n", 0, i), 0)
    line_end = err.find("\n", i)
    close = err.find("\n=====", line_end) if line_end >= 0 else -1
    if close < 0:
        return Span(begin, i, -1, len(err), False)
    nl = err.find("\n", close + 1)
    end = nl + 1 if nl >= 0 else len(err)
    return Span(begin, i, close, end, err[close + 1:nl if nl >= 0 else len(err)] == RULE)


def dedent(text):
    """Every line stripped (the report indents frames; the checks compare text)."""
    return "\n".join(line.strip() for line in text.splitlines())


def report_block(err):
    """The first report in ERR, from its banner to (not including) the closing ===== line, dedented; "" when there
    is none."""
    s = report_span(err)
    if s is None:
        return ""
    return dedent(err[s.banner:s.close if s.close >= 0 else len(err)])


def raw_report(err):
    """The first report exactly as printed, from its banner text to the end of its closing rule (newline
    excluded); asserts there is one and that it is whole."""
    s = report_span(err)
    assert s is not None, f"no cdsa report:\n{err}"
    assert s.closed, f"the report never ended:\n{err}"
    return err[s.banner:s.close]


def live_block(err):
    """The first report byte for byte as the live process printed it: the blank line before the banner, to the
    closing rule's newline (what `cdsa report TRACE` prints)."""
    s = report_span(err)
    assert s is not None and s.closed, f"no whole cdsa report:\n{err}"
    return err[s.begin:s.end]


# ---- parts of a report (report_block's text) -------------------------------------------------------------------

def launch_part(report):
    """From the launch verdict ("the failing launch" or "AMBIGUOUS") to the end; "" when the report names none."""
    starts = [k for k in (report.find(s) for s in LAUNCH_STARTS) if k >= 0]
    return report[min(starts):] if starts else ""


def surfaced_part(report):
    """What comes before the launch verdict: the error and where it surfaced."""
    return report[:len(report) - len(launch_part(report))]


def surfaced_at(report):
    """The driver call that returned the fault first, "" when not said."""
    m = re.search(r"cdsa: surfaced at (\S+)", report)
    return m.group(1) if m else ""


def kernel_lines(text):
    """The launch lines ("kernel NAME  grid ..." or "[N] kernel ...") in TEXT, as printed."""
    return [line for line in text.splitlines() if re.match(r"(\[\d+\] )?kernel ", line)]


def kernel_line(report):
    """The first launch line of the verdict ("kernel ..." or "graph ..."), its "[N] " candidate number removed."""
    for line in launch_part(report).splitlines():
        line = re.sub(r"^\[\d+\] ", "", line)
        if line.startswith("kernel ") or line.startswith("graph "):
            return line
    return ""


def kernel_name(report):
    """The failing kernel's name as the report prints it (the whole line for a graph launch)."""
    k = kernel_line(report)
    return k.split("  ")[0][len("kernel "):] if k.startswith("kernel ") else k


def graph_split(part):
    """A graph launch's verdict (launch_part's text) cut in two: the launch with its stack, and the graph's kernel
    nodes from "The graph holds" on ("" when it lists none)."""
    i = part.find(GRAPH_NODES)
    return (part[:i], part[i:]) if i >= 0 else (part, "")


def hint_lines(report):
    """The text of every "cdsa: hint: " line."""
    return [line[len(HINT):] for line in report.splitlines() if line.startswith(HINT)]


def py_frames(text):
    """Every Python frame in TEXT as (file, line, function)."""
    return re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)


def trace_written(report):
    """The trace path the report names ("cdsa: trace file PATH"), "" when it names none."""
    m = re.search(r"^cdsa: trace file (.+)$", report, re.M)
    return m.group(1) if m else ""


def trace_files(cwd):
    """The trace files a run wrote under the default name in its working directory, sorted."""
    return sorted(pathlib.Path(cwd).glob(TRACE_GLOB))


# ---- what a report should name ---------------------------------------------------------------------------------

def marker_line(path, marker):
    """(line number, stripped text) of the first line of a source file marked `# MARKER`, `// MARKER` or
    `/* MARKER`."""
    for n, text in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if re.search(r"(#|//|/\*) " + re.escape(marker) + r"\b", text):
            return n, text.strip()
    raise AssertionError(f"marker {marker} not in {path}")


# ---- a run's result ----------------------------------------------------------------------------------------------

class ReadsReport:
    """Mixed into a run's result class that has .err (its stderr) and .cwd (its working directory).
    strict (the tests): a missing report or launch verdict is an AssertionError; not strict (the GPU suite, whose
    checks turn everything into a verdict): they read as ""."""
    strict = False

    @property
    def reports(self):
        return count_reports(self.err)

    @property
    def report(self):
        if self.strict:
            assert BANNER in self.err, f"no cdsa report on stderr:\n{self.err}"
        return report_block(self.err)

    def launch_part(self):
        part = launch_part(self.report)
        if self.strict:
            assert part, f"report names no launch:\n{self.report}"
        return part

    def surfaced_part(self):
        return surfaced_part(self.report)

    def surfaced_at(self):
        return surfaced_at(self.report)

    def kernel_line(self):
        return kernel_line(self.report)

    def traces(self):
        return trace_files(self.cwd)
