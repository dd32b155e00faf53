"""Benchmark CLI: methods x prompts on one target, interleaved per prompt so every method meets the
same machine noise, with speedups measured against plain autoregressive decoding in the same run.

    python -m talon.bench --prompts assets/prompts.jsonl --methods ar,chain,static,eagle2,talon \\
        --drafter ngram --budget 16 --max-new-tokens 64 --temperature 0 --seed 0 --out results.json

    python -m talon.bench --suite quick --out-dir docs/bench/quick-cpu

The first form runs one method list and writes a JSON file.  The second runs a named suite
(``talon.suites``: ``smoke``, ``quick``, ``paper``), the transformers peers included, and writes
``runs.csv``, ``summary.csv``, ``meta.json`` and Plotly charts (HTML; PNG too when a static image
exporter works) into the directory.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from . import bench_results, metrics
from .config import METHODS, ConfigError, DecodeConfig, ModelSpec, TreeConfig, device_default_tree
from .decode import device_label, encode_prompt, run_to_end
from .drafters import DRAFTER_HELP, drafter_for
from .models import LoadedModel, ModelLoadError, ModelRegistry
from .peers import assistant_for, default_assistant_spec, run_peer
from .suites import (ALL_METHODS, PEER_METHODS, SUITES, Experiment, Suite, get_suite, load_prompts, split_method,
                     with_overrides)

WARMUP_TOKENS = 8
TREE_FIELDS = ("budget", "topk", "mu", "depth", "gamma")

Log = Callable[[str], None]


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


def with_rates(row: dict) -> dict:
    """``row`` plus its own MAT, delta, tokens/s and draft share (``metrics.pooled`` of one run)."""
    pooled = metrics.pooled([{k: v for k, v in row.items() if v is not None}])
    return {**row, **{k: pooled[k] for k in ("MAT", "delta", "tokens_per_s", "draft_share")}}


def trace_row(trace, method: str) -> dict:
    """One run row from a ``RunTrace``: tokens and text, counts, timings (``seconds`` includes the
    prefill; ``step_seconds`` = drafting + verification; ``draft_seconds`` = tree building) and the tree
    shape (mean deepest layer, mean draft nodes, mean nodes per layer), plus the derived rates."""
    steps = trace.steps
    return with_rates({
        "method": method, "token_ids": trace.output_ids, "text": trace.output_text,
        "new_tokens": len(trace.output_ids), "target_forwards": len(steps),
        "draft_forwards": sum(s.drafter_forwards for s in steps), "seconds": trace.seconds,
        "draft_seconds": sum(s.draft_seconds for s in steps), "step_seconds": metrics.step_seconds(trace),
        "prompt_tokens": len(trace.prompt_ids), "mean_depth": metrics.mean_tree_depth(steps),
        "mean_tree_nodes": metrics.mean_tree_nodes(steps), "mean_layer_widths": metrics.mean_layer_widths(steps),
        "stop_reason": trace.stop_reason, "execution": trace.execution,
        "speculation_hit_rate": metrics.speculation_hit_rate(trace),
        "wait_seconds": sum(s.wait_seconds for s in steps)})


def summarize_runs(runs: list[dict]) -> list[dict]:
    """Per method over all prompts: MAT, delta, tokens/s, draft share (draft seconds / step seconds),
    speedup over ``ar`` (total AR seconds / total method seconds over the same prompts; ``None``
    when ``ar`` was not run) and, for async runs, the share of steps whose speculative tree was right
    (weighted by target forwards; ``None`` for sync runs)."""
    by_method: dict[str, list[dict]] = {}
    for r in runs:
        by_method.setdefault(r["method"], []).append(r)
    ar_seconds = sum(r["seconds"] for r in by_method.get("ar", []))
    rows = []
    for method, rs in by_method.items():
        p = metrics.pooled(rs)
        hits = [(r["speculation_hit_rate"], r["target_forwards"]) for r in rs
                if r.get("speculation_hit_rate") is not None]
        rows.append({"method": method, "prompts": len(rs), "new_tokens": p["new_tokens"], "MAT": p["MAT"],
                     "delta": p["delta"], "tokens_per_s": p["tokens_per_s"], "draft_share": p["draft_share"],
                     "speedup": metrics.speedup(ar_seconds, p["seconds"]) if "ar" in by_method else None,
                     "speculation_hit_rate": sum(h * n for h, n in hits) / sum(n for _, n in hits) if hits else None})
    return rows


def run_benchmark(prompts: list[dict], methods: list[str], spec: ModelSpec, tree_kwargs: dict,
                  decode_cfg: DecodeConfig, log=print) -> dict:
    """Run every method on every prompt (methods interleaved within each prompt) after one warm-up."""
    registry = ModelRegistry()
    target = registry.get(spec.target, progress=log)
    configs = {m: TreeConfig(method=m, **tree_kwargs) for m in methods}

    def one(method: str, prompt: str, cfg: DecodeConfig):
        drafter = drafter_for(method, spec.drafter, target, registry)
        return run_to_end(target, drafter, configs[method], cfg, prompt)

    warm = replace(decode_cfg, max_new_tokens=WARMUP_TOKENS)
    for method in methods:
        one(method, prompts[0]["prompt"], warm)
    runs = []
    for item in prompts:
        for method in methods:
            trace = one(method, item["prompt"], decode_cfg)
            row = trace_row(trace, method)
            runs.append({"prompt_id": item["id"], "category": item["category"], **row})
            hits = row["speculation_hit_rate"]
            log(f"{item['id']:>10} {method:>7}: {row['new_tokens']} tokens, MAT {row['MAT']:.2f}, "
                f"{row['seconds']:.2f} s" + ("" if hits is None else f", async guesses right {hits:.0%}"))
    tree_methods = [m for m in methods if m != "ar"]
    drafter_name = drafter_for(tree_methods[0], spec.drafter, target, registry).name if tree_methods else ""
    return {"device": device_label(target), "model": target.name, "drafter": drafter_name,
            "tree_config": tree_kwargs, "decode_config": dict(vars(decode_cfg)),
            "runs": runs, "summary": summarize_runs(runs)}


# ---- suites -----------------------------------------------------------------------------------------
class SuiteRunner:
    """Runs a suite's experiments on one target: every method and setting on a prompt before the next
    prompt, the autoregressive run first, one short warm-up per method before its first measured run.

    Args:
        suite: the suite (after ``talon.suites.with_overrides``).
        target: the loaded target model.
        registry: where drafters' models and heads come from.
        limit: at most this many prompts from each prompt set (None = all).
        log: receives one line per run.
    """

    def __init__(self, suite: Suite, target: LoadedModel, registry: ModelRegistry, limit: int | None = None,
                 log: Log = print) -> None:
        self.suite, self.target, self.registry, self.limit, self.log = suite, target, registry, limit, log
        self.default_tree = device_default_tree(target.device.type == "cuda")[0]
        self.assistant_spec = suite.assistant or default_assistant_spec(suite.drafter)
        self._assistant: LoadedModel | None = None
        self._warm: set[str] = set()
        self.skipped: dict[str, str] = {}
        self.notes: list[str] = []
        self.drafter_names: dict[str, str] = {}

    def assistant(self) -> LoadedModel:
        """hf_assisted's draft model, loaded on first use."""
        if self._assistant is None:
            self._assistant = assistant_for(self.assistant_spec, self.target, self.registry)
        return self._assistant

    def drafter(self, name: str):
        """A fresh drafter for the tree method ``name`` (``METHOD`` or ``METHOD@DRAFTER``)."""
        method, spec = split_method(name)
        return drafter_for(method, spec or self.suite.drafter, self.target, self.registry)

    def available(self, method: str) -> bool:
        """Whether ``method`` can run with this suite's drafter / assistant; the reason it cannot is kept
        in ``skipped`` (e.g. ``hybrid`` with the n-gram drafter)."""
        if method in self.skipped:
            return False
        try:
            if method == "hf_assisted":
                self.drafter_names[method] = self.assistant().name
            elif method not in PEER_METHODS and method != "ar":
                self.drafter_names[method] = self.drafter(method).name
        except (ConfigError, ModelLoadError) as err:
            self.skipped[method] = str(err)
            self.log(f"skipping {method}: {err}")
            return False
        return True

    def run_one(self, method: str, tree_kwargs: dict, item: dict, ids: list[int], temperature: float,
                max_new_tokens: int) -> dict:
        """One generation of ``item`` (token ids ``ids``) with ``method``; a run row without the
        experiment's columns."""
        if method in PEER_METHODS:
            row = run_peer(method, self.target, ids, max_new_tokens, temperature=temperature, seed=self.suite.seed,
                           assistant=self.assistant() if method == "hf_assisted" else None)
            return {**with_rates(row), "mean_depth": None, "mean_tree_nodes": None, "mean_layer_widths": None}
        cfg = TreeConfig(method=split_method(method)[0], **tree_kwargs)
        dec = DecodeConfig(temperature=temperature, seed=self.suite.seed, max_new_tokens=max_new_tokens)
        return trace_row(run_to_end(self.target, self.drafter(method), cfg, dec, item["prompt"], prompt_ids=ids),
                         method)

    def plan(self, experiment: Experiment) -> list[tuple[str, dict, str]]:
        """``(method, tree kwargs, setting label)`` in run order: ``ar`` first, then per setting every
        other method that can run."""
        settings = experiment.settings(self.default_tree)
        methods = [m for m in experiment.methods if m != "ar" and self.available(m)]
        out = [("ar", settings[0], "")]
        for kwargs in settings:
            label = f"{'N' if experiment.sweep == 'budget' else experiment.sweep}={kwargs[experiment.sweep]}" \
                if experiment.sweep else ""
            out += [(m, kwargs, label) for m in methods]
        return out

    def warm_up(self, plan: list[tuple[str, dict, str]], item: dict, ids: list[int], temperature: float) -> None:
        for method, kwargs, _ in plan:
            if method not in self._warm:
                self.run_one(method, kwargs, item, ids, temperature, WARMUP_TOKENS)
                self._warm.add(method)

    def experiment_columns(self, experiment: Experiment, method: str, kwargs: dict, label: str, item: dict,
                           temperature: float) -> dict:
        """The run row's columns that say what was run (tree fields only for tree methods)."""
        is_tree = split_method(method)[0] in METHODS and method != "ar"
        tree = {k: (kwargs[k] if is_tree else None) for k in TREE_FIELDS}
        return {"suite": self.suite.name, "experiment": experiment.name, "kind": experiment.kind,
                "sweep": experiment.sweep, "setting": label if method != "ar" else "", "temperature": temperature,
                "seed": self.suite.seed, "prompt_id": item["id"], "category": item["category"],
                "source": item["source"], "drafter": self.drafter_names.get(method, ""),
                "max_new_tokens": experiment.max_new_tokens, **tree}

    def run_prompt(self, experiment: Experiment, plan: list[tuple[str, dict, str]], item: dict, ids: list[int],
                   temperature: float) -> list[dict]:
        """Every planned run on one prompt at one temperature, AR first; a run the settings refuse (e.g. a
        prompt too long for the context with a big tree) is logged, kept in ``skipped`` and left out."""
        rows: list[dict] = []
        ar = None
        for method, kwargs, label in plan:
            try:
                run = self.run_one(method, kwargs, item, ids, temperature, experiment.max_new_tokens)
            except ConfigError as err:
                self.skipped[f"{experiment.name}/{method}/{label or '-'}/{item['id']}"] = str(err)
                self.log(f"skipped {method} {label} on {item['id']}: {err}")
                if method == "ar":
                    return []  # no baseline, no speedups: leave the prompt out
                continue
            row = {**self.experiment_columns(experiment, method, kwargs, label, item, temperature), **run}
            ar = row if method == "ar" else ar
            row["ar_seconds"] = ar["seconds"]
            row["speedup"] = metrics.speedup(ar["seconds"], row["seconds"])
            row["matches_ar"] = row["token_ids"] == ar["token_ids"] if temperature == 0 else None
            rows.append(row)
            self.log(f"{experiment.name} T={temperature:g} {item['id']:>16} {method:>16} {label:>8}: "
                     f"{row['new_tokens']:3d} tok, MAT {row['MAT']:.2f}, {row['seconds']:.2f} s, x{row['speedup']:.2f}")
        return rows

    def experiment_rows(self, experiment: Experiment) -> Iterator[list[dict]]:
        """The runs of one experiment as ``bench_results.RUN_COLUMNS`` rows, one list per prompt and
        temperature as soon as it is measured."""
        prompts, notes = load_prompts(experiment, self.limit)
        self.notes += [n for n in notes if n not in self.notes]
        plan = self.plan(experiment)
        for n, item in enumerate(prompts):
            ids = encode_prompt(self.target, item["prompt"])
            for temperature in experiment.temperatures:
                if n == 0:
                    self.warm_up(plan, item, ids, temperature)
                yield self.run_prompt(experiment, plan, item, ids, temperature)


