#!/usr/bin/env bash
# The lent GPU's run, from the repository root there (docs/benchmarks.md, "Graphs per key span"): the
# setup of docs/bench/gpu-host-work-h200 (the embedded GGUF from three xz parts, two copied to /tmp by
# earlier calls; transformers and gguf from wheels in .whl), the replay time of every (bucket, span),
# then the code before the change (.old/talon, graphs over the whole buffer) and after it, alternating
# ABBA, each process measuring its own cost curve, on the head suite's 30 prompts.
set -euo pipefail
source docs/bench/gpu-host-work-h200/setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true
lscpu | grep -E "Model name|^CPU\(s\)"
python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__)"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-key-spans/span_probe.py 2>&1 | grep -v "^Loading" | tee "$OUT/span_probe.txt"
for run in old1 new1 new2 old2; do
  rm -rf /tmp/talon-cache/cost-curves
  code=.; [[ $run == old* ]] && code=.old
  PYTHONPATH=$code:/tmp/site python3 docs/bench/gpu-host-work-h200/ab.py "$OUT/$run.json" "$run" ${PROMPTS:-} 2>&1 \
    | grep -v "^Loading" | tee -a "$OUT/summary.txt" || echo "$run failed"
done
