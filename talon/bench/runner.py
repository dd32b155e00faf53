"""Running benchmarks: methods x prompts on one target, interleaved per prompt so every method meets the
same machine noise, with speedups measured against plain autoregressive decoding in the same run.
``run_benchmark`` runs one method list, ``run_suite`` a named suite (``talon.bench.suites``)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import torch
import transformers

from .. import metrics
from ..config import METHODS, ConfigError, DecodeConfig, ModelSpec, TreeConfig, device_default_tree
from ..drafters.factory import drafter_for
from ..engine.decode import complete, encode_prompt, fill_texts, new_trace
from ..models.cpu_linear import cpu_linear_mode
from ..models.device import device_label, synchronize
from ..models.loaded import LoadedModel, ModelLoadError
from ..models.registry import ModelRegistry
from ..trace import RunTrace
from . import results
from .peers import assistant_for, default_assistant_spec, run_peer
from .suites import PEER_METHODS, Experiment, Suite, load_prompts, split_method

WARMUP_TOKENS = 8
TREE_FIELDS = ("budget", "topk", "mu", "depth", "gamma")

Log = Callable[[str], None]


def with_rates(row: dict) -> dict:
    """``row`` plus its own MAT, delta, tokens/s and draft share (``metrics.pooled`` of one run)."""
    pooled = metrics.pooled([{k: v for k, v in row.items() if v is not None}])
    return {**row, **{k: pooled[k] for k in ("MAT", "delta", "tokens_per_s", "draft_share")}}


def trace_row(trace: RunTrace, method: str, seconds: float) -> dict:
    """One run row from a ``RunTrace`` whose generation took ``seconds`` of wall clock: tokens and
    text, counts, timings (``seconds``: prefill to last token; ``loop_seconds``: the loop's own phase
    clocks, which add up to it; ``step_seconds``: the decoding steps; ``draft_seconds``: tree
    building), the tree shape (mean deepest layer, mean draft nodes, mean nodes per layer), the derived
    rates, and per step the draft nodes (root excluded), depth reached, accepted drafts and the
    drafter's top-1 probability at the root (``steps``)."""
    steps = trace.steps
    return with_rates(
        {
            "method": method,
            "token_ids": trace.output_ids,
            "text": trace.output_text,
            "new_tokens": len(trace.output_ids),
            "target_forwards": len(steps),
            "draft_forwards": sum(s.drafter_forwards for s in steps),
            "seconds": seconds,
            "loop_seconds": trace.seconds,
            "draft_seconds": sum(s.draft_seconds for s in steps),
            "step_seconds": metrics.step_seconds(trace),
            "prompt_tokens": len(trace.prompt_ids),
            "mean_depth": metrics.mean_tree_depth(steps),
            "mean_tree_nodes": metrics.mean_tree_nodes(steps),
            "mean_layer_widths": metrics.mean_layer_widths(steps),
            "stop_reason": trace.stop_reason,
            "execution": trace.execution,
            "speculation_hit_rate": metrics.speculation_hit_rate(trace),
            "wait_seconds": sum(s.wait_seconds for s in steps),
            "steps": [
                {
                    "nodes": s.tree.num_drafts,
                    "depth": s.tree.max_depth,
                    "accepted": s.accepted_tokens,
                    "root_top1": s.root_top1,
                }
                for s in steps
            ],
        }
    )


def timed_generation(
    target: LoadedModel, drafter, tree_cfg: TreeConfig, decode_cfg: DecodeConfig, prompt_ids: list[int]
) -> tuple[RunTrace, float]:
    """Run one generation; returns its trace (text filled after the clock) and its wall clock,
    prefill to last token, read the way the peers' ``generate()`` is read (synchronised on a GPU)."""
    trace = new_trace(target, drafter, tree_cfg, decode_cfg, "", prompt_ids)
    synchronize(target.device)
    t0 = time.perf_counter()
    complete(trace, target, drafter, tree_cfg, decode_cfg, texts=False)
    synchronize(target.device)
    seconds = time.perf_counter() - t0
    fill_texts(trace, target.tokenizer)
    return trace, seconds


