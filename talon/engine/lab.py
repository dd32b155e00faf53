"""The tree lab: one decoding step frozen, so its tree can be rebuilt and verified with other settings.

The context of step k is the prompt plus every token committed before step k.  ``FrozenStep`` prefills
the target and each drafter at that context once; every ``explore`` then drafts the step's tree with
the given method and settings (the drafter rewinds to the same state each time), verifies it with one
target forward and throws the tree's rows away again.  It is the decoding loop's own step, so a greedy
verdict here is the one a decode started at that context with those settings would reach first.

At temperature > 0 the target's choice at each position comes from the run's position-keyed noise
(``talon.engine.sampling``), so the lab shows the sample the run itself would draw there; ``reroll``
repeats the verification of one tree with fresh seeds to show the distribution instead.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from ..config import ConfigError, TreeConfig
from ..drafters.base import Drafter
from ..drafters.factory import drafter_for
from ..models.loaded import LoadedModel
from ..models.registry import ModelRegistry
from ..trace import RunTrace, StepRecord
from ..tree import DraftTree, GateLayer, Verdict
from .builders import make_builder
from .decode import fill_token_texts
from .sampling import PositionNoise, gumbel
from .verify import Verifier, sampling_accept

LAB_METHODS = ("talon", "eagle2", "static", "chain")
"""The tree methods shown side by side at a frozen step (same N)."""


def step_context(trace: RunTrace, index: int) -> list[int]:
    """The committed tokens before step ``index`` of ``trace`` (prompt included; the last is the root)."""
    if not 0 <= index < len(trace.steps):
        raise ConfigError(f"Step {index + 1} is not a step of this run (it has {len(trace.steps)}).")
    return list(trace.prompt_ids) + [t for s in trace.steps[:index] for t in s.committed_ids]


@dataclass
class LabTree:
    """One tree built and verified at the frozen step.

    Attributes:
        config: the settings it was built with.
        tree / verdict: the tree and what the target made of it.
        committed: the tokens the step would commit (accepted drafts, then the bonus token).
        drafter_forwards: drafter calls made; ``call_widths``: nodes per call (for a cost model).
        gate: TALON's per-layer gate record (None for other methods).
        draft_seconds / verify_seconds: measured here (the lab's own clock).
    """

    config: TreeConfig
    tree: DraftTree
    verdict: Verdict
    committed: list[int]
    drafter_forwards: int
    call_widths: list[int]
    gate: list[GateLayer] | None
    draft_seconds: float
    verify_seconds: float

    @property
    def accepted(self) -> int:
        return self.verdict.accepted_tokens

    @property
    def widest_layer(self) -> int:
        return self.tree.widest_layer


def lab_record(lab: "LabTree", index: int, tokenizer) -> StepRecord:
    """``lab`` as a ``StepRecord`` (step ``index`` of the frozen run, texts filled) so the views that
    draw a run's steps draw it too."""
    step = StepRecord(**vars(lab.verdict), index=index, tree=lab.tree, committed_ids=lab.committed,
                      draft_start=0.0, draft_seconds=lab.draft_seconds, verify_start=lab.draft_seconds,
                      verify_seconds=lab.verify_seconds, drafter_forwards=lab.drafter_forwards)
    fill_token_texts([step], tokenizer)
    step.committed_text = tokenizer.decode(lab.committed, skip_special_tokens=True)
    return step


class FrozenStep:
    """A step's context with the target and drafters prefilled once (per-user state: it holds KV caches).

    Args:
        target: the target model.
        registry: where drafter models and heads come from.
        drafter_spec: the drafter of the tree methods (``hybrid`` merges it with prompt lookup).
        context: the committed tokens up to and including the step's root (``step_context``).
        temperature / seed: the run's; at temperature > 0 verification uses the run's noise.
        hybrid_weight: the hybrid drafter's retrieval weight at that step (the run's ``drafter_info``);
            None starts it afresh (0.5), as a decode started at the context would.
    """

    def __init__(self, target: LoadedModel, registry: ModelRegistry, drafter_spec: str, context: Sequence[int],
                 temperature: float = 0.0, seed: int = 0, hybrid_weight: float | None = None) -> None:
        if len(context) < 2:
            raise ConfigError("The frozen context needs at least two tokens.")
        self.target, self.registry, self.drafter_spec = target, registry, drafter_spec
        self.context = list(context)
        self.temperature, self.seed, self.hybrid_weight = temperature, seed, hybrid_weight
        self.noise = PositionNoise(seed, target.vocab_size, target.device)
        self._drafters: dict[str, Drafter] = {"tree": drafter_for("talon", drafter_spec, target, registry)}
        self._lock = threading.Lock()  # one tree at a time in the shared caches (a user's events may overlap)
        with torch.inference_mode():
            self.verifier = Verifier(target, self._drafters["tree"].feature_layers)
            self._features = self.verifier.prefill(self.context)
            self._drafters["tree"].reset(self.context, self._features)

    @property
    def root(self) -> int:
        return self.context[-1]

    @property
    def root_position(self) -> int:
        return len(self.context) - 1

    def _drafter(self, method: str) -> Drafter:
        """The prefilled drafter of ``method``: the run's drafter, or it merged with prompt lookup for
        ``hybrid`` (made on first use)."""
        if method != "hybrid":
            return self._drafters["tree"]
        if "hybrid" not in self._drafters:
            drafter = drafter_for("hybrid", self.drafter_spec, self.target, self.registry)
            drafter.fixed_weight = self.hybrid_weight
            with torch.inference_mode():
                drafter.reset(self.context, self._features)
            self._drafters["hybrid"] = drafter
        return self._drafters["hybrid"]

    def explore(self, cfg: TreeConfig) -> LabTree:
        """Build ``cfg``'s tree at this step and verify it (the step's caches are left as they were)."""
        if cfg.method == "ar":
            raise ConfigError("Autoregressive decoding has no tree to explore: pick a tree method.")
        builder = make_builder(cfg)
        with self._lock, torch.inference_mode():
            drafter = self._drafter(cfg.method)
            t0 = time.perf_counter()
            built = builder.build(drafter, self.root, record_gate=cfg.method in ("talon", "hybrid"))
            t1 = time.perf_counter()
            checked = self.verifier.verify(built.tree, self.temperature, self.noise)
            t2 = time.perf_counter()
            verdict = self.verifier.verdict(checked)
            self.verifier.cached.drop_tree()
            drafter.rewind_step()
        committed = built.tree.path_tokens(verdict.accepted_path[-1]) + [verdict.bonus_token]
        return LabTree(cfg, built.tree, verdict, committed, built.drafter_forwards, built.call_widths, built.gate,
                       t1 - t0, t2 - t1)

    def every_method(self, cfg: TreeConfig) -> dict[str, LabTree]:
        """The same step with each of ``LAB_METHODS`` at ``cfg``'s settings (same N); EAGLE-2 is left out
        when ``cfg.topk`` is 0 (a gated TALON root; EAGLE-2 needs K >= 1)."""
        return {m: self.explore(replace(cfg, method=m)) for m in LAB_METHODS if m != "eagle2" or cfg.topk}

    def sweep(self, cfg: TreeConfig, field: str, values: Sequence) -> list[dict]:
        """``explore`` with ``field`` (``budget``, ``mu`` or ``topk``) set to each of ``values``: per value the
        accepted drafts, depth reached, widest layer and drafter calls."""
        out = []
        for v in values:
            lab = self.explore(replace(cfg, **{field: v}))
            out.append({field: v, "accepted": lab.accepted, "depth": lab.tree.max_depth,
                        "widest": lab.widest_layer, "drafter_calls": lab.drafter_forwards,
                        "nodes": lab.tree.num_drafts})
        return out

    def node_logits(self, tree: DraftTree) -> torch.Tensor:
        """The target's next-token logits after every node of ``tree``, ``[len(tree), vocab]`` (the lab's
        views need rows the verifier does not compute)."""
        with self._lock, torch.inference_mode():
            out = self.verifier.cached.forward_nodes(tree, range(len(tree)), self.root_position, logit_rows="all")
            self.verifier.cached.drop_tree()
        return out.logits

    @property
    def sampling_temperature(self) -> float:
        """The run's temperature, or 1 for a greedy run (the re-rolls sample)."""
        return self.temperature or 1.0

    def reroll(self, lab: LabTree, rolls: int, seed: int = 0) -> tuple[Counter, torch.Tensor]:
        """Verify ``lab.tree`` ``rolls`` times with fresh noise (at ``sampling_temperature``) and count
        the first token each roll emits.  Returns the counts and the target's distribution of that token
        (``[vocab]``, the same temperature), to compare them."""
        temperature = self.sampling_temperature
        tree = lab.tree
        logits = self.node_logits(tree)
        with torch.inference_mode():
            g = torch.Generator(device=self.target.device).manual_seed(seed)
            counts: Counter = Counter()
            for _ in range(rolls):
                noise = gumbel(torch.rand(tree.max_depth + 1, logits.shape[-1], generator=g, device=logits.device))
                verdict = sampling_accept(tree, logits, temperature, noise)
                path = verdict.accepted_path
                counts[tree.token[path[1]] if len(path) > 1 else verdict.bonus_token] += 1
            target = torch.softmax(logits[0] / temperature, dim=-1)
        return counts, target
