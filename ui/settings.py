"""The settings panel's values turned into what a run needs, the same way for every tab: configs,
the target, a fresh drafter and an empty trace, or a ``gr.Error`` that says which field to fix."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.base import Drafter
from talon.engine.decode import new_trace
from talon.models.loaded import LoadedModel
from talon.trace import RunTrace

from .shared import load_target, make_drafter

SETTING_NAMES = ("prompt", "target_spec", "drafter_spec", "method", "budget", "topk", "mu", "depth", "gamma",
                 "temperature", "max_new", "seed", "execution")
"""The settings panel's fields, in the order the run events take them."""


def _number(value, name: str, kind=float):
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number (got {value!r}).") from None


def configs(method, budget, topk, mu, depth, gamma, temperature, max_new, seed,
            execution="sync") -> tuple[TreeConfig, DecodeConfig]:
    """``TreeConfig`` and ``DecodeConfig`` from widget values (``ConfigError`` names the bad field)."""
    tree = TreeConfig(method=method, budget=_number(budget, "Budget N", int), topk=_number(topk, "Root width K", int),
                      mu=_number(mu, "mu"), depth=_number(depth, "Depth", int), gamma=_number(gamma, "Chain length", int))
    return tree, DecodeConfig(temperature=_number(temperature, "Temperature"), seed=_number(seed, "Seed", int),
                              max_new_tokens=_number(max_new, "Max new tokens", int), execution=execution or "sync")


@dataclass
class Prepared:
    """A run ready to start."""

    target: LoadedModel
    drafter: Drafter | None
    tree_cfg: TreeConfig
    decode_cfg: DecodeConfig
    trace: RunTrace


def prepare(prompt, target_spec, drafter_spec, method, budget, topk, mu, depth, gamma, temperature, max_new,
            seed, execution="sync", progress: gr.Progress | None = None) -> Prepared:
    """Validate the settings, load the models, make a fresh drafter and an empty trace."""
    try:
        tree_cfg, decode_cfg = configs(method, budget, topk, mu, depth, gamma, temperature, max_new, seed, execution)
    except ConfigError as err:
        raise gr.Error(str(err), print_exception=False) from None
    target = load_target(target_spec, progress)
    drafter = make_drafter(method, drafter_spec, target)
    try:
        trace = new_trace(target, drafter, tree_cfg, decode_cfg, prompt)
    except ConfigError as err:
        raise gr.Error(str(err), print_exception=False) from None
    return Prepared(target, drafter, tree_cfg, decode_cfg, trace)


def settings_of(trace: RunTrace) -> dict:
    """The settings a trace was made with, by ``SETTING_NAMES`` (target and drafter are display names
    in a trace, so they are not restored)."""
    tree, dec = trace.tree_config, trace.decode_config
    return {"prompt": trace.prompt, "method": tree.get("method"), "budget": tree.get("budget"),
            "topk": tree.get("topk"), "mu": tree.get("mu"), "depth": tree.get("depth"), "gamma": tree.get("gamma"),
            "temperature": dec.get("temperature"), "max_new": dec.get("max_new_tokens"), "seed": dec.get("seed"),
            "execution": dec.get("execution", "sync")}
