"""cdsa's Python side inside the program: the traceback note, notebook cells, the report as data.

libcdsa.so embeds this file and runs it itself (no import of the cdsa package needed: it works under `cdsa run`,
a plain LD_PRELOAD and the Jupyter kernelspec alike), as the module ``_cdsa_hook``, from a pending call
(Py_AddPendingCall: the main thread, the GIL held) when the process first uses CUDA. Until a fault is reported it
only registers notebook cells (filename -> "Cell In[N]" and source) so that the report can name them.

libcdsa.so calls, always with the GIL held:
  _start(register, deliver)   at CUDA start; returns True in a Jupyter kernel (the report is then printed here,
                              through the kernel's sys.stderr, so that it lands in the cell's output)
  _on_fault(report_json, text, note, prior_note, pointer)   once, after a fault was reported (text is None unless
                              this module prints the report)
  _on_uncaught(exc)           for the "sys.excepthook" audit event: an exception about to be printed as uncaught
Only the standard library is used, and only after a fault, except `sys` (and linecache in a kernel).
"""
import sys

_NOTE_PREFIX = "cdsa: "
_register = None  # libcdsa.so's register_source(filename, display_name, text)
_deliver = None  # libcdsa.so's deliver(): hands a reported fault to _on_fault now, if it has not been yet
_shell = None  # the IPython shell of a Jupyter kernel
_state = {
    "report": None,  # the report as data (report_to_json: the trace file's "report" object with its stacks in place)
    "note": None,  # the one line that ends the traceback of the exception the fault caused
    "prior_note": None,  # the line for an unrelated exception that ends the program (or a thread) after the fault
    "pointer": None,  # the one line for later errors on the dead context
    "keys": (),  # texts that tie an exception's message to the fault (the error's name and description)
    "code": None,  # the error's number (710), tied to the fault next to "error", "code", "CUDA", "cu..." or in brackets
    "sites": frozenset(),  # (file, line) of the Python frames where the fault surfaced: innermost, innermost user's
    "user_frame": None,  # (file, function, line) of the surfacing call's innermost user frame
    "before": (),  # the exceptions being handled when the fault was handed over: older than it
    "fault_cell": None,  # the execution count of the notebook cell that surfaced the fault
    "noted": 0,  # exceptions given the note
}


def _start(register, deliver):
    global _register, _deliver, _shell
    _register, _deliver = register, deliver
    shell = _kernel_shell()
    if shell is None:
        return False
    _shell = shell
    _install_ipython(shell)
    return True


def _kernel_shell():
    """The IPython shell of a Jupyter kernel (ipykernel), else None."""
    if "ipykernel" not in sys.modules:
        return None
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get() if get else None
    if shell is None or getattr(shell, "kernel", None) is None or not hasattr(shell, "compile"):
        return None
    return shell


def _install_ipython(shell):
    if getattr(shell, "_cdsa_hooked", False):
        return
    shell._cdsa_hooked = True
    import linecache

    comp = shell.compile
    # Cells already compiled: IPython's compiler keeps filename -> execution count, linecache the source.
    for name, number in list(getattr(comp, "_filename_map", {}).items()):
        entry = linecache.cache.get(name)
        if entry and len(entry) > 2:
            _register(name, f"Cell In[{number}]", "".join(entry[2]))
    orig_cache = comp.cache

    def cache(transformed_code, number=0, raw_code=None):
        name = orig_cache(transformed_code, number, raw_code)
        try:
            _register(name, f"Cell In[{number}]", transformed_code)
        except Exception:
            pass
        return name

    comp.cache = cache
    orig_show = shell.showtraceback

    def showtraceback(*args, **kwargs):
        try:
            if _deliver is not None:
                _deliver()  # the report first, in this cell's output, if the pending call has not printed it
            exc = sys.exc_info()[1]
            if args and isinstance(args[0], tuple) and len(args[0]) > 1:
                exc = args[0][1]
            elif "exc_tuple" in kwargs and kwargs["exc_tuple"]:
                exc = kwargs["exc_tuple"][1]
            if exc is not None:
                _maybe_note(exc)
        except Exception:
            pass
        return orig_show(*args, **kwargs)

    shell.showtraceback = showtraceback
    orig_private = getattr(shell, "_showtraceback", None)
    if orig_private is not None:

        def _showtraceback(etype, evalue, stb):
            # An IPython that does not print PEP 678 notes still ends the cell's error with cdsa's line.
            try:
                notes = [n for n in getattr(evalue, "__notes__", ()) or () if isinstance(n, str)
                         and n.startswith(_NOTE_PREFIX)]
                text = "\n".join(stb) if isinstance(stb, list) else str(stb)
                missing = [n for n in notes if n not in text]
                if missing and isinstance(stb, list):
                    stb = list(stb) + missing
            except Exception:
                pass
            return orig_private(etype, evalue, stb)

        shell._showtraceback = _showtraceback