class MethodRunner:
    """Runs any method on a prompt's token ids and returns its run row: ``ar`` and the tree methods
    (``METHOD`` or ``METHOD@DRAFTER``) with a fresh drafter each time, transformers' peers through
    ``talon.bench.peers``; all timed the same way, wall clock from prefill to last token.

    Args:
        target: the loaded target model.
        registry: where drafters' models and heads come from.
        drafter_spec: the tree methods' drafter (``talon.drafters.factory.DRAFTER_HELP``).
        assistant_spec: ``hf_assisted``'s draft model (None: ``talon.bench.peers.default_assistant_spec``).
        seed: sampling seed of every run.
    """

    def __init__(
        self,
        target: LoadedModel,
        registry: ModelRegistry,
        drafter_spec: str,
        assistant_spec: str | None = None,
        seed: int = 0,
    ) -> None:
        self.target, self.registry, self.drafter_spec, self.seed = target, registry, drafter_spec, seed
        self.assistant_spec = assistant_spec or default_assistant_spec(drafter_spec)
        self._assistant: LoadedModel | None = None

    def assistant(self) -> LoadedModel:
        """hf_assisted's draft model, loaded on first use."""
        if self._assistant is None:
            self._assistant = assistant_for(self.assistant_spec, self.target, self.registry)
        return self._assistant

    def drafter(self, name: str):
        """A fresh drafter for the method ``name`` (``METHOD`` or ``METHOD@DRAFTER``; None for ``ar``)."""
        method, spec = split_method(name)
        return drafter_for(method, spec or self.drafter_spec, self.target, self.registry)

    def drafter_name(self, method: str) -> str:
        """What drafts for ``method`` ("" for ``ar`` and the peers without a draft model); raises
        ``ConfigError`` / ``ModelLoadError`` when it cannot run."""
        if method == "hf_assisted":
            return self.assistant().name
        if method in PEER_METHODS or method == "ar":
            return ""
        return self.drafter(method).name

    def run_one(
        self,
        method: str,
        tree_kwargs: dict,
        ids: list[int],
        temperature: float,
        max_new_tokens: int,
        execution: str = "sync",
    ) -> dict:
        """One generation of the prompt ``ids`` with ``method``; a run row (``trace_row`` / the peers')."""
        if method in PEER_METHODS:
            row = run_peer(
                method,
                self.target,
                ids,
                max_new_tokens,
                temperature=temperature,
                seed=self.seed,
                assistant=self.assistant() if method == "hf_assisted" else None,
            )
            return {
                **with_rates(row),
                "mean_depth": None,
                "mean_tree_nodes": None,
                "mean_layer_widths": None,
                "steps": [],
            }
        cfg = TreeConfig(method=split_method(method)[0], **tree_kwargs)
        dec = DecodeConfig(
            temperature=temperature,
            seed=self.seed,
            max_new_tokens=max_new_tokens,
            execution=execution if method != "ar" else "sync",
        )
        trace, seconds = timed_generation(self.target, self.drafter(method), cfg, dec, ids)
        return trace_row(trace, method, seconds)


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
        hits = [
            (r["speculation_hit_rate"], r["target_forwards"]) for r in rs if r.get("speculation_hit_rate") is not None
        ]
        rows.append(
            {
                "method": method,
                "prompts": len(rs),
                "new_tokens": p["new_tokens"],
                "MAT": p["MAT"],
                "delta": p["delta"],
                "tokens_per_s": p["tokens_per_s"],
                "draft_share": p["draft_share"],
                "speedup": metrics.speedup(ar_seconds, p["seconds"]) if "ar" in by_method else None,
                "speculation_hit_rate": sum(h * n for h, n in hits) / sum(n for _, n in hits) if hits else None,
            }
        )
    return rows


