#!/usr/bin/env python3
"""End-to-end test of cdsa's CPython frame walker (shim/stacks/python_stack.cc).

Loads the pystack_probe library with ctypes.CDLL (the GIL is released during
the call, as PyTorch does around its ops) and with ctypes.PyDLL (the GIL is
kept), captures the calling thread's Python stack from many kinds of call
sites, and compares it frame by frame with traceback.extract_stack() taken on
the same source line (file, line) and with each frame's f_code.co_qualname
(co_name on 3.10, which has no co_qualname: the walker reports co_name there).

Usage: test_python_stack.py --probe path/to/pystack_probe.so
           [--expect ready|unsupported] [--bench]
Plain python3 + assert; exits non-zero on the first failure.
"""
import argparse
import asyncio
import ctypes
import importlib.util
import os
import platform
import runpy
import sys
import tempfile
import threading
import traceback

CAP = 1 << 20          # bytes of formatted output per capture
MAX = 4096             # frames per capture (probe limit)
P = None               # the loaded probe (CDLL or PyDLL), set per pass
CHECKS = 0


def Q(qualname):
    """The function name the walker reports: the qualified name, or on 3.10 (no co_qualname) the last part."""
    return qualname if sys.version_info >= (3, 11) else qualname.rsplit(".", 1)[-1]


def newbuf():
    return ctypes.create_string_buffer(CAP)


def load(path, kind):
    lib = kind(path)
    lib.cdsa_probe_init.restype = ctypes.c_int
    lib.cdsa_probe_description.restype = ctypes.c_char_p
    lib.cdsa_probe_stack_max.restype = ctypes.c_int
    lib.cdsa_probe_stack_max.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_int)]
    lib.cdsa_probe_stack.restype = ctypes.c_int
    lib.cdsa_probe_stack.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.cdsa_probe_innermost.restype = ctypes.c_int
    lib.cdsa_probe_innermost.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                         ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.cdsa_probe_native_thread_frames.restype = ctypes.c_int
    lib.cdsa_probe_accepts_object.restype = ctypes.c_int
    lib.cdsa_probe_accepts_object.argtypes = [ctypes.c_void_p]
    lib.cdsa_probe_bad_check_resolves.restype = ctypes.c_int
    lib.cdsa_probe_bench_ns.restype = ctypes.c_double
    lib.cdsa_probe_bench_ns.argtypes = [ctypes.c_int, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_int),
                                        ctypes.POINTER(ctypes.c_double)]
    lib.cdsa_probe_cached_once.restype = ctypes.c_int
    lib.cdsa_probe_cached_once.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.cdsa_probe_wrap_code_dealloc.restype = ctypes.c_int
    lib.cdsa_probe_layout.restype = ctypes.c_int
    lib.cdsa_probe_layout.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return lib


def parse(n, b):
    assert n >= 0, ("probe failed with %d (-1 buffer, -2 fingerprint, -3 resolve, -4 the chain cache's capture "
                    "differs from the walk, -5 a chain just cached was not served)" % n)
    text = b.value.decode("utf-8")  # must be valid UTF-8
    lines = text.split("\n")
    assert lines[-1] == "", repr(text[-200:])
    rows = []
    for ln in lines[:-1]:
        f, q, l = ln.split("\t")
        rows.append((f, q, int(l)))
    assert len(rows) == n, (len(rows), n)
    return rows


def chain():
    """(file, qualname, name) of the caller's frame and all outer frames, taken
    now: a suspended generator's frame loses its f_back, so the chain cannot
    be walked later."""
    out = []
    f = sys._getframe(1)
    while f is not None:
        out.append((f.f_code.co_filename, getattr(f.f_code, "co_qualname", f.f_code.co_name), f.f_code.co_name))
        f = f.f_back
    return out


def expected(stack, frames):
    """Innermost-first (file, qualname, line) from extract_stack + chain()."""
    summ = list(reversed(stack))
    assert len(summ) == len(frames), (len(summ), len(frames))
    out = []
    for fs, (filename, qualname, name) in zip(summ, frames):
        assert fs.name == name, (fs.name, name)
        assert fs.filename == filename, (fs.filename, filename)
        out.append((fs.filename, qualname, -1 if fs.lineno is None else fs.lineno))
    return out


