"""The tree lab on the shipped examples: ``python -m ui.lab_speed``.

1. **Adaptation.** Decodes every example with TALON at the app's defaults and reports, per category,
   the mean depth of the step trees (draft layers below the root) and the mean widest layer, and the
   ratio of the predictable categories' mean depth to open chat's.
2. **Latency.** Freezes steps of those runs (``ui.lab.freeze``) and times the Tree lab's handler of a
   setting change (``ui.lab.redraw``: rebuild and verify the tree at the frozen context, draw the tree,
   the gate and the caption) for several N (draft nodes, root not counted) and mu; prints p50 and p90
   per N.  The browser's own drawing is not included.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.decode import run_to_end

from . import lab
from .compute import call_on_fresh_thread
from .session import new_session
from .shared import DEFAULT_DRAFTER, DEFAULT_TREE, EMBEDDED, EXAMPLES, REGISTRY

PREDICTABLE = ("code", "math", "extraction", "lists")
"""Categories whose text the drafter can predict (the issue's examples); ``chat`` is open text."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--topk", type=int, default=DEFAULT_TREE.topk)
    parser.add_argument("--mu", type=float, default=DEFAULT_TREE.mu)
    parser.add_argument("--budget", type=int, default=DEFAULT_TREE.budget)
    parser.add_argument("--budgets", default="16,32,64", help="lab latency: N values (comma-separated)")
    parser.add_argument("--mus", default="0.03,0.1,0.3", help="lab latency: mu values (comma-separated)")
    parser.add_argument("--steps-per-run", type=int, default=2, help="lab latency: steps frozen per example")
    parser.add_argument("--no-latency", action="store_true")
    args = parser.parse_args(argv)
    target = call_on_fresh_thread(REGISTRY.get, EMBEDDED)  # as in the app: torch off long-lived threads
    tree = TreeConfig(method="talon", budget=args.budget, topk=args.topk, mu=args.mu, depth=DEFAULT_TREE.depth,
                      gamma=DEFAULT_TREE.gamma)
    decode = DecodeConfig(max_new_tokens=args.max_new_tokens, temperature=0.0, seed=0)

    depth, widest, traces = defaultdict(list), defaultdict(list), []
    for example in EXAMPLES:
        drafter = drafter_for("talon", DEFAULT_DRAFTER, target, REGISTRY)
        trace = call_on_fresh_thread(run_to_end, target, drafter, tree, decode, example["prompt"])
        traces.append(trace)
        for step in trace.steps:
            depth[example["category"]].append(step.tree.max_depth)
            widest[example["category"]].append(step.tree.widest_layer)
    print(f"TALON N={tree.budget} K={tree.topk} mu={tree.mu:g}, drafter {DEFAULT_DRAFTER}, "
          f"{args.max_new_tokens} new tokens, greedy")
    print("| category | steps | mean depth | mean widest layer |\n| --- | --- | --- | --- |")
    for category in depth:
        print(f"| {category} | {len(depth[category])} | {statistics.mean(depth[category]):.2f} | "
              f"{statistics.mean(widest[category]):.2f} |")
    predictable = [d for c in PREDICTABLE for d in depth.get(c, [])]
    if predictable and depth.get("chat"):
        ratio = statistics.mean(predictable) / statistics.mean(depth["chat"])
        print(f"predictable ({', '.join(c for c in PREDICTABLE if c in depth)}) / chat mean depth: {ratio:.2f}")
    if args.no_latency:
        return

    budgets = [int(v) for v in args.budgets.split(",")]
    mus = [float(v) for v in args.mus.split(",")]
    seconds: dict[int, list[float]] = defaultdict(list)
    for trace in traces:
        n = len(trace.steps)
        for index in sorted({0, n // 2, n - 1})[:args.steps_per_run]:
            session = new_session()
            session.trace = trace
            lab.freeze(session, index + 1, EMBEDDED, DEFAULT_DRAFTER, progress=lambda *a, **k: None)
            lab.redraw(session, "talon", tree.budget, tree.topk, tree.mu, tree.depth, tree.gamma, "relative")
            for budget in budgets:
                for mu in mus:
                    t0 = time.perf_counter()
                    lab.redraw(session, "talon", budget, tree.topk, mu, tree.depth, tree.gamma, "relative")
                    seconds[budget].append(time.perf_counter() - t0)
    print("\n| N | lab changes | p50 (s) | p90 (s) |\n| --- | --- | --- | --- |")
    for budget in budgets:
        print(f"| {budget} | {len(seconds[budget])} | {_percentile(seconds[budget], 0.5):.3f} | "
              f"{_percentile(seconds[budget], 0.9):.3f} |")


if __name__ == "__main__":
    main()
