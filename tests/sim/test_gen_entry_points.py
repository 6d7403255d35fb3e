"""Unit test of gen_entry_points.py: the table it derives from the headers the build wraps and the toolkit's stub,
and one clear message per bad input. Run by ctest (label sim) as: python3 -m pytest tests/sim/test_gen_entry_points.py
(TEST_CUDA_HEADERS names the headers, default TEST_CUDA_ROOT/include; TEST_CUDA_ROOT the toolkit, default
/usr/local/cuda)."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
GEN = HERE / "gen_entry_points.py"
CUDA = pathlib.Path(os.environ.get("TEST_CUDA_ROOT", "/usr/local/cuda"))
HEADERS = pathlib.Path(os.environ.get("TEST_CUDA_HEADERS", CUDA / "include"))
TYPEDEFS = HEADERS / "cudaTypedefs.h"
CUDA_H = HEADERS / "cuda.h"
HEADER_VERSION = int(re.search(r"#define CUDA_VERSION (\d+)", CUDA_H.read_text()).group(1))
STUB = pathlib.Path(os.environ.get("TEST_SIM_STUB", CUDA / "lib64" / "stubs" / "libcuda.so"))


def gen(tmp_path, typedefs=TYPEDEFS, cuda_h=CUDA_H, stub=STUB, extra=()):
    out = tmp_path / "gen.cc"
    p = subprocess.run([sys.executable, str(GEN), "--typedefs", str(typedefs), "--cuda-h", str(cuda_h),
                        "--stub", str(stub), "--out", str(out), *extra], capture_output=True, text=True)
    return p, (out.read_text() if out.exists() else "")


def rows(text):
    return {(n, int(v), k): s for n, v, k, s in
            re.findall(r'\{"(\w+)", (\d+), ProcVariant::(\w+), "(\w+)", reinterpret_cast', text)}


def test_the_toolkit_table(tmp_path):
    p, text = gen(tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    r = rows(text)
    assert len(r) == len(set(re.findall(r"\(CUDAAPI \*PFN_(cu\w+?_v\d+(?:_ptsz|_ptds)?)\)", TYPEDEFS.read_text()))) + 1
    assert r[("cuCtxSynchronize", 2000, "Plain")] == "cuCtxSynchronize"
    assert r[("cuCtxSynchronize", 13000, "Plain")] == "cuCtxSynchronize_v2"
    assert r[("cuMemAlloc", 3020, "Plain")] == "cuMemAlloc_v2"
    assert r[("cuMemcpyHtoD", 7000, "Ptds")] == "cuMemcpyHtoD_v2_ptds"
    assert r[("cuLaunchKernel", 7000, "Ptsz")] == "cuLaunchKernel_ptsz"
    assert r[("cuGraphInstantiate", 11000, "Plain")] == "cuGraphInstantiate_v2"
    assert r[("cuGraphInstantiate", 12000, "Plain")] == "cuGraphInstantiateWithFlags"
    assert r[("cuStreamBeginCaptureToGraph", 12030, "Ptsz")] == "cuStreamBeginCaptureToGraph_ptsz"
    # Every symbol gets a weak definition; every stub name is listed.
    weak = set(re.findall(r"^SIM_WEAK\((\w+)\)$", text, re.M))
    assert set(r.values()) <= weak
    assert "cuGetExportTable" in weak and "cuCtxSynchronize_v2" in weak
    # Each row is its own function: no two (name, version, variant) rows share a symbol.
    assert len(set(r.values())) == len(r) - 1  # but cuGraphInstantiate's 12000 row: cuGraphInstantiateWithFlags'


@pytest.mark.skipif(HEADER_VERSION < 13050, reason="headers older than CUDA 13.5")
def test_the_13_5_shapes(tmp_path):
    """Entry points newer than the stub: their exports come from cuda.h's declarations (and __CUDA_API_PTSZ)."""
    stub_map = tmp_path / "stub.map"
    p, text = gen(tmp_path, extra=("--stub-map", str(stub_map)))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    r = rows(text)
    assert r[("cuLaunchHostFunc", 10000, "Plain")] == "cuLaunchHostFunc"
    assert r[("cuLaunchHostFunc", 13010, "Plain")] == "cuLaunchHostFunc_v2"
    assert r[("cuLaunchHostFunc", 13010, "Ptsz")] == "cuLaunchHostFunc_v2_ptsz"
    assert r[("cuMulticastBindMem", 13010, "Plain")] == "cuMulticastBindMem_v2"
    assert r[("cuMulticastBindAddr", 13010, "Plain")] == "cuMulticastBindAddr_v2"
    # 13.4's cuGraphAddNode_v3 (cuda.h still says `#define cuGraphAddNode cuGraphAddNode_v2`).
    assert r[("cuGraphAddNode", 12030, "Plain")] == "cuGraphAddNode_v2"
    assert r[("cuGraphAddNode", 13040, "Plain")] == "cuGraphAddNode_v3"
    assert r[("cuStreamBeginRecaptureToGraph", 13030, "Ptsz")] == "cuStreamBeginRecaptureToGraph_ptsz"
    weak = set(re.findall(r"^SIM_WEAK\((\w+)\)$", text, re.M))
    assert {"cuLaunchHostFunc_v2", "cuLaunchHostFunc_v2_ptsz", "cuGraphAddNode_v3"} <= weak
    # The stub's driver: its names only.
    exported = set(re.findall(r"^    (cu\w+);$", stub_map.read_text(), re.M))
    assert "cuLaunchHostFunc" in exported and "cuLaunchHostFunc_v2" not in exported


@pytest.mark.parametrize("typedefs,message", [
    ("typedef CUresult (CUDAAPI *PFN_cuNoSuchCall_v13000)(void);\n",
     "PFN_cuNoSuchCall_v13000 maps to cuNoSuchCall, which {stub} does not export and {cuda_h} does not declare"),
    ("typedef CUresult (CUDAAPI *PFN_cuLaunchKernel_v7000_ptsz)(void);\n",
     "PFN_cuLaunchKernel_v7000_ptsz has no plain version at or before 7000"),
    ("/* nothing */\n", "no PFN_cu*_v<version> typedefs in {typedefs}"),
], ids=["a_row_the_stub_does_not_export", "a_per_thread_row_without_a_plain_one", "no_typedefs"])
def test_bad_typedefs(tmp_path, typedefs, message):
    td = tmp_path / "typedefs.h"
    td.write_text(typedefs)
    p, _ = gen(tmp_path, typedefs=td)
    assert p.returncode != 0
    assert p.stderr.strip() == "gen_entry_points.py: " + message.format(stub=STUB, typedefs=td, cuda_h=CUDA_H)


@pytest.mark.parametrize("content,message", [(None, "cannot read {}: No such file or directory"),
                                             (b"not an ELF file", "{} is not a 64-bit little-endian ELF file")])
def test_bad_stub(tmp_path, content, message):
    stub = tmp_path / "libcuda.so"
    if content is not None:
        stub.write_bytes(content)
    p, _ = gen(tmp_path, stub=stub)
    assert p.returncode != 0
    assert p.stderr.strip() == "gen_entry_points.py: " + message.format(stub)


def test_missing_header(tmp_path):
    p, _ = gen(tmp_path, cuda_h=tmp_path / "cuda.h")
    assert p.returncode != 0
    assert p.stderr.strip() == f"gen_entry_points.py: cannot read {tmp_path / 'cuda.h'}: No such file or directory"
