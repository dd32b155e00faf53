"""Where the hybrid's expected tokens miss: hybrid auto (the CPU default) on the headline suite's prompts
of the given categories, every reached node's calibrated acceptance (as the calibration answered just
before it counted the node) against its verdict, grouped by source, match length (retrieval) and how
many retrieval nodes lead down to it (the copy's run so far); then the steps' expected against realised
tokens.  ``SCALE=4`` sets the calibration's run-level scale strength for the run (10 shipped then).  From the
repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r33/lookup_calibration.py summarisation,extraction
    SCALE=4 PYTHONPATH=. python docs/bench/xeon-amx-r33/lookup_calibration.py qa,chat"""

import collections
import os
import sys

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig
from talon.drafters import calibration as cal
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry
from talon.tree import SOURCE_RETRIEVAL

if os.environ.get("SCALE"):
    cal.SCALE_STRENGTH = dict.fromkeys(("model", "retrieval"), float(os.environ["SCALE"]))
records = []
orig = cal.Calibration.observe


def observe(self, tree, verdict):
    for node, accepted in cal.reached_nodes(tree, verdict):
        q = cal._q(tree, node)
        run, a = 0, node
        while a > 0 and tree.source[a] == SOURCE_RETRIEVAL:
            run += 1
            a = tree.parent[a]
        predicted = self(q, tree.depth[node], tree.source[node], tree.match[node])
        records.append((tree.source[node], tree.match[node], run, predicted, bool(accepted)))
    return orig(self, tree, verdict)


cal.Calibration.observe = observe

target = ModelRegistry().get("embedded")
runner = MethodRunner(target, ModelRegistry(), "head")
exp = SUITES["headline"].experiments[0]
items, _ = load_prompts(exp)
cats = set(sys.argv[1].split(","))
items = [i for i in items if i.get("category") in cats]
print(len(items), "prompts")
method = "hybrid+auto"
cfg = tree_config(method, {"topk": 6, "mu": 0.1, "depth": 5, "cap": 128})
curve = curve_for_run(target, runner.drafter(method), cfg)
E, R = [], []
for item in items:
    ids = encode_prompt(target, item["prompt"])
    trace, s = timed_generation(target, runner.drafter(method), cfg, DecodeConfig(max_new_tokens=64), ids, curve)
    E += [st.expected for st in trace.steps if st.expected is not None]
    R += [len(st.committed_ids) for st in trace.steps if st.expected is not None]
print("steps", len(E), "E/real", sum(E) / sum(R) - 1)
groups = collections.defaultdict(lambda: [0, 0.0, 0])
for src, match, run, p, acc in records:
    key = (src, min(match, 3) if src == SOURCE_RETRIEVAL else 0, min(run, 6))
    g = groups[key]
    g[0] += 1
    g[1] += p
    g[2] += acc
for key in sorted(groups):
    n, p, a = groups[key]
    print(key, "n", n, "pred", round(p / n, 3), "acc", round(a / n, 3))
