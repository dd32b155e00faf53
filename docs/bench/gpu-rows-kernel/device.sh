#!/usr/bin/env bash
# The lent GPU's run at commit f626169, where talon.models.gpu_linear timed the few-row Triton kernel
# as a third way ($TALON_GPU_LINEAR=auto; blas: the libraries only); the kernel was not kept, and the
# probe now holds it (docs/benchmarks.md, "A few-row Triton kernel for a tree's rows, tried"). From the
# repository root there: setup (setup.sh beside it: the embedded GGUF from two xz parts, the first copied to /tmp by an earlier
# call, the second in .gpu with the HumanEval / MT-Bench question files; transformers and gguf from
# wheels in .whl); cuBLAS, cuBLASLt and the Triton kernel per layer shape and row count; the replay
# time of every (bucket, span) with and without the kernel; then the head suite's 30 prompts (ar,
# TALON N=16/24/32, auto) with TALON_GPU_LINEAR=blas (the libraries only) and auto (the kernel too),
# alternating ABBA, each process measuring its own cost curve (docs/bench/gpu-host-work-h200/ab.py).
SETUP_LOG=kernel_probe.txt source docs/bench/gpu-rows-kernel/setup.sh
timeout 150 python3 docs/bench/gpu-rows-kernel/kernel_probe.py 2>&1 | tee -a "$OUT/kernel_probe.txt" || echo "kernel probe failed"
for mode in auto blas; do
  echo "TALON_GPU_LINEAR=$mode" | tee -a "$OUT/span_probe.txt"
  TALON_GPU_LINEAR=$mode timeout 120 python3 docs/bench/gpu-key-spans/span_probe.py 2>&1 \
    | grep -v "^Loading" | tee -a "$OUT/span_probe.txt" || echo "span probe $mode failed"
done
for run in blas1 auto1 auto2 blas2; do
  rm -rf /tmp/talon-cache/cost-curves
  TALON_GPU_LINEAR=${run%?} timeout 170 python3 docs/bench/gpu-host-work-h200/ab.py "$OUT/$run.json" "$run" \
    ${PROMPTS:-} 2>&1 | grep -v "^Loading" | tee -a "$OUT/summary.txt" || echo "$run failed"
done
date -u | tee -a "$OUT/summary.txt"
