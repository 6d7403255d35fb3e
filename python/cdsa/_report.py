"""The fault report as data: `cdsa.last_report()` (this process's, live) and `cdsa.load_trace(path)` (a trace
file's). Both give a `Report`, made from the same JSON object: the trace file's "report" (docs/trace-format.md),
which libcdsa.so also hands to the program's Python after a fault (python/cdsa/_hook.py keeps it). docs/python.md.

Only the standard library; importing this changes nothing in the process.
"""
import json
import os
import stat
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

__all__ = ["Frame", "NativeFrame", "Candidate", "Report", "last_report", "load_trace"]


class Frame(NamedTuple):
    """A Python frame: `file` (co_filename, or "Cell In[N]" for a notebook cell), `line`, `function`, `source`
    (the stripped source line, "" when unreadable)."""

    file: str
    line: int
    function: str
    source: str


class NativeFrame(NamedTuple):
    """A native frame: `function` (demangled, "" when unknown), `file` and `line` (from DWARF; ""/0 when
    unknown), `module` (the object's path), `module_offset` and `pc` (integers)."""

    function: str
    file: str
    line: int
    module: str
    module_offset: int
    pc: int


class Candidate(NamedTuple):
    """A launch the fault may have come from: its `kernel` (for a graph launch: the kernel node the device's assert
    names, or the graph's only node; else ""), its Python `frames` and `native_frames` (innermost first: for a graph
    launch, where the graph was launched), `why` (one line), and `launch` (the launch object as stored: seq,
    stream_id, kind, grid, block...)."""

    kernel: str
    frames: Tuple[Frame, ...]
    native_frames: Tuple[NativeFrame, ...]
    why: str
    launch: Dict[str, Any]


def _int(v, default=0):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return default
    return default


def _str(v):
    return v if isinstance(v, str) else ""


def _frames(stack):
    stack = stack if isinstance(stack, dict) else {}
    py = tuple(Frame(_str(f.get("file")), _int(f.get("line")), _str(f.get("function")), _str(f.get("source")))
               for f in stack.get("python") or () if isinstance(f, dict))
    native = tuple(NativeFrame(_str(f.get("function")), _str(f.get("file")), _int(f.get("line")),
                               _str(f.get("module")), _int(f.get("module_offset")), _int(f.get("pc")))
                   for f in stack.get("native") or () if isinstance(f, dict))
    return py, native


class Report:
    """A cdsa fault report.

    kernel          the kernel of the launch named (the first candidate), "" when none was named
    frames          that launch's Python frames, innermost first (a tuple of Frame)
    native_frames   its native frames, innermost first (a tuple of NativeFrame)
    attribution     "exact" (proven by breadcrumbs), "ambiguous" (several candidates, in order, not by likelihood), "unknown"
    candidates      every candidate launch (a tuple of Candidate); candidates[0] is the one named
    error_name, error_string, code   the CUDA error (e.g. "CUDA_ERROR_ASSERT", "device-side assert triggered", 710)
    surfaced_call   the driver call that returned it; surfaced_frames: where that call was made (Python frames)
    device_messages the device's assert lines; device_text: them as one text ("" when the device printed none)
    hints, notes    the report's hint and note lines
    rank            the rank named in the report header, or None; gpu: the failing context's GPU name ("" unknown)
    trace_path      the trace file written for it ("" when none), or the file it was loaded from
    data            the whole report object (the trace file's "report", docs/trace-format.md)
    """

    def __init__(self, data: Dict[str, Any], trace_path: Optional[str] = None):
        if not isinstance(data, dict):
            raise ValueError("a cdsa report is a JSON object")
        self.data = data
        self.candidates = tuple(self._candidate(c) for c in data.get("candidates") or () if isinstance(c, dict))
        first = self.candidates[0] if self.candidates else None
        self.kernel = first.kernel if first else ""
        self.frames = first.frames if first else ()
        self.native_frames = first.native_frames if first else ()
        self.attribution = _str(data.get("attribution"))
        self.error_name = _str(data.get("error_name"))
        self.error_string = _str(data.get("error_string"))
        self.code = _int(data.get("code"))
        self.surfaced_call = _str(data.get("surfaced_call"))
        self.surfaced_frames = _frames(data.get("surfaced_stack"))[0]
        self.device_messages = tuple(m for m in data.get("device_messages") or () if isinstance(m, str))
        self.device_text = "\n".join(self.device_messages)
        self.hints = tuple(h for h in data.get("hints") or () if isinstance(h, str))
        self.notes = tuple(n for n in data.get("notes") or () if isinstance(n, str))
        origin = data.get("origin") if isinstance(data.get("origin"), dict) else {}
        rank = _int(origin.get("rank"), -1)
        self.rank = rank if rank >= 0 else None
        self.gpu = _str(origin.get("gpu_name"))
        self.trace_path = trace_path if trace_path is not None else _str(data.get("trace_path"))

    @staticmethod
    def _candidate(c):
        launch = c.get("launch") if isinstance(c.get("launch"), dict) else {}
        py, native = _frames(c.get("stack"))
        kernel = _str(launch.get("kernel"))
        nodes = [n for n in c.get("graph_nodes") or () if isinstance(n, dict)]
        if not kernel and nodes:  # a graph launch: the kernel node the device's assert names, or its only one
            pick = _int(c.get("graph_node_pick"), -1)
            node = nodes[pick] if 0 <= pick < len(nodes) else nodes[0] if len(nodes) == 1 else None
            if node is not None and isinstance(node.get("launch"), dict):
                kernel = _str(node["launch"].get("kernel"))
        return Candidate(kernel, py, native, _str(c.get("why")), launch)

    @property
    def launch_line(self) -> str:
        """"file:line: source" of the launch's innermost Python frame, "" when it has none."""
        if not self.frames:
            return ""
        f = self.frames[0]
        return f"{f.file}:{f.line}: {f.source}" if f.source else f"{f.file}:{f.line}"

    def __repr__(self):
        where = self.launch_line or (self.native_frames[0].function if self.native_frames else "?")
        return f"<cdsa.Report {self.error_name or self.code}: kernel {self.kernel or '<unknown>'} at {where}>"