def check(r, what, innermost_qualname=None, limit=None, truncated=None):
    """r = (n, buffer, extract_stack(), chain()) from one source line."""
    global CHECKS
    n, b, st, fr = r[:4]
    got = parse(n, b)
    exp = expected(st, fr)
    if limit is not None:
        assert len(exp) > limit, (what, len(exp), limit)
        exp = exp[:limit]
    if got != exp:
        print("MISMATCH in %s (%s)" % (what, P._name), file=sys.stderr)
        for i in range(max(len(got), len(exp))):
            g = got[i] if i < len(got) else None
            e = exp[i] if i < len(exp) else None
            print("  %s %r\n    %r" % ("  " if g == e else "!!", g, e), file=sys.stderr)
        raise AssertionError("stack mismatch: " + what)
    assert len(got) >= 1, what
    if innermost_qualname is not None:
        assert got[0][1] == Q(innermost_qualname), (what, got[0][1], Q(innermost_qualname))
    if truncated is not None:
        assert r[4].value == truncated, (what, r[4].value, truncated)
    CHECKS += 1
    return got


# --- call sites. Each site is ONE source line that calls the probe, then
# extract_stack() and chain(), so that every frame is at the same line.

def site_plain():
    b = newbuf()
    return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())


def test_plain():
    check(site_plain(), "plain function", "site_plain")


def test_traced():
    # A trace function (debugger, coverage) instruments the bytecode in place
    # on 3.12+ and sets f_lineno on 3.10/3.11; the walk must be unaffected.
    def tracer(frame, event, arg):
        return tracer
    sys.settrace(tracer)
    try:
        r = site_plain()
    finally:
        sys.settrace(None)
    check(r, "under sys.settrace", "site_plain")


def test_nested():
    def outer():
        def inner():
            b = newbuf()
            return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())
        return inner()
    check(outer(), "nested functions", "test_nested.<locals>.outer.<locals>.inner")


class Klass:
    def method(self):
        b = newbuf()
        return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())

    @classmethod
    def cmethod(cls):
        b = newbuf()
        return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())

    class Inner:
        @staticmethod
        def smethod():
            b = newbuf()
            return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())


def test_methods():
    check(Klass().method(), "method", "Klass.method")
    check(Klass.cmethod(), "classmethod", "Klass.cmethod")
    check(Klass.Inner.smethod(), "nested class staticmethod", "Klass.Inner.smethod")


def test_lambda():
    lam = lambda b: (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())  # noqa: E731
    check(lam(newbuf()), "lambda", "test_lambda.<locals>.<lambda>")


def test_generators_and_comprehensions():
    def gen():
        b = newbuf()
        yield (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())
    check(next(gen()), "generator", "test_generators_and_comprehensions.<locals>.gen")

    def delegating():
        r = yield from gen()
        return r
    check(next(delegating()), "yield from", "test_generators_and_comprehensions.<locals>.gen")

    bufs = [newbuf()]
    r = [(P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain()) for b in bufs][0]
    check(r, "list comprehension")  # own frame in 3.11, inlined in 3.12+
    r = next((P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain()) for b in bufs)
    check(r, "generator expression",
          "test_generators_and_comprehensions.<locals>.<genexpr>")


def test_coroutine():
    async def leaf():
        b = newbuf()
        return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())

    async def main():
        return await leaf()
    check(asyncio.run(main()), "coroutine", "test_coroutine.<locals>.leaf")


