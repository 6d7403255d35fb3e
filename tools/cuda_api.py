#!/usr/bin/env python3
"""Generates the table of driver entry points that libcdsa.so wraps.

Reads the toolkit's own description of the driver API:
  - cudaTypedefs.h (and cudaProfilerTypedefs.h): one PFN_<name>_v<version>[_ptsz|_ptds]
    typedef per (entry point, signature); the version is the CUDA version in which that
    signature appeared, which is what cuGetProcAddress selects by;
  - cuda.h: `#define cuX cuX_v2` (possibly through __CUDA_API_PTDS/PTSZ) names the symbol
    that carries the newest signature of cuX;
  - the functions the headers declare (cuda.h and cudaProfiler.h, run through the C
    preprocessor as a program sees them and as the driver's own build does, __CUDA_API_VERSION_INTERNAL): the
    names a driver of that version exports, so entry points newer than the toolkit's stub get their exports too;
  - the stub libcuda.so: the symbols a program linked with -lcuda (or dlsym) can reach; each of its names that
    has a typedef must be one the headers declare (--list says which are not);
  - shim/intercept/driver_calls.def: the hand table of special kinds (launch, capture, ...) and the
    exempt names (calls that cannot surface a fault: never wrapped). An entry point it does not name gets its kind
    from its prototype (default_kind): one with a CUstream argument is StreamWork (device work that may fault, kept
    in its stream's order: a new entry point is counted as work until the table says otherwise), a synchronous
    copy, memset or launch (cuMemcpy*, cuMemset*, cuLaunch, cuLaunchGrid: no stream argument, the NULL stream's
    work) is DefaultStreamWork, any other is Generic.

Writes one C preprocessor include, every line one of
  CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol)
      every typedef, sorted by (base, per_thread, version); symbol is the exported
      name carrying that signature, or "" when neither the headers declare nor the stub exports one;
  CDSA_EXEMPT_NAME(name)
      the exempt names of driver_calls.def;
  CDSA_WRAP_EXPORT(symbol, pfn, (params), (args))
      every stub export cdsa defines itself, sorted by symbol (the parameter text is
      the typedef's own);
and, with --list, prints the stub exports that have no typedef (they cannot be wrapped).
"""
import argparse
import os
import re
import subprocess
import sys

TYPEDEF = re.compile(
    r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\s*\)\s*\((.*?)\)\s*;", re.S)
DEFINE = re.compile(r"^\s*#define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:DS|SZ)\(\s*)?(cu\w+)\s*\)?\s*$", re.M)
# CDSA_KIND(base, kind[, version]): the version (CUDA_VERSION) that added the entry point, when headers older than
# cdsa's newest pin may lack it (the 13.0 build step); without one, a name the headers lack is an error.
KIND = re.compile(r"^CDSA_KIND\((\w+),\s*(\w+)(?:,\s*(\d+))?\)", re.M)
VERSION = re.compile(r"^\s*#define\s+CUDA_VERSION\s+(\d+)", re.M)
SYNC_WORK = re.compile(r"^(cuMemcpy|cuMemset)\w*$|^cuLaunch(Grid)?$")
EXEMPT = re.compile(r"^CDSA_EXEMPT\((\w+)\)", re.M)


def fail(msg):
    sys.stderr.write(f"cuda_api.py: {msg}\n")
    sys.exit(1)


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    # Windows-only entry points (cuWGLGetDevice) do not exist here.
    return re.sub(r"#\s*if(?:def\s+_WIN32|\s+defined\s*\(\s*_WIN32\s*\)).*?#\s*endif", " ", text, flags=re.S)


def parse_typedefs(paths):
    """[(base, version, suffix, params)] from every header, in order."""
    out = []
    for path in paths:
        if not os.path.exists(path):
            continue
        for m in TYPEDEF.finditer(strip_comments(read(path))):
            params = " ".join(m.group(4).split())
            out.append((m.group(1), int(m.group(2)), m.group(3) or "", params))
    if not out:
        fail(f"no PFN_cu*_v* typedefs found in {', '.join(paths)}")
    return out


