#!/usr/bin/env bash
# The lent GPU's run (docs/benchmarks.md, "The builder's work in the price"): the setup of
# docs/bench/gpu-grouped-attention (three earlier calls copy the GGUF's parts to /tmp), then price_ab.py
# in two processes (auto-sized trees priced with and without the builder's own work per call, fixed
# N = 24 and plain decoding, interleaved per prompt), each measuring its own cost curve.
set -euo pipefail
source docs/bench/gpu-grouped-attention/setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv || true
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for run in b1 b2; do
  rm -rf /tmp/talon-cache/cost-curves
  PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-builder-price/price_ab.py "$OUT/$run.json" "$run" ${PROMPTS:-} 2>&1 \
    | grep -v "Loading\|Converting\|Writing" | tee -a "$OUT/summary.txt" || echo "$run failed"
done
