"""What a loaded model is: ``LoadedModel`` (read-only model + tokenizer + where it runs) and the
error every loader raises.  Models are loaded once and then only read: nothing here keeps per-run
state."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

Progress = Callable[[str], None]
"""Receives one human-readable line per loading stage (for the UI's progress display)."""


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says what to do about it."""


class ListsTheChoices(ModelLoadError):
    """A load error whose message lists what a model spec may be ('embedded', a local directory, a Hub id),
    so a caller that adds such a list of its own leaves it out."""


class TokenScreen(Protocol):
    """What picks the target's tokens from its last hidden states without a float32 LM head over the
    whole vocabulary (``talon.models.lm_head.ScreenedHead``)."""

    name: str

    def scores(self, hidden: torch.Tensor) -> Any:
        """The ``RowScores`` of hidden states ``[rows, H]``."""


class ResourcePool:
    """Idle per-run device resources of one model (static-forward runners with their CUDA graphs), by
    key.  A run takes what it needs for its own use only and gives it back when it ends, so two runs
    never share one.  Thread-safe."""

    def __init__(self) -> None:
        self._idle: dict[Hashable, list[Any]] = {}
        self._lock = threading.Lock()

    def take(self, key: Hashable) -> Any | None:
        with self._lock:
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def give(self, key: Hashable, resource: Any) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(resource)


@dataclass(frozen=True)
class LoadedModel:
    """A read-only model with its tokenizer.

    Attributes:
        name: what the UI and traces show (not unique: two directories can share a name).
        model / tokenizer: the ``transformers`` objects.
        device / dtype: where and in what precision the weights live.
        identity: what the weights are, for caches keyed by model: the resolved directory they were
            loaded from, or the Hub id; ``""`` for a model built in memory.  Two models with the same
            identity, device and dtype hold the same weights.
        runners: idle static-forward runners for this model (``talon.runtime.graphs``), lent to one
            run at a time; the model itself stays read-only.
        screen: the LM head's bfloat16 screen for picking the target's tokens (``talon.models.lm_head``),
            or None where the float32 head is used.
    """

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    identity: str = ""
    runners: ResourcePool = field(default_factory=ResourcePool, compare=False, repr=False)
    screen: TokenScreen | None = field(default=None, compare=False, repr=False)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Every token id that ends generation (generation config and tokenizer)."""
        ids = self.model.generation_config.eos_token_id
        ids = [] if ids is None else ([ids] if isinstance(ids, int) else list(ids))
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return frozenset(int(i) for i in ids)

    @property
    def context_length(self) -> int:
        """Longest sequence (prompt + generated tokens) the model's positions cover."""
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @property
    def vocab_size(self) -> int:
        """Rows of the LM head: the number of token ids the model scores."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 next-token logits ``[..., vocab]`` from last hidden states ``[..., H]`` (after the
        final norm): the LM head, then the logit scaling or soft-capping some families apply in their
        own forward (Cohere's ``logit_scale``, Gemma's ``final_logit_softcapping``)."""
        logits = self.model.get_output_embeddings()(hidden).float()
        config = self.model.config
        scale = getattr(config, "logit_scale", None)
        if isinstance(scale, (int, float)) and scale != 1:
            logits = logits * scale
        cap = getattr(config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    @property
    def cache_key(self) -> tuple[str, str, str]:
        """``(identity, device, dtype)``: what a cache of things derived from these weights (a draft
        head loaded for this target) is keyed by; falls back to the object's id when the model has no
        identity."""
        return (self.identity or f"object:{id(self.model)}", str(self.device), str(self.dtype))
