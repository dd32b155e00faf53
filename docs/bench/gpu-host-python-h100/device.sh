#!/usr/bin/env bash
# The lent GPU's run (docs/benchmarks.md, "A few-row Triton kernel for a tree's rows, tried; auto
# against fixed N again on an H200 and an H100"), from the repository root there: setup
# (docs/bench/gpu-rows-kernel/setup.sh; the GGUF's first xz part copied to /tmp by an earlier call); the host's Python profile of TALON auto; then the head suite's 30 prompts
# (ar, TALON N=16/24/32, auto) twice, each process measuring its own cost curve
# (docs/bench/gpu-host-work-h200/ab.py).
SETUP_LOG=py_profile.txt source docs/bench/gpu-rows-kernel/setup.sh
timeout 120 python3 docs/bench/gpu-host-python-h100/py_profile.py 2>&1 | grep -v "^Loading\|GGUF" \
  | tee -a "$OUT/py_profile.txt" || echo "profile failed"
for run in run1 run2; do
  rm -rf /tmp/talon-cache/cost-curves
  timeout 150 python3 docs/bench/gpu-host-work-h200/ab.py "$OUT/$run.json" "$run" 2>&1 | grep -v "^Loading" \
    | tee -a "$OUT/summary.txt" || echo "$run failed"
done
date -u | tee -a "$OUT/summary.txt"
