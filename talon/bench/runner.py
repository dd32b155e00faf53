"""Running benchmarks: methods x prompts on one target, interleaved per prompt so every method meets the
same machine noise, with speedups measured against plain autoregressive decoding in the same run.
``run_benchmark`` runs one method list, ``run_suite`` a named suite (``talon.bench.suites``)."""

from __future__ import annotations

import functools
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TypeVar

import torch
import transformers

from .. import metrics
from ..config import (
    AUTO_CAP,
    AUTO_METHODS,
    METHODS,
    ConfigError,
    DecodeConfig,
    ModelSpec,
    TreeConfig,
    device_default_tree,
)
from ..drafters.datastore import Datastore, read_datastore
from ..drafters.factory import drafter_for
from ..engine.cost_measure import curve_for_run
from ..engine.decode import complete, encode_prompt, fill_texts, new_trace
from ..models import row_top
from ..models.cpu_linear import block_rows, call_rows, cpu_linear_mode, mkl_rows, packed_kernel
from ..models.device import OtherWork, cpu_flags, cpu_name, device_label, synchronize
from ..models.fused_linear import fused_layers
from ..models.gpu_linear import lt_signature
from ..models.gqa_attention import runs_few_rows_attention
from ..models.lm_head import head_name
from ..models.loaded import LoadedModel, ModelLoadError
from ..models.registry import ModelRegistry
from ..models.row_ops import uses_row_ops
from ..models.weight_arena import coded_weights, gathered_bytes
from ..runtime.cost_curve import CostCurve
from ..trace import RunTrace
from . import results
from .peers import assistant_for, default_assistant_spec, run_peer
from .suites import PEER_METHODS, Experiment, Suite, is_auto, load_prompts, split_method

WARMUP_TOKENS = 8
TREE_FIELDS = ("budget", "topk", "mu", "depth", "gamma", "auto")

Log = Callable[[str], None]
T = TypeVar("T")


def tree_for(method: str, tree_kwargs: dict) -> dict:
    """``TreeConfig`` keyword arguments for ``method`` from an experiment's ``tree_kwargs``: a
    ``METHOD+auto`` name of a method the cost rule can size (``AUTO_METHODS``) sizes by cost with the
    cap ``tree_kwargs["cap"]`` (draft nodes, root excluded; default ``AUTO_CAP``) as its budget; every
    other method runs the fixed ``budget``.  ``cap`` is not a ``TreeConfig`` field and is dropped."""
    kwargs = {k: v for k, v in tree_kwargs.items() if k != "cap"}
    if is_auto(method) and split_method(method)[0] in AUTO_METHODS:
        return {**kwargs, "auto": True, "budget": tree_kwargs.get("cap") or AUTO_CAP}
    return {**kwargs, "auto": False}


def tree_columns(method: str, tree_kwargs: dict) -> dict:
    """The ``TREE_FIELDS`` a run of ``method`` used (``tree_for``), for its result row; empty for ``ar``
    and transformers' peers, which draw no tree."""
    if split_method(method)[0] not in METHODS or method == "ar":
        return {}
    tree = tree_for(method, tree_kwargs)
    return {k: tree[k] for k in TREE_FIELDS}


def tree_config(method: str, tree_kwargs: dict) -> TreeConfig:
    """The ``TreeConfig`` of a run of ``method`` (one of ``METHODS``, with its variants) from an experiment's
    ``tree_kwargs``; ``ConfigError`` for settings it refuses.  Plain decoding reads no tree field, so a
    setting only trees refuse never costs a prompt its baseline."""
    if method == "ar":
        return TreeConfig(method="ar")
    return TreeConfig(method=split_method(method)[0], **tree_for(method, tree_kwargs))


def with_rates(row: dict) -> dict:
    """``row`` plus its own MAT, delta, tokens/s and draft share (``metrics.pooled`` of one run)."""
    pooled = metrics.pooled([{k: v for k, v in row.items() if v is not None}])
    return {**row, **{k: pooled[k] for k in ("MAT", "delta", "tokens_per_s", "draft_share")}}