def last_report() -> Optional[Report]:
    """The report cdsa made in this process, or None when there was none (no fault, or libcdsa.so not loaded).

    Works under `cdsa run`, a plain LD_PRELOAD and the Jupyter kernelspec; call it after the fault surfaced (in
    the handler of the error, in a later notebook cell)."""
    hook = sys.modules.get("_cdsa_hook")  # libcdsa.so's module in this interpreter (python/cdsa/_hook.py)
    state = getattr(hook, "_state", None)
    if not isinstance(state, dict):
        return None
    if state.get("report") is None and callable(getattr(hook, "_deliver", None)):
        try:
            hook._deliver()  # a report made but not yet handed over (the pending call has not run yet)
        except Exception:
            pass
    data = state.get("report")
    return Report(data) if isinstance(data, dict) else None


_MAX_TRACE_BYTES = 256 << 20  # what `cdsa report` reads at most


def load_trace(path) -> Optional[Report]:
    """The report in the cdsa trace file PATH, or None when the file holds none (written at exit: reason "exit").

    trace_path is PATH; the report's stacks are in place, as in last_report()'s (a version 2 file names them by id).
    Raises OSError when it cannot be read, ValueError when it is not a cdsa trace (versions 1 and 2)."""
    path = os.fspath(path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path}: not a regular file")
    if st.st_size > _MAX_TRACE_BYTES:
        raise ValueError(f"{path}: {st.st_size} bytes, more than a cdsa trace file may hold (256 MiB)")
    with open(path, "rb") as f:
        try:
            doc = json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != "cdsa-trace":
        raise ValueError(f"{path}: not a cdsa trace file (no \"format\": \"cdsa-trace\")")
    version = doc.get("version")
    if version not in (1, 2):
        raise ValueError(f"{path}: cdsa trace version {version!r}; this cdsa reads versions 1 and 2")
    report = doc.get("report")
    if report is None:
        return None
    if not isinstance(report, dict):
        raise ValueError(f"{path}: its \"report\" is not an object")
    if version >= 2:
        report = _stacks_in_place(report, doc.get("stacks"), path)
    return Report(report, trace_path=path)


def _stacks_in_place(report, stacks, path):
    """Version 2 names the report's stacks by id (one copy under the file's "stacks"); the report as the live
    process hands it over (report_to_json) also holds each in place: surfaced_stack, and a "stack" beside each
    candidate's, graph node's and forward candidate's launch. Returns that shape (a copy)."""
    table = {}
    for entry in stacks or ():
        if isinstance(entry, dict) and isinstance(entry.get("id"), int):
            table[entry["id"]] = entry.get("stack")

    def stack(stack_id):
        if stack_id is None:
            return {"python": [], "native": []}
        if stack_id not in table:
            raise ValueError(f"{path}: the report names stack {stack_id!r}, which \"stacks\" does not hold")
        return table[stack_id]

    def with_stack(entry):
        if not isinstance(entry, dict):
            return entry
        out = dict(entry)
        launch = out.get("launch") if isinstance(out.get("launch"), dict) else {}
        if "stack" not in out:
            out["stack"] = stack(launch.get("stack_id"))
        for key in ("graph_nodes", "forward_candidates"):
            if isinstance(out.get(key), list):
                out[key] = [with_stack(e) for e in out[key]]
        return out

    out = dict(report)
    if "surfaced_stack" not in out:
        out["surfaced_stack"] = stack(out.get("surfaced_stack_id"))
    if isinstance(out.get("candidates"), list):
        out["candidates"] = [with_stack(c) for c in out["candidates"]]
    return out
