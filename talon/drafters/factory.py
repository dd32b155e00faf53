"""The one parser of drafter specs (``parse_drafter_spec``) and the factory that builds a fresh
``Drafter`` (per-run state) from one, with models and heads loaded once in a ``ModelRegistry``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import ConfigError
from ..models.loaded import LoadedModel, ModelLoadError
from ..models.loading import check_same_tokenizer, truncated_copy
from ..models.registry import ModelRegistry
from .base import Drafter
from .calibration import load_drafter_tables
from .datastore import Datastore
from .eagle3_model import EAGLE3_FILES, Eagle3Head, load_eagle3
from .head import HeadDrafter
from .head_model import SHIPPED_HEAD, DraftHead, load_head, resolve_head_dir
from .hybrid import HybridDrafter
from .model import ModelDrafter
from .ngram import NgramDrafter

BUILT_IN_DRAFTERS = (
    ("head", "the trained draft head shipped for the embedded target (or the weights that target was quantized from)"),
    ("head:DIR_OR_HUB_ID", ""),
    (
        "eagle3:DIR_OR_HUB_ID",
        "an EAGLE-3 draft head in EAGLE's layout or vLLM's speculators format, e.g. "
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B or RedHatAI/Qwen3-8B-speculator.eagle3",
    ),
    ("ngram", "prompt lookup"),
    ("layers:K", "the target's first K layers"),
    ("lookup+SPEC", "SPEC merged with prompt lookup; the hybrid method does this for its drafter"),
)
"""The drafter spec forms other than a small LM's directory or Hub id, each with what it names."""
DRAFTER_FORMS = ", ".join(form for form, _ in BUILT_IN_DRAFTERS)
"""The built-in drafter forms in a few words (``head, head:DIR_OR_HUB_ID, ...``), for a message."""


class NotADrafter(ModelLoadError):
    """A bare word that names no built-in drafter and loads no model: most likely a built-in name mistyped.
    Its message lists the built-in forms, so a caller adds no list of its own."""


DRAFTER_HELP = (
    ", ".join(f"'{form}'" + (f" ({said})" if said else "") for form, said in BUILT_IN_DRAFTERS)
    + ", or a local directory / Hugging Face id of a small LM with the target's tokenizer"
)
LOOKUP_PREFIXES = ("lookup+", "hybrid:")
"""Spec prefixes that merge a drafter with prompt lookup (``hybrid:`` is the older name, still read)."""


@dataclass(frozen=True)
class DrafterSpec:
    """A parsed drafter spec.

    Attributes:
        kind: ``ngram``; ``head`` (``location`` "" = the shipped head); ``eagle3``
            (``location`` = an EAGLE-3 head's directory or Hub id, EAGLE layout or speculators format);
            ``layers`` (``layers`` = K, the target's first K decoder layers); ``with_lookup`` (``inner``
            is merged with prompt lookup: ``lookup+SPEC``); ``model`` (``location`` = a directory or Hub id
            of a causal LM).
        location: a head's or model's directory / Hub id.
        layers: K of ``layers:K``.
        inner: the model side of ``lookup+SPEC``.
    """

    kind: str
    location: str = ""
    layers: int = 0
    inner: DrafterSpec | None = None

    @property
    def is_model(self) -> bool:
        """Whether the spec names a causal LM (``layers:K`` or a model directory / Hub id)."""
        return self.kind in ("layers", "model")


_KEYWORD = re.compile(r"^\s*(ngram|head|eagle3|layers|lookup|hybrid)\s*(?=$|[:+])", re.IGNORECASE)


def _keywords_lowered(spec: str) -> str:
    """``spec`` with each leading keyword (and the ``lookup+`` chain) in lower case and the spaces around
    its ``:`` / ``+`` dropped; a location after ``:`` (a path, a Hub id) is kept as typed."""
    out = ""
    while True:
        match = _KEYWORD.match(spec)
        if not match:
            return out + spec
        out += match.group(1).lower()
        spec = spec[match.end() :].lstrip()
        if spec.startswith("+"):
            out += "+"
            spec = spec[1:].lstrip()
            continue
        if spec.startswith(":"):
            return out + ":" + spec[1:].strip()
        return out + spec


