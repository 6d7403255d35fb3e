#!/usr/bin/env bash
# cdsa on a real GPU, one command: builds libcdsa.so from this checkout (or uses the carried one), compiles the
# native cases with nvcc, runs the cases and prints a table last. Full logs go to LOGDIR.
#   integration/gpu/run.sh LOGDIR [--budget S] [--mirror DIR] [--jobs N] [--only 1,11,14] [--skip-cost]
#   integration/gpu/run.sh --list | --dry-run      (no GPU needed)
# The whole run (build included) is held to --budget seconds (default 480): run.sh runs itself under
# `timeout -k 10 BUDGET+10`, the suite gives no run a deadline past start+budget-15 s, and LOGDIR/results.json and
# LOGDIR/table.md (and DIR/, with --mirror DIR) are rewritten after every case, so a run stopped at any point
# leaves every finished verdict.
# Exit status: 0 every case passed, 1 a case failed or timed out, 2 the suite could not run (no libcdsa.so, no
# GPU: then every case is SKIP), 124 stopped at the budget.
# Environment: PYTHON (default python3: the one with torch), CUDA_HOME (default: the toolkit of the nvcc on PATH,
# else /usr/local/cuda), NVCC_ARCH (default sm_90), CDSA_LIB (use this libcdsa.so, skip the build), CDSA_CARRY
# (the carried folder, default .carry at the repository root).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${PYTHON:-python3}
case "${1:-}" in
  --list|--dry-run|-h|--help) exec "$py" "$here/suite.py" "$@" ;;
  ""|-*) echo "usage: $0 LOGDIR [suite options] | --list | --dry-run" >&2; exit 2 ;;
esac

budget=480
prev=""
for a in "$@"; do
  [ "$prev" = "--budget" ] && budget=$a
  case "$a" in --budget=*) budget=${a#--budget=} ;; esac
  prev=$a
done
case "$budget" in ''|*[!0-9]*) echo "run.sh: --budget takes whole seconds, not '$budget'" >&2; exit 2 ;; esac

# 0. The budget: everything below runs under timeout, which sends SIGTERM to this process group at budget+10 s
#    (the suite then kills its runs' process trees and writes its results) and SIGKILL 10 s later.
if [ -z "${CDSA_GPU_SUITE_START:-}" ]; then
  export CDSA_GPU_SUITE_START=$(date +%s)
  if command -v timeout >/dev/null; then
    timeout -k 10 $((budget + 10)) bash "$0" "$@"
    rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then
      echo "run.sh: stopped after the budget of $budget s (+10 s); finished verdicts are in $1/results.json and $1/table.md"
      [ -f "$1/table.md" ] && cat "$1/table.md"
    fi
    exit $rc
  fi
  echo "run.sh: no timeout(1) here: the suite's own deadline is the only limit" >&2
fi
start=$CDSA_GPU_SUITE_START
unset CDSA_GPU_SUITE_START  # the suite strips CDSA_* from the cases' environment; keep ours out of it anyway

logdir=$1; shift
mkdir -p "$logdir" && logdir=$(cd "$logdir" && pwd) || { echo "run.sh: cannot create $logdir" >&2; exit 2; }
carry=${CDSA_CARRY:-$root/.carry}
note() { echo "[$(( $(date +%s) - start ))s] $*"; }

# The toolkit: CUDA_HOME, else the one whose nvcc is on PATH, else /usr/local/cuda.
if [ -z "${CUDA_HOME:-}" ]; then
  if nvcc=$(command -v nvcc); then CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$nvcc")")"); else CUDA_HOME=/usr/local/cuda; fi
fi
export CUDA_HOME
export PATH=$PATH:$CUDA_HOME/bin

# 1. libcdsa.so: built here from the checkout when cmake, ninja and the build dependencies are present (the
#    system's, or $carry/prefix from prepare_carry.sh); else the carried build. The build gets at most a third of
#    the budget.
lib=${CDSA_LIB:-}
if [ -z "$lib" ]; then
  args=("-DCDSA_CUDA_ROOT=$CUDA_HOME")
  if [ -d "$carry/prefix" ]; then
    p=$carry/prefix
    args+=("-DCMAKE_PREFIX_PATH=$p" "-Dfmt_DIR=$p/lib/x86_64-linux-gnu/cmake/fmt"
           "-DGTest_DIR=$p/lib/x86_64-linux-gnu/cmake/GTest" "-Dnlohmann_json_DIR=$p/share/cmake/nlohmann_json")
  fi
  limit=$((budget / 3))
  if command -v cmake >/dev/null && command -v ninja >/dev/null; then
    note "building libcdsa.so from $root (log: $logdir/build.log; limit $limit s)"
    t_build=$(date +%s)
    if timeout -k 5 $limit cmake -S "$root" -B "$logdir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${args[@]}" >"$logdir/build.log" 2>&1 &&
       timeout -k 5 $(( limit - ($(date +%s) - t_build) > 5 ? limit - ($(date +%s) - t_build) : 5 )) \
         ninja -C "$logdir/build" cdsa >>"$logdir/build.log" 2>&1; then
      lib=$logdir/build/lib/libcdsa.so
      # The CPython walker's probe (case 28): its own target, so a failure here costs only that case.
      timeout -k 5 120 ninja -C "$logdir/build" pystack_probe >>"$logdir/build.log" 2>&1 ||
        note "the Python walker's probe did not build (case 28 will say so)"
    else
      rc=$?
      [ $rc = 124 ] || [ $rc = 137 ] && echo "[run.sh: the build ran past its limit of $limit s]" >>"$logdir/build.log"
      note "build failed (tail of $logdir/build.log below); trying the carried libcdsa.so"
      tail -n 15 "$logdir/build.log"
    fi
  else
    note "cmake or ninja missing: trying the carried libcdsa.so"
  fi
  if [ -z "$lib" ] && [ -f "$carry/build/lib/libcdsa.so" ]; then
    lib=$carry/build/lib/libcdsa.so
    head=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
    note "using the carried libcdsa.so built at $(tr '\n' ' ' <"$carry/COMMIT" 2>/dev/null) (checkout: $head)"
  fi
fi
[ -n "$lib" ] && [ -f "$lib" ] || { echo "run.sh: no libcdsa.so (build failed and no $carry/build: see README.md)" >&2; exit 2; }

# 2. Run-time libraries libcdsa.so dlopens (libunwind.so.8, libdw.so.1 and their dependencies): only the ones this
#    machine lacks are taken from $carry/rtlib, through LD_LIBRARY_PATH in the cases' environment.
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
note "libcdsa.so: $lib; CUDA_HOME $CUDA_HOME; carried run-time libraries used: $(ls "$rtlib" | tr '\n' ' ')"
for n in libunwind.so.8 libdw.so.1; do
  if ! have_lib "$n" && [ ! -e "$rtlib/$n" ]; then
    note "warning: $n is neither installed nor carried: reports will lack $( [ $n = libdw.so.1 ] && echo 'file:line of native frames' || echo 'native frames')"
  fi
done

# 3. The cases (exec: the suite receives timeout's SIGTERM itself).
exec "$py" "$here/suite.py" --logdir "$logdir" --libcdsa "$lib" --rtlib "$rtlib" --start "$start" --budget "$budget" "$@"