def trace_row(trace: RunTrace, method: str, seconds: float) -> dict:
    """One run row from a ``RunTrace`` whose generation took ``seconds`` of wall clock: tokens and
    text, counts, timings (``seconds``: prefill to last token; ``loop_seconds``: the loop's own phase
    clocks, which add up to it; ``step_seconds``: the decoding steps; ``draft_seconds``: tree
    building), the tree shape (mean deepest layer, mean draft nodes, mean nodes per layer), the derived
    rates, the cost rule's means (expected committed tokens and price per step, share of plain steps),
    and per step the draft nodes (root excluded), depth reached, accepted drafts, the drafter's top-1
    probability at the root, the expected committed tokens (bonus included), the price in plain steps
    and why the tree stopped growing (``steps``)."""
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
            "mean_expected": metrics.mean_expected(steps),
            "mean_realised": metrics.mean_realised(steps),
            "mean_sq_miss": metrics.mean_sq_miss(steps),
            "mean_price": metrics.mean_price(steps),
            "plain_share": metrics.plain_share(steps),
            "steps": [
                {
                    "nodes": s.tree.num_drafts,
                    "depth": s.tree.max_depth,
                    "accepted": s.accepted_tokens,
                    "root_top1": s.root_top1,
                    "expected": s.expected,
                    "price": s.price,
                    "stop": s.stop,
                }
                for s in steps
            ],
        }
    )


def timed_generation(
    target: LoadedModel,
    drafter,
    tree_cfg: TreeConfig,
    decode_cfg: DecodeConfig,
    prompt_ids: list[int],
    cost_curve: CostCurve | None = None,
) -> tuple[RunTrace, float]:
    """Run one generation; returns its trace (text filled after the clock) and its wall clock,
    prefill to last token, read the way the peers' ``generate()`` is read (synchronised on a GPU)."""
    trace = new_trace(target, drafter, tree_cfg, decode_cfg, "", prompt_ids, cost_curve)
    synchronize(target.device)
    t0 = time.perf_counter()
    complete(trace, target, drafter, tree_cfg, decode_cfg, texts=False)
    synchronize(target.device)
    seconds = time.perf_counter() - t0
    fill_texts(trace, target.tokenizer)
    return trace, seconds


class MethodRunner:
    """Runs any method on a prompt's token ids and returns its run row: ``ar`` and the tree methods
    (``METHOD`` or ``METHOD@DRAFTER``) with a fresh drafter each time, sized and priced by the cached
    cost curve of each drafter (measured once when an auto-sized method needs it and none is cached),
    transformers' peers through ``talon.bench.peers`` on an unmodified transformers model (what a user
    of transformers runs); all timed the same way, wall clock from prefill to last token.

    Args:
        target: the loaded target model.
        registry: where drafters' models and heads come from.
        drafter_spec: the tree methods' drafter (``talon.drafters.factory.DRAFTER_HELP``).
        assistant_spec: ``hf_assisted``'s draft model (None: ``talon.bench.peers.default_assistant_spec``).
        seed: sampling seed of every run.
        target_spec: the target's spec, to load the peers' unmodified copy of it (``ModelRegistry.get_stock``);
            None runs the peers on ``target`` itself (a model built in memory).
        datastore: a corpus the tree methods' prompt lookup also retrieves from (None: none).
    """

    def __init__(
        self,
        target: LoadedModel,
        registry: ModelRegistry,
        drafter_spec: str,
        assistant_spec: str | None = None,
        seed: int = 0,
        target_spec: str | None = None,
        datastore: Datastore | None = None,
    ) -> None:
        self.target, self.registry, self.drafter_spec, self.seed = target, registry, drafter_spec, seed
        self.target_spec, self.datastore = target_spec, datastore
        self.assistant_spec = assistant_spec or default_assistant_spec(drafter_spec)
        self._assistant: LoadedModel | None = None
        self._curves: dict[str, object] = {}

    def peer_target(self) -> LoadedModel:
        """The unmodified transformers copy of the target the peers run (loaded on first use)."""
        return self.registry.get_stock(self.target_spec) if self.target_spec else self.target

    def assistant(self) -> LoadedModel:
        """hf_assisted's draft model (cut from, or sharing the tokenizer of, the peers' target), loaded
        on first use."""
        if self._assistant is None:
            self._assistant = assistant_for(self.assistant_spec, self.peer_target(), self.registry)
        return self._assistant

    def curve(self, method: str, tree_cfg: TreeConfig) -> CostCurve | None:
        """The cost curve of ``method``'s drafter (measured once when an auto-sized tree needs it)."""
        drafter = self.drafter(method)
        key = drafter.name
        if key not in self._curves or (tree_cfg.auto and self._curves[key] is None):
            self._curves[key] = curve_for_run(self.target, drafter, tree_cfg)
        return self._curves[key]

    def drafter(self, name: str):
        """A fresh drafter for the method ``name`` (``METHOD`` or ``METHOD@DRAFTER``; None for ``ar``)."""
        method, spec = split_method(name)
        return drafter_for(method, spec or self.drafter_spec, self.target, self.registry, self.datastore)

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
                self.peer_target(),
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
        cfg = tree_config(method, tree_kwargs)
        dec = DecodeConfig(
            temperature=temperature,
            seed=self.seed,
            max_new_tokens=max_new_tokens,
            execution=execution if method != "ar" else "sync",
        )
        curve = self.curve(method, cfg) if method != "ar" else None
        trace, seconds = timed_generation(self.target, self.drafter(method), cfg, dec, ids, curve)
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
                "matches_ar": _share([r.get("matches_ar") for r in rs]),
            }
        )
    return rows


