"""Offline GPU simulator: run TALON fixed N and auto on the CPU with a GPU-shaped cost curve, predict
the GPU step time per step as V(rows) + L x head calls, report tokens per predicted second."""

import json, sys, time, statistics

sys.path.insert(0, ".")  # run from the repository root
import torch
from talon.models.registry import ModelRegistry
from talon.drafters.factory import make_drafter
from talon.engine.decode import run_to_end, encode_prompt
from talon.config import TreeConfig, DecodeConfig
from talon.runtime.cost_curve import CostCurve
from talon.bench.suites import SUITES, load_prompts

torch.set_num_threads(2)
reg = ModelRegistry()
target = reg.get("embedded")
PLAIN = 6.82e-3
# measured on the H200 (run 1), verify per bucket; with cheapest buckets 5..32 -> the 32 bucket
V = {1: 6.62, 2: 7.87, 3: 7.76, 4: 7.79, 8: 8.71, 16: 8.71, 32: 8.71, 64: 9.33, 128: 9.55}
V_OLD = {1: 6.62, 2: 7.87, 3: 7.76, 4: 7.79, 8: 11.0, 16: 11.5, 32: 8.71, 64: 9.33, 128: 9.55}


def v_of(rows, table):
    for b in (1, 2, 3, 4, 8, 16, 32, 64, 128):
        if rows <= b:
            return table[b] * 1e-3
    return table[128] * 1e-3


CALL = [[1, 0.000758], [2, 0.000799], [4, 0.000826], [8, 0.000943], [16, 0.000969], [32, 0.000969], [64, 0.000969]]


def curve(extra_call=0.0, table=V):
    sizes = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 128)
    return CostCurve(
        plain=PLAIN,
        verify=tuple((n, v_of(n, table)) for n in sizes),
        call=tuple((w, s + extra_call) for w, s in CALL),
        note="sim",
        key={},
    )


L = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5e-3
suite = SUITES["head"] if isinstance(SUITES, dict) else None
from talon.engine.sizing import CostRule

_aff, _lp = CostRule.affordable, CostRule.layer_pays
LAM = {"v": None}


def affordable(self, expected, nodes, call_widths, candidates):
    lam = LAM["v"]
    if lam is None:
        return _aff(self, expected, nodes, call_widths, candidates)
    best, best_k = expected - lam * self.curve.price(nodes, call_widths), 0
    for k, c in enumerate(candidates, start=1):
        expected += c.accept
        v = expected - lam * self.curve.price(nodes + k, call_widths)
        if v > best:
            best, best_k = v, k
    return best_k


def layer_pays(self, expected, nodes, call_widths, fa, fg):
    lam = LAM["v"]
    if lam is None:
        return _lp(self, expected, nodes, call_widths, fa, fg)
    if not fa:
        return False
    widths = [*call_widths, len(fa)]
    base = expected - lam * self.curve.price(nodes, call_widths)
    gains = sorted((a * g for a, g in zip(fa, fg)), reverse=True)
    for k, gain in enumerate(gains, start=1):
        expected += gain
        if expected - lam * self.curve.price(nodes + k, widths) > base:
            return True
    return False


CostRule.affordable, CostRule.layer_pays = affordable, layer_pays
exp = [e for e in SUITES["head"].experiments if e.name == "auto_vs_fixed"][0]
items, _ = load_prompts(exp)
limit = int(sys.argv[3]) if len(sys.argv) > 3 else len(items)
items = items[:limit]
configs = sys.argv[1].split(",")
results = {c: [] for c in configs}
base = dict(method="talon", topk=10, mu=0.03, depth=8, gamma=5)
for it in items:
    ids = encode_prompt(target, it["prompt"])
    for c in configs:
        drafter = make_drafter("head", target, reg)
        LAM["v"] = float(c.split(":")[1]) if c.startswith("dink") else None
        if c.startswith("auto") or c.startswith("dink"):
            extra = (
                float(c.split(":")[2])
                if c.count(":") > 1
                else (float(c.split(":")[1]) if c.startswith("auto:") else 0.0)
            )
            table = V_OLD if c.endswith("old") else V
            cfg = TreeConfig(**{**base, "budget": 128, "auto": True})
            tr = run_to_end(
                target,
                drafter,
                cfg,
                DecodeConfig(max_new_tokens=64),
                prompt_ids=ids,
                texts=False,
                cost_curve=curve(extra, table),
            )
            tab = table
        else:
            cfg = TreeConfig(**{**base, "budget": int(c), "auto": False})
            tr = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=64), prompt_ids=ids, texts=False)
            tab = V
        t = sum(v_of(len(s.tree), tab) if len(s.tree) > 1 else PLAIN for s in tr.steps) + L * sum(
            len(s.call_widths) for s in tr.steps
        )
        toks = len(tr.output_ids)
        results[c].append(
            (
                toks,
                t,
                len(tr.steps),
                statistics.mean(len(s.tree) - 1 for s in tr.steps),
                statistics.mean(len(s.call_widths) for s in tr.steps),
            )
        )
    print(it["id"], {c: round(results[c][-1][0] / results[c][-1][1]) for c in configs}, flush=True)
ar_t = None
for c in configs:
    r = results[c]
    toks = sum(x[0] for x in r)
    t = sum(x[1] for x in r)
    steps = sum(x[2] for x in r)
    print(
        f"{c:>10}: tok/s {toks / t:6.1f}  x AR {toks / t * PLAIN:5.3f}  MAT {toks / steps:4.2f}  nodes {statistics.mean(x[3] for x in r):5.1f}  calls {statistics.mean(x[4] for x in r):4.2f}"
    )
