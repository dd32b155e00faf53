#!/usr/bin/env bash
# The lent GPU's second run (docs/benchmarks.md, "Graphs per key span"): the setup of
# docs/bench/gpu-host-work-h200, then price_ab.py in two processes (auto-sized trees priced with and
# without the step's first call and bookkeeping, fixed N = 24 and plain decoding, interleaved per prompt).
set -euo pipefail
source docs/bench/gpu-host-work-h200/setup.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for run in p1 p2; do
  rm -rf /tmp/talon-cache/cost-curves
  PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-key-spans/price_ab.py "$OUT/$run.json" "$run" ${PROMPTS:-} 2>&1 \
    | grep -v "Loading\|Converting\|Writing" | tee -a "$OUT/price_summary.txt" || echo "$run failed"
done
