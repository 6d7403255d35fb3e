#!/usr/bin/env bash
# Fuzzes the trace reader for SECONDS (default 60): builds the libFuzzer target with clang if needed,
# starts from the checked-in corpus (tests/fuzz/corpus, left unchanged: new inputs go to a temporary
# directory), and fails on any crash, leak, sanitizer report or hang (a reproducer is kept in
# $CDSA_FUZZ_ARTIFACTS, default build-fuzz/artifacts).
#   tests/fuzz/run.sh 60
set -euo pipefail
seconds=${1:-60}
case "$seconds" in ''|*[!0-9]*) echo "usage: tests/fuzz/run.sh SECONDS" >&2; exit 2;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${CDSA_FUZZ_BUILD:-$root/build-fuzz}
artifacts=${CDSA_FUZZ_ARTIFACTS:-$build/artifacts}
cc=$(command -v clang-14 || command -v clang) || { echo "tests/fuzz/run.sh: needs clang (apt: clang)" >&2; exit 2; }
cxx=$(command -v clang++-14 || command -v clang++) || { echo "tests/fuzz/run.sh: needs clang++ (apt: clang)" >&2; exit 2; }
# A tree configured with another compiler (an older gcc-built one) is reconfigured from scratch.
grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$cxx" "$build/CMakeCache.txt" 2>/dev/null || rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
cmake -S "$root" -B "$build" -G Ninja -DCDSA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" --target trace_reader_fuzzer >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts" "$work/new"
# The dictionary: tests/fuzz/trace.dict, plus every key of the format (report/trace_fields.def, the table the
# reader walks), as a JSON string.
dict=$work/trace.dict
cp "$root/tests/fuzz/trace.dict" "$dict"
grep -oE '^TRACE_(FIELD|NESTED|NULLABLE|CONST)\( *[a-z_0-9]+' "$root/report/trace_fields.def" | sed -E 's/.*\( *//' |
  sort -u | sed 's/^\(.*\)$/"\\"\1\\""/' >>"$dict"
echo "tests/fuzz/run.sh: fuzzing the trace reader for ${seconds}s (corpus tests/fuzz/corpus)"
"$build/bin/trace_reader_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -dict="$dict" -print_final_stats=1 -artifact_prefix="$artifacts/" \
  "$work/new" "$root/tests/fuzz/corpus"
