"""Hybrid auto's trees on a prompt file, kept whole for the calibration replay (2026-12-01, session 55).

Decodes each prompt greedily (64 tokens) with the hybrid method (the shipped head merged with prompt
lookup) at the CPU defaults (N = auto, K=6, mu=0.1) on the cached cost curve, and writes every step's tree
(parents, depths, draft log-probabilities, sources, match lengths), its verdict and the committed tokens,
plus for each retrieval node its *extended* match: the longest suffix of the context (committed tokens and
the path to its parent) that occurred before followed by the node's token (up to 40; prompt lookup itself
looks up at most 3 tokens).

    PYTHONPATH=. python docs/bench/xeon-emr-r55/hybrid_calibration_runs.py PROMPTS.jsonl OUT.json
"""

from __future__ import annotations

import json
import sys

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry
from talon.tree import SOURCE_RETRIEVAL

CAP = 40


def extended_match(context: list[int], token: int) -> int:
    """The longest suffix of ``context`` seen earlier in it followed by ``token`` (at most ``CAP``)."""
    best, n = 0, len(context)
    for j in range(1, n):
        if context[j] != token:
            continue
        length = 0
        while length < CAP and j - 1 - length >= 0 and context[j - 1 - length] == context[n - 1 - length]:
            length += 1
        best = max(best, length)
    return best


def main(prompts_path: str, out: str) -> None:
    prompts = [json.loads(line) for line in open(prompts_path)]
    registry = ModelRegistry()
    target = registry.get("embedded")
    cfg = TreeConfig(method="hybrid", budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=True)
    runs = []
    for k, item in enumerate(prompts):
        drafter = drafter_for("hybrid", "head", target, registry)
        curve = curve_for_run(target, drafter, cfg)
        trace = run_to_end(
            target, drafter, cfg, DecodeConfig(max_new_tokens=64), item["prompt"], texts=False, cost_curve=curve
        )
        seq, steps = list(trace.prompt_ids), []
        for s in trace.steps:
            tree = s.tree
            ext = [
                extended_match(seq + tree.path_tokens(tree.parent[n]), tree.token[n])
                if tree.source[n] == SOURCE_RETRIEVAL
                else 0
                for n in range(len(tree))
            ]
            steps.append(
                {
                    "parent": tree.parent,
                    "depth": tree.depth,
                    "lp": tree.draft_logprob,
                    "src": tree.source,
                    "match": tree.match,
                    "ext": ext,
                    "path": list(s.accepted_path),
                    "status": list(s.status),
                    "expected": s.expected,
                    "committed": len(s.committed_ids),
                }
            )
            seq += list(s.committed_ids)
        runs.append(
            {"id": item.get("id", k), "cat": item.get("category", ""), "prior": trace.calibration_prior, "steps": steps}
        )
        print(f"{k + 1}/{len(prompts)} {item.get('category')}: {len(trace.steps)} steps", flush=True)
    with open(out, "w") as f:
        json.dump(runs, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