def _share(flags: list[bool | None]) -> float | None:
    """The share of true among the flags that are set (None when none is)."""
    known = [f for f in flags if f is not None]
    return sum(known) / len(known) if known else None


def run_benchmark(
    prompts: list[dict],
    methods: list[str],
    spec: ModelSpec,
    tree_kwargs: dict,
    decode_cfg: DecodeConfig,
    log: Log = print,
    assistant: str | None = None,
    checkpoint: Callable[[dict], None] | None = None,
) -> dict:
    """Run every method (ours and transformers' peers) on every prompt, methods interleaved within each
    prompt, after one warm-up per method; speedups against ``ar`` in the same run.  Each run row says
    what ran (``drafter``, and for tree methods the tree fields: ``budget``, ``auto``, ``cap``, ...) and,
    with ``ar`` in the list, whether it emitted ``ar``'s tokens (``matches_ar``, ``mark_matches_ar``).
    ``checkpoint``, when given, receives the result so far (``summary`` None, ``complete`` False) after
    every prompt and before the summary is computed, so neither a cut run nor a failing summary loses the
    measured runs."""
    registry = ModelRegistry()
    target = load_named(lambda: registry.get(spec.target, progress=log), "Target (--target)")
    datastore = None
    if spec.datastore:
        encode = functools.partial(target.tokenizer.encode, add_special_tokens=False)
        datastore = load_named(lambda: read_datastore(spec.datastore, encode, log), "Datastore (--datastore)")
    runner = MethodRunner(target, registry, spec.drafter, assistant, decode_cfg.seed, spec.target, datastore)
    drafters = {m: load_named(lambda m=m: runner.drafter_name(m), option_of(m)) for m in methods}
    encoded = [encode_prompt(target, item["prompt"]) for item in prompts]
    head = {
        "device": device_label(target),
        "model": target.name,
        "drafter": next((drafters[m] for m in methods if m != "ar" and m not in PEER_METHODS), ""),
        "assistant": drafters.get("hf_assisted", ""),
        "datastore": None if datastore is None else {"path": spec.datastore, "name": datastore.name},
        "tree_config": {k: v for k, v in tree_kwargs.items() if k != "auto"},  # each run's own: its row
        "decode_config": dict(vars(decode_cfg)),
        "environment": environment(target),
    }

    def one(method: str, ids: list[int], max_new_tokens: int) -> dict:
        return runner.run_one(method, tree_kwargs, ids, decode_cfg.temperature, max_new_tokens, decode_cfg.execution)

    other = OtherWork.since_now()
    for method in methods:
        one(method, encoded[0], WARMUP_TOKENS)
    runs = []
    for item, ids in zip(prompts, encoded):
        for method in methods:
            try:
                row = one(method, ids, decode_cfg.max_new_tokens)
            except ConfigError as err:  # e.g. a prompt too long for the context: say which one
                raise ConfigError(f"{method} on prompt {item['id']!r}: {err}") from err
            tree = tree_columns(method, tree_kwargs)
            said = {"prompt_id": item["id"], "category": item["category"], "drafter": drafters[method], **tree}
            runs.append({**said, **row})
            hits = row.get("speculation_hit_rate")
            log(
                f"{item['id']:>10} {method:>16}: {row['new_tokens']} tokens, MAT {row['MAT']:.2f}, "
                f"{row['seconds']:.2f} s" + ("" if hits is None else f", async guesses right {hits:.0%}")
            )
        mark_matches_ar([r for r in runs if r["prompt_id"] == item["id"]], decode_cfg.temperature)
        if checkpoint is not None:
            # a copy: the list grows with the next prompt, and an interrupted run reports what was saved
            checkpoint({**head, **busy(other), "complete": False, "runs": list(runs), "summary": None})
    return {**head, **busy(other), "complete": True, "runs": runs, "summary": summarize_runs(runs)}


