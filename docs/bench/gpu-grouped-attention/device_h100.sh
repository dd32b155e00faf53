#!/usr/bin/env bash
# The H100 check (docs/benchmarks.md, "Grouped attention on the GPU"): setup.sh as for the H200 run, the
# span probe with the grouped attention, then the head suite's 30 prompts with each attention, one
# process each (grouped, then sdpa), each measuring its own cost curve.
set -euo pipefail
source docs/bench/gpu-grouped-attention/setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv || true
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-key-spans/span_probe.py 2>&1 | grep -v "Loading\|Converting\|Writing" \
  | tee "$OUT/h100_span_probe_grouped.txt" || echo "span probe failed"
for run in grouped sdpa; do
  rm -rf /tmp/talon-cache/cost-curves
  TALON_GPU_ATTENTION=$run PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-host-work-h200/ab.py "$OUT/h100_$run.json" \
    "h100-$run" ${PROMPTS:-} 2>&1 | grep -v "Loading\|Converting\|Writing" | tee -a "$OUT/h100_summary.txt" || echo "$run failed"
done
