"""Losslessness on random prompts and settings (2026-12-01, session 58): each case decodes a prompt with plain
decoding, then with one speculative method (chain, static, EAGLE-2, TALON or hybrid; fixed N or auto; the
shipped head or prompt lookup; sync or async; random N, K, mu, depth, gamma, max new tokens, temperature
and seed) and checks that the tokens are the same (greedy: plain greedy decoding; T > 0: the AR sample of
the same seed).  Prompts: the example and calibration prompts, with emoji, other scripts, chat-template
markers or code appended, repeated two to five times (long copy chains for prompt lookup), cut short, or
made of those pieces alone.  Settings, prompts and drafters the project refuses are printed and skipped.

    PYTHONPATH=. python docs/bench/xeon-emr-r58/fuzz_lossless.py SEED CASES
"""

from __future__ import annotations

import json
import random
import sys

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry

PIECES = (
    *("", " ", "\n\n", "🙂🙃 ", "日本語のテキスト。", "مرحبا ", "<|im_end|>", "<|im_start|>assistant\n"),
    *("def f(x):\n    return x", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ", "the the the the ", "\t\t{}[]()"),
)


def prompts_from(*paths: str) -> list[str]:
    return [json.loads(line)["prompt"] for path in paths for line in open(path)]


def random_prompt(rng: random.Random, base: list[str]) -> str:
    k = rng.random()
    if k < 0.4:
        return rng.choice(base)
    if k < 0.6:
        return rng.choice(base) + rng.choice(PIECES) * rng.randint(1, 6)
    if k < 0.75:
        return (rng.choice(base) + " ") * rng.randint(2, 5)
    if k < 0.9:
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8)))
    return rng.choice(base)[: rng.randint(1, 20)]


def tokens(trace) -> list[int]:
    return [x for s in trace.steps for x in s.committed_ids]


def main(seed: int, cases: int) -> None:
    rng = random.Random(seed)
    registry = ModelRegistry()
    target = registry.get("embedded")
    base = prompts_from("assets/prompts.jsonl", "assets/calibration_prompts.jsonl")
    bad = 0
    for i in range(cases):
        prompt = random_prompt(rng, base)
        most = rng.choice([1, 2, 3, 5, 17, 40, 64, 100])
        temperature, sample_seed = rng.choice([0.0, 0.0, 0.0, 0.7, 1.0, 1.5]), rng.randint(0, 10**6)
        try:
            plain = DecodeConfig(max_new_tokens=most, temperature=temperature, seed=sample_seed)
            reference = tokens(run_to_end(target, None, TreeConfig(method="ar"), plain, prompt, texts=False))
        except Exception as e:
            print(i, "prompt refused", repr(prompt[:30]), e)
            continue
        method = rng.choice(["talon", "hybrid", "eagle2", "chain", "static"])
        auto = method in ("talon", "hybrid", "eagle2") and rng.random() < 0.6
        settings = dict(
            method=method,
            budget=rng.choice([1, 2, 4, 8, 24, 60]),
            topk=rng.choice([1, 2, 6, 10]),
            mu=rng.choice([0.0, 0.03, 0.1, 0.5, 1.0]),
            depth=rng.choice([1, 3, 5, 8]),
            gamma=rng.choice([1, 4, 7]),
            auto=auto,
        )
        try:
            cfg = TreeConfig(**settings)
        except Exception as e:
            print(i, "config refused", settings, e)
            continue
        kind = rng.choice(["head", "head", "ngram"]) if method != "hybrid" else "head"
        try:
            drafter = drafter_for(method, kind, target, registry)
        except Exception as e:
            print(i, "drafter refused", method, kind, e)
            continue
        execution = rng.choice(["sync", "sync", "async"])
        dec = DecodeConfig(max_new_tokens=most, temperature=temperature, seed=sample_seed, execution=execution)
        curve = curve_for_run(target, drafter, cfg)
        ids = tokens(run_to_end(target, drafter, cfg, dec, prompt, texts=False, cost_curve=curve))
        bad += ids != reference
        verdict = "OK" if ids == reference else "MISMATCH"
        print(i, verdict, method, kind, execution, settings, "T", temperature, "max", most, "len", len(ids), flush=True)
    print("mismatches", bad)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