def busy(other: OtherWork) -> dict:
    """How busy the machine was while a benchmark ran: the load average now and the share of the CPU other
    processes took since it started (``talon.models.device.OtherWork``; None: not known)."""
    return {"load_average_1min_after": load_average(), "other_share": other.so_far()}


def mark_matches_ar(rows: list[dict], temperature: float) -> None:
    """Set ``matches_ar`` on one prompt's run rows: whether each emitted the tokens of its ``ar`` row.  When
    sampling, ours are checked too (each draws plain decoding's sample of the same seed,
    ``talon.engine.sampling``), transformers' peers not (they draw their own): None for them, and for every
    row without an ``ar`` row."""
    ar = next((r for r in rows if r["method"] == "ar"), None)
    for row in rows:
        checked = ar is not None and (temperature == 0 or row["method"] not in PEER_METHODS)
        row["matches_ar"] = row["token_ids"] == ar["token_ids"] if checked else None


def option_of(method: str) -> str:
    """The CLI option a method's drafting model comes from, for error messages (a drafter named in the
    method, ``talon@SPEC``, comes from ``--methods``)."""
    if method == "hf_assisted":
        return "Assistant (--assistant)"
    return f"Drafter ({method} in --methods)" if split_method(method)[1] else "Drafter (--drafter)"


def load_named(load: Callable[[], T], option: str) -> T:
    """``load()``, with a load error's message prefixed by the option to fix."""
    try:
        return load()
    except (ModelLoadError, ConfigError) as err:
        raise type(err)(f"{option}: {err}") from err


# ---- suites -----------------------------------------------------------------------------------------
def run_plan(
    experiment: Experiment, default_tree: TreeConfig, can_run: Callable[[str], bool]
) -> list[tuple[str, dict, str]]:
    """``(method, tree kwargs, setting label)`` in run order: ``ar`` first, then per setting every
    other method that ``can_run``.  A method the sweep does not reach (an auto-sized one in a budget
    sweep: its cap stays ``AUTO_CAP``) runs once, at the first setting, labelled ``N=auto``, so a
    sweep of fixed N can carry the auto-sized tree it is measured against."""
    settings = experiment.settings(default_tree)
    methods = [m for m in experiment.methods if m != "ar" and can_run(m)]
    if "hf_generate" in methods:  # the second baseline runs second, so every row can be set against it
        methods = ["hf_generate"] + [m for m in methods if m != "hf_generate"]
    name = {"budget": "N", "topk": "K"}.get(experiment.sweep, experiment.sweep)
    out = [("ar", settings[0], "")]
    for k, kwargs in enumerate(settings):
        label = f"{name}={kwargs[experiment.sweep]}" if experiment.sweep else ""
        for m in methods:
            unswept = experiment.sweep == "budget" and is_auto(m)
            if not unswept:
                out.append((m, kwargs, label))
            elif k == 0:
                out.append((m, kwargs, f"{name}=auto"))
    return out


