"""The decoding loop: prefill, then per step build -> verify -> commit, one ``StepRecord`` per target
forward.  Plain autoregressive decoding (``method="ar"``) is the same loop with a root-only tree
(``RootOnlyBuilder``), so it shares the cache code and the timing; the synchronous and asynchronous
steps are one function each."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import torch

from ..config import ConfigError, DecodeConfig, TreeConfig
from ..drafters.base import Drafter, NoDrafter
from ..drafters.calibration import Calibration, table_rows
from ..models.device import device_label, synchronize
from ..models.loaded import LoadedModel
from ..models.token_text import token_labels
from ..runtime.cost_curve import CostCurve
from ..runtime.graphs import static_mode
from ..trace import RunTrace, StepRecord
from ..tree import NO_TOKEN, DraftTree, Verdict
from .builders import BuildResult, make_builder
from .sampling import PositionNoise
from .sizing import CostRule
from .speculation import speculate
from .stopping import STOPPED, cut_step
from .verify import Verifier

MAX_PROMPT_CHARS = 20_000


def check_prompt_text(prompt: str) -> None:
    """``ConfigError`` for a prompt no model could run: empty, or over ``MAX_PROMPT_CHARS`` characters."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ConfigError(f"The prompt has {len(prompt):,} characters; keep it under {MAX_PROMPT_CHARS:,}.")


def encode_prompt(target: LoadedModel, prompt: str) -> list[int]:
    """Token ids of ``prompt`` as one user message in the tokenizer's chat template, with the
    generation prompt added (plain encoding if the tokenizer has no template)."""
    check_prompt_text(prompt)
    tok = target.tokenizer
    if tok.chat_template:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
    else:
        ids = tok(prompt)["input_ids"]
    return [int(i) for i in ids]


def rows_needed(prompt_tokens: int, tree_cfg: TreeConfig, decode_cfg: DecodeConfig) -> int:
    """The rows a run's caches may hold, held to the model's context: the prompt, every new token, and one
    tree past the end (``budget`` nodes, ``gamma`` or ``depth`` for a chain or layers, an explicit static
    tree's longest path).  Its positions stay inside the prompt and the new tokens (no tree drafts deeper
    than the run can commit), but a cache is not asked for more rows than the model has positions."""
    deepest = max((len(path) for path in tree_cfg.static_paths or ()), default=0)
    return prompt_tokens + decode_cfg.max_new_tokens + max(tree_cfg.budget, tree_cfg.gamma, tree_cfg.depth, deepest)


def tree_rows(tree_cfg: TreeConfig) -> int:
    """The most cache rows one step adds past the committed end, in the target's cache or the drafter's:
    the tree's draft nodes (at most the budget, an explicit static tree's paths, the chain's ``gamma``),
    and for EAGLE-2 every node its layers expand (up to ``topk`` a layer, ``depth`` layers), which its
    re-rank then cuts to the budget.  Sizes a static runner's fixed buffers, which cannot grow."""
    rows = max(tree_cfg.budget, tree_cfg.gamma, tree_cfg.depth, len(tree_cfg.static_paths or ()))
    if tree_cfg.method == "eagle2":
        rows = max(rows, tree_cfg.topk * tree_cfg.depth)
    return rows


