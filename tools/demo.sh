#!/usr/bin/env bash
# Installs what is missing, builds, and shows cdsa's report on the simulated driver:
# a Python program whose loss kernel fails a device-side assert that surfaces two lines later.
#
# It builds only what the demo runs (libcdsa.so, the cdsa CLI with `run` and `report`, the simulated driver) in a
# tree of its own, build-demo/ (CDSA_DEMO=ON: no tests; Release at -O1 without debug info, cheap to compile), and
# shows the compiler's output only when the build fails. The full build and the tests: tools/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
dir=build-demo
mkdir -p "$dir"
echo "== building libcdsa.so, the cdsa CLI and the simulated driver in $dir/" \
     "(Release -O1, no debug info; log: $dir/build.log)"
start=$SECONDS
if ! { cmake -S . -B "$dir" -G Ninja -DCDSA_DEMO=ON -DCMAKE_BUILD_TYPE=Release \
         "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" &&
       cmake --build "$dir" --target cdsa cdsa_cli cdsa_sim_cuda; } >"$dir/build.log" 2>&1; then
  tail -n 40 "$dir/build.log" >&2
  echo "tools/demo.sh: the build failed; the whole log is $dir/build.log" >&2
  exit 1
fi
echo "== built in $((SECONDS - start)) s"
demo=$(mktemp -d)
echo
echo "== python3 tests/e2e/scripts/nll_loss.py 10   (labels [3, 7, 10, 1], 10 classes), under cdsa run =="
set +e
(cd "$demo" && PYTHONPATH="$OLDPWD/tests/e2e/scripts" LD_LIBRARY_PATH="$OLDPWD/$dir/lib/sim" \
   "$OLDPWD/$dir/bin/cdsa" run -- python3 "$OLDPWD/tests/e2e/scripts/nll_loss.py" 10)
status=$?
set -e
trace=$(ls "$demo"/cdsa-*.json)
echo "== exit status $status (the program's own); trace file: $trace =="
echo
echo "== the same report, later, from the file alone: $dir/bin/cdsa report $trace =="
"$dir/bin/cdsa" report "$trace"
echo
echo "== this was $dir/: the demo's own build (only cdsa run and cdsa report in its CLI)."
echo "== the full build (every command, the tests, the benchmarks; RelWithDebInfo) is build/:"
echo "     cmake -S . -B build -G Ninja && cmake --build build && ctest --test-dir build"
echo "== every test (normal build, the wheel, ASan+UBSan, TSan, fuzzing, aarch64 under qemu): tools/test.sh   (TEST_QUICK=1: build/ only)"