def test_module_level(tmp):
    path = os.path.join(tmp, "modlevel.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write("import sys, traceback\n"
                "b = newbuf()\n"
                "R = (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())\n")
    g = runpy.run_path(path, init_globals={"P": P, "CAP": CAP, "MAX": MAX, "newbuf": newbuf,
                                           "chain": chain})
    check(g["R"], "module level (runpy)", "<module>")

    # Module level during an import (frozen importlib frames in between).
    mod = os.path.join(tmp, "imported_mod_%s.py" % P._cdsa_kind)
    with open(mod, "w", encoding="utf-8") as f:
        f.write("import sys, traceback, builtins\n"
                "_s = builtins._cdsa_site\n"
                "b = _s.newbuf()\n"
                "R = (_s.P.cdsa_probe_stack_max(b, _s.CAP, _s.MAX, None), b, traceback.extract_stack(), _s.chain())\n")
    import builtins
    builtins._cdsa_site = sys.modules[__name__]
    sys.path.insert(0, tmp)
    try:
        m = importlib.import_module("imported_mod_%s" % P._cdsa_kind)
    finally:
        sys.path.remove(tmp)
        del builtins._cdsa_site
    check(m.R, "module level (import)", "<module>")

    # exec of a string: file name "<string>".
    ns = {"P": P, "CAP": CAP, "MAX": MAX, "newbuf": newbuf, "chain": chain,
          "traceback": traceback}
    exec("b = newbuf()\nR = (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())\n", ns)
    got = check(ns["R"], "exec", "<module>")
    assert got[0][0] == "<string>", got[0]


NON_ASCII_SOURCE = '''\
import traceback
from __main__ import chain

def café(P, CAP, MAX, b):
    return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())

class Ünïcode:
    def 方法(self, P, CAP, MAX, b):
        return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())

def 𠀀(P, CAP, MAX, b):
    return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())

def innermost(P, f, fc, g, gc, line):
    return P.cdsa_probe_innermost(f, fc, g, gc, line)

class Ünïcode2:
    def 方法(self, P, f, fc, g, gc, line):
        return P.cdsa_probe_innermost(f, fc, g, gc, line)
'''


def test_non_ascii(tmp):
    # Directory with an astral character (UCS4 file name), module with
    # Latin-1 (UCS1), BMP (UCS2) and astral (UCS4) identifiers.
    d = os.path.join(tmp, "données_\U0001F600")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "модуль_é.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(NON_ASCII_SOURCE)
    spec = importlib.util.spec_from_file_location("nonascii_mod_" + P._cdsa_kind, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    got = check(m.café(P, CAP, MAX, newbuf()), "latin-1 function name", "café")
    assert got[0][0] == path, (got[0][0], path)
    check(m.Ünïcode().方法(P, CAP, MAX, newbuf()), "UCS2 method name", "Ünïcode.方法")
    check(getattr(m, "\U00020000")(P, CAP, MAX, newbuf()), "UCS4 function name", "\U00020000")

    # Safe truncation: every buffer size yields a valid UTF-8 prefix.
    full_q = Q("Ünïcode2.方法").encode("utf-8")
    full_f = path.encode("utf-8")
    obj = m.Ünïcode2()
    for cap in range(0, max(len(full_q), len(full_f)) + 3):
        fb = ctypes.create_string_buffer(max(cap, 1))
        qb = ctypes.create_string_buffer(max(cap, 1))
        line = ctypes.c_int(0)
        assert obj.方法(P, fb, cap, qb, cap, ctypes.byref(line)) == 1
        for raw, full in ((fb.value, full_f), (qb.value, full_q)):
            s = raw.decode("utf-8")  # raises if a sequence was cut
            assert full.startswith(raw), (raw, full)
            assert len(raw) <= max(cap - 1, 0), (cap, raw)
            # Only stops early when the next code point does not fit.
            if len(raw) < len(full):
                nxt = full[len(raw):].decode("utf-8")[0].encode("utf-8")
                assert len(raw) + len(nxt) + 1 > cap, (cap, raw, nxt)
            del s
        assert line.value > 0
    assert qb.value == full_q and fb.value == full_f


def test_deep_recursion():
    def rec(k, b, tr):
        if k == 0:
            return (P.cdsa_probe_stack_max(b, CAP, 64, ctypes.byref(tr)), b, traceback.extract_stack(), chain(), tr)
        return rec(k - 1, b, tr)
    check(rec(300, newbuf(), ctypes.c_int(-1)), "deep recursion, truncated to 64",
          "test_deep_recursion.<locals>.rec", limit=64, truncated=1)

    def rec_full(k, b, tr):
        if k == 0:
            return (P.cdsa_probe_stack_max(b, CAP, MAX, ctypes.byref(tr)), b, traceback.extract_stack(), chain(), tr)
        return rec_full(k - 1, b, tr)
    got = check(rec_full(300, newbuf(), ctypes.c_int(-1)), "deep recursion, full",
                truncated=0)
    assert len(got) > 300

    # Exactly max frames: not truncated; one fewer: truncated.
    def rec_exact(k, b, tr, lim):
        if k == 0:
            return (P.cdsa_probe_stack_max(b, CAP, lim, ctypes.byref(tr)), b, traceback.extract_stack(), chain(), tr)
        return rec_exact(k - 1, b, tr, lim)

    def outer(lim):
        return rec_exact(10, newbuf(), ctypes.c_int(-1), lim)
    n = len(check(outer(MAX), "rec_exact, full", truncated=0))
    check(outer(n), "exactly max frames", truncated=0)
    check(outer(n - 1), "max - 1 frames", limit=n - 1, truncated=1)
    check(outer(1), "max 1 frame", "test_deep_recursion.<locals>.rec_exact", limit=1, truncated=1)


def test_threads():
    results, errors = [], []

    def worker(rounds):
        try:
            for _ in range(rounds):
                results.append(site_plain())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=worker, args=(1,), name="single")
    t.start()
    t.join()
    assert not errors, errors
    got = check(results.pop(), "threading.Thread", "site_plain")
    assert any(q == Q("Thread.run") for _, q, _ in got), got

    # Several threads capturing while the others run Python code.
    stop = threading.Event()

    def spin():
        x = 0
        while not stop.is_set():
            x = sum(range(100)) + x % 7
    spinner = threading.Thread(target=spin)
    spinner.start()
    ts = [threading.Thread(target=worker, args=(50,)) for _ in range(4)]
    for t in ts:
        t.start()
    for _ in range(50):
        check(site_plain(), "main thread during concurrency", "site_plain")
    for t in ts:
        t.join()
    stop.set()
    spinner.join()
    assert not errors, errors
    assert len(results) == 200, len(results)
    for r in results:
        check(r, "worker thread during concurrency", "site_plain")


