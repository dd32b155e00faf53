"""Named benchmark suites as data: which prompts (``talon.bench.prompts``), methods, tree settings,
temperatures and sweeps.

A ``Suite`` is a list of ``Experiment``s; ``python -m talon.bench --suite NAME`` runs one
(``talon.bench.runner.run_suite``).  Torch-free: this module only describes suites.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..config import AUTO_METHODS, METHODS, ConfigError, TreeConfig
from .prompts import PromptSet, load_prompt_set

KINDS = ("methods", "categories", "budget_sweep", "mu_sweep", "topk_sweep", "sources")
"""Experiment kinds: the charts pick their data by kind (``viz.bench_charts``)."""
SWEEPS = {"budget_sweep": "budget", "mu_sweep": "mu", "topk_sweep": "topk"}
"""The ``TreeConfig`` field each sweep kind varies."""
PEER_METHODS = ("hf_generate", "hf_prompt_lookup", "hf_assisted")
"""The transformers peers (``talon.bench.peers`` runs them; named here so this module stays torch-free)."""
ALL_METHODS = METHODS + PEER_METHODS
VARIANT_SEP = "@"
"""``METHOD@DRAFTER`` names a tree method run with another drafter than the suite's (``talon@ngram``:
TALON over prompt lookup), so one experiment can compare drafters."""
AUTO_SUFFIX = "+auto"
"""``METHOD+auto`` (``talon+auto``, ``hybrid+auto``, ``eagle2+auto``, also after ``@DRAFTER``) sizes each
tree by the cost rule (``TreeConfig.auto``, the cap ``AUTO_CAP``), so one experiment can compare fixed
and auto-sized trees side by side."""


def is_auto(name: str) -> bool:
    """Whether a method name asks for auto-sized trees (``METHOD+auto``)."""
    return name.endswith(AUTO_SUFFIX)


def split_method(name: str) -> tuple[str, str | None]:
    """``(method, drafter spec or None)`` of a method name such as ``talon``, ``talon@ngram`` or
    ``talon+auto``."""
    method, sep, drafter = name.removesuffix(AUTO_SUFFIX).partition(VARIANT_SEP)
    return method, (drafter if sep else None)


def auto_sized(methods) -> tuple[str, ...]:
    """``methods`` with every method the cost rule can size (``AUTO_METHODS``) as ``METHOD+auto``, each
    name once, in order."""
    sized = (m + AUTO_SUFFIX if split_method(m)[0] in AUTO_METHODS and not is_auto(m) else m for m in methods)
    return tuple(dict.fromkeys(sized))


def method_problem(name: str) -> str:
    """Why ``name`` is not a method an experiment can run ("" when it is)."""
    method, drafter = split_method(name)
    if method not in ALL_METHODS:
        return f"{name} (unknown method)"
    if drafter is not None and (method == "ar" or method in PEER_METHODS):
        return f"{name} (only tree methods take {VARIANT_SEP}DRAFTER)"
    if drafter is not None and not drafter.strip():
        return f"{name} (no drafter after {VARIANT_SEP}: e.g. {method}{VARIANT_SEP}ngram)"
    if is_auto(name) and method not in AUTO_METHODS:
        return f"{name} (only {', '.join(AUTO_METHODS)} can be auto-sized)"
    return ""


@dataclass(frozen=True)
class TreeParams:
    """Tree settings of an experiment; ``None`` takes the device default
    (``talon.config.device_default_tree``: N=24 on both, K=10 and mu=0.03 on a GPU, K=6 and mu=0.1 on
    a CPU).  Fields as in ``TreeConfig``: budget N (draft nodes, root excluded), topk K, mu, depth
    (draft layers), gamma (chain length); and cap, the node cap of the ``METHOD+auto`` runs (draft
    nodes, root excluded; None: ``AUTO_CAP``), which ``talon.bench.runner.tree_for`` turns into their
    budget."""

    budget: int | None = None
    topk: int | None = None
    mu: float | None = None
    depth: int | None = None
    gamma: int | None = None
    cap: int | None = None

    def resolve(self, default: TreeConfig) -> dict:
        """Keyword arguments for ``tree_for``: ``None`` fields filled from ``default`` (``cap`` stays
        None when not set)."""
        return {k: (v if v is not None else getattr(default, k, None)) for k, v in vars(self).items()}


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
        unknown = [p for p in map(method_problem, self.methods) if p]
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
        drafter: drafter spec of the tree methods (``talon.drafters.factory.DRAFTER_HELP``).
        assistant: the draft model of ``hf_assisted`` (None: ``talon.bench.peers.default_assistant_spec``).
        seed: sampling seed of every run.
    """

    name: str
    description: str
    experiments: tuple[Experiment, ...]
    drafter: str = "head"
    assistant: str | None = None
    seed: int = 0


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
AUTO_VARIANTS = ("eagle2+auto", "talon+auto", "hybrid+auto")
"""The methods the cost rule can size, auto-sized (cap ``AUTO_CAP``)."""
ONE_PER_CATEGORY = (PromptSet("assets", per_category=1),)