def check_suite_settings(suite: Suite, default_tree: TreeConfig) -> None:
    """``ConfigError`` now, before a model loads, for a tree setting some run of ``suite`` would refuse
    (e.g. ``--mu 2``, ``--budget 0``) rather than a skipped run on every prompt."""
    for experiment in suite.experiments:
        for method, kwargs, _ in run_plan(experiment, default_tree, lambda m: True):
            if split_method(method)[0] in METHODS:
                tree_config(method, kwargs)


class SuiteRunner:
    """Runs a suite's experiments on one target: every method and setting on a prompt before the next
    prompt, the autoregressive run first, one short warm-up per method before its first measured run.

    Args:
        suite: the suite (after ``talon.bench.suites.with_overrides``).
        target: the loaded target model.
        registry: where drafters' models and heads come from.
        limit: at most this many prompts from each prompt set (None = all).
        log: receives one line per run.
        target_spec: the target's spec, for the peers' unmodified copy (``MethodRunner``).
    """

    def __init__(
        self,
        suite: Suite,
        target: LoadedModel,
        registry: ModelRegistry,
        limit: int | None = None,
        log: Log = print,
        target_spec: str | None = None,
    ) -> None:
        self.suite, self.target, self.limit, self.log = suite, target, limit, log
        self.methods = MethodRunner(target, registry, suite.drafter, suite.assistant, suite.seed, target_spec)
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
            self.skipped[method] = f"{option_of(method)}: {err}"
            self.log(f"skipping {method}: {self.skipped[method]}")
            return False
        return True

    def run_one(self, method: str, tree_kwargs: dict, ids: list[int], temperature: float, max_new_tokens: int) -> dict:
        """One generation of the prompt ``ids`` with ``method``; a run row without the experiment's
        columns (per-step data left out of the CSV)."""
        row = self.methods.run_one(method, tree_kwargs, ids, temperature, max_new_tokens)
        row.pop("steps", None)
        return row

    def warm_up(self, plan: list[tuple[str, dict, str]], ids: list[int], temperature: float) -> None:
        """One short run of every planned method not yet warm; a run the settings refuse is left to
        ``run_prompt``, which logs and skips it."""
        for method, kwargs, _ in plan:
            if method not in self._warm:
                try:
                    self.run_one(method, kwargs, ids, temperature, WARMUP_TOKENS)
                except ConfigError:
                    continue
                self._warm.add(method)

    def experiment_columns(
        self, experiment: Experiment, method: str, kwargs: dict, label: str, item: dict, temperature: float
    ) -> dict:
        """The run row's columns that say what was run (tree fields only for tree methods)."""
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
            **dict.fromkeys(TREE_FIELDS),
            **tree_columns(method, kwargs),
        }

    def run_prompt(
        self, experiment: Experiment, plan: list[tuple[str, dict, str]], item: dict, ids: list[int], temperature: float
    ) -> list[dict]:
        """Every planned run on one prompt at one temperature, AR first; a run the settings refuse (e.g. a
        prompt too long for the context with a big tree) is logged, kept in ``skipped`` and left out."""
        rows: list[dict] = []
        ar = hf = None
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
            hf = row if method == "hf_generate" else hf
            row["ar_seconds"] = ar["seconds"]
            row["speedup"] = metrics.speedup(ar["seconds"], row["seconds"])
            row["hf_seconds"] = hf["seconds"] if hf is not None else None
            row["speedup_hf"] = metrics.speedup(hf["seconds"], row["seconds"]) if hf is not None else None
            rows.append(row)
            self.log(
                f"{experiment.name} T={temperature:g} {item['id']:>16} {method:>16} {label:>8}: "
                f"{row['new_tokens']:3d} tok, MAT {row['MAT']:.2f}, {row['seconds']:.2f} s, x{row['speedup']:.2f}"
            )
        mark_matches_ar(rows, temperature)
        if hf is not None and rows and rows[0]["method"] == "ar":  # ar ran before the peer: set it against it
            rows[0]["hf_seconds"] = hf["seconds"]
            rows[0]["speedup_hf"] = metrics.speedup(hf["seconds"], rows[0]["seconds"])
        return rows

    def experiment_rows(self, experiment: Experiment) -> Iterator[list[dict]]:
        """The runs of one experiment as ``results.RUN_COLUMNS`` rows, one list per prompt and
        temperature as soon as it is measured."""
        prompts, notes = load_prompts(experiment, self.limit)
        self.notes += [n for n in notes if n not in self.notes]
        plan = run_plan(experiment, self.default_tree, self.available)
        for n, item in enumerate(prompts):
            ids = encode_prompt(self.target, item["prompt"])
            for temperature in experiment.temperatures:
                if n == 0:
                    self.warm_up(plan, ids, temperature)
                yield self.run_prompt(experiment, plan, item, ids, temperature)


