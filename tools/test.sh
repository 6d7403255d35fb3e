#!/usr/bin/env bash
# Runs every test: the normal build, then a table of the toolkit's 13.0 headers over the 13.5 sim, then the wheel (tests/wheel: built, installed into a fresh venv, run), then
# AddressSanitizer + UndefinedBehaviorSanitizer (all tests),
# then ThreadSanitizer (the recorder's, the simulated driver's and the assert capture's tests: its lock-free slots;
# and the soak e2e tests, with libcdsa.so built with TSan),
# then 60 s of fuzzing the trace reader.
# TEST_QUICK=1 runs the normal build only; FUZZ_SECONDS=N fuzzes N seconds (default 60). (Not CDSA_ names:
# those are the product's own, which cdsa reports as unknown.)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
jobs=$(nproc)
passed=0
set -o pipefail

build_and_test() {  # dir, cmake args..., -- ctest args...   (BUILD_TARGETS limits what is built)
  local dir=$1; shift
  local cmake_args=() ctest_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmake_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  ctest_args=("$@")
  echo "== $dir: configure ${cmake_args[*]}"
  cmake -S . -B "$dir" -G Ninja "${cmake_args[@]}" >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$dir" -j "$jobs" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
  echo "== $dir: ctest ${ctest_args[*]}"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${ctest_args[@]}" | tee "$dir/ctest.log"
  local n
  n=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1/p' "$dir/ctest.log" | tail -1)
  passed=$((passed + ${n:-0}))
}

build_and_test build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCDSA_WERROR=ON --
if [ "${TEST_QUICK:-0}" = 1 ]; then echo "$passed passed, 0 failed"; exit 0; fi

# A table of the toolkit's older headers (CUDA 13.0) over the sim of the pinned 13.5 ones: the driver is newer than
# cdsa's headers, so the 13.1 ABI changes go through the ceiling's thunks (label headers: test_entry_versions.py,
# test_request_coverage.py, test_real_runtimes.py). Skipped where the toolkit's headers are the pinned version.
if [ -f .cuda-headers/13.5/include/cuda.h ] && ! grep -q '^#define CUDA_VERSION 13050' "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h"; then
  BUILD_TARGETS="cdsa cdsa_sim_cuda cdsa_sim_cuda_stub e2e_entry_versions e2e_driver_names" \
    build_and_test build-cuda130 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCDSA_CUDA_HEADERS="${CUDA_HOME:-/usr/local/cuda}/include" \
    -DCDSA_SIM_HEADERS="$PWD/.cuda-headers/13.5/include" -- -L headers
fi

# The wheel as a user installs it (build tree kept in build-wheel/; the simulated driver comes from build/).
echo "== wheel: tools/build_wheel.sh, then tests/wheel in a fresh venv"
mkdir -p build-wheel && rm -rf build-wheel/dist
wheel=$(WHEEL_WERROR=1 tools/build_wheel.sh build-wheel/dist 2>build-wheel/build.log) || { tail -40 build-wheel/build.log; exit 1; }
WHEEL_UNDER_TEST="$wheel" python3 -m pytest -q -p no:cacheprovider tests/wheel | tee build-wheel/pytest.log
n=$(sed -n 's/^\([0-9]*\) passed.*/\1/p' build-wheel/pytest.log | tail -1)
passed=$((passed + ${n:-0}))

# A preloaded ASan-built libcdsa.so needs the ASan runtime first in LD_PRELOAD.
export E2E_PRELOAD_FIRST="$(gcc -print-file-name=libasan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
build_and_test build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCDSA_SANITIZE=address -DCDSA_WERROR=ON --
unset E2E_PRELOAD_FIRST ASAN_OPTIONS

# The soak label: a TSan-built libcdsa.so preloaded after the TSan runtime, over the TSan-built simulated driver
# (the soak's 8 threads x 100k launches with forks and exec'd children, and the long run's 40,000 distinct sites).
export TSAN_OPTIONS="halt_on_error=1"
export E2E_PRELOAD_FIRST="$(gcc -print-file-name=libtsan.so)"
BUILD_TARGETS="recorder_test reclaim_test sim_test sim_graphs_test sim_pdl_test assert_capture_test busy_slots_test
  breadcrumb_marks_test breadcrumb_deferral_test breadcrumb_states_test
  cdsa cdsa_sim_cuda e2e_report_first e2e_long_run" \
  build_and_test build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCDSA_SANITIZE=thread -DCDSA_WERROR=ON -- \
  -L "recorder|sim|assert_capture|breadcrumbs|soak"
unset E2E_PRELOAD_FIRST

tests/fuzz/run.sh "${FUZZ_SECONDS:-60}"
echo "== all test runs passed (normal, ASan+UBSan, TSan, fuzzing)"
echo "$passed passed, 0 failed"