def _sources_experiment() -> Experiment:
    """Hybrid drafting against its two sources alone (issue: the AAAI "Talon"'s hybrid drafting):
    TALON over the trained head (model only), TALON over prompt lookup (retrieval only) and the hybrid
    merge, on categories where the answer repeats the context and on open chat, where it does not."""
    prompts = (
        PromptSet("assets", categories=("summarisation",), label="summarisation"),
        PromptSet("assets", categories=("extraction",), label="extraction"),
        PromptSet("style", categories=("code-edit-style",), label="code editing"),
        PromptSet("assets", categories=("chat",), label="open chat"),
        PromptSet("style", categories=("mt-bench-style",), limit=2, label="open chat"),
    )
    return Experiment(
        "sources",
        "sources",
        prompts,
        ("ar", "talon@head", "talon@ngram", "hybrid@head"),
        max_new_tokens=64,
        description="Hybrid (head + prompt lookup) vs head only vs prompt lookup only, TALON "
        "tree at the device's default N, greedy, by category.",
    )


def _smoke() -> Suite:
    return Suite(
        "smoke",
        "Plumbing check in well under a minute: two extraction prompts, 12 tokens, AR, the "
        "transformers peers and TALON with prompt lookup; hf_assisted uses the target's first 4 layers.",
        (
            Experiment(
                "methods",
                "methods",
                (PromptSet("assets", categories=("extraction",), limit=2),),
                ("ar",) + PEER_METHODS + ("talon",),
                TreeParams(budget=8),
                max_new_tokens=12,
                description="AR, transformers peers and TALON on the same prompts.",
            ),
        ),
        drafter="ngram",
        assistant="layers:4",
    )


def _quick() -> Suite:
    return Suite(
        "quick",
        "A few minutes on a 2-core CPU: one prompt per category of assets/prompts.jsonl, 48 new "
        "tokens, AR, the transformers peers and every tree method with the trained head at N=16.",
        (
            Experiment(
                "methods",
                "methods",
                ONE_PER_CATEGORY,
                ("ar",) + PEER_METHODS + TREE_METHODS + AUTO_VARIANTS,
                TreeParams(budget=16),
                max_new_tokens=48,
                description="Every method and the transformers peers at N=16 (and auto-sized), greedy.",
            ),
        ),
        drafter="head",
    )


