#!/usr/bin/env bash
# Runs N generated programs (tests/oracle/README.md) under libcdsa.so on the simulated driver and prints the
# per-class and per-feature counts: tools/oracle.sh N [extra oracle.py arguments, e.g. --shrink, --runner both].
# Seeds start at ORACLE_START (default 100000, past the CI gate's range); BUILD (default build) is the build tree,
# JOBS (default nproc) the parallel runs. About 0.25 s a program on one core of a 2-core VM (0.5 s in the ASan
# build): 2,000 programs take 4 minutes with 2 jobs; 100,000 about 3.5 hours.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: tools/oracle.sh N [oracle.py options]}
shift
start=${ORACLE_START:-100000}
build=${BUILD:-build}
[ -x "$build/tests/oracle/oracle_runner" ] ||
  cmake --build "$build" --target cdsa cdsa_sim_cuda cdsa_fake_cupti oracle_runner oracle_support
t0=$(date +%s)
status=0
python3 tests/oracle/oracle.py --seeds "$start:$((start + n))" --jobs "${JOBS:-$(nproc)}" --build "$build" \
  --json "$build/oracle-last-run.json" "$@" || status=$?
echo "tools/oracle.sh: $n programs in $(( $(date +%s) - t0 )) s;" \
  "every run's classification: $build/oracle-last-run.json"
exit $status
