"""Run from the repository root: PYTHONPATH=. python docs/bench/lookahead-prune-zen4/look_ab.py 2 OUT.jsonl 4

A/B (not kept): TALON auto with the cost rule as it is ("auto") against two variants, interleaved per prompt
with `ar` in a shuffled order: "prune" (after growth, keep the top-m nodes by calibrated path acceptance with
the most E / price, as EAGLE-2 auto re-ranks) and "look" (the prune plus an H-layer lookahead: a layer is
drafted, and a layer's prefix kept, when chains below the likeliest nodes, assuming each node's confidence
persists, would raise E / price within H layers).  The first run of this script had a fixed N=8 in place
of "prune" (look_ab_first.jsonl)."""

import json, random, sys
from talon.bench.suites import load_prompts, get_suite
from talon.bench.runner import MethodRunner
from talon.engine.decode import encode_prompt
from talon.engine import builders as B
from talon.models.registry import ModelRegistry
from talon.config import device_default_tree
from talon.tree import STOP_COST

reps = int(sys.argv[1])
out = sys.argv[2]
H = int(sys.argv[3]) if len(sys.argv) > 3 else 4
ON = {"look": False, "prune_only": False}
orig_layer_pays, orig_affordable, orig_grow = B.Growth.layer_pays, B.Growth.affordable, B.TalonBuilder._grow


def chain_gain(a, g, j):
    return a * sum(g**l for l in range(1, j + 1))


def layer_pays(self, frontier):
    if not ON["look"] or ON["prune_only"] or not self.sizing:
        return orig_layer_pays(self, frontier)
    if not frontier:
        return False
    price = self.rule.curve.price
    widths = self.call_widths
    n0, e0 = len(self.tree), self.expected
    base = e0 / price(n0, widths)
    ag = sorted(
        (
            (
                self.accept[n],
                self.accept[n] / self.accept[self.tree.parent[n]] if self.accept[self.tree.parent[n]] > 0 else 0.0,
            )
            for n in frontier
        ),
        key=lambda x: -x[0] * x[1],
    )
    for k in range(1, len(ag) + 1):
        for j in range(1, H + 1):
            gain = sum(chain_gain(a, g, j) for a, g in ag[:k])
            w = [*widths, len(frontier)] + [k] * (j - 1)
            if (e0 + gain) / price(n0 + k * j, w) > base:
                return True
    return False


def affordable(self, candidates):
    if not ON["look"] or ON["prune_only"] or not self.sizing:
        return orig_affordable(self, candidates)
    price = self.rule.curve.price
    widths = self.call_widths
    n0, e = len(self.tree), self.expected
    best, best_k = e / price(n0, widths), 0
    top = None  # (a, g) of the likeliest kept candidate
    for k, c in enumerate(candidates, 1):
        e += c.accept
        pa = self.accept[c.parent]
        g = c.accept / pa if pa > 0 else 0.0
        if top is None or c.accept > top[0]:
            top = (c.accept, g)
        r = e / price(n0 + k, widths)
        for j in range(1, H):
            r = max(r, (e + chain_gain(*top, j)) / price(n0 + k + j, [*widths, k] + [1] * (j - 1)))
        if r > best:
            best, best_k = r, k
    return best_k


def grow(self, growth):
    tree = orig_grow(self, growth)
    if not ON["look"] or not growth.sizing or tree.num_drafts == 0:
        return tree
    order = sorted(range(1, len(tree)), key=lambda i: (-growth.accept[i], i))
    m = B.Eagle2Builder._best_prefix(growth, order)
    if m < len(order):
        growth.stop = STOP_COST
        return tree.subset([0] + sorted(order[:m]))
    return tree


B.Growth.layer_pays, B.Growth.affordable, B.TalonBuilder._grow = layer_pays, affordable, grow
reg = ModelRegistry()
target = reg.get("embedded")
runner = MethodRunner(target, reg, "head")
items, _ = load_prompts(get_suite("headline").experiments[0])
d = device_default_tree(False)[0]
kw = {k: getattr(d, k) for k in ("budget", "topk", "mu", "depth", "gamma")}
VARIANTS = {
    "ar": ("ar", 0, False),
    "auto": ("talon+auto", 0, False),
    "prune": ("talon+auto", 0, "prune"),
    "look": ("talon+auto", 0, True),
}


def go(name, ids, toks):
    m, n, look = VARIANTS[name]
    ON["look"] = bool(look)
    ON["prune_only"] = look == "prune"
    return runner.run_one(m, dict(kw, budget=n) if n else kw, ids, 0.0, toks)


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
                depth=sum(s["depth"] for s in steps) / max(len(steps), 1) if v != "ar" else 0,
                plain=row.get("plain_share"),
                E=row.get("mean_expected"),
                R=row.get("mean_realised"),
                price=row.get("mean_price"),
                steps_n=len(steps),
            )
            f.write(json.dumps(rec) + "\n")
            f.flush()
        print(rep, item["id"], flush=True)
