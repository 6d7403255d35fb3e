#!/usr/bin/env python3
"""Generates the simulated driver's entry-point table and exports from the CUDA toolkit itself.

Inputs (from the headers the build wraps, CMake's CDSA_CUDA_HEADERS, and the toolkit's stub; new headers bring
their new entry points by themselves):
  --typedefs  include/cudaTypedefs.h   every `PFN_<name>_v<version>[_ptsz|_ptds]` typedef is one
                                       (name, version, stream variant) that cuGetProcAddress answers
  --cuda-h    include/cuda.h           `#define cuX cuX_v2` (also inside __CUDA_API_PTSZ/PTDS(...)):
                                       the exported symbol of a name's newest version
  --stub      lib64/stubs/libcuda.so   its defined dynamic symbols: every `cu*` name the driver exports (a stub
                                       older than the headers lacks the newer names: cuda.h's declarations,
                                       `CUresult CUDAAPI cuX(`, and their `__CUDA_API_PTSZ(cuX)` per-thread
                                       forms, cuX_ptsz, name those)

Symbol of (name, version): the newest version uses cuda.h's macro target (`name_v<n>`) if there is one; otherwise
the i-th version (oldest first) is `name` for i = 1 and `name_v<i>` after (cuCtxSynchronize 2000 ->
cuCtxSynchronize, 13000 -> cuCtxSynchronize_v2), and so is the newest one when the macro names an older one's symbol (13.4 added
cuGraphAddNode_v3 and kept `#define cuGraphAddNode cuGraphAddNode_v2`). A _ptsz/_ptds typedef at version v is the symbol of
the newest plain version <= v plus that suffix. A macro that renames a name to another function
(`#define cuGraphInstantiate cuGraphInstantiateWithFlags`, whose cudaTypedefs.h entries end at 11000)
adds one entry at the next major version after the name's newest typedef (12000), when cuda.h made
the switch. Every symbol must be one the stub exports or cuda.h declares, else the
script stops with a message naming it.

Output: one C++ file with
  * a weak definition of every exported name (stub exports and table symbols, which each have their own address)
    that answers through
    sim::unimplemented_call(); the sim's own (strong) definitions replace them at link time;
  * sim::kProcTable, the (name, version, variant, symbol, address) rows, sorted by name then version;
  * sim::kStubExports, the stub's names (for sim_test).
"""
import argparse
import collections
import re
import struct
import sys


def fail(msg):
    sys.exit(f"gen_entry_points.py: {msg}")


