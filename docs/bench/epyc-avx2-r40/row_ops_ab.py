"""A/B: the C++ norm and rotary embedding (A, the new default: talon/models/row_ops.py) against
transformers' own (B, TALON_ROW_OPS=0), for plain decoding (ar) and TALON auto with the shipped head;
the headline suite's 30 prompts, 64 tokens, greedy, the four runs of a prompt interleaved (order
alternating), wall clock; each side's own target and head, its cost curve measured here first (twice,
alternating, the second kept)."""
import os, statistics, time
import torch
from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig, device_default_tree
from talon.drafters.factory import make_drafter
from talon.engine.cost_measure import measure_curve
from talon.engine.decode import encode_prompt, run_to_end
from talon.models.registry import ModelRegistry
from talon.models.row_ops import uses_row_ops

reg = {"A": ModelRegistry(), "B": ModelRegistry()}
target = {"A": reg["A"].get("embedded")}
os.environ["TALON_ROW_OPS"] = "0"
target["B"] = reg["B"].get("embedded")
head_b = make_drafter("head", target["B"], reg["B"])
del os.environ["TALON_ROW_OPS"]
head_a = make_drafter("head", target["A"], reg["A"])
assert uses_row_ops(target["A"].model) and uses_row_ops(head_a.head)
assert not uses_row_ops(target["B"].model) and not uses_row_ops(head_b.head)
fresh = lambda side: make_drafter("head", target[side], reg[side])
curve = {}
for side in ("A", "B", "A", "B"):
    t0 = time.perf_counter(); c = measure_curve(target[side], fresh(side)); curve[side] = c
    print(side, "curve", round(time.perf_counter() - t0, 1), "s: plain", round(c.plain * 1e3, 2), "ms, verify(4)",
          round(c.verify_seconds(4) * 1e3, 2), "verify(16)", round(c.verify_seconds(16) * 1e3, 2), "call(1)",
          round(c.call_seconds(1) * 1e3, 2), flush=True)
auto = TreeConfig(**{**vars(device_default_tree(False)[0]), "auto": True, "budget": 128})
plain = TreeConfig(method="ar")
dec = DecodeConfig(max_new_tokens=64)
prompts, _ = load_prompts(get_suite("headline").experiments[0])
secs = {(s, m): [] for s in "AB" for m in ("ar", "auto")}
for n, item in enumerate(prompts):
    out = {}
    order = [("A", "ar"), ("B", "ar"), ("A", "auto"), ("B", "auto")]
    for side, method in (order if n % 2 == 0 else [(("B" if s == "A" else "A"), m) for s, m in order]):
        ids = encode_prompt(target[side], item["prompt"])
        t0 = time.perf_counter()
        if method == "ar":
            tr = run_to_end(target[side], None, plain, dec, prompt_ids=ids, texts=False)
        else:
            tr = run_to_end(target[side], fresh(side), auto, dec, prompt_ids=ids, texts=False, cost_curve=curve[side])
        secs[side, method].append(time.perf_counter() - t0); out[side, method] = tr.output_ids
    assert len({tuple(v) for v in out.values()}) == 1, item["id"]
    print(item["id"], "B/A ar", round(secs["B", "ar"][-1] / secs["A", "ar"][-1], 3), "auto",
          round(secs["B", "auto"][-1] / secs["A", "auto"][-1], 3), flush=True)
for method in ("ar", "auto"):
    a, b = secs["A", method], secs["B", method]
    r = [y / x for x, y in zip(a, b)]
    print(method, "total A", round(sum(a), 2), "B", round(sum(b), 2), "B/A", round(sum(b) / sum(a), 3),
          "per prompt median", round(statistics.median(r), 3), "min", round(min(r), 3), "max", round(max(r), 3),
          "A faster on", sum(x > 1 for x in r), "of", len(r))
print("auto over ar, A", round(sum(secs["A", "ar"]) / sum(secs["A", "auto"]), 3), "B",
      round(sum(secs["B", "ar"]) / sum(secs["B", "auto"]), 3))
print("same tokens on every prompt: A and B, ar and auto")