def _on_fault(report_json, text, note, prior_note, pointer):
    import json

    report = json.loads(report_json)
    _state["report"] = report
    _state["note"] = note
    _state["prior_note"] = prior_note
    _state["pointer"] = pointer
    _state["keys"] = tuple(k for k in (report.get("error_name"), report.get("error_string")) if k)
    code = report.get("code")
    _state["code"] = code if isinstance(code, int) and not isinstance(code, bool) and code > 0 else None
    frames = [f for f in (report.get("surfaced_stack") or {}).get("python") or [] if isinstance(f, dict)]
    # The innermost frame outside site-packages and the standard library, as the note names the launch's
    # (report/note_text.cc), else the innermost.
    user = next((f for f in frames if not _is_library_file(f.get("file"))), frames[0] if frames else None)
    _state["sites"] = frozenset((f.get("file"), f.get("line")) for f in frames[:1] + ([user] if user else []))
    if user is not None:
        _state["user_frame"] = (user.get("file"), user.get("function"), user.get("line"))
    _state["before"] = _handled_now()
    if _shell is not None:
        _state["fault_cell"] = getattr(_shell, "execution_count", None)
    if text is not None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except Exception:
            sys.__stderr__.write(text)
    # The exception being handled now (the failing call raised and a handler runs): note it.
    exc = sys.exc_info()[1]
    if exc is not None:
        _maybe_note(exc)
    _wrap_threading_excepthook()
    if not hasattr(BaseException, "add_note"):
        _print_notes_after_traceback()
    if _shell is None:
        _trace_exceptions()


def _on_uncaught(exc):
    if _state["report"] is not None and exc is not None:
        _note_uncaught(exc)


def _note_uncaught(exc):
    """EXC ends the program (or a thread) after the fault: the note when it came from the fault, else the line that
    claims no cause. An exception that was being handled when the fault was handed over is older than the fault
    and gets neither (unless it came from it); a notebook's cells get only the notes (_maybe_note)."""
    _maybe_note(exc)
    if _shell is not None or not isinstance(exc, BaseException) or _has_note(exc):
        return
    if any(exc is b for b in _state["before"]):
        return
    _add_note(exc, _state["prior_note"])


def _handled_now():
    """The exceptions being handled now, on this thread and (3.12+) on the others, with what they were raised from
    or while handling."""
    found = []
    excs = [sys.exc_info()[1]]
    current = getattr(sys, "_current_exceptions", None)
    if current is not None:
        try:
            excs += [e[1] if isinstance(e, tuple) else e for e in current().values()]
        except Exception:
            pass
    for e in excs:
        depth = 0
        while isinstance(e, BaseException) and depth < 16 and not any(e is f for f in found):
            found.append(e)
            e = e.__cause__ or e.__context__
            depth += 1
    return tuple(found)


def _is_library_file(f):
    """A file of site-packages, dist-packages or the standard library (report/note_text.cc: is_library_file)."""
    if not isinstance(f, str) or not f or f.startswith("<"):
        return True
    if "/site-packages/" in f or "/dist-packages/" in f:
        return True
    p = f.find("/lib/python3.")
    return p >= 0 and f.find("/", p + 13) >= 0


_FILLERS = frozenset(("returned", "returns", "failed", "with", "status", "result", "is", "was"))


def _code_word(w):
    """Whether W, the word just before a number, makes the number a CUDA error code: error, err, code and their
    compounds (error_code, errorCode, cudaError), CUDA, cu and the driver's names (cuMemcpyDtoH_v2, cu.launch),
    CU... (CUresult)."""
    import re

    if w.startswith("CU") or w.lower() in ("cu", "cuda"):
        return True
    if w.startswith("cu") and (w[2] in "._" or w[2].isupper() or w[2:4].lower() == "da"):
        return True
    parts = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", w)
    return bool(parts) and parts[-1].lower() in ("error", "err", "code")


def _names_code(msg, code):
    """MSG names error CODE by number: next to error, code, CUDA or cu (after a few filler words: 'cuCtxSynchronize
    returned 710', 'CUDA error: 710', 'error code=710'), or as [710] or (710). 'index 710 out of range' does not."""
    import re

    for m in re.finditer(r"(?<![\w.])%d(?!\w|\.\d)" % code, msg):
        before, after = msg[: m.start()], msg[m.end():]
        if (before.endswith("[") and after.startswith("]")) or (before.endswith("(") and after.startswith(")")):
            return True
        for _ in range(3):
            w = re.search(r"([A-Za-z_][\w.]*)[ \t:=#]*$", before)
            if w is None:
                break
            word = w.group(1).rstrip(".")
            if word.lower() not in _FILLERS:
                if _code_word(word):
                    return True
                break
            before = before[: w.start()]
    return False


def _same_code(code, frame):
    """Whether CODE is the code object of FRAME, (file, function, line) from the report: its file and qualified
    name (co_name on 3.10, as the report names it there), with the frame's line among its lines."""
    file, function, line = frame
    if code.co_filename != file or getattr(code, "co_qualname", code.co_name) != function:
        return False
    try:
        return any(n == line for _, _, n in code.co_lines())
    except Exception:
        return False


