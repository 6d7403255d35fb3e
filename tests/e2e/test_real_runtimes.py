"""Real CUDA runtimes as the oracle: the cudart that nvcc links (static and shared) and
the PyPI cudart of PyTorch's wheels run on the simulated driver under cdsa, with every
cuGetProcAddress request logged (CDSA_DEBUG_ENTRY_POINTS). Each request must select the
wrapper of exactly the typedef the headers declare for (name, version, flags) -- computed
from cudaTypedefs.h by entry_point_oracle.py, independently of tools/cuda_api.py -- and each one the driver
answers must come back wrapped. Real cudart stops at cuGetExportTable (the simulated
driver has no private tables), after its requests."""
import glob
import os
import sys

import pytest

from conftest import BUILD, PROGRAMS, SCRIPTS, clean_env

import subprocess

from entry_point_oracle import CUDA, HEADER_VERSION, INCLUDE, expected, in_any_typedef_header


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
        if int(version) > HEADER_VERSION and outcome == "thunk":
            continue  # above the headers' version: the ceiling's thunk (test_request_coverage.py checks why)
        if selected != want:
            wrong.append(f"{name}@{version}/{flags}: {selected}, expected {want}")
        # A name no header has (cudart 13.5 asks for cuSubgridCreate) that the driver does not answer either is
        # not cdsa's to wrap; any other unknown one is a typedef the build missed (the interop headers).
        if selected == "unknown" and name != "(empty)" and (
                in_any_typedef_header(name) or not outcome.startswith("not-found")):
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
