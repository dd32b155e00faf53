#!/usr/bin/env bash
# The lent GPU's run, from the repository root there (see docs/benchmarks.md, "A layer's host work"):
# the embedded GGUF arrives as three xz parts (the first two copied to /tmp by two earlier calls, the
# third in .gpu3 with the HumanEval / MT-Bench question files), transformers and gguf as wheels in
# .whl, and the code before the change as .old/talon.  Old and new code alternate (ABBA), each process
# measuring its own cost curve; then the new code's host profile.
set -euo pipefail
source docs/bench/gpu-host-work-h200/setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true
lscpu | grep -E "Model name|^CPU\(s\)"
python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__)"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for run in old1 new1 new2 old2; do
  rm -rf /tmp/talon-cache/cost-curves
  code=.; [[ $run == old* ]] && code=.old
  PYTHONPATH=$code:/tmp/site python3 docs/bench/gpu-host-work-h200/ab.py "$OUT/$run.json" "$run" ${PROMPTS:-} 2>&1 \
    | grep -v "^Loading" | tee -a "$OUT/summary.txt" || echo "$run failed"
done
PYTHONPATH=.:/tmp/site python3 docs/bench/gpu-host-work-h200/host_profile.py > "$OUT/host_profile.txt" 2>&1 || true
tail -5 "$OUT/host_profile.txt"
