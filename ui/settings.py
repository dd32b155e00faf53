"""The settings panel's values turned into what a run needs, the same way for every tab: one
``RunSettings`` object, its configs, the target, a fresh drafter and an empty trace, or a ``gr.Error``
that says which field to fix."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace

import gradio as gr

from talon.config import AUTO_CAP, AUTO_METHODS, ConfigError, DecodeConfig, TreeConfig
from talon.drafters.base import Drafter
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import MAX_PROMPT_CHARS, check_prompt_text, encode_prompt, new_trace
from talon.models.loaded import LoadedModel
from talon.models.loading import spec_problem
from talon.trace import RunTrace

from .compute import COMPUTE, STEP, model_work, waiting_line
from .progress_bar import reporter
from .session import RunStopped, run_stepwise
from .shared import load_target, loaded_target, make_drafter, refusal, target_refusal, target_spec

BUDGET_MAX = AUTO_CAP
"""The Budget N sliders' top (draft nodes): the auto cap, so a fixed N reaches every size an auto tree can
and the sliders, the auto cap and the price chart (to 128) agree."""


def _number(value, name: str, kind=float):
    """``value`` as a ``kind`` (``ConfigError`` naming the field ``name`` for text, or a fraction where it
    counts something)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number (got {value!r}).") from None
    if kind is int:
        if not number.is_integer():
            raise ConfigError(f"{name} must be a whole number (got {number:g}).")
        return int(number)
    return kind(number)


BUDGET_NODES = f"a whole number of draft nodes from 1 to {BUDGET_MAX}"
"""What Budget N takes besides auto (every refusal of a Budget N box says it)."""
BUDGET_RULE = f"Budget N is 0 (auto) or {BUDGET_NODES}"
"""What a Budget N refusal says: what the field takes (a Compare methods side names its own box)."""


def budget_nodes(value, rule: str = BUDGET_RULE) -> int:
    """Budget N's field as a number of draft nodes (0: auto); ``ConfigError`` saying what it takes (``rule``:
    how the refusal names the field and what it takes)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return 0
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{rule} (got {value!r}).") from None
    if not number.is_integer() or not 0 <= number <= BUDGET_MAX:
        raise ConfigError(f"{rule} (got {number:g}).")
    return int(number)


@dataclass(frozen=True)
class RunSettings:
    """The settings panel as the user left it (widget values, not validated yet): every tab's runs are
    made from one of these (``configs``, ``prepare``)."""

    prompt: str = ""
    target_spec: str = ""
    drafter_spec: str = ""
    method: str = "talon"
    budget: float = 24
    topk: float = 6
    mu: float = 0.1
    depth: float = 5
    gamma: float = 4
    temperature: float = 0.0
    max_new: float = 64
    seed: float = 0
    execution: str = "sync"

    @classmethod
    def of(cls, values: Sequence) -> RunSettings:
        """From the panel's components' values, in ``SETTING_NAMES`` order."""
        return cls(*values)

    def but(self, **changes) -> RunSettings:
        """A copy with some fields changed (e.g. another method for a comparison)."""
        return replace(self, **changes)

    def configs(self) -> tuple[TreeConfig, DecodeConfig]:
        """``TreeConfig`` and ``DecodeConfig`` (``ConfigError`` names the bad field).  Budget N 0 is the
        slider's "auto" position: the cost rule sizes each tree, capped at ``AUTO_CAP`` nodes."""
        budget = budget_nodes(self.budget)  # at most the slider's top: a typed or API value could ask for any size
        auto = budget == 0 and self.method in AUTO_METHODS
        if budget == 0 and self.method == "static":
            raise ConfigError(
                "A static tree has a fixed size: set Budget N to 1 or more (auto is for TALON, hybrid and EAGLE-2)."
            )
        tree = TreeConfig(
            method=self.method,
            budget=AUTO_CAP if budget == 0 else budget,
            auto=auto,
            topk=_number(self.topk, "Root width K", int),
            mu=_number(self.mu, "mu"),
            depth=_number(self.depth, "Depth", int),
            gamma=_number(self.gamma, "Chain length", int),
        )
        return tree, DecodeConfig(
            temperature=_number(self.temperature, "Temperature"),
            seed=_number(self.seed, "Seed", int),
            max_new_tokens=_number(self.max_new, "Max new tokens", int),
            execution=self.execution or "sync",
        )


SETTING_NAMES = tuple(f.name for f in fields(RunSettings))
"""The settings panel's fields, in the order the run events take them."""


def tree_config(method, budget, topk, mu, depth, gamma) -> TreeConfig:
    """A ``TreeConfig`` from the tree sliders alone (the Tree lab's); ``gr.Error`` names the bad field."""
    try:
        return RunSettings(method=method, budget=budget, topk=topk, mu=mu, depth=depth, gamma=gamma).configs()[0]
    except ConfigError as err:
        raise refusal(str(err)) from None


