#!/usr/bin/env bash
# cdsa on a real GPU, one command: builds libcdsa.so from this checkout (or uses the carried one), compiles the
# native cases with nvcc, runs the 21 cases of issue 3 and prints a table last. Full logs go to LOGDIR.
#   integration/gpu/run.sh LOGDIR [--jobs N] [--only 1,11,14] [--skip-cost]
#   integration/gpu/run.sh --list | --dry-run      (no GPU needed)
# Exit status: 0 when every case passed, 1 when any failed, 2 when the suite could not run at all.
# Environment: PYTHON (default python3: the one with torch), CUDA_HOME (default /usr/local/cuda), NVCC_ARCH
# (default sm_90), CDSA_LIB (use this libcdsa.so, skip the build).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${PYTHON:-python3}
case "${1:-}" in
  --list|--dry-run|-h|--help) exec "$py" "$here/suite.py" "$@" ;;
  ""|-*) echo "usage: $0 LOGDIR [suite options] | --list | --dry-run" >&2; exit 2 ;;
esac
logdir=$1; shift
mkdir -p "$logdir" && logdir=$(cd "$logdir" && pwd) || { echo "run.sh: cannot create $logdir" >&2; exit 2; }
carry=$root/.carry
start=$(date +%s)
note() { echo "[$(( $(date +%s) - start ))s] $*"; }

# 1. libcdsa.so: built here from the checkout when cmake, ninja and the build dependencies are present (the
#    system's, or .carry/prefix from prepare_carry.sh); else the carried build.
lib=${CDSA_LIB:-}
if [ -z "$lib" ]; then
  args=()
  if [ -d "$carry/prefix" ]; then
    p=$carry/prefix
    args+=("-DCMAKE_PREFIX_PATH=$p" "-Dfmt_DIR=$p/lib/x86_64-linux-gnu/cmake/fmt"
           "-DGTest_DIR=$p/lib/x86_64-linux-gnu/cmake/GTest" "-Dnlohmann_json_DIR=$p/share/cmake/nlohmann_json")
  fi
  [ -n "${CUDA_HOME:-}" ] && args+=("-DCDSA_CUDA_ROOT=$CUDA_HOME")
  if command -v cmake >/dev/null && command -v ninja >/dev/null; then
    note "building libcdsa.so from $root (log: $logdir/build.log)"
    if cmake -S "$root" -B "$logdir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${args[@]}" >"$logdir/build.log" 2>&1 &&
       ninja -C "$logdir/build" cdsa >>"$logdir/build.log" 2>&1; then
      lib=$logdir/build/lib/libcdsa.so
    else
      note "build failed (tail of $logdir/build.log below); trying the carried libcdsa.so"
      tail -n 15 "$logdir/build.log"
    fi
  else
    note "cmake or ninja missing: trying the carried libcdsa.so"
  fi
  if [ -z "$lib" ] && [ -f "$carry/build/lib/libcdsa.so" ]; then
    lib=$carry/build/lib/libcdsa.so
    head=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
    note "using the carried libcdsa.so built at $(tr '\n' ' ' <"$carry/COMMIT") (checkout: $head)"
  fi
fi
[ -n "$lib" ] && [ -f "$lib" ] || { echo "run.sh: no libcdsa.so (build failed and no .carry/build: see README.md)" >&2; exit 2; }

# 2. Run-time libraries libcdsa.so dlopens (libunwind.so.8, libdw.so.1 and their dependencies): only the ones this
#    machine lacks are taken from .carry/rtlib, through LD_LIBRARY_PATH in the cases' environment.
have_lib() {  # is this soname installed here? (ldconfig's cache, else the usual folders)
  ldconfig -p 2>/dev/null | awk '{print $1}' | grep -qx "$1" ||
    ls /lib/x86_64-linux-gnu/"$1" /usr/lib/x86_64-linux-gnu/"$1" /lib64/"$1" /usr/lib64/"$1" >/dev/null 2>&1
}
rtlib=$logdir/rtlib
rm -rf "$rtlib" && mkdir -p "$rtlib"
if [ -d "$carry/rtlib" ]; then
  for f in "$carry/rtlib"/*; do
    n=$(basename "$f")
    have_lib "$n" || ln -s "$f" "$rtlib/$n"
  done
fi
note "libcdsa.so: $lib; carried run-time libraries used: $(ls "$rtlib" | tr '\n' ' ')"
for n in libunwind.so.8 libdw.so.1; do
  if ! have_lib "$n" && [ ! -e "$rtlib/$n" ]; then
    note "warning: $n is neither installed nor carried: reports will lack $( [ $n = libdw.so.1 ] && echo 'file:line of native frames' || echo 'native frames')"
  fi
done

# 3. The cases.
exec "$py" "$here/suite.py" --logdir "$logdir" --libcdsa "$lib" --rtlib "$rtlib" --start "$start" "$@"