def parse_drafter_spec(text: str) -> DrafterSpec:
    """Parse ``text`` (see ``DRAFTER_HELP``); ``ConfigError`` says what is wrong.  The keywords are read in
    any case and with spaces around ``:`` and ``+`` ("Ngram", "lookup + head", "layers : 4"): typed so,
    they were taken for a Hub id and failed offline as a model not in the cache."""
    spec = _keywords_lowered((text or "").strip())
    if not spec:
        raise ConfigError(f"No drafter given: use {DRAFTER_HELP}.")
    if spec == "ngram":
        return DrafterSpec("ngram")
    if spec == "head" or spec.startswith("head:"):
        return DrafterSpec("head", location=spec.partition(":")[2].strip())
    if spec.startswith("eagle3:"):
        location = spec.partition(":")[2].strip()
        if not location:
            raise ConfigError(
                "Drafter 'eagle3:' needs a directory or Hugging Face id, e.g. "
                "'eagle3:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B'."
            )
        return DrafterSpec("eagle3", location=location)
    for prefix in LOOKUP_PREFIXES:
        if spec.startswith(prefix):
            return DrafterSpec("with_lookup", inner=parse_drafter_spec(spec[len(prefix) :]))
    if spec.startswith("layers:"):
        try:
            k = int(spec.partition(":")[2])
        except ValueError as err:
            raise ConfigError(f"Drafter {spec!r}: K in 'layers:K' must be a whole number.") from err
        return DrafterSpec("layers", layers=k)
    return DrafterSpec("model", location=spec)


def draft_model(spec: DrafterSpec, target: LoadedModel, registry: ModelRegistry | None = None) -> LoadedModel:
    """The causal LM a ``layers`` or ``model`` spec names (``truncated_copy`` of the target, or a model
    loaded through ``registry`` that must share the target's tokenizer).  A truncated copy is made once
    per target object (the packed target and its stock twin share weights' identity but not layers), so
    its static runners and CUDA graphs are captured once, not on every run's clock."""
    registry = registry or ModelRegistry()
    if spec.kind == "layers":
        key = ("layers", spec.layers, target.model, *target.cache_key)  # the module itself: no id reuse
        return registry.get_derived(key, lambda: truncated_copy(target, spec.layers))
    if spec.kind != "model":
        raise ConfigError(f"Drafter kind {spec.kind!r} is not a draft model.")
    lm = registry.get(spec.location)
    check_same_tokenizer(target, lm)
    return lm


def head_directory(location: str) -> Path:
    """The directory of the draft head at ``location`` ("" = the head shipped for the embedded target)."""
    return SHIPPED_HEAD if not location else resolve_head_dir(location)


def shipped_or_given_head(location: str, target: LoadedModel, registry: ModelRegistry) -> tuple[DraftHead, str]:
    """The draft head at ``location`` ("" = the head shipped for the embedded target) loaded for
    ``target`` and its display name; loaded once per head directory and target weights (device, dtype)."""
    if not location and not SHIPPED_HEAD.is_dir():
        raise ModelLoadError(
            f"No draft head is shipped at {SHIPPED_HEAD}: train one with "
            "`python -m talon.training.train_head` or pick another drafter."
        )
    directory = head_directory(location)
    # the shipped head named by its path is the same drafter (one name, so one cached cost curve)
    shipped = SHIPPED_HEAD.is_dir() and directory.resolve() == SHIPPED_HEAD.resolve()
    name = "trained EAGLE-style head" if shipped else f"EAGLE-style head {location}"
    key = ("head", str(directory.resolve()), *target.cache_key)
    head = registry.get_derived(key, lambda: load_head(directory, target))
    if head.fits_by_fingerprint:  # what a user reads beside the run: the head meets weights it was not trained on
        name += f" for {head.config.target_name}, loaded by its fingerprint"
    return head, name


def eagle3_head(location: str, target: LoadedModel, registry: ModelRegistry) -> Eagle3Head:
    """The EAGLE-3 head at ``location`` loaded for ``target``, once per head directory and target weights."""
    directory = resolve_head_dir(location, EAGLE3_FILES, "EAGLE-3 head")
    key = ("eagle3", str(directory.resolve()), *target.cache_key)
    return registry.get_derived(key, lambda: load_eagle3(directory, target))


