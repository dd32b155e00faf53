#!/usr/bin/env bash
# The lent GPU's run, from the repository root there (docs/benchmarks.md, "cuBLASLt for a tree's few
# rows"): setup (the embedded GGUF from three xz parts copied to /tmp by three earlier calls; transformers
# and gguf from wheels in .whl); cuBLAS against cuBLASLt per layer shape and row count; the replay time
# of every (bucket, span) with each; then the head suite's 30 prompts (ar, TALON N=16/24/32, auto) with
# TALON_GPU_LINEAR=cublas and auto, alternating ABBA, each process measuring its own cost curve
# (docs/bench/gpu-host-work-h200/ab.py).
set -euo pipefail
source docs/bench/gpu-grouped-attention/setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv || true
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PYTHONPATH=. python3 docs/bench/gpu-skinny-linear/lt_probe.py 2>&1 | tee "$OUT/lt_probe.txt" || echo "lt probe failed"
for mode in auto cublas; do
  TALON_GPU_LINEAR=$mode PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-key-spans/span_probe.py 2>&1 \
    | grep -v "^Loading" | tee "$OUT/span_probe_$mode.txt" || echo "span probe $mode failed"
done
for run in cublas1 auto1 auto2 cublas2; do
  rm -rf /tmp/talon-cache/cost-curves
  TALON_GPU_LINEAR=${run%?} PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-host-work-h200/ab.py "$OUT/$run.json" "$run" \
    ${PROMPTS:-} 2>&1 | grep -v "^Loading" | tee -a "$OUT/summary.txt" || echo "$run failed"
done