class _Finalizer:
    results = []

    def __del__(self):
        _Finalizer.results.append(site_plain())


def _with_cell():
    x = 1  # a cell: MAKE_CELL runs before RESUME, while the frame is incomplete

    def inner():
        return x
    return inner


def test_incomplete_frame():
    """A finalizer running inside MAKE_CELL (3.11 collects synchronously in
    the allocation) sees an incomplete _with_cell frame on the chain: CPython
    hides it (PyFrame_GetBack skips incomplete frames), so must the walker."""
    import gc
    old = gc.get_threshold()
    gc.disable()
    try:
        _Finalizer.results.clear()
        for _ in range(3):
            a = _Finalizer()
            a.cycle = a
            del a
        gc.set_threshold(1)
        gc.enable()
        _with_cell()
    finally:
        gc.set_threshold(*old)
        gc.enable()
    gc.collect()
    assert _Finalizer.results, "finalizer did not run"
    for r in _Finalizer.results:
        got = check(r, "finalizer (incomplete frame below)", "site_plain")
        assert got[1][1] == Q("_Finalizer.__del__"), got[:3]
    # On 3.11 this really runs with the incomplete frame on the chain: with the
    # incomplete-frame check removed from the walker, this test fails there.


def test_native_thread_and_rejections():
    assert P.cdsa_probe_native_thread_frames() == 0
    for obj in ("a str", 12345678901234567890, test_plain, Klass, [1, 2]):
        assert P.cdsa_probe_accepts_object(id(obj)) == 0, obj
    assert P.cdsa_probe_accepts_object(None) == 0
    assert P.cdsa_probe_bad_check_resolves() == 0


def chain_stats():
    a = (ctypes.c_ulonglong * 6)()
    P.cdsa_probe_chain_stats(a)
    return {"hits": a[0], "partial": a[1], "fills": a[2], "plain": a[3], "predicted": a[4], "word_checks": a[5]}


# Sites for the successor tests: each captures once through the chain cache alone (as a launch takes it; the probe
# checks it against the walk), on one line.
def _succ_site(k):
    src = ("def succ_site_%d(b, hit):\n"
           "    return (P.cdsa_probe_cached_once(b, CAP, MAX, ctypes.byref(hit)), b, traceback.extract_stack(), chain(),"
           " hit)\n" % k)
    exec(compile(src, "<succ sites>", "exec"), globals())
    return globals()["succ_site_%d" % k]


