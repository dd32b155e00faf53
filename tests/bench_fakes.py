"""Synthetic benchmark-suite rows (no model): every experiment kind, two temperatures, peers, so the
results schema, the aggregation, the charts and the app's Benchmark tab can be tested in milliseconds."""

from __future__ import annotations

from pathlib import Path

from talon.bench import results as bench_results
from talon.bench.suites import SWEEPS

CATEGORIES = ("MT-Bench", "HumanEval", "GSM-style")
TREE = {"budget": 16, "topk": 6, "mu": 0.03, "depth": 5, "gamma": 4}


def _run(
    experiment: str,
    kind: str,
    method: str,
    prompt: int,
    category: str,
    temperature: float,
    tree: dict | None,
    setting: str = "",
    mat: float = 1.0,
) -> dict:
    """One fake run: 24 tokens, ``24 / mat`` target forwards, AR at 1 s."""
    forwards = round(24 / mat)
    peer = method.startswith("hf_")
    is_tree = tree is not None
    seconds = 1.0 if method == "ar" else 1.0 / mat * (1.3 if is_tree else 1.1)
    return {
        "suite": "fake",
        "experiment": experiment,
        "kind": kind,
        "sweep": SWEEPS.get(kind, ""),
        "setting": setting,
        "temperature": temperature,
        "seed": 0,
        "prompt_id": f"p{prompt}",
        "category": category,
        "source": "assets",
        "method": method,
        "drafter": "fake" if is_tree else "",
        **({k: tree[k] for k in TREE} if is_tree else dict.fromkeys(TREE)),
        "max_new_tokens": 24,
        "prompt_tokens": 50,
        "new_tokens": 24,
        "target_forwards": forwards,
        "draft_forwards": 3 * forwards if is_tree else 0,
        "seconds": seconds,
        "step_seconds": seconds * 0.9,
        "draft_seconds": seconds * 0.2 if is_tree else 0.0,
        "ar_seconds": 1.0,
        "MAT": 24 / forwards,
        "delta": 3.0 if is_tree else 0.0,
        "tokens_per_s": 24 / seconds,
        "speedup": 1.0 / seconds,
        "draft_share": 0.22 if is_tree else 0.0,
        "mean_depth": None if peer else (3.0 if is_tree else 0.0),
        "mean_tree_nodes": None if peer else (6.0 if is_tree else 0.0),
        "mean_layer_widths": None if peer else ([3.0, 2.0, 1.0] if is_tree else []),
        "matches_ar": (prompt != 1 or method != "hf_assisted") if temperature == 0 else None,
        "stop_reason": "max_new_tokens",
        "text": "fake text, with a comma",
        "token_ids": [1, 2, 3],
    }


def fake_runs() -> list[dict]:
    """Runs of a fake suite with every experiment kind (one run of hf_assisted differs from AR)."""
    rows = []
    for p, cat in enumerate(CATEGORIES):
        for t in (0.0, 1.0):
            rows.append(_run("categories", "categories", "ar", p, cat, t, None))
            rows.append(_run("categories", "categories", "eagle2", p, cat, t, TREE, mat=2.0))
            rows.append(_run("categories", "categories", "talon", p, cat, t, TREE, mat=2.5))
        # auto-sized (greedy), with the cost rule's plan: 2.6 tokens a step expected, MAT committed
        auto = _run("categories", "categories", "talon+auto", p, cat, 0.0, {**TREE, "budget": 128}, mat=2.4)
        rows.append({**auto, "auto": True, "mean_expected": 2.6, "mean_realised": 2.4, "mean_sq_miss": 0.5})
        rows.append(_run("sweep", "budget_sweep", "ar", p, cat, 0.0, None))
        for n in (8, 16, 32):
            for m in ("eagle2", "talon"):
                rows.append(
                    _run("sweep", "budget_sweep", m, p, cat, 0.0, {**TREE, "budget": n}, f"N={n}", mat=1.5 + n / 32)
                )
        # auto-sized, run once a prompt: 1.2x the best fixed N (N=32, MAT 2.5) on p0 and p2, 0.96x on p1
        auto_mat = 2.4 if p == 1 else 3.0
        rows.append(
            _run("sweep", "budget_sweep", "talon+auto", p, cat, 0.0, {**TREE, "budget": 128}, "N=auto", auto_mat)
        )
        rows.append(_run("mu", "mu_sweep", "ar", p, cat, 0.0, None))
        for mu in (0.01, 0.1):
            rows.append(_run("mu", "mu_sweep", "talon", p, cat, 0.0, {**TREE, "mu": mu}, f"mu={mu}", mat=2 + mu))
        rows.append(_run("root", "topk_sweep", "ar", p, cat, 0.0, None))
        for k in (0, 6):
            rows.append(
                _run("root", "topk_sweep", "talon", p, cat, 0.0, {**TREE, "topk": k}, f"K={k}", mat=2.2 + k / 60)
            )
        for m in ("ar", "hf_generate", "hf_prompt_lookup", "hf_assisted"):
            rows.append(_run("peers", "methods", m, p, cat, 0.0, None, mat=1.0 if m != "hf_prompt_lookup" else 1.6))
        rows.append(_run("peers", "methods", "talon", p, cat, 0.0, TREE, mat=2.5))
        rows.append(_run("sources", "sources", "ar", p, cat, 0.0, None))
        for m, mat in (("talon@head", 2.0), ("talon@ngram", 1.5), ("hybrid@head", 3.0)):
            rows.append(_run("sources", "sources", m, p, cat, 0.0, TREE, mat=mat))
    return rows


def write_fake_results(
    directory: Path,
    date: str = "2026-01-01T00:00:00+00:00",
    device: str = "cpu",
    kinds: tuple[str, ...] | None = None,
    dtype: str | None = None,
) -> Path:
    """A complete fake results directory (tables and meta.json, no plots) measured on ``device``;
    ``kinds``: the experiment kinds meta.json lists (None: no list); ``dtype``: the model's (None: not
    recorded, as in early results)."""
    runs = fake_runs()
    bench_results.write_tables(directory, runs, bench_results.summarize(runs))
    meta = {
        "suite": "fake",
        "date": date,
        "description": "synthetic rows",
        "device": device,
        "cpu": "test CPU",
        "cpu_count": 2,
        "model": "fake model",
        "command": "python -m talon.bench --suite fake",
        "notes": ["a note"],
    }
    if kinds is not None:
        meta["experiments"] = [{"name": kind, "kind": kind} for kind in kinds]
    if dtype is not None:
        meta["dtype"] = dtype
    bench_results.write_meta(directory, meta)
    return directory
