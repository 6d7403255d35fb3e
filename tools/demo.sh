#!/usr/bin/env bash
# Installs what is missing, builds, and shows cdsa's report on the simulated driver:
# a Python program whose loss kernel fails a device-side assert that surfaces two lines later.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
demo=$(mktemp -d)
echo
echo "== python3 tests/e2e/scripts/nll_loss.py 10   (labels [3, 7, 10, 1], 10 classes), under cdsa run =="
set +e
(cd "$demo" && PYTHONPATH="$OLDPWD/tests/e2e/scripts" LD_LIBRARY_PATH="$OLDPWD/build/lib/sim" \
   "$OLDPWD/build/bin/cdsa" run -- python3 "$OLDPWD/tests/e2e/scripts/nll_loss.py" 10)
status=$?
set -e
trace=$(ls "$demo"/cdsa-*.json)
echo "== exit status $status (the program's own); trace file: $trace =="
echo
echo "== the same report, later, from the file alone: build/bin/cdsa report $trace =="
build/bin/cdsa report "$trace"