def _paper() -> Suite:
    categories = (
        PromptSet("mtbench", limit=4, label="MT-Bench"),
        PromptSet("humaneval", limit=4, label="HumanEval"),
        PromptSet("style", categories=("gsm-style",), limit=4, label="GSM-style"),
        PromptSet("assets", categories=("summarisation",), label="summarisation"),
        PromptSet("assets", categories=("extraction", "qa"), label="extraction/QA"),
    )
    return Suite(
        "paper",
        "TALON's experiments at our scale: per-category EAGLE-2 vs TALON at equal N and T=0/1 "
        "(Table 1 / Table 3 layout), the N, μ and root-width K sweeps, and the transformers peers.",
        (
            Experiment(
                "categories",
                "categories",
                categories,
                ("ar", "eagle2", "talon"),
                temperatures=(0.0, 1.0),
                max_new_tokens=96,
                description="EAGLE-2 vs TALON at the device's default N, per category, T=0 and T=1.",
            ),
            Experiment(
                "budget_sweep",
                "budget_sweep",
                ONE_PER_CATEGORY,
                ("ar", "eagle2", "talon"),
                values=(8, 16, 32, 60, 96),
                max_new_tokens=64,
                description="Speedup, MAT and tree-construction share against the budget N.",
            ),
            Experiment(
                "mu_sweep",
                "mu_sweep",
                ONE_PER_CATEGORY,
                ("ar", "talon"),
                values=(0.005, 0.01, 0.03, 0.1, 0.3),
                max_new_tokens=64,
                description="TALON's confidence gate μ at the device's default N.",
            ),
            Experiment(
                "topk_sweep",
                "topk_sweep",
                ONE_PER_CATEGORY,
                ("ar", "talon"),
                values=(0, 1, 3, 6, 10),
                max_new_tokens=64,
                description="TALON's root width K at the device's default N and mu; K=0 gates the root's "
                "children too (the paper's pure gating, Fig. 7).",
            ),
            Experiment(
                "peers",
                "methods",
                ONE_PER_CATEGORY,
                ("ar",) + PEER_METHODS + TREE_METHODS,
                max_new_tokens=64,
                description="Every method next to transformers' generate, prompt lookup and assisted "
                "generation, greedy.",
            ),
            _sources_experiment(),
        ),
        drafter="head",
    )


HEADLINE_PROMPTS = (
    PromptSet("assets"),
    PromptSet("mtbench", limit=8, label="MT-Bench"),
    PromptSet("humaneval", limit=8, label="HumanEval"),
)


FIXED_BUDGETS = (4, 8, 16, 24, 32, 60, 96)
"""The fixed N the head suite sets auto-sized trees against: the CPU's best sizes (a few nodes) to the
paper's N=60 and past it (the H100's cost curve was flat from 32 to 64 nodes)."""


def _head() -> Suite:
    return Suite(
        "head",
        "The draft head's bar: TALON over the trained head at the paper's N=60, K=10, μ=0.03, greedy, "
        "on every example prompt and a held-out sample of MT-Bench and HumanEval (MAT per category); "
        "then auto-sized trees against every fixed N at the device's K and μ.",
        (
            Experiment(
                "head_bar",
                "categories",
                HEADLINE_PROMPTS,
                ("ar", "talon", "talon+auto"),
                TreeParams(budget=60, topk=10, mu=0.03),
                max_new_tokens=64,
                description="TALON N=60, K=10, μ=0.03 with the trained head vs autoregressive, by category, "
                "and the same policy auto-sized by the cost rule (cap 128).",
            ),
            Experiment(
                "auto_vs_fixed",
                "budget_sweep",
                HEADLINE_PROMPTS,
                ("ar", "talon", "talon+auto"),
                values=FIXED_BUDGETS,
                max_new_tokens=64,
                description="Which N on this device: TALON at the device's K and μ with each fixed budget N, "
                "against the same policy auto-sized by the cost rule (cap 128, run once a prompt), interleaved.",
            ),
        ),
        drafter="head",
    )


def _headline() -> Suite:
    return Suite(
        "headline",
        "The README's headline at the device's default tree settings: TALON and hybrid with the "
        "trained head against autoregressive decoding and transformers' generate and prompt lookup, and "
        "EAGLE-2 at the same N, on every example prompt plus MT-Bench and HumanEval samples, greedy; every run's "
        "tokens compared with autoregressive decoding's.",
        (
            Experiment(
                "headline",
                "methods",
                HEADLINE_PROMPTS,
                ("ar", "hf_generate", "hf_prompt_lookup", "eagle2", "talon", "hybrid") + AUTO_VARIANTS,
                max_new_tokens=64,
                description="Every method at the device defaults, fixed N and auto-sized by the cost rule, "
                "by category, greedy.",
            ),
        ),
        drafter="head",
    )