_SUCC_SITES = [_succ_site(k) for k in range(6)]


def _via_a(site):
    return site(newbuf(), ctypes.c_int(-1))


def _via_b(site):
    return site(newbuf(), ctypes.c_int(-1))


def _succ_rec(k, site):
    if k == 0:
        return site(newbuf(), ctypes.c_int(-1))
    return _succ_rec(k - 1, site)


def test_chain_successors():
    """The chain cache first tries the chain that followed the last one served: sites called in a repeating order
    (an op-by-op forward pass) are served by it, and every other order, a changed frame further out, a generator
    resumed from other callers at the same yield, recursion at other depths, must still give exactly the walk
    (every capture here goes through the cache once, as at a launch, and the probe compares it with the walk)."""
    P.cdsa_probe_chain_clear()
    sites = _SUCC_SITES
    before = chain_stats()
    for rnd in range(5):  # one order, five rounds: from the second round on every capture is a hit
        for k, site in enumerate(sites):
            r = check(site(newbuf(), ctypes.c_int(-1)), "cycle round %d site %d" % (rnd, k), "succ_site_%d" % k)
    after = chain_stats()
    assert after["hits"] - before["hits"] >= 4 * len(sites), (before, after)
    assert after["predicted"] - before["predicted"] >= 3 * len(sites), (before, after)
    for rnd in range(3):  # another order: the successors recorded are wrong now, found by the set instead
        for k in (3, 1, 4, 0, 5, 2):
            check(sites[k](newbuf(), ctypes.c_int(-1)), "reordered %d" % k, "succ_site_%d" % k)
    for rnd in range(4):  # the same innermost frames (same code, same instruction) under another caller
        for k, site in enumerate(sites):
            r = check((_via_a, _via_b)[(rnd + k) % 2](site), "caller changes %d/%d" % (rnd, k), "succ_site_%d" % k)
            assert r[1][1] == Q(("_via_a", "_via_b")[(rnd + k) % 2]), r[:2]
    for rnd in range(3):  # the same site at other recursion depths, in a repeating order
        for depth in (2, 5, 3, 0):
            got = check(_succ_rec(depth, sites[0]), "recursion %d" % depth, "succ_site_0")
            assert sum(1 for g in got if g[1] == Q("_succ_rec")) == depth + 1, (depth, got[:8])

    def gen():
        while True:  # one yield point: its frame's words are the same whoever resumes it
            b, h = newbuf(), ctypes.c_int(-1)
            yield (P.cdsa_probe_cached_once(b, CAP, MAX, ctypes.byref(h)), b, traceback.extract_stack(), chain())

    def resume_1(g):
        return next(g)

    def resume_2(g):
        return resume_1(g)
    g = gen()
    for rnd in range(4):
        for how in (resume_1, resume_2, resume_1, next):
            got = check(how(g), "generator resumed by %s" % how.__name__, "test_chain_successors.<locals>.gen")
            want = {next: ["test_chain_successors"], resume_1: ["resume_1", "test_chain_successors"],
                    resume_2: ["resume_1", "resume_2", "test_chain_successors"]}[how]
            want = [w if w == "test_chain_successors" else "test_chain_successors.<locals>." + w for w in want]
            assert [g[1] for g in got[1:1 + len(want)]] == [Q(w) for w in want], (how, got[:4])
    g.close()


_EDITED_CELL = """
def cell_site(P, CAP, MAX, b):
{pad}    return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())
"""


