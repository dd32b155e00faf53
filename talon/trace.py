"""What a run leaves behind: one ``StepRecord`` per target forward and the ``RunTrace`` holding them.
Torch-free and JSON round-trippable (``RunTrace.from_json(t.to_json()) == t``); the app's export is
this JSON and ``viz`` draws from it."""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields

from .tree import DraftTree, GateLayer, Verdict

TRACE_FORMAT = 1

EOS, MAX_NEW_TOKENS, STOPPED = "eos", "max_new_tokens", "stopped"
"""Stop reasons (``RunTrace.stop_reason``): an end-of-sequence token, the max-new-tokens limit, the user."""


def _stored_fields(cls, d: dict) -> list:
    """``cls``'s fields to read from ``d``: those present, and the required ones (a missing required
    field raises ``KeyError``); a field added later with a default is left to it, so old traces load."""
    return [f for f in fields(cls) if f.name in d or (f.default is MISSING and f.default_factory is MISSING)]


@dataclass
class StepRecord(Verdict):
    """One decoding step = one target forward: the verdict on its tree (the fields of
    ``talon.tree.Verdict``: status, accepted_path, bonus_token, target_token, target_prob) and what
    the loop did with it.

    Attributes:
        index: step number from 0.
        tree: the draft tree that was verified (root = the last committed token).
        committed_ids: tokens this step added to the output (accepted drafts, then the bonus token),
            cut at EOS or at the max-new-tokens limit.
        draft_start / verify_start: seconds since the run started when each phase began.
        draft_seconds: wall time of tree building (drafter forwards included).
        verify_seconds: wall time of the target's forward, the acceptance walk and the KV commit.
        drafter_forwards: drafter calls this step (one batched forward per tree layer grown).
        bookkeeping_seconds: wall time of the rest of the step (async waiting, the drafter's commit,
            this record): the three phases follow one another, so ``step_seconds`` is the step's wall
            clock.
        drafter_info: the drafter's state when it drafted this tree (a hybrid's source weights).
        root_top1: the drafter's top-1 probability after the root (its confidence at this step);
            ``None`` for autoregressive decoding.
        committed_text: the committed tokens' text (decoded in context, so multi-byte characters come
            out whole); filled after the run, like the next two (``talon.engine.decode.fill_texts``).
        node_text: per node, the token's text on its own (for labels).
        target_text: per node, the text of ``target_token`` (``""`` where not visited).
        speculate_start / speculate_seconds: async mode: when and how long the drafter drafted the
            next tree during this step's verification (``None`` / 0 when it did not).
        speculate_hit: async mode: whether that guess was right, so the next step used its tree
            (``None`` in sync mode); a wrong guess's tree is discarded.
        wait_seconds: async mode: how long the target's side waited for the drafter after verifying.
        call_widths: nodes in each drafter call's frontier, in call order (1 for the root call; empty
            for a root-only tree): what a cost model prices.
        stop: why the tree stopped growing, a key of ``talon.tree.STOP_REASONS`` (``""`` in old traces).
        expected: the expected committed tokens of the tree (bonus included) by the drafter's calibrated
            confidence, when the run had a calibration; else None.
        price: the step's price in plain decoding steps by the device's cost curve, when the run had
            one; else None.
        gate: TALON's per-layer gate record when one was asked for (the tree lab), else None.
    """

    index: int
    tree: DraftTree
    committed_ids: list[int]
    draft_start: float
    draft_seconds: float
    verify_start: float
    verify_seconds: float
    drafter_forwards: int
    bookkeeping_seconds: float = 0.0
    drafter_info: dict = field(default_factory=dict)
    root_top1: float | None = None
    committed_text: str = ""
    node_text: list[str] = field(default_factory=list)
    target_text: list[str] = field(default_factory=list)
    speculate_start: float | None = None
    speculate_seconds: float = 0.0
    speculate_hit: bool | None = None
    wait_seconds: float = 0.0
    call_widths: list[int] = field(default_factory=list)
    stop: str = ""
    expected: float | None = None
    price: float | None = None
    gate: list[GateLayer] | None = None

    @property
    def texts_filled(self) -> bool:
        """Whether the text fields were filled (``talon.engine.decode.fill_texts``)."""
        return len(self.node_text) == len(self.tree)

    @property
    def step_seconds(self) -> float:
        """Wall time of the step: drafting, verification and bookkeeping (traces written before
        bookkeeping was timed count the async wait instead, a part of it)."""
        return self.draft_seconds + self.verify_seconds + max(self.bookkeeping_seconds, self.wait_seconds)

    @property
    def layer_widths(self) -> list[int]:
        """Nodes per depth, root layer (width 1) first."""
        return self.tree.layer_widths()

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["tree"] = self.tree.to_dict()
        if self.gate is None:
            del d["gate"]
        else:
            d["gate"] = [layer.to_dict() for layer in self.gate]
        d["layer_widths"] = self.layer_widths  # convenience for readers; derived, ignored on load
        return d

    @classmethod
    def from_dict(cls, d: dict) -> StepRecord:
        kwargs = {f.name: d[f.name] for f in _stored_fields(cls, d)}
        kwargs["tree"] = DraftTree.from_dict(d["tree"])
        if kwargs.get("gate") is not None:
            kwargs["gate"] = [GateLayer.from_dict(layer) for layer in kwargs["gate"]]
        return cls(**kwargs)