def _related(exc, tb=None):
    """True when EXC, or an exception it was raised from or while handling, came from the reported fault: its
    message names the CUDA error (by name, or by number next to error/code/CUDA/cu), it was raised in the surfacing
    call's innermost user frame (the same code object), or its traceback passes through a line where the fault
    surfaced. TB: EXC's traceback so far, when EXC does not hold it yet (the 'exception' trace event before 3.12)."""
    keys, sites, code, user = _state["keys"], _state["sites"], _state["code"], _state["user_frame"]
    e, depth, seen = exc, 0, set()
    while e is not None and depth < 16 and id(e) not in seen:
        seen.add(id(e))
        try:
            msg = str(e)
        except Exception:
            msg = ""
        if any(k in msg for k in keys) or (code is not None and _names_code(msg, code)):
            return True
        if e is not exc or tb is None:
            tb = getattr(e, "__traceback__", None)
        raised_at = None
        while tb is not None:
            if (tb.tb_frame.f_code.co_filename, tb.tb_lineno) in sites:
                return True
            raised_at = tb
            tb = tb.tb_next
        if raised_at is not None and user is not None and _same_code(raised_at.tb_frame.f_code, user):
            return True
        e = e.__cause__ or e.__context__
        depth += 1
    return False


def _has_note(exc):
    return any(isinstance(n, str) and n.startswith(_NOTE_PREFIX) for n in getattr(exc, "__notes__", ()) or ())


def _maybe_note(exc, tb=None):
    """Adds cdsa's line to EXC (PEP 678), once, when it came from the fault (TB: as for _related)."""
    if _state["report"] is None or not isinstance(exc, BaseException) or _has_note(exc) or not _related(exc, tb):
        return
    note = _state["note"]
    cell = _state["fault_cell"]
    if _shell is not None and cell is not None and getattr(_shell, "execution_count", cell) != cell:
        note = _state["pointer"]  # a later cell, failing on the context that died in an earlier one
    if not _add_note(exc, note):
        return
    _state["noted"] += 1
    if _state["noted"] == 1 and _shell is None:
        _untrace()


def _add_note(exc, note):
    """Adds NOTE to EXC (PEP 678; __notes__ on 3.10); True when it did."""
    if not note:
        return False
    try:
        exc.add_note(note)  # 3.11+
    except AttributeError:
        try:
            exc.__notes__ = list(getattr(exc, "__notes__", ()) or ()) + [note]
        except Exception:
            return False
    except Exception:
        return False
    return True


def _print_notes_after_traceback():
    """Python 3.10: the interpreter prints no PEP 678 notes, so the uncaught exception's cdsa line is printed after
    its traceback by a wrapper around sys.excepthook (installed when the fault is reported, before that exception
    reaches the hook)."""
    hook = sys.excepthook
    if getattr(hook, "_cdsa", False):
        return

    def excepthook(etype, value, tb):
        hook(etype, value, tb)
        _print_cdsa_notes(value)

    excepthook._cdsa = True
    sys.excepthook = excepthook


def _print_cdsa_notes(exc):
    try:
        for n in getattr(exc, "__notes__", ()) or ():
            if isinstance(n, str) and n.startswith(_NOTE_PREFIX):
                sys.stderr.write(n + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _wrap_threading_excepthook():
    threading = sys.modules.get("threading")
    if threading is None or getattr(threading.excepthook, "_cdsa", False):
        return
    orig = threading.excepthook

    def excepthook(args):
        ends = args.exc_value is not None and not issubclass(args.exc_type, SystemExit)  # SystemExit: silent
        try:
            if ends:
                _note_uncaught(args.exc_value)
        except Exception:
            pass
        result = orig(args)
        if ends and not hasattr(BaseException, "add_note"):
            _print_cdsa_notes(args.exc_value)  # 3.10: after the thread's traceback
        return result

    excepthook._cdsa = True
    threading.excepthook = excepthook


# After the fault, in a script: an exception raised from Python code (a wrapper that checks the CUDA call's result)
# is noted when it is raised, through the 'exception' trace event, so that a handler that catches it and formats it
# (traceback.format_exception, logging) sees the line too. Not when the program traces itself (a debugger,
# coverage): the uncaught exception still gets it through the excepthook audit event. Removed once one exception
# was noted.
def _local_trace(frame, event, arg):
    if event == "exception" and _tracing:
        try:
            _maybe_note(arg[1], arg[2])
        except Exception:
            pass
    return _local_trace if _tracing else None


def _global_trace(frame, event, arg):
    if not _tracing:
        return None
    frame.f_trace_lines = False
    return _local_trace


_tracing = False
_traced_frames = []


def _trace_exceptions():
    global _tracing
    if _tracing or sys.gettrace() is not None:
        return
    _tracing = True
    sys.settrace(_global_trace)
    f = sys._getframe(1)
    while f is not None:
        if f.f_trace is None:
            f.f_trace_lines = False
            f.f_trace = _local_trace
            _traced_frames.append(f)
        f = f.f_back


def _untrace():
    global _tracing
    if not _tracing:
        return
    _tracing = False
    if sys.gettrace() is _global_trace:
        sys.settrace(None)
    for f in _traced_frames:
        try:
            if f.f_trace is _local_trace:
                f.f_trace = None
        except Exception:
            pass
    _traced_frames.clear()
