"""Benchmark CLI: methods x prompts on one target, interleaved per prompt so every method meets the
same machine noise, with speedups measured against plain autoregressive decoding in the same run.

    python -m talon.bench --prompts assets/prompts.jsonl --methods ar,chain,static,eagle2,talon \\
        --drafter ngram --budget 16 --max-new-tokens 64 --temperature 0 --seed 0 --out results.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from . import metrics
from .config import METHODS, ConfigError, DecodeConfig, ModelSpec, TreeConfig
from .decode import device_label, run_to_end
from .drafters import DRAFTER_HELP, make_drafter
from .models import ModelLoadError, ModelRegistry

WARMUP_TOKENS = 8


def read_prompts(path: str | Path) -> list[dict]:
    """JSONL lines ``{"id", "category", "prompt"}``; raises ``ConfigError`` naming the bad line."""
    prompts = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            prompts.append({"id": str(item["id"]), "category": str(item.get("category", "")),
                            "prompt": str(item["prompt"])})
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ConfigError(f"{path}:{n}: expected {{\"id\", \"category\", \"prompt\"}} ({err}).") from err
    if not prompts:
        raise ConfigError(f"{path} holds no prompts.")
    return prompts


def summarize_runs(runs: list[dict]) -> list[dict]:
    """Per method over all prompts: MAT, delta, tokens/s and speedup over ``ar`` (total AR seconds /
    total method seconds over the same prompts; ``None`` when ``ar`` was not run)."""
    by_method: dict[str, list[dict]] = {}
    for r in runs:
        by_method.setdefault(r["method"], []).append(r)
    ar_seconds = sum(r["seconds"] for r in by_method.get("ar", []))
    rows = []
    for method, rs in by_method.items():
        forwards = sum(r["target_forwards"] for r in rs)
        tokens = sum(r["new_tokens"] for r in rs)
        seconds = sum(r["seconds"] for r in rs)
        rows.append({
            "method": method, "prompts": len(rs), "new_tokens": tokens,
            "MAT": tokens / forwards if forwards else 0.0,
            "delta": sum(r["draft_forwards"] for r in rs) / forwards if forwards else 0.0,
            "tokens_per_s": tokens / seconds if seconds else 0.0,
            "draft_share": (sum(r["draft_seconds"] for r in rs) / seconds) if seconds else 0.0,
            "speedup": metrics.speedup(ar_seconds, seconds) if "ar" in by_method else None,
        })
    return rows


def run_benchmark(prompts: list[dict], methods: list[str], spec: ModelSpec, tree_kwargs: dict,
                  decode_cfg: DecodeConfig, log=print) -> dict:
    """Run every method on every prompt (methods interleaved within each prompt) after one warm-up."""
    registry = ModelRegistry()
    target = registry.get(spec.target, progress=log)
    configs = {m: TreeConfig(method=m, **tree_kwargs) for m in methods}

    def one(method: str, prompt: str, cfg: DecodeConfig):
        drafter = None if method == "ar" else make_drafter(spec.drafter, target, registry)
        return run_to_end(target, drafter, configs[method], cfg, prompt)

    warm = DecodeConfig(temperature=decode_cfg.temperature, seed=decode_cfg.seed, max_new_tokens=WARMUP_TOKENS)
    for method in methods:
        one(method, prompts[0]["prompt"], warm)
    runs = []
    for item in prompts:
        for method in methods:
            trace = one(method, item["prompt"], decode_cfg)
            s = metrics.summarize(trace)
            runs.append({"prompt_id": item["id"], "category": item["category"], "method": method,
                         "token_ids": trace.output_ids, "text": trace.output_text,
                         "new_tokens": s["new_tokens"], "target_forwards": s["target_forwards"],
                         "draft_forwards": s["draft_forwards"], "seconds": s["seconds"],
                         "draft_seconds": sum(st.draft_seconds for st in trace.steps),
                         "prompt_tokens": len(trace.prompt_ids)})
            log(f"{item['id']:>10} {method:>7}: {s['new_tokens']} tokens, MAT {s['mat']:.2f}, "
                f"{s['seconds']:.2f} s")
    drafter_name = make_drafter(spec.drafter, target, registry).name if set(methods) - {"ar"} else ""
    return {"device": device_label(target), "model": target.name, "drafter": drafter_name,
            "tree_config": tree_kwargs, "decode_config": dict(vars(decode_cfg)),
            "runs": runs, "summary": summarize_runs(runs)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m talon.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", required=True, help="JSONL file of {id, category, prompt}")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--target", default="embedded", help="'embedded', a local directory or a Hub id")
    p.add_argument("--drafter", default="ngram", help=DRAFTER_HELP)
    p.add_argument("--budget", type=int, default=TreeConfig.budget, help="N: draft nodes, root excluded")
    p.add_argument("--topk", type=int, default=TreeConfig.topk, help="K: root children (talon), top-k (eagle2)")
    p.add_argument("--mu", type=float, default=TreeConfig.mu, help="TALON confidence gate in (0, 1]")
    p.add_argument("--depth", type=int, default=TreeConfig.depth, help="draft layers (eagle2, static)")
    p.add_argument("--gamma", type=int, default=TreeConfig.gamma, help="chain length (draft tokens)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    p.add_argument("--out", default="results.json", help="where to write the results JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    try:
        for m in methods:
            TreeConfig(method=m)  # validates the name
        tree_kwargs = {"budget": args.budget, "topk": args.topk, "mu": args.mu, "depth": args.depth,
                       "gamma": args.gamma}
        TreeConfig(**tree_kwargs)
        decode_cfg = DecodeConfig(temperature=args.temperature, seed=args.seed,
                                  max_new_tokens=args.max_new_tokens)
        prompts = read_prompts(args.prompts)[: args.limit]
        result = run_benchmark(prompts, methods, ModelSpec(args.target, args.drafter), tree_kwargs,
                               decode_cfg, log=lambda s: print(s, file=sys.stderr))
    except (ConfigError, ModelLoadError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False))
    table = pd.DataFrame(result["summary"]).set_index("method")
    print(f"device: {result['device']}  model: {result['model']}  drafter: {result['drafter'] or '-'}")
    print(table.to_string(float_format=lambda x: f"{x:.3f}"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