def test_verified_chains():
    """The verified chain cache (every probe capture is also taken through it and compared with the walk):
    repeated sites whose frames are freed and reused at the same address, sites in turn at one depth,
    recursion at changing depths (a re-walk from the changed frame), generators and coroutines resumed at
    different lines, and a code object replaced by another from the same file at the same place (an edited
    notebook cell)."""
    P.cdsa_probe_chain_clear()
    before = chain_stats()
    for _ in range(20):
        check(site_plain(), "repeated site", "site_plain")
    after = chain_stats()
    assert after["hits"] - before["hits"] >= 30, (before, after)  # both probe passes of 19 repeats hit

    def a(b):
        return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())

    def b_(b):
        return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())
    for i in range(30):
        check((a, b_)[i % 2](newbuf()), "sites in turn", ("test_verified_chains.<locals>.a",
                                                         "test_verified_chains.<locals>.b_")[i % 2])

    def rec(k, b):
        if k == 0:
            return (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())
        return rec(k - 1, b)
    before = chain_stats()
    for k in (5, 7, 5, 3, 7, 7, 0, 12):
        check(rec(k, newbuf()), "recursion %d deep" % k, "test_verified_chains.<locals>.rec")
    for lim in (3, 5, 3, 64):
        def lim_outer(lim):
            return rec_lim(8, newbuf(), ctypes.c_int(-1), lim)

        def rec_lim(k, b, tr, lim):
            if k == 0:
                return (P.cdsa_probe_stack_max(b, CAP, lim, ctypes.byref(tr)), b, traceback.extract_stack(),
                        chain(), tr)
            return rec_lim(k - 1, b, tr, lim)
        r = lim_outer(lim)
        check(r, "recursion with max %d" % lim, limit=lim if lim < 10 else None, truncated=1 if lim < 10 else 0)

    def gen(n):
        for i in range(n):
            b = newbuf()
            yield (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())
            b = newbuf()
            yield (P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain())
    g = gen(5)
    for r in g:
        check(r, "generator resumed", "test_verified_chains.<locals>.gen")
    for _ in range(3):  # a fresh generator object each time: its frame may reuse the last one's memory
        for r in gen(2):
            check(r, "fresh generator", "test_verified_chains.<locals>.gen")

    async def coro(n):
        for _ in range(n):
            b = newbuf()
            _Yield.results.append((P.cdsa_probe_stack_max(b, CAP, MAX, None), b, traceback.extract_stack(), chain()))
            await _Yield()
    _Yield.results = []
    c = coro(4)
    try:
        while True:
            c.send(None)
    except StopIteration:
        pass
    for r in _Yield.results:
        check(r, "coroutine resumed", "test_verified_chains.<locals>.coro")

    # An edited cell: the same file name, the function at another line, compiled after the old code was freed.
    import gc
    for pad in range(8):
        ns = {"traceback": traceback, "chain": chain}
        exec(compile("\n" * pad + _EDITED_CELL.format(pad=""), "<edited cell>", "exec"), ns)
        got = check(ns["cell_site"](P, CAP, MAX, newbuf()), "edited cell %d" % pad, "cell_site")
        assert got[0][2] == pad + 3, (pad, got[0])
        got = check(ns["cell_site"](P, CAP, MAX, newbuf()), "edited cell %d again" % pad, "cell_site")
        assert got[0][2] == pad + 3, (pad, got[0])
        del ns, got
        gc.collect()


def test_checks_by_instruction():
    """3.11+: a repeated chain is verified by its frames' instructions and links alone while no code object was
    freed since its code objects' words were last read (cdsa counts the frees through PyCode_Type's tp_dealloc); any
    code object freed makes the next check compare the words and the guards again, once. 3.10 (frame objects, an
    instruction index, not a pointer) always compares the words. Every capture is also checked against the walk."""
    import gc
    desc = P.cdsa_probe_description().decode()
    assert "not counted" not in desc, desc  # the type object is writable data in every interpreter tested here
    P.cdsa_probe_chain_clear()
    stats = {}
    # One capture line for every phase: the same chain throughout.
    for phase in ["warm-up"] * 3 + ["repeated"] * 10 + ["free"] + ["after a code object was freed"] + ["again"] * 5:
        if phase == "free":
            ns = {}
            exec(compile("def freed():\n    pass\n", "<freed>", "exec"), ns)
            del ns
            gc.collect()  # the function, its code object: one code object freed
            continue
        if phase not in stats:
            stats[phase] = chain_stats()
        check(site_plain(), phase, "site_plain")
    stats["end"] = chain_stats()
    s0, s1, s2, s3 = (stats[k] for k in ("repeated", "after a code object was freed", "again", "end"))
    assert s1["hits"] - s0["hits"] == 20 and s3["hits"] - s2["hits"] == 10, stats  # two cached captures a site_plain
    if sys.version_info < (3, 11):
        assert s1["word_checks"] - s0["word_checks"] >= 20, (s0, s1)
        return
    assert s1["word_checks"] == s0["word_checks"], (s0, s1)
    assert s2["word_checks"] - s1["word_checks"] == 1, (s1, s2)  # the first capture after the free, once
    assert s3["word_checks"] == s2["word_checks"], (s2, s3)