def run_benchmark(
    prompts: list[dict],
    methods: list[str],
    spec: ModelSpec,
    tree_kwargs: dict,
    decode_cfg: DecodeConfig,
    log: Log = print,
    assistant: str | None = None,
) -> dict:
    """Run every method (ours and transformers' peers) on every prompt, methods interleaved within each
    prompt, after one warm-up per method; speedups against ``ar`` in the same run."""
    registry = ModelRegistry()
    target = registry.get(spec.target, progress=log)
    runner = MethodRunner(target, registry, spec.drafter, assistant, decode_cfg.seed)
    drafters = {m: runner.drafter_name(m) for m in methods}
    encoded = [encode_prompt(target, item["prompt"]) for item in prompts]

    def one(method: str, ids: list[int], max_new_tokens: int) -> dict:
        return runner.run_one(method, tree_kwargs, ids, decode_cfg.temperature, max_new_tokens, decode_cfg.execution)

    for method in methods:
        one(method, encoded[0], WARMUP_TOKENS)
    runs = []
    for item, ids in zip(prompts, encoded):
        for method in methods:
            row = one(method, ids, decode_cfg.max_new_tokens)
            runs.append({"prompt_id": item["id"], "category": item["category"], **row})
            hits = row.get("speculation_hit_rate")
            log(
                f"{item['id']:>10} {method:>16}: {row['new_tokens']} tokens, MAT {row['MAT']:.2f}, "
                f"{row['seconds']:.2f} s" + ("" if hits is None else f", async guesses right {hits:.0%}")
            )
    drafter_name = next((drafters[m] for m in methods if m != "ar" and m not in PEER_METHODS), "")
    return {
        "device": device_label(target),
        "model": target.name,
        "drafter": drafter_name,
        "assistant": drafters.get("hf_assisted", ""),
        "tree_config": tree_kwargs,
        "decode_config": dict(vars(decode_cfg)),
        "environment": environment(target),
        "runs": runs,
        "summary": summarize_runs(runs),
    }


