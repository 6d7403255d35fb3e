#!/usr/bin/env python3
"""Every CDSA_* variable is read through the table (shim/common/config_vars.def -> shim/common/config.cc): no other source of
the product calls getenv/secure_getenv on a CDSA_ name, so no variable works without being listed, checked and
documented (and ignored under secure execution). Run by ctest (config.env_reads) as: check_env_reads.py ROOT"""
import pathlib
import re
import sys

PRODUCT = ("base", "cli", "cupti_tracer", "python", "report", "shim", "symbolizer")
READ = re.compile(r'\b(?:secure_)?getenv\s*\(\s*"(CDSA_[A-Z0-9_]*)"')


def stray_reads(root):
    out = []
    for top in PRODUCT:
        for p in sorted((root / top).rglob("*")):
            if p.suffix not in (".c", ".cc", ".h") or p == root / "shim" / "common" / "config.cc":
                continue
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                for m in READ.finditer(line):
                    out.append(f"{p.relative_to(root)}:{n}: reads {m.group(1)} outside the table")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2 or not pathlib.Path(sys.argv[1], "shim", "common", "config_vars.def").is_file():
        sys.exit("usage: check_env_reads.py ROOT  (the source tree, holding shim/common/config_vars.def)")
    found = stray_reads(pathlib.Path(sys.argv[1]))
    print("\n".join(found) or "no CDSA_ variable is read outside shim/common/config.cc")
    sys.exit(1 if found else 0)
