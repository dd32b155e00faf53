"""The decoding loop: prefill, then per step build -> verify -> commit, one ``StepRecord`` per target
forward.  Plain autoregressive decoding (``method="ar"``) is the same loop with a root-only tree, so
it shares the cache code and the timing."""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from .builders import BuildResult, TreeBuilder, make_builder
from .config import ConfigError, DecodeConfig, TreeConfig
from .drafters import Drafter
from .models import LoadedModel
from .trace import RunTrace, StepRecord
from .tree import DraftTree
from .verify import NO_TOKEN, Verifier

MAX_PROMPT_CHARS = 20_000


def encode_prompt(target: LoadedModel, prompt: str) -> list[int]:
    """Token ids of ``prompt`` as one user message in the tokenizer's chat template, with the
    generation prompt added (plain encoding if the tokenizer has no template)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ConfigError(f"The prompt has {len(prompt)} characters; keep it under {MAX_PROMPT_CHARS}.")
    tok = target.tokenizer
    if tok.chat_template:
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                      tokenize=True, return_dict=True)["input_ids"]
    else:
        ids = tok(prompt)["input_ids"]
    return [int(i) for i in ids]


def device_label(lm: LoadedModel) -> str:
    if lm.device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(lm.device)})"
    return lm.device.type


def new_trace(target: LoadedModel, drafter: Drafter | None, tree_cfg: TreeConfig, decode_cfg: DecodeConfig,
              prompt: str, prompt_ids: Sequence[int] | None = None) -> RunTrace:
    """An empty trace for a run, after checking the inputs fit (raises ``ConfigError`` otherwise)."""
    ids = list(prompt_ids) if prompt_ids is not None else encode_prompt(target, prompt)
    if not ids:
        raise ConfigError("The prompt encodes to no tokens.")
    if tree_cfg.method != "ar" and drafter is None:
        raise ConfigError(f"Method {tree_cfg.method!r} needs a drafter.")
    if decode_cfg.execution == "async" and drafter is not None and not drafter.can_draft_ahead:
        raise ConfigError(f"The drafter {drafter.name!r} cannot draft ahead; use synchronous execution.")
    # Tree nodes sit at most `budget` positions past the end, so leave room for them too.
    needed = len(ids) + decode_cfg.max_new_tokens + max(tree_cfg.budget, tree_cfg.gamma, tree_cfg.depth)
    if needed > target.context_length:
        raise ConfigError(
            f"The prompt is {len(ids)} tokens; with {decode_cfg.max_new_tokens} new tokens and the draft "
            f"tree that exceeds the model's context of {target.context_length} tokens. Shorten the prompt "
            "or lower max new tokens.")
    tree_dict = {k: (list(map(list, v)) if k == "static_paths" and v else v) for k, v in vars(tree_cfg).items()}
    return RunTrace(prompt=prompt, prompt_ids=ids, tree_config=tree_dict, decode_config=dict(vars(decode_cfg)),
                    target=target.name, drafter=drafter.name if drafter and tree_cfg.method != "ar" else "",
                    device=device_label(target))


def _sync(lm: LoadedModel) -> None:
    if lm.device.type == "cuda":
        torch.cuda.synchronize(lm.device)


class _TextDiff:
    """Turns the growing id list into per-step text pieces that concatenate to the full decode,
    holding back an incomplete multi-byte character until it completes."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.emitted = ""

    def piece(self, all_ids: list[int], final: bool) -> str:
        full = self.tokenizer.decode(all_ids, skip_special_tokens=True)
        if not final:
            full = full.rstrip("\ufffd")
        piece = full[len(self.emitted):] if full.startswith(self.emitted) else ""
        self.emitted += piece
        return piece


