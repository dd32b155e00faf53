"""Peers: Hugging Face transformers' own generation on the same target, measured like our runs.

Three peers, all batch 1 on the same ``LoadedModel`` and the same prompt token ids as our methods:

* ``hf_generate``: plain ``model.generate`` (greedy at temperature 0), the library's autoregressive
  baseline.
* ``hf_prompt_lookup``: ``generate(prompt_lookup_num_tokens=10, max_matching_ngram_size=2)``:
  transformers' prompt-lookup decoding with the values its documentation uses (10 candidate tokens,
  n-grams of 2 then 1; the leftmost match wins, one chain of candidates per step, no tree).
* ``hf_assisted``: ``generate(assistant_model=...)``: assisted generation with a draft model, using
  the assistant's generation-config defaults of the installed transformers (5.x: 20 candidate tokens
  per round, "constant" schedule, drafting stops below 0.4 confidence; the threshold is re-fitted only
  when scikit-learn is installed).  The embedded SmolLM2-135M has no smaller sibling offline, so its
  assistant is ``layers:K``: a ``truncated_copy`` of the target (its first K layers, weights shared);
  a drafter spec that names a model directory or Hub id is used as the assistant as is.

Counting: a forward hook on the target model counts target forwards (prefill included: plain
``generate`` makes one forward per new token, so MAT = new tokens / target forwards is 1 like our
``ar``), and hooks on the assistant count its forwards and time them (``draft_seconds``; prompt
lookup's search itself is not timed, so its ``draft_seconds`` is 0).  Wall time is ``perf_counter``
around ``generate``, after a CUDA synchronize on a GPU.  Output stops at EOS like our runs.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ..config import ConfigError
from ..drafters.factory import draft_model, parse_drafter_spec
from ..engine.stopping import EOS, MAX_NEW_TOKENS, cut_at_eos
from ..models.device import synchronize
from ..models.loaded import LoadedModel
from ..models.registry import ModelRegistry
from .suites import PEER_METHODS

PROMPT_LOOKUP_TOKENS = 10
"""``prompt_lookup_num_tokens``: candidate tokens copied per prompt-lookup step."""
PROMPT_LOOKUP_NGRAM = 2
"""``max_matching_ngram_size``: the longest n-gram matched (then shorter ones)."""
DEFAULT_ASSISTANT = "layers:6"
"""The assistant used when the drafter spec is not a model (the target's first 6 layers)."""


@dataclass
class ForwardCounter:
    """Forward calls and their summed wall time for one module (filled by ``count_forwards``)."""

    calls: int = 0
    seconds: float = 0.0
    _started: list[float] = field(default_factory=list)


@contextmanager
def count_forwards(model: torch.nn.Module, cuda_sync: bool = False) -> Iterator[ForwardCounter]:
    """Count and time ``model``'s forward calls while the block runs.

    The hooks check the module's identity, because a ``truncated_copy`` shares its hook dictionaries
    with the model it was cut from: only calls of exactly ``model`` count.  ``cuda_sync``: synchronize
    the GPU before reading the clock, so the time is the forward's, not its kernel launches'."""
    counter = ForwardCounter()

    def clock() -> float:
        if cuda_sync:
            torch.cuda.synchronize()
        return time.perf_counter()

    def before(module, args):
        if module is model:
            counter._started.append(clock())

    def after(module, args, output):
        if module is model and counter._started:
            counter.calls += 1
            counter.seconds += clock() - counter._started.pop()

    handles = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        yield counter
    finally:
        for h in handles:
            h.remove()


def assistant_for(spec: str, target: LoadedModel, registry: ModelRegistry | None = None) -> LoadedModel:
    """The assistant model for ``hf_assisted`` from a drafter spec: ``layers:K`` (the target's first K
    layers, with a private generation config so HF's schedule updates never touch the target's) or a
    model directory / Hub id sharing the target's tokenizer.  Heads, n-grams and hybrids have no
    transformers equivalent: ``ConfigError``."""
    parsed = parse_drafter_spec(spec)
    if not parsed.is_model:
        raise ConfigError(
            f"Assistant {spec!r}: transformers' assisted generation needs a draft *model*: "
            "use 'layers:K' or a model directory / Hub id with the target's tokenizer."
        )
    lm = draft_model(parsed, target, registry)
    if parsed.kind == "layers":
        lm.model.generation_config = copy.deepcopy(target.model.generation_config)
    return lm


def default_assistant_spec(drafter_spec: str) -> str:
    """The drafter spec itself when it names a draft model (``layers:K``, a model directory or Hub id), so
    transformers' assisted generation drafts with the same model as our runs; else ``DEFAULT_ASSISTANT``."""
    try:
        return drafter_spec if parse_drafter_spec(drafter_spec).is_model else DEFAULT_ASSISTANT
    except ConfigError:  # no spec given
        return DEFAULT_ASSISTANT


def generate_kwargs(method: str, temperature: float, assistant: LoadedModel | None = None) -> dict:
    """The ``generate`` arguments that make ``method`` (one of ``PEER_METHODS``) at ``temperature``:
    greedy at 0, else plain sampling at that temperature with top-k / top-p off (like our runs)."""
    if method not in PEER_METHODS:
        raise ConfigError(f"Unknown peer {method!r}: choose one of {', '.join(PEER_METHODS)}.")
    kwargs: dict = (
        {"do_sample": False}
        if temperature == 0
        else {"do_sample": True, "temperature": float(temperature), "top_k": 0, "top_p": 1.0}
    )
    if method == "hf_prompt_lookup":
        kwargs.update(prompt_lookup_num_tokens=PROMPT_LOOKUP_TOKENS, max_matching_ngram_size=PROMPT_LOOKUP_NGRAM)
    elif method == "hf_assisted":
        if assistant is None:
            raise ConfigError("hf_assisted needs an assistant model (see talon.bench.peers.assistant_for).")
        kwargs["assistant_model"] = assistant.model
    return kwargs


def run_peer(
    method: str,
    target: LoadedModel,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    seed: int = 0,
    assistant: LoadedModel | None = None,
) -> dict:
    """Generate with one transformers peer and return a run row in ``talon.bench``'s shape (without the
    prompt's id and category): ``method``, ``token_ids``, ``text``, ``new_tokens``, ``target_forwards``,
    ``draft_forwards`` (the assistant's forwards; 0 for the others), ``seconds``, ``draft_seconds``
    (the assistant's forward time), ``step_seconds`` (= ``seconds``), ``prompt_tokens``, ``stop_reason``.

    Args:
        method: one of ``PEER_METHODS``.
        target: the target model (its weights are only read).
        prompt_ids: the prompt's token ids, chat template applied (``talon.engine.decode.encode_prompt``).
        max_new_tokens: generated tokens at most, prompt not counted; EOS also stops.
        temperature: 0 = greedy; > 0 samples (seeded by ``seed`` through ``torch.manual_seed``).
        assistant: the draft model for ``hf_assisted`` (``assistant_for``).
    """
    kwargs = generate_kwargs(method, temperature, assistant)
    tok = target.tokenizer
    eos = target.eos_token_ids
    pad = tok.pad_token_id if tok.pad_token_id is not None else min(eos)
    ids = torch.tensor([list(prompt_ids)], device=target.device)
    mask = torch.ones_like(ids)
    draft_model = assistant.model if method == "hf_assisted" else torch.nn.Identity()
    if temperature > 0:
        torch.manual_seed(seed)
    timed_on_gpu = method == "hf_assisted" and target.device.type == "cuda"
    with count_forwards(target.model) as t_count, count_forwards(draft_model, timed_on_gpu) as d_count:
        synchronize(target.device)
        t0 = time.perf_counter()
        out = target.model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            eos_token_id=sorted(eos),
            pad_token_id=pad,
            **kwargs,
        )
        synchronize(target.device)
        seconds = time.perf_counter() - t0
    new = cut_at_eos(out[0, len(prompt_ids) :].tolist(), eos)
    reason = EOS if new and new[-1] in eos else MAX_NEW_TOKENS
    return {
        "method": method,
        "stop_reason": reason,
        "token_ids": new,
        "text": tok.decode(new, skip_special_tokens=True),
        "new_tokens": len(new),
        "target_forwards": t_count.calls,
        "draft_forwards": d_count.calls,
        "seconds": seconds,
        "draft_seconds": d_count.seconds,
        "step_seconds": seconds,
        "prompt_tokens": len(prompt_ids),
    }
