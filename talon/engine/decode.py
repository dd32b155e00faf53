"""The decoding loop: prefill, then per step build -> verify -> commit, one ``StepRecord`` per target
forward.  Plain autoregressive decoding (``method="ar"``) is the same loop with a root-only tree, so
it shares the cache code and the timing."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from ..config import ConfigError, DecodeConfig, TreeConfig
from ..drafters.base import Drafter
from ..models.device import device_label, synchronize
from ..models.loaded import LoadedModel
from ..trace import RunTrace, StepRecord
from ..tree import NO_TOKEN, DraftTree
from .builders import make_builder
from .speculation import speculate
from .stopping import cut_step
from .verify import Verifier

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
            synchronize(target.device)
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
                synchronize(target.device)
                t1 = time.perf_counter()
                pending = worker.submit(speculate, drafter, builder, built, side_stream, clock0) if worker else None
                verdict = verifier.verify(tree, decode_cfg.temperature, generator)
                path_hidden = verifier.commit(verdict)
                synchronize(target.device)
                t2 = time.perf_counter()
                speculation = pending.result() if pending else None
                t3 = time.perf_counter()

                new_ids, reason = cut_step(tree.path_tokens(verdict.accepted_path[-1]) + [verdict.bonus_token],
                                           eos, decode_cfg.max_new_tokens - len(generated))
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
