#!/usr/bin/env python3
"""The include rules of the product's layers, checked (ctest: layers.includes; run as check_layers.py ROOT).

Top level, each layer including only itself and the layers after it:
    cli -> cupti_tracer -> shim -> report -> symbolizer -> base
Inside shim/, the stages of libcdsa.so, the same way (shim/entry.cc, the constructor, sits above them all):
    shim/intercept -> shim/fault -> shim/record -> shim/stacks -> shim/common
with one more rule: shim/record (the launch path) and shim/stacks (the walkers it takes stacks from) include
nothing from report/ either, so the launch stage links without the fault path and the report model; and only
shim/intercept (and shim/entry.cc) exports a symbol: every hook of libc or of the driver is there
(shim/intercept/libc_hooks.def, driver_calls.def), so the stages below it interpose nothing; and of shim/record
only stack_capture.cc includes a walker (shim/stacks/native_stack.h, python_stack.h): the tables include none. A violation prints FILE:LINE and the rule it breaks; exit 1."""
import pathlib
import re
import sys

TOP = ["cli", "cupti_tracer", "shim", "report", "symbolizer", "base"]
STAGES = ["intercept", "fault", "record", "stacks", "common"]
EXTRA_FORBIDDEN = {"shim/record": {"report"}, "shim/stacks": {"report"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
EXPORT = re.compile(r'\bCDSA_EXPORT\b|visibility\("default"\)')
EXPORTING = {"shim/intercept", "shim"}
WALKERS = {"shim/stacks/native_stack.h", "shim/stacks/python_stack.h"}
WALKER_DRIVER = "shim/record/stack_capture.cc"
SOURCES = (".c", ".cc", ".h", ".def", ".inc")


def layer_of(rel):
    """('shim/record', rank) for a path inside the product, None outside it."""
    parts = rel.split("/")
    if parts[0] not in TOP:
        return None
    if parts[0] == "shim" and len(parts) > 2 and parts[1] in STAGES:
        return "shim/" + parts[1]
    return parts[0]


def rank(layer):
    """Order of a layer: larger is lower. shim's stages sit between shim's top (entry.cc) and report/."""
    top, _, stage = layer.partition("/")
    r = TOP.index(top) * 10
    if top == "shim":
        r += 1 + STAGES.index(stage) if stage else 0
    return r


def violations(root):
    out = []
    for top in TOP:
        for p in sorted((root / top).rglob("*")):
            if p.suffix not in SOURCES or not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            here = layer_of(rel)
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if here.startswith("shim/") and here not in EXPORTING and EXPORT.search(line.split("//")[0]):
                    out.append(f"{rel}:{n}: {here} exports a symbol (only shim/intercept interposes)")
                m = INCLUDE.match(line)
                if not m or "/" not in m.group(1):
                    continue  # a system header, or a generated file found through the include path
                if here == "shim/record" and m.group(1) in WALKERS and rel != WALKER_DRIVER:
                    out.append(f"{rel}:{n}: {here} includes {m.group(1)} (only {WALKER_DRIVER} drives the walkers)")
                there = layer_of(m.group(1))
                if there is None or there == here:
                    continue
                if rank(there) < rank(here):
                    out.append(f"{rel}:{n}: {here} includes {m.group(1)} ({there} is above it)")
                elif there.split("/")[0] in EXTRA_FORBIDDEN.get(here, ()):
                    out.append(f"{rel}:{n}: {here} includes {m.group(1)} (the launch stage stays out of {there})")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2 or not pathlib.Path(sys.argv[1], "shim", "common").is_dir():
        sys.exit("usage: check_layers.py ROOT  (the source tree, holding shim/common)")
    found = violations(pathlib.Path(sys.argv[1]))
    print("\n".join(found) or "every include follows the layer rules")
    sys.exit(1 if found else 0)