def likely_outcome(tree: DraftTree) -> list[int]:
    """The drafter's guess at the outcome of verifying ``tree``: the node ``u`` that maximises the
    drafter's probability of "the target accepts the path to ``u``, then emits as bonus the drafter's
    best token outside ``u``'s children", ``p(path to u) * b(u)``.  Node ids from the root to ``u``.

    ``b(u)``, the best outside token's draft probability, is bounded by ``u``'s least likely child and
    by the mass its children leave; a leaf was never expanded, so it gets the drafter's typical
    confidence in this tree (the mean best-child probability of the expanded nodes).  Scoring only the
    chance to *stop* at ``u`` instead would favour the root of a wide tree, whose bonus must be a token
    the drafter ranked below all K root children and is almost never the target's."""
    n = len(tree)
    child_mass, least, best = [0.0] * n, [1.0] * n, [0.0] * n
    for node in range(1, n):
        q = math.exp(tree.draft_logprob[node])
        parent = tree.parent[node]
        child_mass[parent] += q
        least[parent], best[parent] = min(least[parent], q), max(best[parent], q)
    expanded = [u for u in range(n) if child_mass[u] > 0.0]
    typical = sum(best[u] for u in expanded) / len(expanded) if expanded else 0.5

    def bonus(u: int) -> float:
        return min(least[u], max(0.0, 1.0 - child_mass[u])) if child_mass[u] > 0.0 else typical

    return tree.path_to(max(range(n), key=lambda u: (math.exp(tree.path_logprob[u]) * bonus(u), -u)))


@dataclass
class Speculation:
    """The next step's tree drafted while the target verified this one, from a guessed outcome."""

    guess: list[int]          # the committed tokens it assumed (path tokens, then the guessed bonus)
    checkpoint: int           # drafter state before the guess (for rollback / confirm)
    built: BuildResult | None  # the next tree, None if no guess could be made
    start: float              # seconds since the run started
    seconds: float
    drafter_info: dict


def _best_outside(logprobs: torch.Tensor | None, exclude: Sequence[int]) -> int | None:
    """Most likely token of ``logprobs`` (``[vocab]``) not in ``exclude``; None if none is finite."""
    if logprobs is None:
        return None
    logprobs = logprobs.clone()
    if exclude:
        logprobs[list(exclude)] = -math.inf
    return int(logprobs.argmax()) if torch.isfinite(logprobs).any() else None


def _speculate(drafter: Drafter, builder: TreeBuilder, built: BuildResult, stream: torch.cuda.Stream | None,
               clock0: float) -> Speculation:
    """Worker side of async mode: guess the outcome of verifying ``built.tree`` (``likely_outcome``,
    then as bonus the drafter's best token there that the tree does not already hold), commit the
    guess to the drafter and build the next tree from it.  One more drafter forward than a
    synchronous step when the guess goes below the root.  ``stream``: the run's side CUDA stream
    (``None`` on a CPU)."""
    t0 = time.perf_counter()
    tree = built.tree
    checkpoint = drafter.checkpoint()
    stop = likely_outcome(tree)[-1]
    path_tokens = tree.path_tokens(stop)
    children = [tree.token[c] for c in tree.children(stop)]
    guess, next_built, info, forwards = [], None, {}, 0
    with torch.inference_mode(), (torch.cuda.stream(stream) if stream is not None else nullcontext()):
        logprobs = built.root_logprobs
        if path_tokens:
            drafter.commit(path_tokens)
            logprobs = drafter.propose(DraftTree.with_root(path_tokens[-1]), [0])[0]
            forwards = 1
        bonus = _best_outside(logprobs, children)
        if bonus is not None:
            drafter.commit([bonus])
            guess = path_tokens + [bonus]
            next_built = builder.build(drafter, bonus)
            next_built.drafter_forwards += forwards
            info = drafter.step_info()
        if stream is not None:
            stream.synchronize()
    return Speculation(guess, checkpoint, next_built, t0 - clock0, time.perf_counter() - t0, info)


