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
cmake -S "$root" -B "$build" -G Ninja -DCDSA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target trace_reader_fuzzer >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
echo "tests/fuzz/run.sh: fuzzing the trace reader for ${seconds}s (corpus tests/fuzz/corpus)"
"$build/bin/trace_reader_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -dict="$root/tests/fuzz/trace.dict" -print_final_stats=1 -artifact_prefix="$artifacts/" \
  "$work" "$root/tests/fuzz/corpus"