def new_trace(
    target: LoadedModel,
    drafter: Drafter | None,
    tree_cfg: TreeConfig,
    decode_cfg: DecodeConfig,
    prompt: str,
    prompt_ids: Sequence[int] | None = None,
    cost_curve: CostCurve | None = None,
) -> RunTrace:
    """An empty trace for a run, after checking the inputs fit (raises ``ConfigError`` otherwise).
    ``cost_curve``: the device's cost curve for this target and drafter (``talon.engine.cost_measure``);
    needed by an auto-sized tree, and with it every step is priced."""
    ids = list(prompt_ids) if prompt_ids is not None else encode_prompt(target, prompt)
    if not ids:
        raise ConfigError("The prompt encodes to no tokens.")
    if tree_cfg.method != "ar" and drafter is None:
        raise ConfigError(f"Method {tree_cfg.method!r} needs a drafter.")
    if decode_cfg.execution == "async" and drafter is not None and not drafter.can_draft_ahead:
        raise ConfigError(f"The drafter {drafter.name!r} cannot draft ahead; use synchronous execution.")
    needed = rows_needed(len(ids), tree_cfg, decode_cfg)
    if needed > target.context_length:
        without_tree = len(ids) + decode_cfg.max_new_tokens
        if without_tree <= target.context_length:  # the tree alone takes it past the context: say so
            setting = f"γ={tree_cfg.gamma}" if tree_cfg.method == "chain" else f"budget N={tree_cfg.budget}"
            raise ConfigError(
                f"The draft tree ({setting}) needs up to {needed - without_tree} cache rows past the last token, "
                f"which with the prompt's {len(ids)} tokens and {decode_cfg.max_new_tokens} new tokens exceeds the "
                f"model's context of {target.context_length} tokens. Lower {setting.split('=')[0]}."
            )
        raise ConfigError(
            f"The prompt is {len(ids)} tokens; with {decode_cfg.max_new_tokens} new tokens and the draft "
            f"tree that exceeds the model's context of {target.context_length} tokens. Shorten the prompt "
            "or lower max new tokens."
        )
    if tree_cfg.auto and cost_curve is None:
        raise ConfigError(
            "Auto-sized trees need this device's cost curve (talon.engine.cost_measure.cost_curve_for measures "
            "it once and caches it)."
        )
    tree_dict = {k: (list(map(list, v)) if k == "static_paths" and v else v) for k, v in vars(tree_cfg).items()}
    return RunTrace(
        prompt=prompt,
        prompt_ids=ids,
        tree_config=tree_dict,
        decode_config=dict(vars(decode_cfg)),
        target=target.name,
        drafter=drafter.name if drafter and tree_cfg.method != "ar" else "",
        device=device_label(target),
        dtype=str(target.dtype).removeprefix("torch."),
        device_kind=target.device.type,
        static_forwards=static_mode(target.device) or "off",
        cost_curve=cost_curve.to_dict() if cost_curve is not None else None,
        calibration_prior=table_rows(prior)
        if drafter and tree_cfg.method != "ar" and (prior := drafter.calibration_prior)
        else None,
    )


def fill_texts(trace: RunTrace, tokenizer, upto: int | None = None) -> None:
    """Fill the text fields of ``trace``'s steps (``node_text``, ``target_text``, ``committed_text``)
    that are still empty, up to step ``upto`` (exclusive; all by default).  Only the views and the
    export need text, so the decoding loop leaves it out of the hot path and the reader fills it.

    ``committed_text`` pieces concatenate to the decoded output; a multi-byte character split across
    steps appears whole in the step that completes it (the last step of a finished run flushes)."""
    steps = trace.steps[:upto]
    todo = [s for s in steps if not s.texts_filled]
    if not todo:
        return
    emitted = "".join(s.committed_text for s in steps if s.texts_filled)
    ids: list[int] = []
    for k, step in enumerate(steps):
        ids += step.committed_ids
        if step.texts_filled:
            continue
        final = bool(trace.stop_reason) and k == len(trace.steps) - 1
        full = tokenizer.decode(ids, skip_special_tokens=True)
        if not final:
            full = full.rstrip("\ufffd")
        piece = full[len(emitted) :] if full.startswith(emitted) else ""
        emitted += piece
        step.committed_text = piece
    fill_token_texts(todo, tokenizer)


def fill_token_texts(steps: Sequence[StepRecord], tokenizer) -> None:
    """Set ``node_text`` and ``target_text`` of ``steps``: each token's text on its own (part of a
    character as its bytes, ``talon.models.token_text``), every distinct token decoded once."""
    singles = sorted({t for s in steps for t in [*s.tree.token, *s.target_token] if t != NO_TOKEN})
    text_of = dict(zip(singles, token_labels(tokenizer, singles)))
    for step in steps:
        step.node_text = [text_of[t] for t in step.tree.token]
        step.target_text = [text_of[t] if t != NO_TOKEN else "" for t in step.target_token]


