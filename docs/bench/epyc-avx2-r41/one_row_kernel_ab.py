"""Plain decoding (64 tokens, greedy, one code prompt) with one-row products on TALON's kernel (plain_rows 0,
what a quiet load chooses on the AVX2 EPYC) against PyTorch's own linear (plain_rows 1, what 4 of 6 loads timed
beside another load chose), four runs each, alternating.  PYTHONPATH=. python docs/bench/epyc-avx2-r41/one_row_kernel_ab.py"""
import time, statistics
from talon.config import DecodeConfig, TreeConfig
from talon.engine.decode import encode_prompt, run_to_end
from talon.models.registry import ModelRegistry
from talon.models.cpu_linear import set_plain_rows, mkl_rows
from talon.models.fused_linear import fused_products
t = ModelRegistry().get("embedded"); m = t.model; fused = fused_products(m)
ids = encode_prompt(t, "Write a Python function that returns the n-th Fibonacci number, with a docstring and tests.")
plain = TreeConfig(method="ar"); dec = DecodeConfig(max_new_tokens=64)
res = {0: [], 1: []}; outs = {}
for r in range(4):
    for rows in ((0, 1) if r % 2 == 0 else (1, 0)):
        set_plain_rows(m, fused, rows)
        t0 = time.perf_counter(); tr = run_to_end(t, None, plain, dec, prompt_ids=ids, texts=False)
        res[rows].append(time.perf_counter() - t0); outs.setdefault(rows, tr.output_ids)
print({k: [round(x, 2) for x in v] for k, v in res.items()})
print("rows=1 / rows=0 median", round(statistics.median(res[1]) / statistics.median(res[0]), 3), "same tokens", outs[0] == outs[1])