def elf_defined_functions(path):
    """Names of the defined function symbols in an ELF64 little-endian file's .dynsym."""
    try:
        data = open(path, "rb").read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        fail(f"{path} is not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for sh in sections:
        if sh[1] != 11:  # SHT_DYNSYM
            continue
        strtab = sections[sh[6]]
        str_off = strtab[4]
        for off in range(sh[4], sh[4] + sh[5], 24):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", data, off)
            if st_shndx == 0 or (st_info & 0xF) != 2:  # undefined, or not STT_FUNC
                continue
            end = data.index(b"\0", str_off + st_name)
            names.append(data[str_off + st_name:end].decode())
    if not names:
        fail(f"{path} has no defined functions in .dynsym")
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--typedefs", required=True)
    ap.add_argument("--cuda-h", required=True)
    ap.add_argument("--stub", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stub-map", help="also write a version script that exports only the stub's names (and "
                    "cuGetProcAddress_v2_ptsz): the sim as the stub's older driver")
    a = ap.parse_args()

    try:
        typedefs = open(a.typedefs).read()
        cuda_h = open(a.cuda_h).read()
    except OSError as e:
        fail(f"cannot read {e.filename}: {e.strerror}")
    exports = sorted({n for n in elf_defined_functions(a.stub) if n.startswith("cu")})

    pfns = set(re.findall(r"\(CUDAAPI \*PFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\)", typedefs))
    if not pfns:
        fail(f"no PFN_cu*_v<version> typedefs in {a.typedefs}")
    macros = dict(re.findall(r"^\s*#define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:SZ|DS)\()?(cu\w+)\)?\s*$", cuda_h, re.M))
    # The names cuda.h declares, and their per-thread forms (what __CUDA_API_PTSZ/PTDS(cuX) makes of cuX in the
    # driver's own build): the exports of a driver as new as the headers.
    declared = set(re.findall(r"\bCUresult\s+CUDAAPI\s+(cu\w+)\s*\(", cuda_h))
    declared |= {t + "_pt" + k.lower() for k, t in
                 re.findall(r"^\s*#define\s+cu\w+\s+__CUDA_API_PT(SZ|DS)\(\s*(cu\w+)\s*\)", cuda_h, re.M)}

    plain = collections.defaultdict(list)
    for name, ver, suffix in pfns:
        if not suffix:
            plain[name].append(int(ver))
    for vs in plain.values():
        vs.sort()

    def plain_symbol(name, ver):
        vs = plain[name]
        i = vs.index(ver)
        older = {name if j == 0 else f"{name}_v{j + 1}" for j in range(i)}
        target = macros.get(name, "")
        if i == len(vs) - 1 and re.fullmatch(re.escape(name) + r"_v\d+", target) and target not in older:
            return target
        return name if i == 0 else f"{name}_v{i + 1}"

    exported = set(exports)
    known = exported | declared
    rows = []
    for name, ver, suffix in pfns:
        ver = int(ver)
        if suffix:
            older = [v for v in plain[name] if v <= ver]
            if not older:
                fail(f"PFN_{name}_v{ver}{suffix} has no plain version at or before {ver}")
            symbol = plain_symbol(name, max(older)) + suffix
        else:
            symbol = plain_symbol(name, ver)
        if symbol not in known:
            fail(f"PFN_{name}_v{ver}{suffix} maps to {symbol}, which {a.stub} does not export and {a.cuda_h} does not declare")
        rows.append((name, ver, {"": "Plain", "_ptsz": "Ptsz", "_ptds": "Ptds"}[suffix], symbol))
    for name, target in macros.items():
        if name in plain and target != name and not re.fullmatch(re.escape(name) + r"_v\d+", target):
            if target not in known:
                fail(f"cuda.h renames {name} to {target}, which {a.stub} does not export")
            rows.append((name, (plain[name][-1] // 1000 + 1) * 1000, "Plain", target))
    rows.sort()

    out = [
        f"// Generated by tests/sim/gen_entry_points.py from {a.typedefs}, {a.cuda_h} and {a.stub}.",
        "// Do not edit: the build regenerates it.",
        f"// {len(rows)} (name, version, variant) entry points over {len(plain)} names; {len(exports)} exports.",
        '#include "sim_proc_table.h"',
        "",
        "// Every exported name: the sim's own definition (sim_*.cc) replaces this weak one.",
        "#define SIM_WEAK(n) \\",
        '  extern "C" __attribute__((weak, visibility("default"))) int n() { return sim::unimplemented_call(#n); }',
    ]
    out += [f"SIM_WEAK({n})" for n in sorted(exported | {r[3] for r in rows})]
    out += ["#undef SIM_WEAK", "", "namespace sim {", "", "const ProcEntry kProcTable[] = {"]
    out += [f'    {{"{n}", {v}, ProcVariant::{k}, "{s}", reinterpret_cast<void*>(&{s})}},' for n, v, k, s in rows]
    out += ["};", "const size_t kProcTableSize = sizeof kProcTable / sizeof kProcTable[0];", "",
            "const char* const kStubExports[] = {"]
    out += [f'    "{n}",' for n in exports]
    out += ["};", "const size_t kStubExportsSize = sizeof kStubExports / sizeof kStubExports[0];", "",
            "}  // namespace sim", ""]
    files = [(a.out, "\n".join(out))]
    if a.stub_map:
        names = sorted(set(exports) | {"cuGetProcAddress_v2_ptsz"})
        files.append((a.stub_map, "/* Generated by tests/sim/gen_entry_points.py: the names of " + a.stub +
                      " (the sim as that stub's driver). */\n{\n  global:\n" + "".join(f"    {n};\n" for n in names) +
                      "  local: *;\n};\n"))
    for path, text in files:
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            fail(f"cannot write {path}: {e.strerror}")


if __name__ == "__main__":
    main()