def split_params(params):
    """'CUdevice *d, void (*fn)(int)' -> ['CUdevice *d', 'void (*fn)(int)'] (top-level commas)."""
    if params.strip() in ("", "void"):
        return []
    parts, depth, cur = [], 0, ""
    for ch in params:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def param_name(param, i):
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", param)  # function pointer
    if m:
        return param, m.group(1)
    m = re.search(r"(\w+)\s*(\[[^\]]*\])*\s*$", param)
    words = re.findall(r"\w+", param)
    if m and len(words) > 1 and m.group(1) not in ("int", "char", "long", "short", "unsigned", "float",
                                                     "double", "void", "size_t"):
        return param, m.group(1)
    return f"{param} a{i}", f"a{i}"  # unnamed parameter: name it


def declared_functions(include, headers, cc):
    """The driver functions the headers declare, as exported: cuda.h's `#define cuX cuX_v2` macros applied, once
    as a program sees them and once as the driver's own build (__CUDA_API_VERSION_INTERNAL: the per-thread
    _ptsz/_ptds names and the old signatures' names)."""
    src = "".join(f"#include <{h}>\n" for h in headers)
    names = set()
    for mode in ([], ["-D__CUDA_API_VERSION_INTERNAL", "-D__CUDA_API_VERSION_INTERNAL_ODR"]):
        argv = (cc or "cc").split() + ["-E", "-P", "-x", "c", "-I", include, *mode, "-"]
        try:
            p = subprocess.run(argv, input=src, capture_output=True, text=True)
        except OSError as e:
            fail(f"cannot run the C preprocessor {argv[0]}: {e.strerror}")
        if p.returncode != 0:
            fail(f"the C preprocessor failed on {', '.join(headers)} in {include}: {p.stderr.strip()[:400]}")
        names |= set(re.findall(r"\bCUresult\s+(cu\w+)\s*\(", p.stdout))
    if not names:
        fail(f"no driver functions declared in {include}/cuda.h")
    return names


def stub_exports(stub, nm):
    if not stub:
        return None
    try:
        out = subprocess.run([nm or "nm", "-D", "--defined-only", stub], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"cannot list the symbols of {stub}: {e}")
    return {line.split()[-1] for line in out.splitlines() if line.split() and line.split()[-1].startswith("cu")}


def takes_stream(params):
    """Whether a prototype has an argument of type CUstream itself (not a CUstream * it writes)."""
    return any(re.fullmatch(r"(const\s+)?CUstream(\s+\w+)?", p.strip()) for p in split_params(params))


def default_kind(base, params):
    """The kind of an entry point driver_calls.def does not name (the module docstring)."""
    if takes_stream(params):
        return "StreamWork"
    if SYNC_WORK.match(base):
        return "DefaultStreamWork"
    return "Generic"


