"""Real CUDA runtimes as the oracle: the cudart that nvcc links (static and shared) and
the PyPI cudart of PyTorch's wheels run on the simulated driver under cdsa, with every
cuGetProcAddress request logged (CDSA_DEBUG_ENTRY_POINTS). Each request must select the
wrapper of exactly the typedef the toolkit declares for (name, version, flags) -- computed
here from cudaTypedefs.h, independently of tools/cuda_api.py -- and each one the driver
answers must come back wrapped. Real cudart stops at cuGetExportTable (the simulated
driver has no private tables), after its requests."""
import glob
import os
import re
import sys

import pytest

from conftest import BUILD, PROGRAMS, SCRIPTS, clean_env

import subprocess

CUDA = os.environ.get("TEST_CUDA_ROOT", "/usr/local/cuda")
INCLUDE = os.path.join(CUDA, "include")
EXEMPT = {"cuGetErrorString", "cuGetErrorName", "cuDriverGetVersion", "cuGetExportTable"}
INTEROP = {"GL": "GL/gl.h", "EGL": "EGL/egl.h", "VDPAU": "vdpau/vdpau.h"}


def toolkit_typedefs():
    """{name: [(version, per_thread, typedef)]} from the toolkit headers this build wraps."""
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


def run_logged(argv, tmp_path):
    log = tmp_path / "entry_points.log"
    env = clean_env({"CDSA_DEBUG_ENTRY_POINTS": str(log)})
    env["LD_LIBRARY_PATH"] += f":{CUDA}/lib64"
    proc = subprocess.run([str(a) for a in argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = log.read_text().splitlines() if log.exists() else []
    return proc, [l.split() for l in lines]


def pypi_cudart():
    for entry in sys.path:
        found = glob.glob(os.path.join(entry or ".", "nvidia/cu13/lib/libcudart.so.13"))
        if found:
            return found[0]
    return None


RUNTIMES = [
    pytest.param([PROGRAMS / "cudart_static"], id="nvcc-static-cudart"),
    pytest.param([PROGRAMS / "cudart_shared"], id="nvcc-shared-cudart"),
    pytest.param([sys.executable, SCRIPTS / "pypi_cudart.py"], id="pypi-cudart"),
]


@pytest.mark.parametrize("argv", RUNTIMES)
def test_every_entry_point_a_real_cudart_requests_is_wrapped_with_its_signature(tmp_path, argv):
    if argv[0] != sys.executable and not os.path.exists(argv[0]):
        pytest.skip(f"{argv[0]} was not built (no nvcc)")
    if argv[0] == sys.executable and not pypi_cudart():
        pytest.skip("the PyPI nvidia-cuda-runtime (CUDA 13) is not installed (tools/setup.sh installs it)")
    proc, log = run_logged(argv, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cudaGetDeviceCount" in proc.stdout, proc.stdout
    requests = [l for l in log if l[0] == "cuGetProcAddress"]
    # cudart gets cuGetProcAddress_v2 with dlsym and asks it for everything else.
    assert any(l[0] == "dlsym" and l[1] == "cuGetProcAddress_v2" and l[6] == "wrapped" for l in log), log[:3]
    assert len(requests) > 300, f"cudart made only {len(requests)} requests"
    wrong, unwrapped, unknown = [], [], []
    for how, name, version, flags, _, selected, outcome in requests:
        want = expected(name, int(version), int(flags))
        if selected != want:
            wrong.append(f"{name}@{version}/{flags}: {selected}, expected {want}")
        if selected == "unknown" and name != "(empty)":
            unknown.append(name)
        if outcome == "passed" and selected != "exempt" or outcome == "wrapped" and selected == "exempt":
            unwrapped.append(f"{name}@{version}/{flags}: {selected} {outcome}")
    assert not wrong, "\n".join(wrong)
    assert not unknown, (f"requested names without a wrapped typedef in {INCLUDE}: {sorted(set(unknown))} "
                         "(the GL/EGL/VDPAU ones need libgl-dev libegl-dev libvdpau-dev: tools/setup.sh)")
    assert not unwrapped, "\n".join(unwrapped)
    answered = [r for r in requests if not r[6].startswith("not-found")]
    print(f"{argv[-1].name}: {len(requests)} requests ({len({r[1] for r in requests})} names), "
          f"{sum(r[5].startswith('PFN_') for r in requests)} select a wrapper, "
          f"{sum(r[5] == 'exempt' for r in requests)} exempt, "
          f"{sum(r[5] == 'unknown' for r in requests)} unknown; the driver answered {len(answered)}: "
          f"{sum(r[6] == 'wrapped' for r in answered)} wrapped, {sum(r[6] == 'passed' for r in answered)} exempt")
