"""The cost rule's objective, side by side: each tree's own E / price (shipped) against E - rate x price with
the run's committed tokens per plain step so far as the rate (2026-12-01, session 58).

Maximising every step's own E / price is not what maximises a run's tokens per second: over a run that is
sum(committed) / sum(price), and a step adds to it exactly when its tree's E - rate x price does, with rate
the run's own tokens per plain step.  A sure step should then grow past its own best ratio, and an unsure
one shrink below it (down to a plain step).  The run-level rate starts at 1 (plain decoding) with the
weight of ``PRIOR`` plain steps.

Interleaved per prompt, the headline suite's 30 prompts, greedy, 64 tokens, the cached cost curve:
``ar``, then each method auto-sized under either objective (order alternating per prompt), ROUNDS rounds.

    PYTHONPATH=. python docs/bench/xeon-emr-r58/rate_rule_ab.py ROUNDS OUT.json [METHODS]
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

import talon.engine.decode as decode
from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.sizing import CostRule
from talon.models.registry import ModelRegistry

PRIOR = 2.0
SHIPPED = CostRule


class RateRule(CostRule):
    """The shipped rule's decisions with ``E - rate * price`` in place of ``E / price``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tokens, self.paid, self.last_price = PRIOR, PRIOR, None

    @property
    def rate(self) -> float:
        return self.tokens / self.paid

    def price(self, nodes: int, call_widths: Sequence[int]) -> float | None:
        self.last_price = super().price(nodes, call_widths)
        return self.last_price

    def observe(self, tree, verdict) -> None:
        super().observe(tree, verdict)
        if self.last_price is not None:
            self.tokens += len(verdict.accepted_path)  # accepted drafts + the bonus token
            self.paid += self.last_price

    def affordable(self, expected, nodes, call_widths, accepts) -> int:
        lam = self.rate
        best, best_k = expected - lam * self.curve.price(nodes, call_widths), 0
        for k, accept in enumerate(accepts, start=1):
            expected += accept
            value = expected - lam * self.curve.price(nodes + k, call_widths)
            if value > best:
                best, best_k = value, k
        return best_k

    def layer_pays(self, expected, nodes, call_widths, frontier_accept, frontier_given_parent) -> bool:
        if not frontier_accept:
            return False
        lam = self.rate
        widths = [*call_widths, len(frontier_accept)]
        base = expected - lam * self.curve.price(nodes, call_widths)
        gains = sorted((a * g for a, g in zip(frontier_accept, frontier_given_parent)), reverse=True)
        for k, gain in enumerate(gains, start=1):
            expected += gain
            if expected - lam * self.curve.price(nodes + k, widths) > base:
                return True
        return False


def one_run(target, registry, method: str, rule: type, prompt: str) -> dict:
    decode.CostRule = rule
    try:
        cfg = TreeConfig(method=method, budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=method != "ar")
        drafter = None if method == "ar" else drafter_for(method, "head", target, registry)
        curve = curve_for_run(target, drafter, cfg) if method != "ar" else None
        t0 = time.perf_counter()
        trace = decode.run_to_end(
            target, drafter, cfg, DecodeConfig(max_new_tokens=64), prompt, texts=False, cost_curve=curve
        )
        seconds = time.perf_counter() - t0
    finally:
        decode.CostRule = SHIPPED
    steps = trace.steps
    return {
        "seconds": seconds,
        "ids": [t for s in steps for t in s.committed_ids],
        "steps": len(steps),
        "nodes": [len(s.tree) - 1 for s in steps],
        "expected": [s.expected for s in steps],
        "committed": [len(s.committed_ids) for s in steps],
        "price": [s.price for s in steps],
    }


def main(rounds: int, out: str, methods: Sequence[str]) -> None:
    experiment = get_suite("headline").experiments[0]
    prompts, _ = load_prompts(experiment)
    registry = ModelRegistry()
    target = registry.get("embedded")
    variants = [(m, name, rule) for m in methods for name, rule in (("ratio", CostRule), ("rate", RateRule))]
    one_run(target, registry, "ar", CostRule, prompts[0]["prompt"])  # warm-up
    for m, _, rule in variants:
        one_run(target, registry, m, rule, prompts[0]["prompt"])
    results = []
    for r in range(rounds):
        for k, item in enumerate(prompts):
            order = variants if (k + r) % 2 == 0 else variants[::-1]
            row = {"round": r, "id": item.get("id", k), "category": item.get("category", ""), "runs": {}}
            row["runs"]["ar"] = one_run(target, registry, "ar", CostRule, item["prompt"])
            for m, name, rule in order:
                row["runs"][f"{m}/{name}"] = one_run(target, registry, m, rule, item["prompt"])
            results.append(row)
            same = all(v["ids"] == row["runs"]["ar"]["ids"] for v in row["runs"].values())
            times = " ".join(f"{k2}={v['seconds']:.2f}" for k2, v in row["runs"].items())
            print(f"r{r} {k + 1}/{len(prompts)} {row['category']}: {times} same={same}", flush=True)
            with open(out, "w") as f:
                json.dump(results, f)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3].split(",") if len(sys.argv) > 3 else ["talon"])