def run(
    trace: RunTrace,
    target: LoadedModel,
    drafter: Drafter | None,
    tree_cfg: TreeConfig,
    decode_cfg: DecodeConfig,
    stop: Callable[[], bool] | None = None,
) -> Iterator[StepRecord]:
    """Decode ``trace.prompt_ids``; append one ``StepRecord`` per target forward to ``trace.steps``
    and yield it.  Ends at EOS, at ``max_new_tokens``, or when ``stop()`` returns True (checked
    between steps); ``trace.stop_reason`` says which.  ``drafter`` may be None for ``ar``.

    Timing: each step's phases (draft, verify, bookkeeping) follow one another without gaps, so
    ``trace.seconds`` (prefill + every step's phases) is the wall clock of everything the loop does,
    less the time the caller spends between steps.  On a GPU the clock is read after the host has the
    step's results, and the device is synchronised once at the end of the prefill and of the run.
    Token text is not decoded here (``fill_texts``).

    At temperature > 0 the target's choices come from position-keyed noise (``talon.engine.sampling``),
    so the output equals autoregressive sampling with the same seed, for every method.

    ``decode_cfg.execution == "async"`` drafts the next tree on a worker thread (its own CUDA stream on
    a GPU) while the target verifies the current one, from the guessed outcome (``likely_outcome``
    and the drafter's best bonus token there).  A right guess makes that tree the next step's; after a
    wrong one the next step drafts again (the drafter crops itself back to the committed sequence).
    Only verified tokens are ever committed, so the output is the synchronous output (greedy, and
    sampled for the same seed); the trees can differ when the drafter's state after a guess is not the
    one it would have had (a head's stand-in features, a hybrid's weights before the step's acceptance
    counts, the cost rule's calibration before it reads the step's verdict).  ``ar`` always runs synchronously."""
    loop = _Loop(trace, target, drafter, tree_cfg, decode_cfg)
    try:
        loop.prefill()
        while True:
            if stop is not None and stop():
                trace.stop_reason = STOPPED
                return
            step = loop.step()
            yield step
            if trace.stop_reason:
                return
    finally:
        loop.close()