@dataclass
class Prepared:
    """A run ready to start."""

    target: LoadedModel
    drafter: Drafter | None
    tree_cfg: TreeConfig
    decode_cfg: DecodeConfig
    trace: RunTrace
    waited: float = 0.0
    """Seconds the run's steps waited in the shared queue (``run_to_end``)."""

    def run_to_end(self, stop: Callable[[], bool] | None = None) -> RunTrace:
        """Decode the whole run (text filled in), one step per job of the shared queue, and return its trace;
        ``stop()`` True ends it before its next step (``stop_reason`` "stopped")."""
        trace, self.waited = run_stepwise(
            self.trace, self.target, self.drafter, self.tree_cfg, self.decode_cfg, stop=stop
        )
        return trace


LONG_PROMPT_TOKENS = {"cpu": 2048}
"""Prompt tokens above which a run is refused on this kind of device, with a message that says how to
shorten it: on the 2-core CPU reading 2,000 tokens took about 20 s under load and every step then attends
to all of them, so a longer prompt would keep a classroom waiting for minutes (a GPU has no such limit
below the model's context)."""


def characters_for(tokens: int, ids: int, chars: int) -> str:
    """ "about N characters": what ``tokens`` tokens come to at a prompt's own characters per token (``chars``
    characters made ``ids`` tokens), rounded down to hundreds."""
    return f"about {int(tokens * chars / ids) // 100 * 100:,} characters"


def characters_that_fit(target: LoadedModel, prompt: str, limit: int) -> int:
    """The most leading characters of ``prompt`` (in hundreds) whose encoding (``encode_prompt``, the chat
    template included) takes at most ``limit`` tokens: what "shorten it to" can promise will pass, where a
    count at the prompt's average characters per token fell short when its start packs fewer a token."""
    lo, hi = 0, len(prompt) // 100  # in hundreds of characters
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            tokens = len(encode_prompt(target, prompt[: mid * 100]))
        except ConfigError:  # a start of white space alone: nothing to count
            tokens = 0
        if tokens <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo * 100


def check_prompt_length(
    ids: list[int], device_kind: str, chars: int | None = None, fits: Callable[[int], int] | None = None
) -> None:
    """``gr.Error`` when a prompt of ``ids`` is too long to run here in reasonable time (``LONG_PROMPT_TOKENS``);
    ``chars``: the prompt's length in characters; ``fits(limit)``: how many of its leading characters fit
    within ``limit`` tokens (``characters_that_fit``; asked only of a prompt over the limit), for the
    message's "shorten it to" (else estimated at the prompt's own characters per token).  The message
    stays until closed: it says what to change."""
    limit = LONG_PROMPT_TOKENS.get(device_kind)
    if limit is not None and len(ids) > limit:
        size = f"{len(ids):,} tokens" + (f" ({chars:,} characters)" if chars else "")
        if fits is not None:
            target = f"about {fits(limit):,} characters"
        else:
            target = characters_for(limit, len(ids), chars) if chars else f"{limit:,} tokens"
        raise refusal(
            f"This prompt is {size}. On this {device_kind.upper()} reading it and then decoding at that length "
            f"would take minutes, so prompts are kept to {limit:,} tokens here: shorten it to {target} or fewer."
        )


def _too_long_note(prompt: str, target: LoadedModel | None) -> str:
    """What a prompt over ``MAX_PROMPT_CHARS`` is told of the length that counts where the model runs: on a
    device with a token limit (``LONG_PROMPT_TOKENS``) that limit in characters of this prompt's own text,
    as ``check_prompt_length`` says it, where its first ``MAX_PROMPT_CHARS`` characters alone pass that
    limit; before the model is loaded the CPU's, in characters of English (about 4 a token); nothing more
    on a device without one."""
    cpu = LONG_PROMPT_TOKENS["cpu"]
    if target is None:
        return f" On a CPU the limit that counts is {cpu:,} tokens, about {cpu * 4:,} characters of English."
    limit = LONG_PROMPT_TOKENS.get(target.device.type)
    if limit is None:
        return ""
    sample = prompt[:MAX_PROMPT_CHARS]
    if len(encode_prompt(target, sample)) <= limit:  # the characters alone are too many: more than that a token
        return ""
    about = f"about {characters_that_fit(target, sample, limit):,} characters"
    device = target.device.type.upper()
    return f" On this {device} the limit that counts is {limit:,} tokens: shorten it to {about} or fewer."


def check(settings: RunSettings, label: str = "") -> None:
    """``gr.Error`` for settings no run could start from (an empty prompt, a bad field, a Target folder
    that does not exist or holds no model, and a prompt too long for this device when its target is
    loaded already), found without loading a model: checked before a run's page changes, so a refused
    run leaves the last one on show.
    ``label`` starts the message about a field (e.g. "Method A: ")."""
    try:
        check_prompt_text(settings.prompt)
    except ConfigError as err:
        if not settings.prompt.strip():
            raise refusal(str(err)) from None
        also = _too_long_note(settings.prompt, loaded_target(settings.target_spec))
        # where a token limit is stricter, it is the one length to name (two limits read as a contradiction)
        told = f"The prompt has {len(settings.prompt):,} characters." + also if also else str(err)
        raise refusal(told) from None
    try:
        settings.configs()
    except ConfigError as err:
        raise refusal(f"{label}{err}") from None
    problem = spec_problem(target_spec(settings.target_spec))
    if problem:  # a missing folder is refused here, before a load step says it is loading it
        raise target_refusal(problem)
    target = loaded_target(settings.target_spec)
    if target is not None:  # a prompt too long for this device, told before the page changes
        encoded_prompt(target, settings.prompt)