def environment(target: LoadedModel) -> dict:
    """Where the numbers were measured: device, CPU, versions."""
    import torch
    import transformers

    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"device": device_label(target), "dtype": str(target.dtype).removeprefix("torch."),
            "load_average_1min": round(load[0], 2) if load else None,
            "cpu": cpu or platform.processor(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "platform": platform.platform(), "torch": torch.__version__, "transformers": transformers.__version__}


def run_suite(suite: Suite, target_spec: str = "embedded", limit: int | None = None, log: Log = print,
              registry: ModelRegistry | None = None, checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Run ``suite`` on the target ``target_spec``; returns ``{"runs", "summary", "meta"}`` (rows as
    dicts; ``meta`` without the command and file list, which the CLI adds).  ``checkpoint``, when given,
    receives the same dict (``meta["complete"]`` False) after every prompt, so a cut run keeps its rows."""
    registry = registry or ModelRegistry()
    target = registry.get(target_spec, progress=log)
    runner = SuiteRunner(suite, target, registry, limit, log)
    env_before = environment(target)
    t0 = time.perf_counter()

    def meta(complete: bool) -> dict:
        experiments = [{**asdict(e), "sweep": e.sweep, "tree_settings": e.settings(runner.default_tree)}
                       for e in suite.experiments]
        return {"suite": suite.name, "description": suite.description, "complete": complete,
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "model": target.name, "target_spec": target_spec, "drafter_spec": suite.drafter,
                "drafters": runner.drafter_names, "assistant_spec": runner.assistant_spec,
                "seed": suite.seed, "limit": limit, **env_before,
                "load_average_1min_after": environment(target)["load_average_1min"],
                "seconds": round(time.perf_counter() - t0, 1), "experiments": experiments,
                "skipped": runner.skipped, "notes": runner.notes,
                "peers": {"hf_prompt_lookup": "prompt_lookup_num_tokens=10, max_matching_ngram_size=2",
                          "hf_assisted": "assistant's generation-config defaults of this transformers version"}}

    runs: list[dict] = []
    for experiment in suite.experiments:
        for rows in runner.experiment_rows(experiment):
            runs += rows
            if checkpoint is not None:
                checkpoint({"runs": list(runs), "summary": bench_results.summarize(runs), "meta": meta(False)})
    return {"runs": runs, "summary": bench_results.summarize(runs), "meta": meta(True)}


def write_plots(out_dir: Path, summary: list[dict], png: bool = True) -> tuple[list[Path], str]:
    """Charts of ``viz.bench_charts`` as standalone HTML (Plotly from its CDN) and, when ``png`` and a
    static exporter (kaleido + a Chrome) works, PNG.  Returns the files written and a sentence on PNG."""
    try:
        from viz import bench_charts
    except ImportError as err:  # plotly is not installed: the CSVs still stand
        return [], f"no plots: {err}"
    summary_df = pd.DataFrame(summary, columns=list(bench_results.SUMMARY_COLUMNS))
    figures = bench_charts.figures(summary_df, include_empty=False)
    written = []
    for name, fig in figures.items():
        path = out_dir / f"{name}.html"
        fig.write_html(path, include_plotlyjs="cdn", full_html=True)
        written.append(path)
    if not png:
        return written, "PNG skipped (--no-png)."
    try:
        import plotly.io as pio

        paths = [out_dir / f"{name}.png" for name in figures]
        pio.write_images(list(figures.values()), paths, width=1000)
        return written + paths, "PNG written with kaleido."
    except Exception as err:  # noqa: BLE001 - any exporter failure only means no PNG
        return written, f"PNG skipped: no working static image exporter ({type(err).__name__}: {str(err)[:200]})."


def write_suite(out_dir: Path, result: dict, command: str, png: bool = True) -> list[Path]:
    """Write a suite's results directory: runs.csv, summary.csv, plots (for a complete result), then
    meta.json, whose ``complete`` says whether the suite ran to its end."""
    paths = bench_results.write_tables(out_dir, result["runs"], result["summary"])
    plots, png_note = write_plots(out_dir, result["summary"], png) if result["meta"].get("complete", True) \
        else ([], "no plots yet: the run is not complete")
    meta = {**result["meta"], "command": command, "png": png_note,
            "files": [p.name for p in paths + plots] + [bench_results.META]}
    return paths + plots + [bench_results.write_meta(out_dir, meta)]


# ---- CLI --------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m talon.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", help="JSONL file of {id, category, prompt} (method-list mode)")
    p.add_argument("--suite", choices=list(SUITES), help="run a named suite (talon.suites) instead of --prompts")
    p.add_argument("--out-dir", help="suite mode: directory for runs.csv, summary.csv, meta.json and plots")
    p.add_argument("--methods", default=None,
                   help=f"comma list of {', '.join(METHODS)} (default: all but hybrid); suite mode: keep only "
                        f"these of {', '.join(ALL_METHODS)} (ar always runs)")
    p.add_argument("--target", default="embedded", help="'embedded', a local directory or a Hub id")
    p.add_argument("--drafter", default=None, help=DRAFTER_HELP + " (default: ngram; a suite's own in suite mode)")
    p.add_argument("--assistant", default=None,
                   help="suite mode: hf_assisted's draft model, 'layers:K' or a model directory / Hub id")
    tree_help = {"budget": "N: draft nodes, root excluded", "topk": "K: root children (talon), top-k (eagle2)",
                 "mu": "TALON confidence gate in (0, 1]", "depth": "draft layers (eagle2, static)",
                 "gamma": "chain length (draft tokens)"}
    for name, text in tree_help.items():
        p.add_argument(f"--{name}", type=float if name == "mu" else int, default=None,
                       help=f"{text} (default {getattr(TreeConfig, name)}; suite mode: the suite's)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 64; in suite mode the suite's")
    p.add_argument("--temperature", type=float, default=0.0, help="method-list mode (a suite sets its own)")
    p.add_argument("--execution", choices=["sync", "async"], default="sync",
                   help="method-list mode: draft then verify (sync), or draft the next tree while the target "
                        "verifies (async; needs a drafter that can draft ahead)")
    p.add_argument("--seed", type=int, default=None, help="default 0; in suite mode the suite's")
    p.add_argument("--limit", type=int, default=None,
                   help="use only the first N prompts (suite mode: of each prompt set)")
    p.add_argument("--out", default="results.json", help="method-list mode: where to write the results JSON")
    p.add_argument("--no-png", action="store_true", help="suite mode: write HTML plots only")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's own); 1 steadies timings on a busy machine")
    args = p.parse_args(argv)
    if bool(args.prompts) == bool(args.suite):
        p.error("give either --prompts (a method list) or --suite NAME")
    if args.suite and not args.out_dir:
        p.error("--suite needs --out-dir")
    return args


def _methods(text: str | None) -> list[str] | None:
    return None if text is None else [m.strip() for m in text.split(",") if m.strip()]


def main_methods(args: argparse.Namespace) -> int:
    """The method-list mode (``--prompts``): one JSON file, a table on stdout."""
    methods = _methods(args.methods) or [m for m in METHODS if m != "hybrid"]
    try:
        for m in methods:
            TreeConfig(method=m)  # validates the name
        tree_kwargs = {k: getattr(TreeConfig, k) if getattr(args, k) is None else getattr(args, k)
                       for k in TREE_FIELDS}
        TreeConfig(**tree_kwargs)
        decode_cfg = DecodeConfig(temperature=args.temperature, seed=args.seed or 0,
                                  max_new_tokens=args.max_new_tokens or 64, execution=args.execution)
        prompts = read_prompts(args.prompts)[: args.limit]
        result = run_benchmark(prompts, methods, ModelSpec(args.target, args.drafter or "ngram"), tree_kwargs,
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


def main_suite(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The suite mode (``--suite``): a results directory, the overall table on stdout."""
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    try:
        methods = _methods(args.methods)
        suite = with_overrides(get_suite(args.suite), drafter=args.drafter, assistant=args.assistant,
                               max_new_tokens=args.max_new_tokens, seed=args.seed,
                               tree={k: getattr(args, k) for k in TREE_FIELDS if getattr(args, k) is not None},
                               methods=tuple(methods) if methods else None)
        command = "python -m talon.bench " + shlex.join(sys.argv[1:] if argv is None else argv)
        out_dir = Path(args.out_dir)
        result = run_suite(suite, args.target, args.limit, log,
                           checkpoint=lambda partial: write_suite(out_dir, partial, command))
    except (ConfigError, ModelLoadError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    paths = write_suite(out_dir, result, command, png=not args.no_png)
    table = pd.DataFrame([r for r in result["summary"] if r["category"] == bench_results.ALL])
    cols = ["experiment", "setting", "temperature", "method", "prompts", "MAT", "delta", "tokens_per_s",
            "speedup", "draft_share", "matches_ar"]
    print(f"device: {result['meta']['device']}  model: {result['meta']['model']}  drafter: {suite.drafter}")
    print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"wrote {len(paths)} files to {out_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return main_suite(args, argv) if args.suite else main_methods(args)


if __name__ == "__main__":
    sys.exit(main())