class _Loop:
    """The state of one run between steps.  Plain decoding is the same loop with a root-only builder
    (and a drafter that is never asked).  Each call runs in inference mode on its own, so the caller
    may resume the generator from another thread (a web server does)."""

    def __init__(
        self,
        trace: RunTrace,
        target: LoadedModel,
        drafter: Drafter | None,
        tree_cfg: TreeConfig,
        decode_cfg: DecodeConfig,
        static: bool = True,
    ) -> None:
        """``static``: whether the run may take static runners (CUDA graphs) where the device has them."""
        self.clock0 = time.perf_counter()  # a first run's static runners are captured on its clock
        self.trace, self.target, self.decode_cfg = trace, target, decode_cfg
        self.builder = make_builder(tree_cfg)
        self.drafter = drafter if drafter is not None and tree_cfg.method != "ar" else NoDrafter()
        self.eos = target.eos_token_ids
        rows = len(trace.prompt_ids) + decode_cfg.max_new_tokens + tree_rows(tree_cfg) + 1
        self.rows = rows if static else None
        self.verifier = Verifier(target, self.drafter.feature_layers, self.rows)
        self.noise = (
            PositionNoise(decode_cfg.seed, target.vocab_size, target.device) if decode_cfg.temperature > 0 else None
        )
        asynchronous = decode_cfg.execution == "async" and tree_cfg.method != "ar"
        trace.execution = "async" if asynchronous else "sync"
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="talon-drafter") if asynchronous else None
        self.side_stream = torch.cuda.Stream(target.device) if asynchronous and target.device.type == "cuda" else None
        curve = CostCurve.from_dict(trace.cost_curve).for_method(tree_cfg.method) if trace.cost_curve else None
        self.rule = CostRule(Calibration(self.drafter.calibration_prior), curve, sizing=tree_cfg.auto)
        self.committed = list(trace.prompt_ids)  # prompt + output so far; the last token is the next root
        self.ready: tuple[BuildResult, dict] | None = None  # async: the next tree, drafted during a verification

    def close(self) -> None:
        if self.worker is not None:
            self.worker.shutdown(wait=True)
        self.verifier.close()
        self.drafter.release()

    @torch.inference_mode()
    def prefill(self) -> None:
        prompt_ids = self.trace.prompt_ids
        self.verifier.prefill(prompt_ids)
        self.drafter.start(prompt_ids, self.verifier.features, self.rows)
        synchronize(self.target.device)
        self.trace.prefill_seconds = time.perf_counter() - self.clock0

    def step(self) -> StepRecord:
        """Draft, verify, commit and record one step; appends it to the trace and sets its stop reason."""
        return self._async_step() if self.worker is not None else self._sync_step()

    @property
    def tokens_left(self) -> int:
        """New tokens the run may still commit (max new tokens less the output so far)."""
        return self.decode_cfg.max_new_tokens - (len(self.committed) - len(self.trace.prompt_ids))

    def _build(self) -> tuple[BuildResult, dict]:
        deepest = self.tokens_left - 1  # a step commits at most the tokens left, bonus included
        built = self.builder.build(
            self.drafter, self.committed, self.verifier.features, rule=self.rule, max_depth=deepest
        )
        return built, self.drafter.step_info()

    def _verify(self, tree: DraftTree) -> Verdict:
        verdict = self.verifier.verify(tree, self.decode_cfg.temperature, self.noise)
        self.verifier.commit(verdict.accepted_path)
        return verdict

    @torch.inference_mode()
    def _sync_step(self) -> StepRecord:
        t0 = time.perf_counter()
        built, info = self._build()
        t1 = time.perf_counter()
        verdict = self._verify(built.tree)
        t2 = time.perf_counter()
        new_ids, reason = self._commit(built.tree, verdict)
        return self._record(built, info, verdict, new_ids, reason, (t0, t1, t2))

    @torch.inference_mode()
    def _async_step(self) -> StepRecord:
        """The tree drafted during the last verification if its guess was right (else drafted now);
        while the target verifies it, the worker drafts the next tree from a guessed outcome."""
        t0 = time.perf_counter()
        (built, info), self.ready = self.ready or self._build(), None
        t1 = time.perf_counter()
        pending = self.worker.submit(
            speculate,
            self.drafter,
            self.builder,
            built,
            list(self.committed),
            self.verifier.features,
            self.side_stream,
            self.clock0,
            self.rule,
            self.tokens_left,
        )
        verdict = self._verify(built.tree)
        t2 = time.perf_counter()
        speculation = pending.result()
        waited = time.perf_counter() - t2
        new_ids, reason = self._commit(built.tree, verdict)
        hit = bool(speculation.guess) and speculation.guess == new_ids and not reason
        if hit:
            self.ready = (speculation.built, speculation.drafter_info)
        return self._record(
            built,
            info,
            verdict,
            new_ids,
            reason,
            (t0, t1, t2),
            speculate_start=speculation.start,
            speculate_seconds=speculation.seconds,
            speculate_hit=hit,
            wait_seconds=waited,
        )

    def _commit(self, tree: DraftTree, verdict: Verdict) -> tuple[list[int], str]:
        """The step's tokens that make it into the output (cut at EOS / max new tokens) and why the run
        ends there; the drafter observes the verdict."""
        new_ids, reason = cut_step(
            tree.path_tokens(verdict.accepted_path[-1]) + [verdict.bonus_token],
            self.eos,
            self.tokens_left,
        )
        self.committed.extend(new_ids)
        self.drafter.observe(tree, verdict)
        self.rule.observe(tree, verdict)
        if self.noise is not None:
            self.noise.forget_before(self.verifier.root_position)
        return new_ids, reason

    def _record(
        self,
        built: BuildResult,
        info: dict,
        verdict: Verdict,
        new_ids: list[int],
        reason: str,
        times: tuple[float, float, float],
        **speculation,
    ) -> StepRecord:
        t0, t1, t2 = times
        root_top1 = (
            float(built.root_logprobs.max().exp())
            if built.root_logprobs is not None and torch.isfinite(built.root_logprobs).any()
            else None
        )
        if reason:
            synchronize(self.target.device)
        t3 = time.perf_counter()
        clock0 = self.clock0
        step = StepRecord(
            **vars(verdict),
            index=len(self.trace.steps),
            tree=built.tree,
            committed_ids=new_ids,
            draft_start=t0 - clock0,
            draft_seconds=t1 - t0,
            verify_start=t1 - clock0,
            verify_seconds=t2 - t1,
            bookkeeping_seconds=t3 - t2,
            drafter_forwards=built.drafter_forwards,
            drafter_info=info,
            root_top1=root_top1,
            call_widths=built.call_widths,
            stop=built.stop,
            expected=built.expected,
            price=built.price,
            **speculation,
        )
        self.trace.steps.append(step)
        self.trace.stop_reason = reason
        return step


