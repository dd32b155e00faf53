"""The tree KV cache: causal models (the target, a model drafter, the draft head) run tree-masked
forwards over one preallocated buffer that the engine owns.

Rows of the buffer:

* committed rows ``[0, committed_len)``: tokens that are part of the output (or the prompt);
* tree rows ``[committed_len, length)``: draft-tree nodes fed during the current step, in the order
  they were fed (``node_rows`` maps node -> tree row, 0 = the first tree row).

A forward writes its keys and values in place at ``length`` (no concatenation), and attends over
``[0, length + q)`` only.  Accepting a path copies the path's rows into place after the committed
prefix (a few rows; no whole-cache gather), dropping the tree is a change of ``length``.

A query sees every committed row, plus the tree rows of its own ancestors and itself.  That mask is
built per forward on the host from the tree's ancestor closure, kept there for the rows fed so far
(``talon.runtime.masks``), and reaches the device in one copy.

Only plain full attention fits this cache: ``check_full_attention`` refuses sliding-window and
hybrid (linear-attention, state-space) models with a message that says so.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from ..config import ConfigError
from ..models.device import host_to_device, to_device
from ..models.gqa_attention import additive_mask, head_dim, takes_additive_mask
from ..models.lm_head import RowScores, row_scores
from ..models.loaded import LoadedModel, ResourcePool
from ..tree import DraftTree
from .graphs import StaticRunner, capacity_for, static_mode
from .masks import VisibleRows, causal, tree_rows_mask

FIRST_CAPACITY = 256
"""Rows the buffer starts with; it doubles when a forward would overflow it."""


def check_full_attention(config, name: str) -> None:
    """Raise ``ConfigError`` unless every layer of the model described by ``config`` is plain full
    attention (the tree mask and the preallocated cache assume that)."""
    types = set(getattr(config, "layer_types", None) or ["full_attention"])
    window = getattr(config, "sliding_window", None)
    uses_window = (
        window
        and getattr(config, "use_sliding_window", True)
        and window < getattr(config, "max_position_embeddings", 0)
    )
    if types != {"full_attention"} or uses_window:
        kinds = ", ".join(sorted(types - {"full_attention"})) or f"a sliding window of {window} tokens"
        raise ConfigError(
            f"{name} uses {kinds} in some layers; tree verification here needs full causal attention in "
            "every layer (a preallocated key/value cache and an ancestor mask). Pick a model with full "
            "attention everywhere (Llama, SmolLM, Qwen2/3 without a sliding window, Mistral with its "
            "window off)."
        )


class _BufferLayer(CacheLayerMixin):
    """One decoder layer's view of a ``KVBuffer`` (what the model's attention calls ``update`` on)."""

    is_sliding = False
    is_croppable = False

    def __init__(self, owner: KVBuffer, index: int) -> None:
        super().__init__()
        self.owner, self.index = owner, index
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # preallocated: nothing to do
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write ``[1, heads, q, dim]`` keys and values at the owner's ``write_at``; return the rows
        ``[0, write_at + q)``."""
        return self.owner.write(self.index, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self.owner.static_rows is not None:
            return self.owner.static_span, 0
        return self.owner.write_at + query_length, 0

    def get_seq_length(self) -> int:
        return self.owner.write_at

    def get_max_length(self) -> int:
        return -1


class KVBuffer(Cache):
    """A ``transformers`` cache over one tensor ``[layers, 2, kv_heads, capacity, head_dim]``.

    The owner (``TreeKVCache``) sets ``write_at`` before each forward; each layer's ``update`` writes
    its new rows there in place.  A static forward (``talon.runtime.graphs``) sets ``static_rows``
    instead (the rows to write, as a device tensor) and ``static_span``: attention then reads rows
    ``[0, static_span)``.

    ``capacity``: rows to start with; ``fixed`` buffers (a static runner's) start zeroed and never
    grow, since CUDA graphs hold their address."""

    def __init__(
        self,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        capacity: int = FIRST_CAPACITY,
        fixed: bool = False,
    ) -> None:
        super().__init__(layers=[_BufferLayer(self, i) for i in range(num_layers)])
        make = torch.zeros if fixed else torch.empty
        self.buffer = make(num_layers, 2, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.fixed = fixed
        self.write_at = 0
        self.static_rows: torch.Tensor | None = None
        self.static_span = 0

    @property
    def buffer(self) -> torch.Tensor:
        """``[layers, 2, kv_heads, capacity, head_dim]``: every layer's keys (index 0) and values (1)."""
        return self._buffer

    @buffer.setter
    def buffer(self, tensor: torch.Tensor) -> None:
        self._buffer = tensor
        # each layer's keys and values ``[kv_heads, capacity, head_dim]``, sliced once: indexing the whole
        # buffer for them cost a layer's write about 6 us more of a plain step's few hundred
        self._layer_kv = [(both[0], both[1]) for both in tensor.unbind(0)]

    @property
    def capacity(self) -> int:
        return self.buffer.shape[3]

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows (doubling), keeping the rows written so far."""
        if rows <= self.capacity:
            return
        if self.fixed:
            raise RuntimeError(f"a fixed KV buffer of {self.capacity} rows cannot hold {rows}")
        bigger = self.capacity
        while bigger < rows:
            bigger *= 2
        fresh = self.buffer.new_empty(*self.buffer.shape[:3], bigger, self.buffer.shape[4])
        fresh[:, :, :, : self.capacity] = self.buffer
        self.buffer = fresh

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.static_rows is not None:
            self.buffer[layer, 0].index_copy_(1, self.static_rows, keys[0])
            self.buffer[layer, 1].index_copy_(1, self.static_rows, values[0])
            span = self.static_span
            return self.buffer[layer, 0, :, :span].unsqueeze(0), self.buffer[layer, 1, :, :span].unsqueeze(0)
        start = self.write_at
        end = start + keys.shape[-2]
        layer_keys, layer_values = self._layer_kv[layer]
        layer_keys[:, start:end] = keys[0]
        layer_values[:, start:end] = values[0]
        return layer_keys[None, :, :end], layer_values[None, :, :end]

    def move_rows(self, source: torch.Tensor, start: int) -> None:
        """Copy rows ``source`` (long, on the device) of every layer to ``[start, start + len(source))``."""
        self.buffer[:, :, :, start : start + source.shape[0]] = self.buffer.index_select(3, source)


@dataclass
class ForwardOut:
    """What one forward returns.

    Attributes:
        logits: float32 ``[rows, vocab]`` for the rows asked for (``None`` if none were).
        hidden: ``[q, H]`` the last hidden state of every query row (after the final norm), for
            logits of more rows later (``TreeKVCache.logits``).
        features: ``[q, layers, H]`` the hidden states a feature drafter asked for, or ``None``.
    """

    logits: torch.Tensor | None
    hidden: torch.Tensor
    features: torch.Tensor | None = None


LogitRows = str | Sequence[int] | None
"""Which query rows get logits: ``"all"``, ``"last"``, a list of row indices, or ``None``."""


class TreeKVCache(ABC):
    """Bookkeeping of committed prefix + draft-tree rows over a ``KVBuffer``; one subclass per kind of
    model says how one forward is run.

    ``extra`` keyword arguments of ``extend_committed`` / ``forward_nodes`` (e.g. per-query input
    features of a draft head, ``[q, ...]``) are passed through to ``_model_forward``.

    With a static runner (``use_runner``; CUDA graphs on a GPU) forwards of up to 128 rows run at
    padded static shapes over the runner's buffer; longer ones (a prefill) run eagerly on the same
    buffer.  ``release`` gives the runner back when the run ends.

    ``make_buffer(capacity=FIRST_CAPACITY, fixed=False)`` makes this cache's ``KVBuffer`` (the eager
    one here, a runner's fixed one in ``use_runner``)."""

    def __init__(self, make_buffer: Callable[..., KVBuffer], device: torch.device) -> None:
        self._make_buffer = make_buffer
        self.kv = make_buffer()
        self.device = device
        self.runner: StaticRunner | None = None
        self._lease: tuple[ResourcePool, Hashable] | None = None
        self.committed_len = 0
        self.length = 0
        self.node_rows: dict[int, int] = {}
        self._closure = np.zeros((0, 0), dtype=bool)  # host: ancestor-or-self closure of the tree rows
        self.position_offset = 0
        """Position of cache row 0 (committed row k sits at position k + position_offset)."""

    def use_runner(
        self,
        pool: ResourcePool,
        key: Hashable,
        rows: int | None,
        extra: dict[str, tuple[tuple[int, ...], torch.dtype]] | None = None,
    ) -> None:
        """Take a static runner for ``rows`` rows from ``pool`` (or make one over a fixed buffer of
        this cache's kind, graphs captured at once) when ``static_mode`` allows it and a runner is big
        enough; otherwise keep the eager path.  Call before the first forward.
        ``extra``: per-row inputs of ``_model_forward`` beyond ids and positions (row shape, dtype)."""
        mode = static_mode(self.device)
        capacity = capacity_for(rows) if rows is not None else None
        if mode is None or capacity is None:
            return
        key = (key, capacity, mode)
        runner = pool.take(key)
        fresh = runner is None
        if fresh:
            runner = StaticRunner(self._make_buffer(capacity, fixed=True), extra or {}, capture=mode == "graph")
        self.kv, self.runner, self._lease = runner.kv, runner, (pool, key)
        if fresh:
            runner.capture_all(self._model_forward)  # its forwards write through self.kv, the runner's buffer

    def release(self) -> None:
        """Give the static runner back to its pool (the cache must not be used afterwards)."""
        if self.runner is not None:
            (pool, key), runner = self._lease, self.runner
            self.runner, self._lease = None, None
            pool.give(key, runner)

    @abstractmethod
    def _model_forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor, **extra
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward writing at ``self.kv.write_at`` (or at ``self.kv.static_rows``):
        ``input_ids`` / ``position_ids`` ``[1, q]``, bool ``mask`` ``[1, 1, q, kv_rows]``; returns
        the last hidden states ``[q, H]`` and the extra features ``[q, ...]`` (or None)."""

    @abstractmethod
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 next-token logits ``[rows, vocab]`` from last hidden states ``[rows, H]``."""

    def _run(
        self, ids: np.ndarray, positions: np.ndarray, mask: VisibleRows, logit_rows: LogitRows, **extra
    ) -> ForwardOut:
        """Feed ``q`` rows at ``length``: int64 ``ids`` and ``positions`` ``[q]`` and ``mask`` on the host."""
        q = ids.shape[0]
        shape = self.runner.bucket(self.length, q) if self.runner is not None else None
        if shape is not None:
            hidden, features = self.runner.forward(
                self._model_forward, shape, self.length, ids, positions, mask, **extra
            )
        else:
            self.kv.reserve(self.length + q)
            self.kv.write_at = self.length
            index = host_to_device(np.stack([ids, positions]), self.device)
            dense = host_to_device(mask.dense(), self.device)
            hidden, features = self._model_forward(index[0:1], index[1:2], dense[None, None], **extra)
        self.length += q
        return ForwardOut(select_logits(self, hidden, logit_rows), hidden, features)

    def extend_committed(self, ids: Sequence[int], logit_rows: LogitRows = "last", **extra) -> ForwardOut:
        """Append committed tokens (causal among themselves) after dropping any tree rows; ``ids``
        must be non-empty."""
        self.drop_tree()
        q, start = len(ids), self.committed_len
        positions = np.arange(start + self.position_offset, start + self.position_offset + q)
        out = self._run(np.asarray(ids, dtype=np.int64), positions, causal(q, start), logit_rows, **extra)
        self.committed_len += q
        return out

    def forward_nodes(
        self, tree: DraftTree, nodes: Sequence[int], root_position: int, logit_rows: LogitRows = "all", **extra
    ) -> ForwardOut:
        """Feed tree ``nodes`` (parents first; a node's parent was fed before, is among ``nodes``, or is
        the committed root).  Position of node i is ``root_position + depth[i]``."""
        nodes = list(nodes)
        local = {node: k for k, node in enumerate(nodes)}
        parent_local, parent_old, generation = [], [], []
        for node in nodes:
            p = tree.parent[node]
            k = local.get(p, -1)
            parent_local.append(k)
            parent_old.append(self.node_rows.get(p, -1) if k < 0 else -1)
            generation.append(generation[k] + 1 if k >= 0 else 1)
        old_rows = self.length - self.committed_len
        rows = tree_rows_mask(self._closure[:old_rows, :old_rows], parent_local, parent_old, generation)
        ids = np.array([tree.token[n] for n in nodes], dtype=np.int64)
        positions = np.array([root_position + tree.depth[n] for n in nodes], dtype=np.int64)
        out = self._run(ids, positions, VisibleRows(self.committed_len, rows), logit_rows, **extra)
        self._grow_closure(old_rows, rows)
        for k, node in enumerate(nodes):
            self.node_rows[node] = old_rows + k
        return out

    def _grow_closure(self, old_rows: int, new: np.ndarray) -> None:
        total = old_rows + new.shape[0]
        if total > self._closure.shape[0]:
            bigger = np.zeros((max(2 * total, 64), max(2 * total, 64)), dtype=bool)
            bigger[:old_rows, :old_rows] = self._closure[:old_rows, :old_rows]
            self._closure = bigger
        self._closure[old_rows:total, :total] = new

    def commit_nodes(self, nodes: Sequence[int]) -> None:
        """Keep the committed rows plus the rows of ``nodes`` (a root-to-node path, in order), which
        become committed; every other tree row is dropped."""
        rows = [self.committed_len + self.node_rows[n] for n in nodes]
        if rows != list(range(self.committed_len, self.committed_len + len(rows))):
            self.kv.move_rows(to_device(rows, torch.long, self.device), self.committed_len)
        self.committed_len += len(rows)
        self.drop_tree()

    def crop_committed(self, length: int) -> None:
        """Forget the tree rows and every committed row from ``length`` on (no-op beyond the end)."""
        self.committed_len = min(self.committed_len, length)
        self.drop_tree()

    def drop_tree(self) -> None:
        """Forget this step's tree rows, keeping the committed prefix."""
        self.length = self.committed_len
        self.node_rows = {}


def select_logits(cache: TreeKVCache, hidden: torch.Tensor, logit_rows: LogitRows) -> torch.Tensor | None:
    """``cache.logits`` of the rows ``logit_rows`` names (see ``LogitRows``) of ``hidden`` ``[q, H]``."""
    if logit_rows is None:
        return None
    if logit_rows == "all":
        return cache.logits(hidden)
    if logit_rows == "last":
        return cache.logits(hidden[-1:])
    return cache.logits(hidden[torch.as_tensor(list(logit_rows), dtype=torch.long, device=hidden.device)])


class CachedLM(TreeKVCache):
    """A ``transformers`` causal LM on its own tree KV cache.

    ``hidden_layers`` selects hidden states to return with every forward (``0`` = the embeddings,
    ``i`` = the output of decoder layer i, before the final norm), stacked as ``[q, len(layers), H]``.
    ``rows``: the most rows a run will hold (committed plus tree); given, the cache may take a static
    runner (CUDA graphs) from the model's pool; ``release`` gives it back."""

    def __init__(self, lm: LoadedModel, hidden_layers: Sequence[int] = (), rows: int | None = None) -> None:
        config = lm.model.config
        check_full_attention(config, lm.name)
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        width = head_dim(config)
        super().__init__(partial(KVBuffer, config.num_hidden_layers, heads, width, lm.dtype, lm.device), lm.device)
        self.lm = lm
        self.decoder = lm.model.base_model
        self.hidden_layers = tuple(hidden_layers)
        self.passes_additive_mask = takes_additive_mask(lm.model)
        """Whether forwards pass their mask additive (converted once, not in each layer's SDPA)."""
        self.use_runner(lm.runners, ("lm", self.hidden_layers), rows)

    def _model_forward(self, input_ids, position_ids, mask, **extra) -> tuple[torch.Tensor, torch.Tensor | None]:
        want = self.hidden_layers
        if self.passes_additive_mask and mask.dtype == torch.bool:
            mask = additive_mask(mask, self.lm.dtype)
        out = self.decoder(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=mask,
            past_key_values=self.kv,
            use_cache=True,
            output_hidden_states=bool(want),
        )
        hidden = out.last_hidden_state[0]
        features = torch.stack([out.hidden_states[i][0] for i in want], dim=1) if want else None
        return hidden, features

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm.logits(hidden)

    def scores(self, hidden: torch.Tensor) -> RowScores:
        """The target's token choices and probabilities for hidden rows ``[rows, H]``
        (``talon.models.lm_head``: screened in bfloat16 where the model has a screen)."""
        return row_scores(self.lm, hidden)
