#!/usr/bin/env bash
# Runs N generated programs (tests/oracle/README.md) under libcdsa.so on the simulated driver and prints the
# per-class and per-feature counts: tools/oracle.sh N [extra oracle.py arguments, e.g. --shrink, --runner both].
# Seeds start at ORACLE_START (default 100000, past the CI gate's range); BUILD (default build) is the build tree,
# JOBS (default nproc) the parallel runs, ORACLE_JSON (default BUILD/oracle-last-run.json) where every run's
# classification goes. About 93 ms of CPU a program (2026-12-04, 2-core VM; twice that in the ASan build): 10,000
# programs take about 10 minutes with JOBS=4 on 2 cores (the runs wait on the simulated GPU part of the time, so
# 4 jobs keep 2 cores busy). A long run in pieces, on one commit: each piece with its own ORACLE_START and
# ORACLE_JSON, then `python3 tests/oracle/oracle.py --merge PIECE.json...` prints the table of them all.
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
  --json "${ORACLE_JSON:-$build/oracle-last-run.json}" "$@" || status=$?
echo "tools/oracle.sh: $n programs in $(( $(date +%s) - t0 )) s;" \
  "every run's classification: ${ORACLE_JSON:-$build/oracle-last-run.json}"
exit $status