def run_settings(trace: RunTrace) -> tuple[TreeConfig, DecodeConfig]:
    """The tree and decode settings a trace was made with (``ConfigError`` if they are not valid ones)."""
    tree = {f.name: trace.tree_config[f.name] for f in fields(TreeConfig) if f.name in trace.tree_config}
    if tree.get("static_paths"):
        tree["static_paths"] = tuple(tuple(path) for path in tree["static_paths"])
    try:
        decode = DecodeConfig(
            **{f.name: trace.decode_config[f.name] for f in fields(DecodeConfig) if f.name in trace.decode_config}
        )
        return TreeConfig(**tree), decode
    except TypeError as err:
        raise ConfigError(f"The trace's settings are not valid: {err}") from None


@dataclass
class Replayed:
    """A run's state at the start of one of its steps, as its own loop left it there.

    Attributes:
        verifier: the target's caches holding the step's context (no static runner).
        drafter: the run's drafter after every earlier step (its caches, its learned state).
        calibration: the run's calibration, learned from the earlier steps' verdicts.
        method: the run's tree method (``hybrid``'s drafter is the merged one).
    """

    verifier: Verifier
    drafter: Drafter
    calibration: Calibration
    method: str


def replayable(trace: RunTrace, steps: int) -> bool:
    """Whether ``Replay`` can bring ``trace``'s run to the start of its step ``steps`` (from 0): a synchronous
    tree run (an async run's trees came from guessed states; plain decoding has no drafter) with that step."""
    method = trace.tree_config.get("method")
    return trace.execution == "sync" and method not in (None, "ar") and 0 <= steps < len(trace.steps)


