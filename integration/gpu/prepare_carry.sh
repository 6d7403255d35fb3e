#!/usr/bin/env bash
# Prepares .carry/ (git-ignored) on a Debian 12 build machine, for integration/gpu/run.sh on a GPU machine that
# has no package manager and no network. See README.md. Usage: integration/gpu/prepare_carry.sh
#   .carry/prefix/   build dependencies as Debian ships them (paths relative to /usr): fmt, nlohmann-json, GoogleTest,
#                    elfutils headers. run.sh passes their CMake config folders to cmake, so cdsa builds from the
#                    checkout there.
#   .carry/rtlib/    run-time libraries that libcdsa.so dlopens: libunwind.so.8 and libdw.so.1 with their
#                    dependencies (liblzma, libelf, libz, libbz2, libzstd...). run.sh puts only those the GPU machine
#                    lacks on LD_LIBRARY_PATH.
#   .carry/build/    libcdsa.so and the cdsa CLI built here (used when the build there fails), and COMMIT.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
carry=$root/.carry
rm -rf "$carry/prefix" "$carry/rtlib" "$carry/build" "$carry/COMMIT"
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

# 3. libcdsa.so and the CLI, built from this checkout.
cmake -S "$root" -B "$root/build-carry" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$root/build-carry" cdsa cdsa_cli >/dev/null
cp "$root/build-carry/lib/libcdsa.so" "$carry/build/lib/"
cp "$root/build-carry/bin/cdsa" "$carry/build/bin/"
{ git -C "$root" rev-parse HEAD; git -C "$root" diff --quiet HEAD || echo "dirty"; } >"$carry/COMMIT"

echo "prepare_carry: $(du -sh "$carry" | cut -f1) in $carry (prefix $(du -sh "$carry/prefix" | cut -f1), rtlib: $(ls "$carry/rtlib" | tr '\n' ' '))"