def run(trace: RunTrace, target: LoadedModel, drafter: Drafter | None, tree_cfg: TreeConfig,
        decode_cfg: DecodeConfig, stop: Callable[[], bool] | None = None) -> Iterator[StepRecord]:
    """Decode ``trace.prompt_ids``; append one ``StepRecord`` per target forward to ``trace.steps``
    and yield it.  Ends at EOS, at ``max_new_tokens``, or when ``stop()`` returns True (checked
    between steps); ``trace.stop_reason`` says which.

    ``decode_cfg.execution == "async"`` drafts the next tree on a worker thread (its own CUDA stream on
    a GPU) while the target verifies the current one, from the guessed outcome (``likely_outcome``
    and the drafter's best bonus token there).  A right guess makes that tree the next step's; a wrong one is rolled back and
    the tree is drafted again, so only verified tokens are ever committed and the output is the
    synchronous output.  ``ar`` always runs synchronously."""
    builder = make_builder(tree_cfg)
    prompt_ids = trace.prompt_ids
    eos = target.eos_token_ids
    tok = target.tokenizer
    generator = torch.Generator().manual_seed(decode_cfg.seed)
    verifier = Verifier(target, drafter.feature_layers if builder is not None else ())
    text = _TextDiff(tok)
    asynchronous = decode_cfg.execution == "async" and builder is not None
    trace.execution = "async" if asynchronous else "sync"
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="talon-drafter") if asynchronous else None
    side_stream = torch.cuda.Stream(target.device) if asynchronous and target.device.type == "cuda" else None
    clock0 = time.perf_counter()

    try:
        with torch.inference_mode():
            prompt_hidden = verifier.prefill(prompt_ids)
            if builder is not None:
                drafter.reset(prompt_ids, prompt_hidden)
            _sync(target)
            trace.prefill_seconds = time.perf_counter() - clock0
            root = prompt_ids[-1]
            generated: list[int] = []
            ready = None  # async: (BuildResult, drafter_info) drafted during the previous verification
            while True:
                if stop is not None and stop():
                    trace.stop_reason = "stopped"
                    return
                t0 = time.perf_counter()
                if builder is None:
                    tree, forwards, info = DraftTree.with_root(root), 0, {}
                elif ready is not None:
                    (built, info), ready = ready, None
                    tree, forwards = built.tree, built.drafter_forwards
                else:
                    built = builder.build(drafter, root)
                    tree, forwards, info = built.tree, built.drafter_forwards, drafter.step_info()
                _sync(target)
                t1 = time.perf_counter()
                pending = worker.submit(_speculate, drafter, builder, built, side_stream, clock0) if worker else None
                verdict = verifier.verify(tree, decode_cfg.temperature, generator)
                path_hidden = verifier.commit(verdict)
                _sync(target)
                t2 = time.perf_counter()
                speculation = pending.result() if pending else None
                t3 = time.perf_counter()

                new_ids = [tree.token[n] for n in verdict.accepted_path[1:]] + [verdict.bonus_token]
                reason = ""
                room = decode_cfg.max_new_tokens - len(generated)
                if len(new_ids) >= room:
                    new_ids, reason = new_ids[:room], "max_new_tokens"
                for k, t in enumerate(new_ids):
                    if t in eos:
                        new_ids, reason = new_ids[: k + 1], "eos"
                        break
                generated.extend(new_ids)
                hit = None
                if builder is not None:
                    drafter.observe(tree, verdict.accepted_path)
                    if speculation is not None:
                        hit = bool(speculation.guess) and speculation.guess == new_ids and not reason
                        if hit:
                            drafter.confirm(speculation.checkpoint, path_hidden)
                            ready = (speculation.built, speculation.drafter_info)
                        else:
                            drafter.rollback(speculation.checkpoint)
                    if not reason and not hit:
                        drafter.commit(new_ids, path_hidden)
                node_text = tok.batch_decode([[t] for t in tree.token])
                step = StepRecord(
                    index=len(trace.steps), tree=tree, status=verdict.status,
                    accepted_path=verdict.accepted_path, bonus_token=verdict.bonus_token,
                    target_token=verdict.target_token, target_prob=verdict.target_prob,
                    committed_ids=new_ids, committed_text=text.piece(generated, final=bool(reason)),
                    node_text=node_text,
                    target_text=[tok.decode([t]) if t != NO_TOKEN else "" for t in verdict.target_token],
                    draft_start=t0 - clock0, draft_seconds=t1 - t0, verify_start=t1 - clock0,
                    verify_seconds=t2 - t1, drafter_forwards=forwards, drafter_info=info,
                    speculate_start=speculation.start if speculation else None,
                    speculate_seconds=speculation.seconds if speculation else 0.0,
                    speculate_hit=hit, wait_seconds=t3 - t2 if speculation else 0.0)
                trace.steps.append(step)
                trace.stop_reason = reason
                yield step
                if reason:
                    return
                root = verdict.bonus_token
    finally:
        if worker is not None:
            worker.shutdown(wait=True)


def run_to_end(target: LoadedModel, drafter: Drafter | None, tree_cfg: TreeConfig, decode_cfg: DecodeConfig,
               prompt: str = "", prompt_ids: Sequence[int] | None = None) -> RunTrace:
    """Run a whole generation and return its trace."""
    trace = new_trace(target, drafter, tree_cfg, decode_cfg, prompt, prompt_ids)
    for _ in run(trace, target, drafter, tree_cfg, decode_cfg):
        pass
    return trace