def _sources() -> Suite:
    return Suite(
        "sources",
        "Hybrid drafting vs its model and retrieval sources alone, by category (the "
        "paper suite's last experiment on its own).",
        (_sources_experiment(),),
        drafter="head",
    )


SUITES = MappingProxyType({s.name: s for s in (_smoke(), _quick(), _paper(), _sources(), _head(), _headline())})
"""The named suites of generations (read-only)."""
COST_SUITE = "cost"
"""The cost suite (``talon.bench.cost``): timings of a step's pieces, not generations."""
SUITE_NAMES = (*SUITES, COST_SUITE)


def get_suite(name: str) -> Suite:
    """The suite called ``name``; ``ConfigError`` listing the names otherwise."""
    if name not in SUITES:
        raise ConfigError(f"Unknown suite {name!r}: choose one of {', '.join(SUITES)}.")
    return SUITES[name]


def with_overrides(
    suite: Suite,
    *,
    drafter: str | None = None,
    assistant: str | None = None,
    max_new_tokens: int | None = None,
    methods: tuple[str, ...] | None = None,
    seed: int | None = None,
    tree: dict | None = None,
    experiments: tuple[str, ...] | None = None,
    auto: bool = False,
) -> Suite:
    """A copy of ``suite`` with the CLI's overrides: drafter / assistant specs, max new tokens of every
    experiment, methods kept (intersected with each experiment's; ``ar`` always stays), seed,
    ``tree``: ``TreeParams`` fields set in every experiment (a sweep still varies its own field),
    ``experiments``: the names of the experiments kept (default: all), and ``auto``: every method the
    cost rule can size runs as ``METHOD+auto`` (once), except in budget sweeps, whose point is the
    fixed N (they keep their own auto-sized runs)."""
    names = [e.name for e in suite.experiments]
    unknown_experiments = [n for n in experiments or () if n not in names]
    if unknown_experiments:
        raise ConfigError(
            f"Suite {suite.name!r} has no experiment {unknown_experiments}: choose from {', '.join(names)}."
        )
    if methods is not None:
        unknown = [p for p in map(method_problem, methods) if p]
        if unknown:
            raise ConfigError(f"Unknown methods {unknown}: choose from {', '.join(ALL_METHODS)}.")
    chosen = []
    for e in suite.experiments:
        if experiments is not None and e.name not in experiments:
            continue
        kept = e.methods if methods is None else tuple(m for m in e.methods if m == "ar" or m in methods)
        if auto and e.sweep != "budget":
            kept = auto_sized(kept)
        if methods is not None and kept == ("ar",) and "ar" not in methods:
            continue  # nothing of the experiment is left but the baseline
        chosen.append(
            replace(
                e, methods=kept, max_new_tokens=max_new_tokens or e.max_new_tokens, tree=replace(e.tree, **(tree or {}))
            )
        )
    if not chosen:
        raise ConfigError(
            f"Nothing of suite {suite.name!r} is left with methods {list(methods or ['all'])} "
            f"and experiments {list(experiments or ['all'])}."
        )
    if (tree or {}).get("topk") == 0:
        fixed_k = [
            e.name for e in chosen if any(split_method(m)[0] == "eagle2" for m in e.methods) and e.sweep != "topk"
        ]
        if fixed_k:
            raise ConfigError(
                f"--topk 0 (a gated TALON root) cannot run EAGLE-2, which needs K >= 1; experiments "
                f"{fixed_k} run it: leave it out with --methods or set K >= 1."
            )
    return replace(
        suite,
        experiments=tuple(chosen),
        drafter=drafter or suite.drafter,
        assistant=assistant or suite.assistant,
        seed=suite.seed if seed is None else seed,
    )