def load_average() -> float | None:
    """The machine's one-minute load average, to two decimals (None where the OS has none)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def environment(target: LoadedModel) -> dict:
    """Where the numbers were measured: device, CPU, versions."""

    cpu = cpu_name()
    return {
        "device": device_label(target),
        "dtype": str(target.dtype).removeprefix("torch."),
        "cpu_linear": cpu_linear_mode() if target.device.type == "cpu" else None,
        "mkl_rows": mkl_rows(target.model),
        "packed_kernel": packed_kernel(target.model),
        "block_rows": block_rows(target.model),
        "call_rows": call_rows(target.model),
        "fused_layers": fused_layers(target.model),
        "row_ops": uses_row_ops(target.model),
        "row_picks": target.device.type == "cpu" and row_top.active(),
        "few_rows_attention": runs_few_rows_attention(target.model),
        "weight_arena_bytes": gathered_bytes(target.model),
        "weight_codes": coded_weights(target.model),
        "gpu_linear_lt_rows": lt_signature(target.model),
        "lm_head": head_name(target),
        "cpu_flags": cpu_flags(),
        "load_average_1min": load_average(),
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
    required: Sequence[str] = (),
) -> dict:
    """Run ``suite`` on the target ``target_spec``; returns ``{"runs", "summary", "meta"}`` (rows as
    dicts; ``meta`` without the command and file list, which the CLI adds).  ``checkpoint``, when given,
    receives the runs so far with ``summary`` None (``meta["complete"]`` False) after every prompt, so
    neither a cut run nor a failing summary loses them (``talon.bench.cli.write_suite`` writes the runs
    before it computes the summary).  A method of the suite that cannot run is skipped (and said in
    ``meta["skipped"]``), except one in ``required`` (its model was named on the command line): then
    its load error (``ModelLoadError`` or ``ConfigError``, naming the option) before any run."""
    registry = registry or ModelRegistry()
    target = load_named(lambda: registry.get(target_spec, progress=log), "Target (--target)")
    runner = SuiteRunner(suite, target, registry, limit, log, target_spec)
    planned = {m for e in suite.experiments for m in e.methods}
    for method in planned.intersection(required):
        runner.drafter_names[method] = load_named(lambda m=method: runner.methods.drafter_name(m), option_of(method))
    env_before = environment(target)
    t0 = time.perf_counter()
    other = OtherWork.since_now()

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
            **busy(other),  # the load after, and the share of the CPU other processes took while it ran
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
            if checkpoint is not None:  # the runs as measured, before anything is computed from them
                checkpoint({"runs": list(runs), "summary": None, "meta": meta(False)})
    return {"runs": runs, "summary": results.summarize(runs), "meta": meta(True)}
