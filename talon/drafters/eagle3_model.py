"""EAGLE-3 draft heads in the layouts the public checkpoints use (EAGLE's releases, SpecForge exports;
vLLM's ``speculators`` format through ``speculators_format``) and the writer that exports a head to
either (so EAGLE's own code, SGLang or vLLM can load it).

The network (``Eagle3Head``), for a target of width ``Ht`` and a head of width ``H``:

* ``fc`` ``[H, 3 Ht]`` fuses the target's states at three layers (low, middle, high, in that order);
  later draft steps feed back the head's own output state instead (width ``H``, ``fc`` skipped);
* ``midlayer``: one Llama decoder layer whose attention reads ``2 H`` inputs,
  ``[input_layernorm(token embedding) ; hidden_norm(state)]``, with the (un-normed) state as residual,
  then ``post_attention_layernorm`` and a SwiGLU MLP;
* ``norm`` then ``lm_head`` ``[Vd, H]`` over a draft vocabulary of ``Vd`` tokens; draft id ``i`` is
  target token ``i + d2t[i]`` (``t2d`` marks the target tokens that are in the draft vocabulary);
* the token embedding is the head's ``embed_tokens`` when the checkpoint carries one (SpecForge),
  else the target's (EAGLE's releases).

Files: ``config.json`` (a Llama config with ``num_hidden_layers: 1``, ``vocab_size`` = the target's,
``draft_vocab_size``, optional ``target_hidden_size``) and ``model.safetensors`` or
``pytorch_model.bin`` with keys ``fc.weight``, ``midlayer.*``, ``norm.weight``, ``lm_head.weight``,
``d2t``, ``t2d`` and optionally ``embed_tokens.weight``.

Feature layers (``Eagle3Head.feature_layers``) use this package's indexing: index i is the hidden
state entering decoder layer i (0 = the embeddings, i = output of layer i - 1), the indexing of
``output_hidden_states``.  Checkpoints name them three ways:

* no ids in the config: EAGLE's default, the states entering layers 2, L//2 and L-3;
* ``eagle_aux_hidden_state_layer_ids`` at the config's top level: vLLM reads these first and
  captures the state entering each layer id, i.e. our indexing as is;
* ``eagle_config.eagle_aux_hidden_state_layer_ids``: SGLang / SpecForge name layers by their output
  (SGLang captures entering ``id + 1``), so index = id + 1.

``save_eagle3`` writes both keys, each in its reader's convention, so neither engine has to guess.

The token embedding of an exported head.  EAGLE's reference loader (SafeAILab/EAGLE,
``eagle/model/cnets.py``, ``Model.__init__``) copies the target's embedding only when its config has
no ``target_hidden_size`` attribute (every key of config.json becomes one), then loads the checkpoint
non-strictly (``eagle/model/ea_model.py``), so a head whose config names ``target_hidden_size`` and
carries no ``embed_tokens.weight`` drafts there with a random embedding.  ``save_eagle3`` therefore
writes ``target_hidden_size`` only when it differs from ``hidden_size`` (EAGLE's own release configs
never carry it; SGLang, vLLM and speculators' converter all read the absence as "the head's width"),
and a head that needs it has an embedding of its own, which is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as tensor_bytes
from torch import nn
from transformers import LlamaConfig
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from ..files import write_atomically, write_text_atomically
from ..models.cpu_linear import drafter_dtype
from ..models.gqa_attention import use_gqa_attention_in
from ..models.loaded import LoadedModel, ModelLoadError
from .head_model import (
    HEAD_CONFIG,
    HEAD_WEIGHTS,
    resolve_head_dir,
    scatter_draft_logits,
    target_checksum,
    use_device_linears,
)
from .speculators_format import VARIANT_FLAGS, from_speculators, is_speculators, to_speculators

EAGLE3_CONFIG = "config.json"
EAGLE3_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
EAGLE3_FILES = [EAGLE3_CONFIG, *EAGLE3_WEIGHTS]
EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"
LAYOUTS = ("eagle", "speculators")
"""What ``save_eagle3`` writes: EAGLE's layout (EAGLE, SGLang, vLLM) or the ``speculators`` format (vLLM)."""
FORMATS_READ = (
    "the EAGLE-3 layout (EAGLE's releases, SpecForge exports, this package's export: config.json with "
    "hidden_size; fc.weight and midlayer.* in model.safetensors or pytorch_model.bin), vLLM's speculators "
    "format (config.json with speculators_model_type 'eagle3' and a transformer_layer_config; fc.weight "
    "and layers.0.* in model.safetensors), both as 'eagle3:DIR_OR_HUB_ID', and this package's own "
    f"heads ({HEAD_CONFIG} + {HEAD_WEIGHTS}) as 'head:DIR_OR_HUB_ID'"
)
"""The head formats this package reads, for messages about a directory in none of them."""