class Replay:
    """A run decoded again from its prompt with its settings, one ``advance`` at a time, up to the start of
    its step ``steps`` (from 0): the state the run itself had there (``state``), so a step rebuilt from it
    is the run's own tree.  A context prefilled in one piece gives the same tokens but not the same
    trees: its feature rows and caches differ from the run's in their last bits (other row counts,
    other kernels), enough to reorder close candidates.

    Each ``advance`` is one model job (the prefill, then one step), so a server can interleave other
    work.  A replayed step whose tree or tokens differ from the recorded one (a trace made on another
    machine, by other code or with another drafter) ends the replay: ``advance`` returns False and what it
    borrowed is released.

    Args:
        trace: a run ``replayable`` to ``steps``.
        target: the run's target.
        drafter: a fresh drafter of the run's kind (``drafter_for(method, spec, ...)``).
        steps: the step to stop at the start of (from 0; 0 is the state after the prefill).
    """

    def __init__(self, trace: RunTrace, target: LoadedModel, drafter: Drafter, steps: int) -> None:
        if not replayable(trace, steps):
            raise ConfigError(f"This run cannot be replayed to its step {steps + 1}.")
        tree_cfg, decode_cfg = run_settings(trace)
        curve = CostCurve.from_dict(trace.cost_curve).for_method(tree_cfg.method) if trace.cost_curve else None
        copy = new_trace(target, drafter, tree_cfg, decode_cfg, trace.prompt, trace.prompt_ids, curve)
        self._loop: _Loop | None = _Loop(copy, target, drafter, tree_cfg, decode_cfg, static=False)
        self.recorded, self.steps, self.method = trace.steps, steps, tree_cfg.method
        self.done = -1  # steps replayed; -1 before the prefill

    @property
    def finished(self) -> bool:
        return self._loop is not None and self.done == self.steps

    def advance(self) -> bool:
        """The prefill (first call), else the next step; False once the replay has left the run."""
        loop = self._loop
        if loop is None or self.finished:
            return loop is not None
        try:
            if self.done < 0:
                loop.prefill()
            else:
                step, ran = loop.step(), self.recorded[self.done]
                if (step.tree.token, step.tree.parent, step.committed_ids) != (
                    ran.tree.token,
                    ran.tree.parent,
                    ran.committed_ids,
                ):
                    self.close()
                    return False
            self.done += 1
            return True
        except BaseException:
            self.close()
            raise

    def state(self) -> Replayed:
        """The run's state at the start of step ``steps`` (after the last ``advance``); the caller owns it."""
        if not self.finished:
            raise RuntimeError("the replay has not reached its step")
        loop = self._loop
        return Replayed(loop.verifier, loop.drafter, loop.rule.calibration, self.method)

    def close(self) -> None:
        """Release the replay's caches (not needed after ``state``, whose owner keeps them)."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None


def replay(
    trace: RunTrace,
    target: LoadedModel,
    drafter: Drafter,
    steps: int,
    run: Callable[[Callable[[], bool]], bool] | None = None,
    on_advance: Callable[[Replay], None] | None = None,
) -> Replayed | None:
    """``Replay`` run to its end: the run's state at the start of step ``steps``, or None where the run
    cannot be replayed to it (not ``replayable``, settings or a prompt this target cannot run again, or it
    left the recorded run).  ``run(advance)`` calls each ``advance`` (a server: one queued job each; None
    calls it here); ``on_advance(replay)`` hears before each one (``replay.done`` of ``steps``)."""
    if not replayable(trace, steps):
        return None
    try:
        run_again = Replay(trace, target, drafter, steps)
    except ConfigError:
        return None
    run = run or (lambda advance: advance())
    try:
        while not run_again.finished:
            if on_advance is not None:
                on_advance(run_again)
            if not run(run_again.advance):  # left the run, or the server did not run the job
                run_again.close()
                return None
    except BaseException:  # a listener's or the server's error: nothing borrowed is kept
        run_again.close()
        raise
    return run_again.state()


def complete(
    trace: RunTrace,
    target: LoadedModel,
    drafter: Drafter | None,
    tree_cfg: TreeConfig,
    decode_cfg: DecodeConfig,
    texts: bool = True,
) -> RunTrace:
    """Run ``trace`` (made by ``new_trace``) to its end and return it, its text filled in unless ``texts``
    is False (a benchmark decodes text after the clock, as it does for transformers' peers)."""
    for _ in run(trace, target, drafter, tree_cfg, decode_cfg):
        pass
    if texts:
        fill_texts(trace, target.tokenizer)
    return trace


def run_to_end(
    target: LoadedModel,
    drafter: Drafter | None,
    tree_cfg: TreeConfig,
    decode_cfg: DecodeConfig,
    prompt: str = "",
    prompt_ids: Sequence[int] | None = None,
    texts: bool = True,
    cost_curve: CostCurve | None = None,
) -> RunTrace:
    """A whole generation of ``prompt`` (or ``prompt_ids``): ``new_trace`` then ``complete``."""
    trace = new_trace(target, drafter, tree_cfg, decode_cfg, prompt, prompt_ids, cost_curve)
    return complete(trace, target, drafter, tree_cfg, decode_cfg, texts)
