#!/usr/bin/env bash
# The lent GPU's run, from the repository root there (docs/benchmarks.md, "Grouped attention on the GPU"):
# setup.sh (the embedded GGUF from three xz parts copied to /tmp by three earlier calls;
# transformers and gguf from wheels in .whl); the replay time of every (bucket, span) with
# transformers' sdpa and with the grouped batched-matmul attention; one linear layer by rows; then the
# head suite's 30 prompts (ar, TALON N=16/24/32, auto) with each attention, alternating ABBA, each
# process measuring its own cost curve (docs/bench/gpu-host-work-h200/ab.py).
set -euo pipefail
source docs/bench/gpu-grouped-attention/setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true
lscpu | grep -E "Model name|^CPU\(s\)"
python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__)"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for mode in grouped sdpa; do
  TALON_GPU_ATTENTION=$mode PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-key-spans/span_probe.py 2>&1 \
    | grep -v "^Loading" | tee "$OUT/span_probe_$mode.txt" || echo "span probe $mode failed"
done
PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-grouped-attention/linear_probe.py 2>&1 | tee "$OUT/linear_probe.txt" \
  || echo "linear probe failed"
for run in sdpa1 grouped1 grouped2 sdpa2; do
  rm -rf /tmp/talon-cache/cost-curves
  TALON_GPU_ATTENTION=${run%?} PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-host-work-h200/ab.py "$OUT/$run.json" "$run" \
    ${PROMPTS:-} 2>&1 | grep -v "^Loading" | tee -a "$OUT/summary.txt" || echo "$run failed"
done
