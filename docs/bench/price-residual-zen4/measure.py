"""Per step, the wall clock of auto-sized trees against the price the cost curve gave them: what does a tree
step cost that the curve does not price?  The headline suite's 30 prompts, 64 tokens, greedy, the CPU
defaults, plain decoding of each prompt first (its median step is the unit), then each method; one JSON
line per step (nodes, call widths, price, expected tokens, and the step's draft / verify / bookkeeping
seconds against the curve's verify(n) and summed call(w)).

    PYTHONPATH=. python docs/bench/price-residual-zen4/measure.py talon+auto,eagle2+auto OUT.jsonl [PROMPTS]
    PYTHONPATH=. python docs/bench/price-residual-zen4/measure.py --summary OUT.jsonl
"""

import json
import statistics
import sys

import numpy as np

from talon.bench.runner import MethodRunner, split_method, timed_generation, tree_for
from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig, device_default_tree
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry


def measure(methods: list[str], out: str, limit: int) -> None:
    registry = ModelRegistry()
    target = registry.get("embedded")
    runner = MethodRunner(target, registry, "head")
    items = load_prompts(get_suite("headline").experiments[0])[0][:limit]
    tree = device_default_tree(False)[0]
    kwargs = {k: getattr(tree, k) for k in ("budget", "topk", "mu", "depth", "gamma")}

    def generate(method: str, ids: list[int], tokens: int = 64):
        cfg = TreeConfig(method=split_method(method)[0], **tree_for(method, kwargs))
        curve = runner.curve(method, cfg) if method != "ar" else None
        drafter = runner.drafter(method) if method != "ar" else None
        trace, _ = timed_generation(target, drafter, cfg, DecodeConfig(max_new_tokens=tokens), ids, curve)
        return trace, curve

    warm = encode_prompt(target, items[0]["prompt"])
    for method in ["ar", *methods]:
        generate(method, warm, 8)
    with open(out, "w") as f:
        for item in items:
            ids = encode_prompt(target, item["prompt"])
            plain = statistics.median(s.step_seconds for s in generate("ar", ids)[0].steps[1:])
            for method in methods:
                trace, curve = generate(method, ids)
                for s in trace.steps[1:]:
                    row = {
                        "id": item["id"],
                        "method": method,
                        "plain": plain,
                        "curve_plain": curve.plain,
                        "nodes": s.tree.num_drafts,
                        "widths": s.call_widths,
                        "price": s.price,
                        "expected": s.expected,
                        "step": s.step_seconds,
                        "draft": s.draft_seconds,
                        "verify": s.verify_seconds,
                        "book": s.bookkeeping_seconds,
                        "verify_priced": curve.verify_seconds(s.tree.num_drafts + 1),
                        "calls_priced": sum(curve.call_seconds(w) for w in s.call_widths),
                    }
                    f.write(json.dumps(row) + "\n")
            print(item["id"], flush=True)


def summary(path: str) -> None:
    """Per method: plain and tree steps' wall clock (in the prompt's plain steps) against their price,
    and per tree size the median residual and where it sits (verify, draft, bookkeeping)."""
    rows = [json.loads(line) for line in open(path)]
    for method in sorted({r["method"] for r in rows}):
        steps = [r for r in rows if r["method"] == method]
        print(f"{method}: {len(steps)} steps, {sum(r['nodes'] == 0 for r in steps)} plain")
        for lo, hi in ((0, 0), (1, 3), (4, 7), (8, 15), (16, 31), (32, 999)):
            group = [r for r in steps if lo <= r["nodes"] <= hi]
            if len(group) < 5:
                continue

            def unit(key, group=group):
                return np.array([r[key] / r["plain"] for r in group])

            residual = unit("step") - np.array([r["price"] for r in group])
            verify_gap = np.median(unit("verify") - unit("verify_priced"))
            print(
                f"  nodes {lo}-{hi}: {len(group)} steps, wall {unit('step').mean():.3f} plain steps,"
                f" price {np.mean([r['price'] for r in group]):.3f}, residual median {np.median(residual):+.3f}"
                f" (mean {residual.mean():+.3f}); verify - verify(n) {verify_gap:+.3f},"
                f" draft - calls {np.median(unit('draft') - unit('calls_priced')):+.3f},"
                f" bookkeeping {np.median(unit('book')):.3f}"
            )
        ratio = statistics.median(r["curve_plain"] / r["plain"] for r in steps)
        print(f"  the curve's plain step / this run's: {ratio:.3f}")


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        measure(sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 99)