def test_dealloc_slot_replaced():
    """Another layer puts its own function into PyCode_Type's tp_dealloc after the walker's wrapper: from the next
    miss on, the walker no longer trusts its count of frees, and every check compares the words and guards again
    (still exact). Run last: the walker stays that way for the rest of the process."""
    if sys.version_info < (3, 11):
        return
    assert P.cdsa_probe_wrap_code_dealloc() == 0
    P.cdsa_probe_chain_clear()
    stats = []
    for k in range(6):  # one capture line: a fill (a miss: the slot is checked), then hits
        stats.append(chain_stats())
        check(site_plain(), "after another layer wrapped tp_dealloc %d" % k, "site_plain")
    stats.append(chain_stats())
    for a, b in zip(stats[2:], stats[3:]):  # repeats: hits, each by words and guards
        assert b["hits"] - a["hits"] == 2 and b["word_checks"] - a["word_checks"] >= 2, (a, b)


class _Yield:
    results = []

    def __await__(self):
        yield


def bench():
    def rec(k):
        if k == 0:
            frames, rns = ctypes.c_int(0), ctypes.c_double(0)
            ns = P.cdsa_probe_bench_ns(200000, 64, ctypes.byref(frames), ctypes.byref(rns))
            return ns, frames.value, rns.value
        return rec(k - 1)
    base = len(traceback.extract_stack())
    ns, frames, rns = rec(max(0, 20 - base - 1))
    print("bench (%s): %.1f ns per capture of %d frames (%.2f ns/frame); "
          "resolve %.0f ns/frame" % (P._cdsa_kind, ns, frames, ns / max(frames, 1), rns))
    assert 15 <= frames <= 25, frames
    assert ns < 50000, ns  # gross sanity only; not a timing test


def run_ready(path, do_bench):
    global P
    with tempfile.TemporaryDirectory() as tmp:
        for kind in (ctypes.CDLL, ctypes.PyDLL):
            P = load(path, kind)
            P._cdsa_kind = kind.__name__
            assert P.cdsa_probe_init() == 1, P.cdsa_probe_description()
            desc = P.cdsa_probe_description().decode()
            want = "CPython %s " % platform.python_version()
            assert desc.startswith(want), (desc, want)
            test_plain()
            test_traced()
            test_nested()
            test_methods()
            test_lambda()
            test_generators_and_comprehensions()
            test_coroutine()
            test_module_level(tmp)
            test_non_ascii(tmp)
            test_deep_recursion()
            test_incomplete_frame()
            test_threads()
            test_native_thread_and_rejections()
            test_verified_chains()
            test_chain_successors()
            test_checks_by_instruction()
            if do_bench:
                bench()
    test_dealloc_slot_replaced()  # last: it turns the walker's count of code frees off for good
    print("OK: %s; %d stack comparisons (CDLL and PyDLL)" % (desc, CHECKS))


def run_unsupported(path):
    global P
    P = load(path, ctypes.CDLL)
    P._cdsa_kind = "CDLL"
    assert P.cdsa_probe_init() == 2, P.cdsa_probe_init()
    desc = P.cdsa_probe_description().decode()
    v = "%d.%d" % sys.version_info[:2]
    assert desc.startswith("CPython " + v) and "disabled" in desc, desc
    b = newbuf()
    assert P.cdsa_probe_stack(b, CAP) == 0 and b.value == b""
    assert P.cdsa_probe_native_thread_frames() == 0
    assert P.cdsa_probe_accepts_object(id("x")) == 0
    print("OK: degraded as expected: %s" % desc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--expect", choices=("ready", "unsupported"), default="ready")
    ap.add_argument("--bench", action="store_true")
    a = ap.parse_args()
    print("Python %s at %s" % (sys.version.split()[0], sys.executable))
    if a.expect == "unsupported":
        run_unsupported(a.probe)
    else:
        run_ready(a.probe, a.bench)


if __name__ == "__main__":
    main()