@dataclass
class RunTrace:
    """A whole run: inputs, models, every step, the output.

    Attributes:
        prompt: the user's prompt text; ``prompt_ids``: the tokens after the chat template.
        tree_config / decode_config: ``TreeConfig`` / ``DecodeConfig`` as dicts.
        target / drafter: model names as shown to users (drafter ``""`` for autoregressive).
        device: where it ran, e.g. ``"cpu"`` or ``"cuda (NVIDIA H100)"``.
        prefill_seconds: the prompt's forward passes (target and drafter) before step 0.
        stop_reason: ``EOS``, ``MAX_NEW_TOKENS``, ``STOPPED`` (by the user) or ``""`` (running).
        execution: ``"sync"`` or ``"async"`` (drafting overlapped with verification).
        dtype: the target's weights' precision, e.g. ``"float32"`` (``""`` in traces from before it was
            recorded); it can change timings and, in low precision, output.
        device_kind: ``"cpu"`` or ``"cuda"``.
        static_forwards: ``"graph"`` (CUDA graphs replayed), ``"eager"`` (the static path without
            capture) or ``"off"`` (``talon.runtime.graphs.static_mode``).
        cost_curve: the device's cost curve the run priced its steps with (and, for an auto-sized tree,
            sized them by), as ``talon.runtime.cost_curve.CostCurve.to_dict``; None when it had none.
        calibration_prior: the fitted calibration the drafter shipped, which the run's online calibration
            started from, as ``talon.drafters.calibration.table_rows``; None when it shipped none (or in
            traces from before it was recorded).
    """

    prompt: str
    prompt_ids: list[int]
    tree_config: dict
    decode_config: dict
    target: str
    drafter: str
    device: str
    prefill_seconds: float = 0.0
    steps: list[StepRecord] = field(default_factory=list)
    stop_reason: str = ""
    execution: str = "sync"
    dtype: str = ""
    device_kind: str = ""
    static_forwards: str = ""
    cost_curve: dict | None = None
    calibration_prior: list[dict] | None = None

    @property
    def output_ids(self) -> list[int]:
        return [t for s in self.steps for t in s.committed_ids]

    @property
    def output_text(self) -> str:
        return "".join(s.committed_text for s in self.steps)

    @property
    def seconds(self) -> float:
        """Wall time of the run: the prefill and every step's ``step_seconds`` (everything the decoding
        loop did, prefill to last token)."""
        return self.prefill_seconds + sum(s.step_seconds for s in self.steps)

    def to_dict(self) -> dict:
        """The trace as JSON-ready data (``talon.metrics.trace_json`` adds the summary metrics)."""
        d = asdict(self)
        d["steps"] = [s.to_dict() for s in self.steps]
        d["format"] = TRACE_FORMAT
        d["output_text"] = self.output_text  # derived, ignored on load
        return d

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict) -> RunTrace:
        if d.get("format") != TRACE_FORMAT:
            if "format" not in d:
                raise ValueError(f'it has no "format" field (a trace saved by this app has "format": {TRACE_FORMAT})')
            raise ValueError(f"its format is {d['format']!r}, not {TRACE_FORMAT} (saved by another version?)")
        for name in ("tree_config", "decode_config"):
            if not isinstance(d.get(name), dict):
                raise TypeError(f"{name} must be an object, not {d.get(name)!r}")
        kwargs = {f.name: d[f.name] for f in _stored_fields(cls, d) if f.name != "steps"}
        return cls(**kwargs, steps=[StepRecord.from_dict(s) for s in d["steps"]])

    @classmethod
    def from_json(cls, text: str) -> RunTrace:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"it is not valid JSON ({err})") from err
        if not isinstance(data, dict):
            raise ValueError("it is JSON, but not a JSON object")
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError) as err:
            raise ValueError(f"it is missing or mistypes a field ({err})") from err