def make_drafter(
    spec: str | DrafterSpec,
    target: LoadedModel,
    registry: ModelRegistry | None = None,
    datastore: Datastore | None = None,
) -> Drafter:
    """A fresh drafter (per-run state) for ``spec`` (see ``DRAFTER_HELP``).  Models and heads come
    from ``registry`` so they are loaded once; a private one is used when none is given.  Prompt lookup
    (``ngram``, and the lookup side of ``lookup+SPEC``) also retrieves from ``datastore`` when given."""
    registry = registry or ModelRegistry()
    parsed = spec if isinstance(spec, DrafterSpec) else parse_drafter_spec(spec)
    if parsed.kind == "ngram":
        return lookup_drafter(target.vocab_size, datastore, target.device)
    if parsed.kind == "with_lookup":
        inner = make_drafter(parsed.inner, target, registry)
        return hybrid_with_lookup(inner, target.vocab_size, datastore, target.device)
    if parsed.kind == "head":
        head, name = shipped_or_given_head(parsed.location, target, registry)
        drafter = HeadDrafter(head, target, name)
        directory = head_directory(parsed.location)
    elif parsed.kind == "eagle3":
        drafter = HeadDrafter(eagle3_head(parsed.location, target, registry), target, f"EAGLE-3 head {parsed.location}")
        directory = resolve_head_dir(parsed.location, EAGLE3_FILES, "EAGLE-3 head")
    else:
        try:
            return ModelDrafter(draft_model(parsed, target, registry), target.vocab_size)
        except ModelLoadError as err:
            if parsed.kind != "model" or "/" in parsed.location or "\\" in parsed.location:
                raise  # a path or an owner/name Hub id: the load's own message says what to do
            # a bare word ("heads", "ngrams"): most likely a built-in drafter's name mistyped
            raise NotADrafter(f"Not a built-in drafter ({DRAFTER_FORMS}), nor a model: {err}") from err
    drafter.calibration_prior = registry.get_derived(
        ("calibration", str(directory.resolve())), lambda: load_drafter_tables(directory)
    )
    return drafter


def drafter_for(
    method: str,
    spec: str,
    target: LoadedModel,
    registry: ModelRegistry | None = None,
    datastore: Datastore | None = None,
    hybrid_weight: float | None = None,
) -> Drafter | None:
    """The drafter a decoding ``method`` runs with: ``None`` for ``ar``; for ``hybrid`` the drafter of
    ``spec`` merged with prompt lookup (holding the retrieval weight ``hybrid_weight`` when given instead
    of learning it); else ``make_drafter(spec)``.  Prompt lookup retrieves from ``datastore`` too when
    given."""
    if method == "ar":
        return None
    drafter = make_drafter(spec, target, registry, datastore)
    if method != "hybrid":
        return drafter
    if isinstance(drafter, HybridDrafter):
        drafter.fixed_weight = hybrid_weight
        return drafter
    return hybrid_with_lookup(drafter, target.vocab_size, datastore, target.device, hybrid_weight)


def uses_prompt_lookup(method: str, spec: str) -> bool:
    """Whether ``drafter_for(method, spec, ...)`` drafts with prompt lookup (and so reads a datastore): the
    hybrid method, or an ``ngram`` or ``lookup+SPEC`` drafter.  ``ConfigError`` for a spec that does not
    parse."""
    return method == "hybrid" or parse_drafter_spec(spec).kind in ("ngram", "with_lookup")


def hybrid_with_lookup(
    model: Drafter,
    vocab: int,
    datastore: Datastore | None = None,
    device: torch.device | str = "cpu",
    fixed_weight: float | None = None,
) -> HybridDrafter:
    """``model`` merged with prompt lookup (``lookup_drafter``); refuses n-gram as the model side (it
    would be retrieval twice)."""
    if isinstance(model, NgramDrafter):
        raise ConfigError(
            "Prompt lookup is merged with a model drafter (the hybrid method, lookup+SPEC): pick the trained "
            "head, a self-draft ('layers:K') or a draft model as that drafter, not n-gram."
        )
    return HybridDrafter(model, lookup_drafter(vocab, datastore, device), fixed_weight=fixed_weight)


def lookup_drafter(vocab: int, datastore: Datastore | None = None, device: torch.device | str = "cpu") -> NgramDrafter:
    """Prompt lookup over the run's prompt and output, then ``datastore`` when given (its name then says
    which); its rows made on ``device``."""
    if datastore is None:
        return NgramDrafter(vocab, device=device)
    drafter = NgramDrafter(vocab, datastore=datastore.index, device=device)
    drafter.name = f"{NgramDrafter.name} + {datastore.name}"
    return drafter
