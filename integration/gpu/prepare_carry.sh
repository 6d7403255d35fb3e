#!/usr/bin/env bash
# Prepares .carry/ (git-ignored) on a Debian 12 build machine, for integration/gpu/run.sh on a GPU machine that
# has no package manager and no network. See README.md. Run it right before the device call (so .carry/build is
# this checkout's libcdsa.so), then name .carry in the call's carry list.
# Usage: integration/gpu/prepare_carry.sh [--no-build]      (CDSA_CARRY=DIR: fill DIR instead of .carry)
#   .carry/prefix/   build dependencies as Debian ships them (paths relative to /usr): fmt, nlohmann-json, GoogleTest,
#                    elfutils headers. run.sh passes their CMake config folders to cmake, so cdsa builds from the
#                    checkout there.
#   .carry/rtlib/    run-time libraries that libcdsa.so dlopens: libunwind.so.8 and libdw.so.1 with their
#                    dependencies (liblzma, libelf, libz, libbz2, libzstd...). run.sh puts only those the GPU machine
#                    lacks on LD_LIBRARY_PATH.
#   .carry/cuda-headers/  cuda.h and the typedef headers of the pinned CUDA 13.5 set (tools/cuda_headers.sh):
#                    case 29a walks that table's entries on the real driver.
#   .carry/build/    libcdsa.so and the cdsa CLI built here (used when the build there fails), and COMMIT;
#                    --no-build leaves it out (prefix and rtlib only).
# Last it checks that cdsa configures with the carried prefix alone (every system search path switched off).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
carry=${CDSA_CARRY:-$root/.carry}
build=1
[ "${1:-}" = "--no-build" ] && build=0
rm -rf "$carry/prefix" "$carry/rtlib" "$carry/build" "$carry/COMMIT" "$carry/cuda-headers"
mkdir -p "$carry/prefix" "$carry/rtlib" "$carry/build/lib" "$carry/build/bin"

# 1. Build dependencies, copied file by file from the Debian packages (symlinks kept).
for pkg in libfmt-dev libfmt9 nlohmann-json3-dev libgtest-dev libdw-dev libelf-dev; do
  if ! dpkg -L "$pkg" >/dev/null 2>&1; then echo "prepare_carry: package $pkg is not installed here" >&2; exit 1; fi
  dpkg -L "$pkg" | while read -r f; do
    case "$f" in /usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*) continue ;; esac
    case "$pkg:$f" in libdw-dev:*.a|libelf-dev:*.a) continue ;; esac
    if [ -f "$f" ] || [ -L "$f" ]; then (cd /usr && cp -a --parents "${f#/usr/}" "$carry/prefix/"); fi
  done
done

# 2. Run-time libraries (real files under their sonames), without libc and the loader.
libs=$(for l in libunwind.so.8 libdw.so.1; do
  p=$(ldconfig -p | awk -v n="$l" '$1 == n && /x86-64/ {print $NF; exit}')
  [ -n "$p" ] || { echo "prepare_carry: $l not found (apt-get install libunwind8 libdw1)" >&2; exit 1; }
  echo "$p"; ldd "$p" | awk '/=>/ {print $3}'
done | sort -u)
for p in $libs; do
  case "$(basename "$p")" in libc.so.*|ld-linux*|libm.so.*|libpthread.so.*|libdl.so.*) continue ;; esac
  cp -L "$p" "$carry/rtlib/$(basename "$p")"
done

# 3. A configure that sees only the carried prefix (no system search path, no package registry), as on a GPU
#    machine without these packages.
check=$(mktemp -d)
p=$carry/prefix
if ! cmake -S "$root" -B "$check" -G Ninja -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF \
     -DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=OFF -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
     -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -DPython3_EXECUTABLE="$(command -v python3)" \
     -DCMAKE_MAKE_PROGRAM="$(command -v ninja)" -DCMAKE_C_COMPILER="$(command -v "${CC:-cc}")" \
     -DCMAKE_CXX_COMPILER="$(command -v "${CXX:-c++}")" \
     -DCMAKE_PREFIX_PATH="$p" -Dfmt_DIR="$p/lib/x86_64-linux-gnu/cmake/fmt" \
     -DGTest_DIR="$p/lib/x86_64-linux-gnu/cmake/GTest" -Dnlohmann_json_DIR="$p/share/cmake/nlohmann_json" \
     >"$check/configure.log" 2>&1; then
  echo "prepare_carry: cdsa does not configure with the carried prefix alone:" >&2
  tail -n 20 "$check/configure.log" >&2
  exit 1
fi
grep -q "^CDSA_LIBDWFL_INCLUDE_DIR:PATH=$p/include" "$check/CMakeCache.txt" ||
  { echo "prepare_carry: elfutils/libdwfl.h not found in the carried prefix" >&2; exit 1; }
rm -rf "$check"
echo "prepare_carry: cdsa configures with the carried prefix alone"

# 3b. The pinned headers' table (case 29a), a few hundred KB.
"$root/tools/cuda_headers.sh"
mkdir -p "$carry/cuda-headers"
cp "$root/.cuda-headers/13.5/include/"{cuda.h,cudaTypedefs.h,cudaProfilerTypedefs.h} "$carry/cuda-headers/"

# 4. libcdsa.so and the CLI, built from this checkout.
if [ $build = 1 ]; then
  cmake -S "$root" -B "$root/build-carry" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C "$root/build-carry" cdsa cdsa_cli >/dev/null
  cp "$root/build-carry/lib/libcdsa.so" "$carry/build/lib/"
  cp "$root/build-carry/bin/cdsa" "$carry/build/bin/"
  { git -C "$root" rev-parse HEAD; git -C "$root" diff --quiet HEAD || echo "dirty"; } >"$carry/COMMIT"
fi

echo "prepare_carry: $(du -sh "$carry" | cut -f1) in $carry$( [ $build = 1 ] || echo ' (no build)') (prefix $(du -sh "$carry/prefix" | cut -f1), rtlib: $(ls "$carry/rtlib" | tr '\n' ' '))"