def build(typedefs, defines, exports, kinds, exempt):
    by_base = {}
    for base, ver, suffix, params in typedefs:
        by_base.setdefault(base, []).append((ver, suffix, params))
    entries = []  # (base, per_thread, version, pfn, symbol, kind, params)
    seen = {}
    for base in sorted(by_base):
        if base in exempt:
            continue
        variants = by_base[base]
        kind = kinds.get(base) or default_kind(base, variants[0][2])
        for per_thread in (False, True):
            vs = sorted(v for v in variants if bool(v[1]) == per_thread)
            for i, (ver, suffix, params) in enumerate(vs):
                pfn = f"PFN_{base}_v{ver}{suffix}"
                # The k-th signature of cuX is exported as cuX, cuX_v2, cuX_v3, ...; for the newest one
                # cuda.h's `#define cuX cuX_vN` says N when it differs (cuCtxCreate: four signatures, _v4).
                symbol = base if i == 0 else f"{base}_v{i + 1}"
                target = defines.get(base, "")
                # ... unless the macro names an older signature's symbol: 13.4 added cuGraphAddNode_v3 (the
                # prototype of cuGraphAddNode_v2) and left `#define cuGraphAddNode cuGraphAddNode_v2` as it was.
                older = {base if j == 0 else f"{base}_v{j + 1}" for j in range(i)}
                if i == len(vs) - 1 and re.fullmatch(re.escape(base) + r"_v\d+", target) and target not in older:
                    symbol = target
                symbol += suffix
                if exports is not None and symbol not in exports:
                    symbol = ""
                if symbol and symbol in seen:
                    fail(f"{symbol} would carry both {seen[symbol]} and {pfn}")
                seen[symbol] = pfn
                entries.append((base, per_thread, ver, pfn, symbol, kind, params))
    return entries


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--include", required=True, help="the toolkit's include directory")
    ap.add_argument("--stub", help="the toolkit's stub libcuda.so (its exports become cdsa's)")
    ap.add_argument("--nm", help="the nm program (default: nm)")
    ap.add_argument("--cc", help="the C compiler whose preprocessor reads the headers (default: cc)")
    ap.add_argument("--kinds", required=True, help="shim/intercept/driver_calls.def")
    ap.add_argument("--interop", nargs="*", default=[], choices=["GL", "EGL", "VDPAU"],
                    help="also the graphics-interop typedefs (cuda<X>Typedefs.h; need the system's GL/EGL/VDPAU headers)")
    ap.add_argument("--output", help="the include file to write")
    ap.add_argument("--list", action="store_true", help="print what is wrapped and what is not")
    a = ap.parse_args()
    headers = ["cudaTypedefs.h", "cudaProfilerTypedefs.h"] + [f"cuda{x}Typedefs.h" for x in a.interop]
    typedefs = parse_typedefs([os.path.join(a.include, h) for h in headers])
    defines = dict(DEFINE.findall(strip_comments(read(os.path.join(a.include, "cuda.h")))))
    kinds_text = strip_comments(read(a.kinds))
    rows = KIND.findall(kinds_text)
    kinds = {base: kind for base, kind, _ in rows}
    since = {base: int(v) for base, _, v in rows if v}
    exempt = set(EXEMPT.findall(kinds_text))
    version = VERSION.search(strip_comments(read(os.path.join(a.include, "cuda.h"))))
    header_version = int(version.group(1)) if version else 0
    # cuda.h's and cudaProfiler.h's (the interop headers' names stay what the stub says: it exports none of them).
    declared = declared_functions(a.include, ["cuda.h", "cudaProfiler.h"], a.cc)
    stub = stub_exports(a.stub, a.nm)
    # What a driver of the headers' version exports: what they declare; a stub older than the headers has fewer
    # names, one of the same version as many (the names of both, should a stub ever have one the headers lack).
    exports = declared | (stub or set())
    entries = build(typedefs, defines, exports, kinds, exempt)
    known_bases = {e[0] for e in entries}
    for base in kinds:
        if base not in known_bases and not (base in since and header_version < since[base]):
            fail(f"{a.kinds}: {base} has no PFN_{base}_v* typedef in {a.include}")
    kinds = {b: k for b, k in kinds.items() if b in known_bases}

    lines = ["// Generated by tools/cuda_api.py from the toolkit's cudaTypedefs.h, cuda.h and stub libcuda.so.",
             "// Do not edit: shim/intercept/driver_calls.def holds the hand-written part."]
    for base, per_thread, ver, pfn, symbol, kind, _ in entries:
        lines.append(f"CDSA_ENTRY({pfn}, {base}, {ver}, {int(per_thread)}, {kind}, \"{symbol}\")")
    for name in sorted(exempt):
        lines.append(f"CDSA_EXEMPT_NAME({name})")
    exported = set()
    for base, per_thread, ver, pfn, symbol, kind, params in sorted(entries, key=lambda e: e[4]):
        if not symbol or symbol in exported:
            continue
        exported.add(symbol)
        named = [param_name(p, i) for i, p in enumerate(split_params(params))]
        plist = ", ".join(p for p, _ in named) or "void"
        alist = ", ".join(n for _, n in named)
        lines.append(f"CDSA_WRAP_EXPORT({symbol}, {pfn}, ({plist}), ({alist}))")
    text = "\n".join(lines) + "\n"
    if a.output:
        old = read(a.output) if os.path.exists(a.output) else None
        if old != text:
            with open(a.output, "w", encoding="utf-8") as f:
                f.write(text)
    if a.list:
        unwrapped = sorted(exports - exported)
        print(f"typedefs: {len(typedefs)}  wrapped entries: {len(entries)}  exported wrappers: {len(exported)}")
        print(f"exports without a wrapper ({len(unwrapped)}): {' '.join(unwrapped)}")
        if stub is not None:
            newer = sorted(exported - stub)
            print(f"exported wrappers the stub lacks ({len(newer)}): {' '.join(newer)}")
            bases = {e[0] for e in entries}
            undeclared = sorted(n for n in stub - declared if re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", n) in bases)
            print(f"stub names with a typedef the headers do not declare ({len(undeclared)}): {' '.join(undeclared)}")


if __name__ == "__main__":
    main()