def encoded_prompt(target: LoadedModel, prompt: str) -> list[int]:
    """``prompt``'s token ids for ``target``; ``gr.Error`` for a prompt no run can start from here (nothing
    left once encoded, or longer than this device's ``LONG_PROMPT_TOKENS``)."""
    try:
        ids = encode_prompt(target, prompt)
    except ConfigError as err:
        raise refusal(str(err)) from None
    check_prompt_length(ids, target.device.type, len(prompt), lambda limit: characters_that_fit(target, prompt, limit))
    return ids


def load_models(settings: RunSettings, methods: Sequence[str] = ()) -> None:
    """Load the target of ``settings`` and make the drafter of each of ``methods`` (default: the settings'
    method), before a run's page changes: a model that cannot load is refused with its field's message
    (``gr.Error``) and leaves every output as it was; loaded models stay in the registry, so the run reuses
    them.  No output shows progress here (an output would keep an error mark), so a first load says so in
    a note, as does a default head that does not fit the target (``make_drafter``)."""
    if loaded_target(settings.target_spec) is None:
        gr.Info(f"Loading the target model {target_spec(settings.target_spec)} (its first use here)...")
    target = load_target(settings.target_spec)
    fell_back: list[str] = []
    for method in methods or (settings.method,):
        make_drafter(method, settings.drafter_spec, target, fell_back)
    if fell_back:  # the model's load and its cost curve's measurement can follow: keep it in view a while
        gr.Warning(fell_back[0], duration=30, title="Drafter")


@model_work()
def load_panel_models(*panel) -> None:
    """Handler: ``load_models`` for the settings ``panel`` (``SETTING_NAMES``), wired between a tab's check
    and its run (Explore, Compare prompts, Sync vs async)."""
    load_models(RunSettings.of(panel))


def prepare(
    settings: RunSettings, progress: gr.Progress | None = None, stop: Callable[[], bool] | None = None
) -> Prepared:
    """Validate the settings, load the models, make a fresh drafter and an empty trace.  A cost curve that
    must be measured first is measured as a job of the shared queue (it times the machine, so it runs alone).
    ``stop``: whether Stop was pressed; checked after the models load and between the measurement's rounds
    (``RunStopped``: nothing is kept)."""
    try:
        tree_cfg, decode_cfg = settings.configs()
    except ConfigError as err:
        raise refusal(str(err)) from None
    stopped = stop or (lambda: False)
    target = load_target(settings.target_spec, progress)
    ids = encoded_prompt(target, settings.prompt)
    drafter = make_drafter(settings.method, settings.drafter_spec, target)
    shown = reporter(progress)

    def report(line: str) -> None:  # the measurement's progress, between its rounds
        if stopped():
            raise RunStopped
        if shown is not None:
            shown(line)

    on_wait = (lambda ticket: progress(0.0, desc=waiting_line(ticket))) if progress is not None else None
    if stopped():
        raise RunStopped
    curve = COMPUTE.run(
        curve_for_run, target, drafter, tree_cfg, report, priority=STEP, label="run's cost curve", on_wait=on_wait
    )
    if stopped():
        raise RunStopped
    try:
        trace = new_trace(target, drafter, tree_cfg, decode_cfg, settings.prompt, prompt_ids=ids, cost_curve=curve)
    except ConfigError as err:
        raise refusal(str(err)) from None
    return Prepared(target, drafter, tree_cfg, decode_cfg, trace)


def budget_setting(tree_config: dict) -> int | None:
    """The Budget N slider's value for a trace's tree config: 0 (auto) for an auto-sized tree (its
    ``budget`` is the cap, not a size), else the budget, at most ``BUDGET_MAX`` (a command-line run can
    go past the slider)."""
    if tree_config.get("auto"):
        return 0
    budget = tree_config.get("budget")
    return None if budget is None else min(int(budget), BUDGET_MAX)


def settings_of(trace: RunTrace) -> dict:
    """The settings a trace was made with, by ``SETTING_NAMES``, each a value its control accepts
    (target and drafter are display names in a trace, so they are not restored)."""
    tree, dec = trace.tree_config, trace.decode_config
    return {
        "prompt": trace.prompt,
        "method": tree.get("method"),
        "budget": budget_setting(tree),
        "topk": tree.get("topk"),
        "mu": tree.get("mu"),
        "depth": tree.get("depth"),
        "gamma": tree.get("gamma"),
        "temperature": dec.get("temperature"),
        "max_new": dec.get("max_new_tokens"),
        "seed": dec.get("seed"),
        "execution": dec.get("execution", "sync"),
    }
