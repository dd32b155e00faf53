"""The tree lab on the shipped examples: ``python -m ui.lab_speed``.

1. **Adaptation.** Decodes every example with TALON at the app's defaults and reports, per category,
   the mean depth of the step trees (draft layers below the root) and the mean widest layer, and the
   ratio of the predictable categories' mean depth to open chat's.
2. **The text's own bound** (``--bound DRAFTER``): decodes every example with a chain of 12 drafts
   from ``DRAFTER`` and reports, per threshold tau, the ratio of the predictable categories' mean
   "confident depth" (1 + the drafts before the chain's cumulative draft probability falls below tau)
   to chat's: how far apart the categories are in that drafter's own confidence, whatever the tree
   policy.  With ``layers:29`` (the target less its last layer, as close to a perfect drafter as the
   embedded model has) it shows roughly what any drafter could.
3. **Latency.** Freezes steps of those runs (``ui.tree_lab.freeze``) and times the Tree lab's handler of a
   setting change (``ui.tree_lab.redraw``: rebuild and verify the tree at the frozen context, draw the tree,
   the gate and the caption) for several N (draft nodes, root not counted) and mu; prints p50 and p90
   per N.  The browser's own drawing is not included.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import defaultdict

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.decode import run_to_end
from talon.metrics import percentile

from . import tree_lab
from .compute import call_on_fresh_thread
from .session import new_session
from .shared import DEFAULT_DRAFTER, DEFAULT_TREE, EMBEDDED, EXAMPLES, REGISTRY

PREDICTABLE = ("code", "math", "extraction", "lists")
"""Categories whose text the drafter can predict (the issue's examples); ``chat`` is open text."""


BOUND_CHAIN = 12
BOUND_TAUS = (0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02)


def confident_depth(probs: list[float], tau: float) -> int:
    """1 + the number of leading drafts whose cumulative probability stays at or above ``tau``."""
    depth, cumulative = 1, 1.0
    for p in probs:
        cumulative *= p
        if cumulative < tau:
            break
        depth += 1
    return depth


def confidence_bound(target, drafter_spec: str, max_new_tokens: int) -> None:
    """Print, per tau, predictable / chat mean ``confident_depth`` of greedy chain drafts by ``drafter_spec``."""
    chain = TreeConfig(method="chain", gamma=BOUND_CHAIN)
    decode = DecodeConfig(max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
    probs = defaultdict(list)  # category -> per step, the chain's draft probabilities
    for example in EXAMPLES:
        drafter = drafter_for("chain", drafter_spec, target, REGISTRY)
        trace = call_on_fresh_thread(run_to_end, target, drafter, chain, decode, example["prompt"])
        for step in trace.steps:
            probs[example["category"]].append([math.exp(lp) for lp in step.tree.draft_logprob[1:]])
    print(
        f"Chains of {BOUND_CHAIN} drafts by {drafter_spec}, {max_new_tokens} new tokens, greedy: "
        "predictable / chat mean confident depth"
    )
    print("| tau | ratio | chat | predictable |\n| --- | --- | --- | --- |")
    for tau in BOUND_TAUS:
        chat = statistics.mean(confident_depth(p, tau) for p in probs["chat"])
        predictable = statistics.mean(confident_depth(p, tau) for c in PREDICTABLE for p in probs[c])
        print(f"| {tau:g} | {predictable / chat:.2f} | {chat:.2f} | {predictable:.2f} |")


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
    parser.add_argument("--bound", metavar="DRAFTER", help="only the confidence bound, with this drafter spec")
    args = parser.parse_args(argv)
    target = call_on_fresh_thread(REGISTRY.get, EMBEDDED)  # as in the app: torch off long-lived threads
    if args.bound:
        confidence_bound(target, args.bound, args.max_new_tokens)
        return
    tree = TreeConfig(
        method="talon",
        budget=args.budget,
        topk=args.topk,
        mu=args.mu,
        depth=DEFAULT_TREE.depth,
        gamma=DEFAULT_TREE.gamma,
    )
    decode = DecodeConfig(max_new_tokens=args.max_new_tokens, temperature=0.0, seed=0)

    depth, widest, traces = defaultdict(list), defaultdict(list), []
    for example in EXAMPLES:
        drafter = drafter_for("talon", DEFAULT_DRAFTER, target, REGISTRY)
        trace = call_on_fresh_thread(run_to_end, target, drafter, tree, decode, example["prompt"])
        traces.append(trace)
        for step in trace.steps:
            depth[example["category"]].append(step.tree.max_depth)
            widest[example["category"]].append(step.tree.widest_layer)
    print(
        f"TALON N={tree.budget} K={tree.topk} μ={tree.mu:g}, drafter {DEFAULT_DRAFTER}, "
        f"{args.max_new_tokens} new tokens, greedy"
    )
    print("| category | steps | mean depth | mean widest layer |\n| --- | --- | --- | --- |")
    for category in depth:
        print(
            f"| {category} | {len(depth[category])} | {statistics.mean(depth[category]):.2f} | "
            f"{statistics.mean(widest[category]):.2f} |"
        )
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
        for index in sorted({0, n // 2, n - 1})[: args.steps_per_run]:
            session = new_session()
            session.trace = trace
            tree_lab.freeze(session, index + 1, EMBEDDED, DEFAULT_DRAFTER, progress=lambda *a, **k: None)
            tree_lab.redraw(session, "talon", tree.budget, tree.topk, tree.mu, tree.depth, tree.gamma, "relative")
            for budget in budgets:
                for mu in mus:
                    t0 = time.perf_counter()
                    tree_lab.redraw(session, "talon", budget, tree.topk, mu, tree.depth, tree.gamma, "relative")
                    seconds[budget].append(time.perf_counter() - t0)
    print("\n| N | lab changes | p50 (s) | p90 (s) |\n| --- | --- | --- | --- |")
    for budget in budgets:
        print(
            f"| {budget} | {len(seconds[budget])} | {percentile(seconds[budget], 0.5):.3f} | "
            f"{percentile(seconds[budget], 0.9):.3f} |"
        )


if __name__ == "__main__":
    main()