def default_feature_layers(target_layers: int) -> tuple[int, int, int]:
    """EAGLE's default features for a target of ``target_layers`` decoder layers: the states entering
    layers 2, L//2 and L-3 (our indexing: those indices)."""
    return 2, target_layers // 2, target_layers - 3


def feature_layers_from_config(meta: dict, target_layers: int) -> tuple[int, ...]:
    """The feature layers a checkpoint's ``config.json`` names, in our indexing (module docstring)."""
    if meta.get("eagle_aux_hidden_state_layer_ids"):
        return tuple(int(i) for i in meta["eagle_aux_hidden_state_layer_ids"])
    nested = (meta.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if nested:
        return tuple(int(i) + 1 for i in nested)
    return default_feature_layers(target_layers)


@dataclass(frozen=True)
class Eagle3Config:
    """What the drafter needs to know of an ``Eagle3Head``.

    Attributes:
        llama: the head's one-layer Llama config (width ``hidden_size``, attention shape, rope).
        feature_layers: target hidden-state indices fused by ``fc`` (0 = embeddings, i = entering
            decoder layer i).
        target_hidden_size: the target's width ``Ht`` (``fc`` reads ``len(feature_layers) * Ht``).
        vocab_size: the target's vocabulary; ``draft_vocab_size``: rows of ``lm_head``.
    """

    llama: LlamaConfig
    feature_layers: tuple[int, ...]
    target_hidden_size: int
    vocab_size: int
    draft_vocab_size: int

    @property
    def hidden_size(self) -> int:
        return self.llama.hidden_size

    @property
    def num_key_value_heads(self) -> int:
        return self.llama.num_key_value_heads

    @property
    def head_dim(self) -> int:
        return getattr(self.llama, "head_dim", None) or self.llama.hidden_size // self.llama.num_attention_heads


class Eagle3Layer(nn.Module):
    """EAGLE-3's ``midlayer``: a Llama decoder layer whose q/k/v read ``[norm(embedding) ; norm(state)]``."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.self_attn = LlamaAttention(config, layer_idx=0)
        for name in ("q_proj", "k_proj", "v_proj"):
            old = getattr(self.self_attn, name)
            setattr(self.self_attn, name, nn.Linear(2 * h, old.out_features, bias=old.bias is not None))
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(h, eps=config.rms_norm_eps)

    def forward(
        self, token_embeds: torch.Tensor, states: torch.Tensor, position_embeddings, attention_mask, cache: Cache
    ) -> torch.Tensor:
        """``token_embeds``, ``states`` ``[B, T, H]`` -> output states ``[B, T, H]``; appends to ``cache``."""
        x = torch.cat([self.input_layernorm(token_embeds), self.hidden_norm(states)], dim=-1)
        attn, _ = self.self_attn(
            x, position_embeddings=position_embeddings, attention_mask=attention_mask, past_key_values=cache
        )
        h = states + attn
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Head(nn.Module):
    """An EAGLE-3 draft head (module docstring), with the call interface ``HeadDrafter`` drives."""

    def __init__(self, config: Eagle3Config, own_embedding: bool = False) -> None:
        super().__init__()
        self.config = config
        self.llama_config = config.llama
        h = config.hidden_size
        self.fc = nn.Linear(len(config.feature_layers) * config.target_hidden_size, h, bias=False)
        self.midlayer = Eagle3Layer(config.llama)
        self.norm = LlamaRMSNorm(h, eps=config.llama.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("draft_ids", torch.arange(config.draft_vocab_size), persistent=False)
        """``[Vd]`` target token id of each draft id (``i + d2t[i]``); kept with ``d2t`` by ``set_d2t``."""
        self.embed_tokens = nn.Embedding(config.vocab_size, h) if own_embedding else None
        self.rotary = LlamaRotaryEmbedding(config.llama)
        self.identity_vocab = config.draft_vocab_size == config.vocab_size
        """Whether draft id i is target token i (no scatter into the vocabulary); kept by ``set_d2t``."""

    def set_d2t(self, d2t: torch.Tensor) -> None:
        """Set the draft-to-target offsets ``[Vd]`` and what follows from them (``draft_ids``,
        ``identity_vocab``), once, so no draft call recomputes them."""
        self.d2t = d2t
        self.draft_ids = torch.arange(d2t.numel(), device=d2t.device) + d2t
        self.identity_vocab = bool(torch.equal(self.draft_ids.cpu(), torch.arange(self.config.vocab_size)))

    @classmethod
    def for_target(cls, target: LoadedModel, feature_layers: Sequence[int] | None = None) -> Eagle3Head:
        """A fresh head shaped like ``target`` (its width, attention shape and rope), drafting over the
        whole vocabulary with a frozen copy of the target's LM head; default features EAGLE's.  This is
        the head ``python -m talon.training.train_head --arch eagle3`` trains."""
        c = target.model.config
        layers = tuple(feature_layers) if feature_layers else default_feature_layers(c.num_hidden_layers)
        llama = LlamaConfig(
            hidden_size=c.hidden_size,
            intermediate_size=c.intermediate_size,
            num_hidden_layers=1,
            num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads,
            head_dim=getattr(c, "head_dim", c.hidden_size // c.num_attention_heads),
            rms_norm_eps=c.rms_norm_eps,
            max_position_embeddings=c.max_position_embeddings,
            vocab_size=c.vocab_size,
            rope_parameters=dict(getattr(c, "rope_parameters", None) or {}),
        )
        llama._attn_implementation = "sdpa"
        head = cls(Eagle3Config(llama, layers, c.hidden_size, target.vocab_size, target.vocab_size))
        lm = target.model.get_output_embeddings().weight.detach()
        head.lm_head.weight = nn.Parameter(lm.to("cpu", torch.float32).clone(), requires_grad=False)
        return head

    def restrict_vocab(self, ids: Sequence[int]) -> None:
        """Draft only the target tokens ``ids`` (ascending, unique): keep those rows of ``lm_head``.
        Only for a head that drafts over the whole vocabulary (``for_target``)."""
        if self.config.draft_vocab_size != self.config.vocab_size:
            raise ValueError("restrict_vocab needs a head over the whole vocabulary")
        index = torch.as_tensor(sorted({int(i) for i in ids}), dtype=torch.long, device=self.d2t.device)
        rows = self.lm_head.weight.detach()[index]
        self.lm_head = nn.Linear(rows.shape[1], rows.shape[0], bias=False, device=rows.device, dtype=rows.dtype)
        self.lm_head.weight = nn.Parameter(rows, requires_grad=False)
        self.config = Eagle3Config(
            self.config.llama,
            self.config.feature_layers,
            self.config.target_hidden_size,
            self.config.vocab_size,
            index.numel(),
        )
        self.set_d2t(index - torch.arange(index.numel(), device=index.device))

    # ---- the interface HeadDrafter and the trainer use ---------------------------------------------
    def embed(self, input_ids: torch.Tensor, target: LoadedModel) -> torch.Tensor:
        """Token embeddings ``[..., H]``: the head's own when it has them, else the target's."""
        table = self.embed_tokens if self.embed_tokens is not None else target.model.get_input_embeddings()
        return table(input_ids)

    def fuse_features(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """``[..., len(feature_layers), Ht]`` target states (low to high) -> ``[..., H]``."""
        return self.fc(target_hidden.flatten(-2).to(self.fc.weight.dtype))

    def forward(
        self,
        features: torch.Tensor,
        token_embeds: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: Cache,
    ) -> torch.Tensor:
        """``features`` (fused target states or the head's own states) and ``token_embeds`` ``[B, T, H]``,
        ``position_ids`` ``[B, T]`` (a token's position in the sequence; EAGLE counts the head's
        positions from the second token, so 1 is subtracted), bool ``attention_mask``
        ``[B, 1, T, cache_len + T]``.  Appends to ``cache``; returns output states ``[B, T, H]``
        (before ``norm``)."""
        states = features.to(self.fc.weight.dtype)
        position_embeddings = self.rotary(states, position_ids - 1)
        return self.midlayer(token_embeds.to(states.dtype), states, position_embeddings, attention_mask, cache)

    def logits(self, states: torch.Tensor, lm_head: nn.Module | None = None) -> torch.Tensor:
        """Float32 logits ``[..., vocab]`` over the target's vocabulary from output states ``[..., H]``
        through the head's own ``lm_head``; tokens outside the draft vocabulary get ``-inf``.
        ``lm_head`` (the target's) is not used: the argument keeps one call for every head."""
        return self._in_vocab(self._rows(states))

    def log_probs(self, states: torch.Tensor, lm_head: nn.Module | None = None) -> torch.Tensor:
        """Float32 next-token log-probabilities ``[..., vocab]`` (``logits`` normalised over the draft
        vocabulary before it is scattered)."""
        return self._in_vocab(torch.log_softmax(self._rows(states), dim=-1))

    def _rows(self, states: torch.Tensor) -> torch.Tensor:
        """Float32 ``[..., draft vocab]`` logits through the head's own ``lm_head``."""
        return self.lm_head(self.norm(states).to(self.lm_head.weight.dtype)).float()

    def _in_vocab(self, rows: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary columns ``rows`` over the target's vocabulary (``-inf`` elsewhere)."""
        return rows if self.identity_vocab else scatter_draft_logits(rows, self.draft_ids, self.config.vocab_size)


# ---- reading checkpoints -------------------------------------------------------------------------------
def read_state(directory: Path) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint directory (``model.safetensors`` or ``pytorch_model.bin``), with
    any ``model.`` prefix removed; ``unreadable`` when it holds neither."""
    for name in EAGLE3_WEIGHTS:
        path = directory / name
        if path.is_file():
            state = (
                load_file(path)
                if name.endswith(".safetensors")
                else torch.load(path, map_location="cpu", weights_only=True)
            )
            return {k.removeprefix("model."): v for k, v in state.items()}
    raise unreadable(directory, f"it holds neither {' nor '.join(EAGLE3_WEIGHTS)}")


def describe_directory(directory: Path, limit: int = 8) -> str:
    """What ``directory`` holds, for a message about a head that cannot be read: its files (the first
    ``limit``), what its ``config.json`` says it is, and the first weight names of its safetensors file."""
    names = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    if not names:
        return "no files"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    parts = [f"the files {', '.join(names[:limit])}{more}"]
    if (directory / EAGLE3_CONFIG).is_file():
        try:
            meta = json.loads((directory / EAGLE3_CONFIG).read_text())
            said = [f"{k} {meta[k]!r}" for k in ("architectures", "model_type", "speculators_model_type") if k in meta]
            parts.append(f"a {EAGLE3_CONFIG} with " + (", ".join(said) or f"the keys {sorted(meta)[:limit]}"))
        except (OSError, ValueError, TypeError) as err:
            parts.append(f"an unreadable {EAGLE3_CONFIG} ({err})")
    if (directory / EAGLE3_WEIGHTS[0]).is_file():
        try:
            with safe_open(directory / EAGLE3_WEIGHTS[0], "pt") as f:
                keys = sorted(f.keys())
            parts.append(f"weights named {', '.join(keys[:limit])}{' ...' if len(keys) > limit else ''}")
        except Exception as err:  # noqa: BLE001 - a broken file is described, not raised
            parts.append(f"an unreadable {EAGLE3_WEIGHTS[0]} ({str(err).splitlines()[0]})")
    return "; ".join(parts)


def unreadable(directory: Path, why: str) -> ModelLoadError:
    """The error for a directory with no head in a format read here: ``why``, the formats read here
    (``FORMATS_READ``) and what the directory holds (``describe_directory``)."""
    hint = (
        " It holds one of this package's own heads: load it with 'head:DIR'."
        if (directory / HEAD_CONFIG).is_file()
        else ""
    )
    return ModelLoadError(
        f"{directory} is not an EAGLE-3 head in a format read here: {why}.{hint} Read here: "
        f"{FORMATS_READ}. {directory} holds {describe_directory(directory)}."
    )


def read_head_files(directory: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """A head directory's ``config.json`` content and weights in the EAGLE layout, translated from the
    speculators format when the config is one (``speculators_format``); ``unreadable`` when the
    directory is in neither format."""
    try:
        meta = json.loads((directory / EAGLE3_CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise unreadable(directory, f"no readable {EAGLE3_CONFIG} ({str(err).splitlines()[0]})") from err
    if not isinstance(meta, dict):
        raise unreadable(directory, f"its {EAGLE3_CONFIG} is not a JSON object")
    if "hidden_size" not in meta and not is_speculators(meta):
        raise unreadable(directory, f"its {EAGLE3_CONFIG} has no hidden_size and no speculators_model_type")
    no_head = (
        "its weights have no fc.weight and decoder layer (midlayer.*, or layers.0.* in the speculators "
        "format): EAGLE-3's feature fusion and its one layer"
    )
    if "fc.weight" not in safetensors_names(directory, "fc.weight"):  # a whole model is refused before it is read
        raise unreadable(directory, no_head)
    state = read_state(directory)
    if is_speculators(meta):
        meta, state = from_speculators(meta, state, str(directory))
    if "fc.weight" not in state or not any(k.startswith("midlayer.") for k in state):
        raise unreadable(directory, no_head)
    return meta, state


def safetensors_names(directory: Path, default: str) -> set[str]:
    """The tensor names in ``directory``'s ``model.safetensors`` (from its header, without reading the
    tensors; any ``model.`` prefix removed), or ``{default}`` when there is no such file to look into."""
    path = directory / EAGLE3_WEIGHTS[0]
    if not path.is_file():
        return {default}
    try:
        with safe_open(path, "pt") as f:
            return {k.removeprefix("model.") for k in f.keys()}  # noqa: SIM118 - safe_open is not iterable
    except Exception:  # noqa: BLE001 - an unreadable file is reported by read_state
        return {default}


def check_pair(
    directory: Path, meta: dict, state: dict[str, torch.Tensor], target: LoadedModel, layers: tuple[int, ...]
) -> None:
    """Refuse a head that cannot draft for ``target``: another vocabulary, another width, feature
    layers the target does not have, a narrower head without an embedding of its own, or (for a head
    this package exported) other target weights.  ``load_eagle3`` checks the draft ids itself."""
    c = target.model.config
    name = f"The EAGLE-3 head in {directory}"
    if int(meta.get("vocab_size", -1)) != target.vocab_size:
        raise ModelLoadError(
            f"{name} is for a vocabulary of {meta.get('vocab_size')} tokens; {target.name} has "
            f"{target.vocab_size}. Pick the head trained for this target."
        )
    target_width = int(meta.get("target_hidden_size") or meta["hidden_size"])
    fc = state.get("fc.weight")
    if target_width != c.hidden_size or fc is None or fc.shape[1] != len(layers) * c.hidden_size:
        raise ModelLoadError(
            f"{name} reads target states of width {target_width} "
            f"(fc {tuple(fc.shape) if fc is not None else 'missing'}); {target.name} has width "
            f"{c.hidden_size}. Pick the head trained for this target."
        )
    if any(not 0 <= i <= c.num_hidden_layers for i in layers):
        raise ModelLoadError(
            f"{name} reads the target's hidden states {list(layers)} (entering those layers), but "
            f"{target.name} has {c.num_hidden_layers} layers. Pick the head trained for this target."
        )
    if "embed_tokens.weight" not in state and int(meta["hidden_size"]) != c.hidden_size:
        raise ModelLoadError(
            f"{name} has width {meta['hidden_size']} and no embedding of its own, so it cannot "
            f"use the embedding of {target.name} (width {c.hidden_size})."
        )
    sha = (meta.get("talon") or {}).get("target_sha256")
    if sha and sha != target_checksum(target):
        raise ModelLoadError(
            f"{name} was exported for {(meta.get('talon') or {}).get('target_name')} (weights "
            f"sha256 {sha[:12]}...), not for {target.name}. Use the head of this target."
        )


def eagle3_config(meta: dict, target: LoadedModel) -> Eagle3Config:
    """``Eagle3Config`` from a checkpoint's ``config.json`` content (EAGLE layout), for ``target``;
    refuses the variants of ``speculators_format.VARIANT_FLAGS`` (a normed residual, norms around
    ``fc``, normed outputs fed back): their layer computes something else, and is not guessed."""
    variants = [k for k in VARIANT_FLAGS if meta.get(k)]
    if variants:
        flags = ", ".join(f"{k}: true" for k in variants)
        raise ModelLoadError(
            f"This EAGLE-3 head is a variant ({flags}) whose layer differs from EAGLE-3's; only the "
            "original layout is supported."
        )
    llama = LlamaConfig.from_dict({k: v for k, v in meta.items() if k not in ("architectures", "eagle_config")})
    llama.num_hidden_layers = 1
    llama._attn_implementation = "sdpa"
    layers = feature_layers_from_config(meta, target.model.config.num_hidden_layers)
    width = int(meta.get("target_hidden_size") or meta["hidden_size"])
    vocab = int(meta["vocab_size"])
    return Eagle3Config(llama, layers, width, vocab, int(meta.get("draft_vocab_size") or vocab))


def load_eagle3(spec: str | Path, target: LoadedModel, dtype: torch.dtype | None = None) -> Eagle3Head:
    """Load the EAGLE-3 head at ``spec`` (a directory or a Hugging Face id; EAGLE layout or speculators
    format) for ``target``; refuses a mismatched pair (``check_pair``) and names the formats read here
    for a directory in neither.  Runs in ``dtype`` (default ``drafter_dtype``: a drafter's rounding
    shapes the tree, never the output)."""
    directory = resolve_head_dir(str(spec), EAGLE3_FILES, "EAGLE-3 head")
    meta, state = read_head_files(directory)
    try:
        config = eagle3_config(meta, target)
    except ModelLoadError:
        raise
    except Exception as err:  # noqa: BLE001 - any config a hand or another tool wrote: say what is wrong
        raise unreadable(
            directory, f"its config.json cannot be read as an EAGLE-3 head's ({type(err).__name__}: {err})"
        ) from err
    check_pair(directory, meta, state, target, config.feature_layers)
    if "d2t" not in state and config.draft_vocab_size != config.vocab_size:
        raise ModelLoadError(f"{directory}: a draft vocabulary of {config.draft_vocab_size} tokens needs a 'd2t' map.")
    state.pop("t2d", None)  # derived from d2t
    head = Eagle3Head(config, own_embedding="embed_tokens.weight" in state)
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as err:  # a weight of another shape than its config says
        why = str(err).splitlines()[-1].strip()
        raise ModelLoadError(f"{directory}: its weights do not match its config ({why})") from err
    missing = [k for k in missing if not k.startswith("rotary.") and k != "d2t"]
    if missing or unexpected:
        raise ModelLoadError(f"{directory} does not hold an EAGLE-3 head (missing {missing}, unexpected {unexpected}).")
    head.set_d2t(head.d2t)
    ids = head.draft_ids
    if ids.min() < 0 or ids.max() >= config.vocab_size or ids.unique().numel() != ids.numel():
        raise ModelLoadError(f"{directory}: its d2t maps draft tokens outside the vocabulary or twice.")
    head.to(target.device, dtype or drafter_dtype(target.device, target.dtype)).eval().requires_grad_(False)
    use_device_linears(head)
    use_gqa_attention_in(head, head.config.llama)
    return head


# ---- writing them ----------------------------------------------------------------------------------------
def eagle_layout(
    head: Eagle3Head, target: LoadedModel, extra: dict | None = None, dtype: torch.dtype = torch.bfloat16
) -> tuple[dict, dict[str, torch.Tensor]]:
    """``head`` as EAGLE-layout ``config.json`` content and weights (``dtype``; ``d2t`` stays int64):
    feature layers explicit in both conventions (module docstring), ``target_hidden_size`` only where
    it differs from ``hidden_size`` (so EAGLE's loader gives the head the target's embedding), the
    head's own embedding when it has one, ``tie_word_embeddings: false`` and a ``talon`` block naming
    ``target`` (its checksum: our loader refuses another target) with ``extra`` in it."""
    layers = list(head.config.feature_layers)
    if min(layers) < 1:
        raise ValueError("SGLang cannot read the embeddings (index 0) as a feature layer")
    width, own_width = head.config.target_hidden_size, head.config.hidden_size
    if head.embed_tokens is None and width != own_width:
        raise ValueError(
            f"a head of width {own_width} without its own embedding cannot use the target's (width {width})"
        )
    state = {k: v.detach().to("cpu").contiguous() for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    state = {k: (v if k == "d2t" else v.to(dtype)) for k, v in state.items()}
    t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
    t2d[head.draft_ids.cpu()] = True
    state["t2d"] = t2d
    llama = head.config.llama.to_dict()
    keep = (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "max_position_embeddings",
        "rope_parameters",
        "hidden_act",
        "attention_bias",
        "mlp_bias",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    )
    rope = dict(llama.get("rope_parameters") or {})
    meta = {
        "architectures": [EAGLE3_ARCHITECTURE],
        "model_type": "llama",
        "num_hidden_layers": 1,
        **{k: llama[k] for k in keep if llama.get(k) is not None},
        "rope_theta": rope.get("rope_theta", 10000.0),
        "vocab_size": head.config.vocab_size,
        "draft_vocab_size": head.config.draft_vocab_size,
        "tie_word_embeddings": False,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "eagle_aux_hidden_state_layer_ids": layers,
        "eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [i - 1 for i in layers]},
        "talon": {
            "feature_layers": layers,
            "feature_layers_convention": "index i = hidden state entering target layer i (0 = embeddings); "
            "top-level ids: vLLM's convention (the same); eagle_config ids: "
            "SGLang's (output of layer id, = index - 1)",
            "target_name": target.name,
            "target_sha256": target_checksum(target),
            **(extra or {}),
        },
    }
    if width != own_width:  # EAGLE's loader takes the target's embedding only without this key
        meta["target_hidden_size"] = width
    if rope.get("rope_type", "default") != "default":  # readers on older transformers take rope_scaling
        meta["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    return meta, state


def save_eagle3(
    head: Eagle3Head,
    directory: str | Path,
    target: LoadedModel,
    extra: dict | None = None,
    dtype: torch.dtype = torch.bfloat16,
    layout: str = "eagle",
    verifier: str | None = None,
    speculative_tokens: int = 3,
) -> Path:
    """Write ``head`` as ``config.json`` + ``model.safetensors`` (``dtype``) in ``layout``: ``"eagle"``,
    EAGLE-3's layout (``eagle_layout``), or ``"speculators"``, vLLM's format
    (``speculators_format.to_speculators``; ``verifier``: the target's Hub id or path vLLM will serve,
    default ``target.identity``; ``speculative_tokens``: vLLM's default draft length).  ``extra`` goes
    into the config's ``talon`` block.  Returns the directory."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    meta, state = eagle_layout(head, target, extra, dtype)
    if layout == "speculators":
        # a model built in memory has no architectures in its config; its class is the one
        architectures = list(getattr(target.model.config, "architectures", None) or [type(target.model).__name__])
        meta, state = to_speculators(
            meta, state, verifier or target.identity or target.name, architectures, speculative_tokens
        )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / EAGLE3_WEIGHTS[0], lambda f: f.write(tensor_bytes(state)))
    write_text_atomically(directory / EAGLE3_CONFIG, json.dumps(meta, indent=1))
    return directory