# ---- suites -----------------------------------------------------------------------------------------
class SuiteRunner:
    """Runs a suite's experiments on one target: every method and setting on a prompt before the next
    prompt, the autoregressive run first, one short warm-up per method before its first measured run.

    Args:
        suite: the suite (after ``talon.bench.suites.with_overrides``).
        target: the loaded target model.
        registry: where drafters' models and heads come from.
        limit: at most this many prompts from each prompt set (None = all).
        log: receives one line per run.
    """

    def __init__(
        self, suite: Suite, target: LoadedModel, registry: ModelRegistry, limit: int | None = None, log: Log = print
    ) -> None:
        self.suite, self.target, self.limit, self.log = suite, target, limit, log
        self.methods = MethodRunner(target, registry, suite.drafter, suite.assistant, suite.seed)
        self.default_tree = device_default_tree(target.device.type == "cuda")[0]
        self._warm: set[str] = set()
        self.skipped: dict[str, str] = {}
        self.notes: list[str] = []
        self.drafter_names: dict[str, str] = {}

    def available(self, method: str) -> bool:
        """Whether ``method`` can run with this suite's drafter / assistant; the reason it cannot is kept
        in ``skipped`` (e.g. ``hybrid`` with the n-gram drafter)."""
        if method in self.skipped:
            return False
        try:
            self.drafter_names[method] = self.methods.drafter_name(method)
        except (ConfigError, ModelLoadError) as err:
            self.skipped[method] = str(err)
            self.log(f"skipping {method}: {err}")
            return False
        return True

    def run_one(self, method: str, tree_kwargs: dict, ids: list[int], temperature: float, max_new_tokens: int) -> dict:
        """One generation of the prompt ``ids`` with ``method``; a run row without the experiment's
        columns (per-step data left out of the CSV)."""
        row = self.methods.run_one(method, tree_kwargs, ids, temperature, max_new_tokens)
        row.pop("steps", None)
        return row

    def plan(self, experiment: Experiment) -> list[tuple[str, dict, str]]:
        """``(method, tree kwargs, setting label)`` in run order: ``ar`` first, then per setting every
        other method that can run."""
        settings = experiment.settings(self.default_tree)
        methods = [m for m in experiment.methods if m != "ar" and self.available(m)]
        out = [("ar", settings[0], "")]
        for kwargs in settings:
            name = {"budget": "N", "topk": "K"}.get(experiment.sweep, experiment.sweep)
            label = f"{name}={kwargs[experiment.sweep]}" if experiment.sweep else ""
            out += [(m, kwargs, label) for m in methods]
        return out

    def warm_up(self, plan: list[tuple[str, dict, str]], item: dict, ids: list[int], temperature: float) -> None:
        for method, kwargs, _ in plan:
            if method not in self._warm:
                self.run_one(method, kwargs, ids, temperature, WARMUP_TOKENS)
                self._warm.add(method)

    def experiment_columns(
        self, experiment: Experiment, method: str, kwargs: dict, label: str, item: dict, temperature: float
    ) -> dict:
        """The run row's columns that say what was run (tree fields only for tree methods)."""
        is_tree = split_method(method)[0] in METHODS and method != "ar"
        tree = {k: (kwargs[k] if is_tree else None) for k in TREE_FIELDS}
        return {
            "suite": self.suite.name,
            "experiment": experiment.name,
            "kind": experiment.kind,
            "sweep": experiment.sweep,
            "setting": label if method != "ar" else "",
            "temperature": temperature,
            "seed": self.suite.seed,
            "prompt_id": item["id"],
            "category": item["category"],
            "source": item["source"],
            "drafter": self.drafter_names.get(method, ""),
            "max_new_tokens": experiment.max_new_tokens,
            **tree,
        }

    def run_prompt(
        self, experiment: Experiment, plan: list[tuple[str, dict, str]], item: dict, ids: list[int], temperature: float
    ) -> list[dict]:
        """Every planned run on one prompt at one temperature, AR first; a run the settings refuse (e.g. a
        prompt too long for the context with a big tree) is logged, kept in ``skipped`` and left out."""
        rows: list[dict] = []
        ar = None
        for method, kwargs, label in plan:
            try:
                run = self.run_one(method, kwargs, ids, temperature, experiment.max_new_tokens)
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
            self.log(
                f"{experiment.name} T={temperature:g} {item['id']:>16} {method:>16} {label:>8}: "
                f"{row['new_tokens']:3d} tok, MAT {row['MAT']:.2f}, {row['seconds']:.2f} s, x{row['speedup']:.2f}"
            )
        return rows

    def experiment_rows(self, experiment: Experiment) -> Iterator[list[dict]]:
        """The runs of one experiment as ``results.RUN_COLUMNS`` rows, one list per prompt and
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

    cpu = ""
    try:
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "device": device_label(target),
        "dtype": str(target.dtype).removeprefix("torch."),
        "cpu_linear": cpu_linear_mode() if target.device.type == "cpu" else None,
        "load_average_1min": round(load[0], 2) if load else None,
        "cpu": cpu or platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def run_suite(
    suite: Suite,
    target_spec: str = "embedded",
    limit: int | None = None,
    log: Log = print,
    registry: ModelRegistry | None = None,
    checkpoint: Callable[[dict], None] | None = None,
) -> dict:
    """Run ``suite`` on the target ``target_spec``; returns ``{"runs", "summary", "meta"}`` (rows as
    dicts; ``meta`` without the command and file list, which the CLI adds).  ``checkpoint``, when given,
    receives the same dict (``meta["complete"]`` False) after every prompt, so a cut run keeps its rows."""
    registry = registry or ModelRegistry()
    target = registry.get(target_spec, progress=log)
    runner = SuiteRunner(suite, target, registry, limit, log)
    env_before = environment(target)
    t0 = time.perf_counter()

    def meta(complete: bool) -> dict:
        experiments = [
            {**asdict(e), "sweep": e.sweep, "tree_settings": e.settings(runner.default_tree)} for e in suite.experiments
        ]
        return {
            "suite": suite.name,
            "description": suite.description,
            "complete": complete,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "model": target.name,
            "target_spec": target_spec,
            "drafter_spec": suite.drafter,
            "drafters": runner.drafter_names,
            "assistant_spec": runner.methods.assistant_spec,
            "seed": suite.seed,
            "limit": limit,
            **env_before,
            "load_average_1min_after": environment(target)["load_average_1min"],
            "seconds": round(time.perf_counter() - t0, 1),
            "experiments": experiments,
            "skipped": runner.skipped,
            "notes": runner.notes,
            "peers": {
                "hf_prompt_lookup": "prompt_lookup_num_tokens=10, max_matching_ngram_size=2",
                "hf_assisted": "assistant's generation-config defaults of this transformers version",
            },
        }

    runs: list[dict] = []
    for experiment in suite.experiments:
        for rows in runner.experiment_rows(experiment):
            runs += rows
            if checkpoint is not None:
                checkpoint({"runs": list(runs), "summary": results.summarize(runs), "meta": meta(False)})
    return {"runs": runs, "summary": results.summarize(runs), "meta": meta(True)}
