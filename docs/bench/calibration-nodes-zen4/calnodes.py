"""Run from the repository root: PYTHONPATH=. python docs/bench/calibration-nodes-zen4/calnodes.py {examples,heldout,calib}

Per node the target reached in TALON auto runs (greedy, 64 tokens, the device's cached cost curve): depth,
draft probability q, rank among its siblings, the parent's q, the calibration's conditional acceptance at
decision time (before the step's verdict is observed) and the verdict; per step the planned E and the
committed tokens.  Writes calnodes-WHICH-talon+auto{TAG}.jsonl in the working directory; calan.py / calan2.py
tabulate (calan.txt, calan2.txt: calibration, held-out, examples, in that order).

Environment, for the variants tried (docs/benchmarks.md, "Tried and not kept (2026-11-26)"): CAL_DIR reads
the head's tables from that directory (its calibration.json and a copy of the shipped
calibration-lookup.json; autofit/'s records: a directory holding autofit/calibration-autofit.json as
calibration.json, TAG=-autofit); DEEP=w uses w x the table
+ (1 - w) x the raw q for the head's cells below depth 1 (DEEP=0 and 0.5 were tried); TAG is added to the
output's name."""

import json, math, sys
from talon.bench.prompts import PromptSet, load_prompt_set
from talon.bench.runner import MethodRunner
from talon.config import device_default_tree
from talon.drafters import calibration as C
from talon.engine import sizing
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry
import os

if os.environ.get("DEEP"):
    _prior_of = C.Calibration.prior_of
    w = float(os.environ["DEEP"])  # the table's weight at depth >= 2 (0: the raw q)

    def prior_of(self, key, q):
        p = _prior_of(self, key, q)
        return p if key[1] < 2 or key[0] != "model" else w * p + (1 - w) * q

    C.Calibration.prior_of = prior_of
if os.environ.get("CAL_DIR"):
    from pathlib import Path
    import talon.drafters.factory as F

    _orig = F.load_drafter_tables
    F.load_drafter_tables = lambda d: _orig(Path(os.environ["CAL_DIR"]))

which = sys.argv[1]
method = sys.argv[2] if len(sys.argv) > 2 else "talon+auto"
if which == "examples":
    items = load_prompt_set(PromptSet("assets"))[0]
elif which == "heldout":
    items = load_prompt_set(PromptSet("mtbench"))[0][8:32] + load_prompt_set(PromptSet("humaneval"))[0][8:24]
elif which == "calib":
    import json as j
    from talon.training.calibrate import CALIBRATION_PROMPTS

    items = [j.loads(l) for l in open(CALIBRATION_PROMPTS)]
cur = {}
out = open(f"calnodes-{which}-{method}{os.environ.get('TAG', '')}.jsonl", "w")
orig = sizing.CostRule.observe


def observe(self, tree, verdict):
    cal = self.calibration
    on = set(verdict.accepted_path)
    pa = cal.path_acceptance(tree)
    kids = {}
    for n in range(1, len(tree)):
        kids.setdefault(tree.parent[n], []).append(n)
    for n, ok in C.reached_nodes(tree, verdict):
        p = tree.parent[n]
        sib = sorted(kids[p], key=lambda m: -tree.draft_logprob[m])
        out.write(
            json.dumps(
                dict(
                    cat=cur["cat"],
                    id=cur["id"],
                    d=tree.depth[n],
                    q=math.exp(tree.draft_logprob[n]),
                    rank=sib.index(n),
                    nsib=len(sib),
                    pq=math.exp(tree.draft_logprob[p]) if p else None,
                    c=cal.node(tree, n),
                    ok=bool(ok),
                    src=tree.source[n],
                    size=len(tree) - 1,
                )
            )
            + "\n"
        )
    # step-level
    out.write(
        json.dumps(dict(cat=cur["cat"], id=cur["id"], step=True, E=sum(pa), got=len(verdict.accepted_path))) + "\n"
    )
    return orig(self, tree, verdict)


sizing.CostRule.observe = observe
registry = ModelRegistry()
target = registry.get("embedded")
runner = MethodRunner(target, registry, "head")
tree = device_default_tree(False)[0]
kwargs = {k: getattr(tree, k) for k in ("budget", "topk", "mu", "depth", "gamma")}
for item in items:
    cur["cat"] = item.get("category") or item["id"].split("-")[0]
    cur["id"] = item["id"]
    runner.run_one(method, kwargs, encode_prompt(target, item["prompt"]), 0.0, 64)
    print(item["id"], cur["cat"], file=sys.stderr, flush=True)
