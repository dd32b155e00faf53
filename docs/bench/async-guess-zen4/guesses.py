"""Run from the repository root: PYTHONPATH=. python docs/bench/async-guess-zen4/guesses.py

How often async mode's guess of a step's outcome is right, one prompt (the app's first example), greedy,
64 tokens, TALON with the shipped head, K=6, mu=0.1: auto-sized trees (priced by cost_curve.json, the
curve the app measured on the 2-core Zen 4 at 03:20 UTC, 2026-11-26) against fixed N=6 and N=24.  Per
run: steps, hits (the next tree was drafted from the right guess), guesses whose accepted path was right
("stop right") and of those the ones whose bonus token was right too, and guesses stopped at the root.
Output: guesses.txt."""

import json

import torch

import talon.engine.decode as dec
import talon.engine.speculation as sp
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.sizing import CostCurve
from talon.models.loading import load_model

torch.set_num_threads(2)
target = load_model("embedded", device=torch.device("cpu"), dtype=torch.float32)
curve = CostCurve.from_dict(json.load(open("docs/bench/async-guess-zen4/cost_curve.json")))
guesses = []
speculate = sp.speculate


def logged(*args, **kwargs):
    out = speculate(*args, **kwargs)
    guesses.append(list(out.guess))
    return out


dec.speculate = logged
prompt = "What are three good habits for getting better sleep? Explain each briefly."
for name, cfg in [
    ("auto", TreeConfig(method="talon", budget=128, topk=6, mu=0.1, auto=True)),
    ("N=6", TreeConfig(method="talon", budget=6, topk=6, mu=0.1)),
    ("N=24", TreeConfig(method="talon", budget=24, topk=6, mu=0.1)),
]:
    guesses.clear()
    trace = dec.run_to_end(
        target,
        drafter_for("talon", "head", target),
        cfg,
        DecodeConfig(max_new_tokens=64, execution="async"),
        prompt,
        cost_curve=curve,
    )
    stop_right = bonus_right = at_root = 0
    for step, guess in zip(trace.steps, guesses):
        at_root += len(guess) == 1
        if guess and guess[:-1] == step.committed_ids[:-1]:
            stop_right += 1
            bonus_right += guess[-1] == step.committed_ids[-1]
    nodes = sum(len(s.tree) - 1 for s in trace.steps) / len(trace.steps)
    print(
        f"{name}: steps {len(trace.steps)}, hits {sum(bool(s.speculate_hit) for s in trace.steps)}, "
        f"stop right {stop_right}, bonus right {bonus_right}, root guesses {at_root}, mean nodes {nodes:.1f}"
    )
