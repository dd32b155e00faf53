"""Run from the repository root: PYTHONPATH=. python docs/bench/pad-lone-row-zen4/ar_ab.py REPS P NPROMPTS

A/B (not kept): our ar with lone rows padded to P rows in the packed linears vs not, interleaved per prompt."""

import json, random, sys, time, statistics
import torch
from talon.bench.suites import load_prompts, get_suite
from talon.bench.runner import MethodRunner
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry
from talon.models import cpu_linear as C
from talon.config import device_default_tree

reps = int(sys.argv[1])
P = int(sys.argv[2])
nprompts = int(sys.argv[3]) if len(sys.argv) > 3 else 30
ON = {"pad": 0}
orig = C.PackedLinear.forward


def fwd(self, x):
    if ON["pad"] and x.numel() == self.in_features and not torch.is_grad_enabled():
        pad = torch.cat([x.reshape(1, -1), x.new_zeros(ON["pad"] - 1, self.in_features)])
        out = torch.ops.mkldnn._linear_pointwise(pad, self.packed, self.bias, "none", [], "")
        return out[:1].reshape(*x.shape[:-1], self.out_features)
    return orig(self, x)


C.PackedLinear.forward = fwd
reg = ModelRegistry()
target = reg.get("embedded")
runner = MethodRunner(target, reg, "head")
items, _ = load_prompts(get_suite("headline").experiments[0])
items = items[:nprompts]
d = device_default_tree(False)[0]
kw = {k: getattr(d, k) for k in ("budget", "topk", "mu", "depth", "gamma")}
VARIANTS = {"ar": 0, f"ar_pad{P}": P}


def go(name, ids, toks):
    ON["pad"] = VARIANTS[name]
    return runner.run_one("ar", kw, ids, 0.0, toks)


ids0 = encode_prompt(target, items[0]["prompt"])
for v in VARIANTS:
    go(v, ids0, 8)
ratios = []
eq = 0
n = 0
for rep in range(reps):
    for item in items:
        ids = encode_prompt(target, item["prompt"])
        order = list(VARIANTS)
        random.shuffle(order)
        rows = {v: go(v, ids, 64) for v in order}
        a, b = rows["ar"], rows[f"ar_pad{P}"]
        ratios.append((a["seconds"] / len(a["token_ids"])) / (b["seconds"] / len(b["token_ids"])))
        eq += a["token_ids"] == b["token_ids"]
        n += 1
qs = statistics.quantiles(ratios, n=4)
print(
    f"pad{P}: speed ratio padded/plain median {statistics.median(ratios):.3f} quartiles {qs[0]:.3f}-{qs[2]:.3f} "
    f"geo {statistics.geometric_mean(ratios):.3f} range {min(ratios):.3f}-{max(ratios):.3f}; equal tokens {eq}/{n}"
)
