"""Run from the repository root: PYTHONPATH=. python docs/bench/auto-vs-fixed-cpu-epyc-zen4/call_price_ab.py 2 0,0.02,0.04 OUT.jsonl

A/B: TALON auto with the curve's call prices as measured vs each call priced DELTA plain steps more
(the drafting residual of the price study), against fixed N=4, interleaved per prompt."""

import json, random, sys
from talon.bench.suites import load_prompts, get_suite
from talon.bench.runner import MethodRunner
from talon.engine.decode import encode_prompt
from talon.runtime.cost_curve import CostCurve
from talon.models.registry import ModelRegistry
from talon.config import device_default_tree

base_price = CostCurve.price


def with_delta(delta):
    def price(self, nodes, call_widths):
        return base_price(self, nodes, call_widths) + delta * len(call_widths)

    return price


reps = int(sys.argv[1])
deltas = [float(x) for x in sys.argv[2].split(",")]
out = sys.argv[3]
reg = ModelRegistry()
target = reg.get("embedded")
runner = MethodRunner(target, reg, "head")
items, _ = load_prompts(get_suite("headline").experiments[0])
d = device_default_tree(False)[0]
kw = {k: getattr(d, k) for k in ("budget", "topk", "mu", "depth", "gamma")}
variants = [("ar", 0.0, 0), ("talon", 0.0, 4)] + [("talon+auto", x, 0) for x in deltas]
ids0 = encode_prompt(target, items[0]["prompt"])


def go(m, delta, n, ids, toks):
    CostCurve.price = with_delta(delta)
    k = dict(kw, budget=n) if n else kw
    return runner.run_one(m, k, ids, 0.0, toks)


for v in variants:
    go(*v, ids0, 8)
f = open(out, "a")
for rep in range(reps):
    for item in items:
        ids = encode_prompt(target, item["prompt"])
        order = variants[1:]
        random.shuffle(order)
        ar = None
        for m, delta, n in [variants[0]] + order:
            row = go(m, delta, n, ids, 64)
            if m == "ar":
                ar = row
            steps = row["steps"]
            rec = dict(
                rep=rep,
                id=item["id"],
                category=item.get("category"),
                method=m,
                delta=delta,
                n=n,
                seconds=row["seconds"],
                equal=row["token_ids"] == ar["token_ids"],
                ar_seconds=ar["seconds"],
                nodes=sum(s["nodes"] for s in steps) / max(len(steps), 1) if m != "ar" else 0,
                plain=row.get("plain_share"),
                E=row.get("mean_expected"),
                R=row.get("mean_realised"),
                steps_n=len(steps),
            )
            f.write(json.dumps(rec) + "\n")
            f.flush()
        print(rep, item["id"], flush=True)
