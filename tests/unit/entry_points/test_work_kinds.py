"""Every driver entry point that can put device work on a stream is counted as work that may fault (issue 26 item 3):
the generated table (tools/cuda_api.py's output) against the toolkit's cudaTypedefs.h, read here on its own.

A prototype with a CUstream argument is StreamWork unless shim/intercept/driver_calls.def names its kind; a
synchronous copy, memset or launch (cuMemcpy*, cuMemset*, cuLaunch, cuLaunchGrid: no stream argument) is the NULL
stream's work (DefaultStreamWork, or SyncCopyToHost for the copies into host memory, which complete on return)."""
import os
import re

INC = os.environ["CDSA_ENTRY_POINTS_INC"]
INCLUDE = os.environ["CDSA_CUDA_INCLUDE"]
DEF = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shim", "intercept", "driver_calls.def")

TYPEDEF = re.compile(r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\s*\)\s*\((.*?)\)\s*;",
                     re.S)
ENTRY = re.compile(r"^CDSA_ENTRY\(PFN_\w+, (\w+), \d+, [01], (\w+), \"\w*\"\)$", re.M)


def kinds():
    out = {}
    with open(INC, encoding="utf-8") as f:
        for base, kind in ENTRY.findall(f.read()):
            assert out.setdefault(base, kind) == kind, base  # one kind for every version and variant
    return out


def named_in_def():
    with open(DEF, encoding="utf-8") as f:
        text = re.sub(r"//[^\n]*", "", f.read())
    return dict(re.findall(r"^CDSA_KIND\((\w+),\s*(\w+)", text, re.M))


def prototypes():
    with open(os.path.join(INCLUDE, "cudaTypedefs.h"), encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = {}
    for base, _, _, params in TYPEDEF.findall(text):
        out.setdefault(base, params)
    return out


def takes_stream(params):
    return any(re.fullmatch(r"(const\s+)?CUstream(\s+\w+)?", p.strip()) for p in params.split(","))


def test_every_entry_point_with_a_stream_argument_is_work_unless_the_table_says_otherwise():
    k, hand = kinds(), named_in_def()
    with_stream = [b for b, p in prototypes().items() if b in k and takes_stream(p)]
    assert len(with_stream) > 60, with_stream
    unnamed = [b for b in with_stream if b not in hand]
    assert unnamed, "the rule has nothing to decide"
    wrong = [(b, k[b]) for b in unnamed if k[b] != "StreamWork"]
    assert wrong == []
    # The copies, memsets and memory operations of today's headers are among them, named or not.
    for b in ("cuMemcpyAsync", "cuMemcpy3DAsync", "cuMemsetD2D32Async", "cuStreamWriteValue64", "cuMemPrefetchAsync",
              "cuLaunchGridAsync"):
        assert k.get(b) == "StreamWork", (b, k.get(b))
    # Only the calls the table names as putting nothing that can fault on a stream are not work.
    assert {k[b] for b in with_stream} <= {"StreamWork", "StreamOp", "StreamInfo", "StreamSync", "Launch", "LaunchEx",
                                           "LaunchCoop", "GraphLaunch", "BeginCapture", "BeginRecapture", "EndCapture",
                                           "EndCaptureToCig", "StreamDestroy"}


def test_the_synchronous_copies_memsets_and_launches_are_the_null_streams_work():
    k = kinds()
    sync = [b for b, p in prototypes().items()
            if b in k and not takes_stream(p) and re.match(r"^(cuMemcpy|cuMemset)\w*$|^cuLaunch(Grid)?$", b)]
    assert {"cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemsetD32", "cuMemcpy3D", "cuLaunch", "cuLaunchGrid"} <= set(sync)
    assert {b: k[b] for b in sync if k[b] not in ("DefaultStreamWork", "SyncCopyToHost")} == {}
    assert k["cuMemcpyDtoH"] == k["cuMemcpyAtoH"] == "SyncCopyToHost"
    assert k["cuMemcpyHtoD"] == k["cuMemsetD8"] == "DefaultStreamWork"
