"""What the driver hands out for a cuGetProcAddress request, read from the headers the build wraps
(TEST_CUDA_HEADERS, CMake's CDSA_CUDA_HEADERS) independently of tools/cuda_api.py, and the exported symbol of each
typedef as the build's generated table says it. Shared by test_real_runtimes.py and test_request_coverage.py."""
import os
import re

from conftest import BUILD

CUDA = os.environ.get("TEST_CUDA_ROOT", "/usr/local/cuda")
INCLUDE = os.environ.get("TEST_CUDA_HEADERS", os.path.join(CUDA, "include"))
EXEMPT = {"cuGetErrorString", "cuGetErrorName", "cuDriverGetVersion", "cuGetExportTable"}
INTEROP = {"GL": "GL/gl.h", "EGL": "EGL/egl.h", "VDPAU": "vdpau/vdpau.h"}
HEADER_VERSION = int(re.search(r"#define CUDA_VERSION (\d+)", open(os.path.join(INCLUDE, "cuda.h")).read()).group(1))


def toolkit_typedefs():
    """{name: [(version, per_thread, typedef)]} from the headers this build wraps."""
    headers = ["cudaTypedefs.h", "cudaProfilerTypedefs.h"]
    headers += [f"cuda{api}Typedefs.h" for api, h in INTEROP.items() if os.path.exists(f"/usr/include/{h}")]
    out = {}
    for h in headers:
        text = open(os.path.join(INCLUDE, h), encoding="utf-8", errors="replace").read()
        text = re.sub(r"#ifdef _WIN32.*?#endif", "", text, flags=re.S)
        for name, ver, suffix in re.findall(r"PFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\s*\)", text):
            out.setdefault(name, []).append((int(ver), bool(suffix), f"PFN_{name}_v{ver}{suffix}"))
    return out


TYPEDEFS = toolkit_typedefs()


def in_any_typedef_header(name):
    """Whether any *Typedefs.h of the headers (the interop ones too, wrapped or not) has a PFN_ of `name`: a runtime
    may ask for a name none has (cudart 13.5's cuSubgridCreate), which the driver may not have either."""
    import glob
    pattern = re.compile(r"PFN_" + re.escape(name) + r"_v\d+")
    return any(pattern.search(open(h, encoding="utf-8", errors="replace").read())
               for h in glob.glob(os.path.join(INCLUDE, "*Typedefs.h")))


def expected(name, version, flags):
    """What the driver hands out for cuGetProcAddress(name, version, flags): the newest signature not newer
    than `version`, its per-thread variant when asked for (flag 2) and there is one."""
    if name in EXEMPT:
        return "exempt"
    if name not in TYPEDEFS:
        return "unknown"
    fits = [t for t in TYPEDEFS[name] if t[0] <= version]
    plain = max((t for t in fits if not t[1]), default=None)
    per_thread = max((t for t in fits if t[1]), default=None)
    pick = per_thread if flags & 2 and per_thread else plain
    return pick[2] if pick else "unknown"


def table_symbols():
    """{typedef: exported symbol} of the build's generated table (shim/intercept/generated/cuda_entry_points.inc)."""
    inc = BUILD / "shim" / "intercept" / "generated" / "cuda_entry_points.inc"
    return dict(re.findall(r'^CDSA_ENTRY\((PFN_\w+), \w+, \d+, \d, \w+, "(\w*)"\)', inc.read_text(), re.M))
