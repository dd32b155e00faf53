"""Run from the repository root: PYTHONPATH=. python docs/bench/verify-dip-zen4/rule_ab.py 2 OUT.jsonl

A/B: the cost rule on the cost suite's curve (verify at 1, 2, 4, 8, ..., made non-decreasing) vs on a curve
with verify measured at every size 1..12 and 16, as measured (oneDNN's packed kernel is cheaper at 3-6 rows
than at 2 or 7-8), with the per-candidate rule (greedy) and with the best prefix; fixed N=4 as reference."""

import json, random, sys, dataclasses
from talon.bench.suites import load_prompts, get_suite
from talon.bench.runner import MethodRunner, tree_for
from talon.engine.decode import encode_prompt
from talon.engine.sizing import CostRule
from talon.models.registry import ModelRegistry
from talon.config import device_default_tree, TreeConfig


def greedy(self, expected, nodes, call_widths, candidates):
    """The rule before this A/B: stop at the first candidate that alone does not raise E / price."""
    price = self.curve.price(nodes, call_widths)
    for k, c in enumerate(candidates):
        new_price = self.curve.price(nodes + 1, call_widths)
        if (expected + c.accept) * price <= expected * new_price:
            return k
        expected, nodes, price = expected + c.accept, nodes + 1, new_price
    return len(candidates)


def best_prefix(self, expected, nodes, call_widths, candidates):
    best_k, best = 0, expected / self.curve.price(nodes, call_widths)
    e = expected
    for k, c in enumerate(candidates, 1):
        e += c.accept
        r = e / self.curve.price(nodes + k, call_widths)
        if r > best:
            best, best_k = r, k
    return best_k


MEASURED = {
    1: 1.004,
    2: 1.114,
    3: 0.969,
    4: 0.958,
    5: 0.972,
    6: 0.995,
    7: 1.102,
    8: 1.113,
    9: 1.174,
    10: 1.189,
    11: 1.234,
    12: 1.265,
    16: 1.426,
}
reps = int(sys.argv[1])
out = sys.argv[2]
reg = ModelRegistry()
target = reg.get("embedded")
runner = MethodRunner(target, reg, "head")
items, _ = load_prompts(get_suite("headline").experiments[0])
d = device_default_tree(False)[0]
kw = {k: getattr(d, k) for k in ("budget", "topk", "mu", "depth", "gamma")}
base = runner.curve("talon+auto", TreeConfig(method="talon", **tree_for("talon+auto", kw)))
dip = dataclasses.replace(
    base,
    verify=tuple(sorted([(n, r * base.plain) for n, r in MEASURED.items()] + [p for p in base.verify if p[0] > 16])),
)
print("base", [(n, round(s / base.plain, 3)) for n, s in base.verify])
print("dip", [(n, round(s / dip.plain, 3)) for n, s in dip.verify])
VARIANTS = {
    "ar": ("ar", 0, base, greedy),
    "N4": ("talon", 4, base, greedy),
    "auto": ("talon+auto", 0, base, greedy),
    "auto_dip": ("talon+auto", 0, dip, greedy),
    "auto_dip_prefix": ("talon+auto", 0, dip, best_prefix),
}
orig_curve = MethodRunner.curve


def go(name, ids, toks):
    m, n, curve, rule = VARIANTS[name]
    CostRule.affordable = rule
    runner._curves = {runner.drafter("talon+auto").name: curve}
    k = dict(kw, budget=n) if n else kw
    return runner.run_one(m, k, ids, 0.0, toks)


ids0 = encode_prompt(target, items[0]["prompt"])
for v in VARIANTS:
    go(v, ids0, 8)
f = open(out, "a")
for rep in range(reps):
    for item in items:
        ids = encode_prompt(target, item["prompt"])
        order = list(VARIANTS)[1:]
        random.shuffle(order)
        ar = None
        for v in ["ar"] + order:
            row = go(v, ids, 64)
            if v == "ar":
                ar = row
            steps = row["steps"]
            rec = dict(
                rep=rep,
                id=item["id"],
                category=item.get("category"),
                variant=v,
                seconds=row["seconds"],
                equal=row["token_ids"] == ar["token_ids"],
                ar_seconds=ar["seconds"],
                nodes=sum(s["nodes"] for s in steps) / max(len(steps), 1) if v != "ar" else 0,
                plain=row.get("plain_share"),
                E=row.get("mean_expected"),
                R=row.get("mean_realised"),
                price=row.get("mean_price"),
                steps_n=len(steps),
            )
            f.write(json.dumps(rec) + "\n")
            f.flush()
        print(rep, item["id"], flush=True)
