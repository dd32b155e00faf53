"""An EAGLE-style draft head: one decoder layer that drafts from the target's own hidden states.

Architecture (EAGLE-3 flavoured, see ``docs/head.md``):

* **features**: the target's hidden states at ``feature_layers`` (a low, a middle and the top layer)
  are concatenated and mapped to the model width by ``fuse`` (``[3H] -> [H]``);
* **input**: at position p the head reads ``[feature of position p-1 ; embedding of token p]``
  through ``input_proj`` (``[2H] -> [H]``): the target's fused feature for committed positions, the
  head's own output at the parent for draft-tree nodes (EAGLE's recurrence);
* **body**: one Llama decoder layer of the target's width with its own KV cache and rotary
  positions, then its own RMS norm;
* **output**: the target's frozen LM head (shared, not stored), so the head predicts token p+1.  With a
  draft vocabulary (``draft_vocab.json`` beside the weights, EAGLE-3's reduced vocabulary) only those
  rows of the LM head are computed and every other token gets probability 0: the full 49k-row
  projection was the biggest part of a draft step on a CPU.

The token embedding and LM head are the target's, so a head file holds only ~4.5 M parameters.
A head records the target it was trained for and a checksum of that target's weights, and refuses
to load against another target, unless the target's weights are ones a 4-bit quantization turned into
its target's (``head_fingerprint``: the Hub's original of the embedded 4-bit model).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from safetensors.torch import load_file
from safetensors.torch import save as tensor_bytes
from torch import nn
from transformers import LlamaConfig
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from ..config import ASSETS
from ..files import write_atomically, write_text_atomically
from ..models.cpu_linear import drafter_dtype, halve_small_rows, pack_for_device, quantize_small_rows
from ..models.fused_linear import fuse, fused_products
from ..models.gpu_linear import use_row_linears
from ..models.gqa_attention import use_gqa_attention_in
from ..models.hub import hub_reachable
from ..models.loaded import LoadedModel, ModelLoadError
from ..models.loading import looks_like_path
from ..models.row_ops import use_row_ops
from .head_fingerprint import FINGERPRINT
from .head_fingerprint import matches as fingerprint_matches


class HeadMismatch(ModelLoadError):
    """A head trained for other weights than the target's (neither its checksum nor its fingerprint fits)."""


HEAD_WEIGHTS = "head.safetensors"
HEAD_CONFIG = "head_config.json"
HEAD_FORMAT = 1
DRAFT_VOCAB = "draft_vocab.json"
"""Optional: ``{"ids": [token ids, ascending], ...provenance}``, the tokens the head may draft."""
HEAD_FILES = [HEAD_WEIGHTS, HEAD_CONFIG, DRAFT_VOCAB, FINGERPRINT]
SHIPPED_HEAD = ASSETS / "heads" / "smollm2-135m-instruct"
"""The head trained for the embedded SmolLM2-135M-Instruct (``python -m talon.training.train_head``)."""


def target_checksum(target: LoadedModel) -> str:
    """SHA-256 over the target's weights (names and values rounded to bfloat16, so the same target
    loaded in float32 on a CPU or bfloat16 on a GPU gives the same digest)."""
    h = hashlib.sha256()
    for name, tensor in sorted(target.model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().to("cpu", torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class HeadConfig:
    """Shape of a head and the target it belongs to.

    Attributes:
        target_name: the target's display name when the head was trained.
        target_sha256: ``target_checksum`` of that target.
        feature_layers: target hidden-state indices fused as features (0 = embeddings, i = output of
            decoder layer i).
        the rest: the target's width, attention shape, norm epsilon, rope settings and vocabulary.
    """

    target_name: str
    target_sha256: str
    feature_layers: tuple[int, ...]
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    vocab_size: int
    format: int = HEAD_FORMAT

    @classmethod
    def for_target(cls, target: LoadedModel, feature_layers: Sequence[int] | None = None) -> HeadConfig:
        """A head shaped like ``target``; default features: layer 2, the middle layer and the top."""
        c = target.model.config
        n = c.num_hidden_layers
        layers = tuple(feature_layers) if feature_layers else (min(2, n), n // 2, n)
        rope = getattr(c, "rope_parameters", None) or {}
        return cls(
            target_name=target.name,
            target_sha256=target_checksum(target),
            feature_layers=layers,
            hidden_size=c.hidden_size,
            intermediate_size=c.intermediate_size,
            num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads,
            head_dim=getattr(c, "head_dim", c.hidden_size // c.num_attention_heads),
            rms_norm_eps=c.rms_norm_eps,
            rope_theta=float(rope.get("rope_theta", 10000.0)),
            max_position_embeddings=c.max_position_embeddings,
            vocab_size=c.vocab_size,
        )

    def llama_config(self) -> LlamaConfig:
        """A one-layer Llama config for the head's decoder layer."""
        cfg = LlamaConfig(
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=1,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_position_embeddings,
            vocab_size=self.vocab_size,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
        )
        cfg._attn_implementation = "sdpa"
        return cfg


class DraftHead(nn.Module):
    """The trainable part of the head (shapes in the module docstring)."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.llama_config = config.llama_config()
        self.fuse = nn.Linear(len(config.feature_layers) * h, h, bias=False)
        self.input_proj = nn.Linear(2 * h, h, bias=False)
        self.layer = LlamaDecoderLayer(self.llama_config, layer_idx=0)
        self.norm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
        self.rotary = LlamaRotaryEmbedding(self.llama_config)
        self.draft_ids: torch.Tensor | None = None  # [V_d] token ids the head may draft (None: all)
        self.draft_lm_head: nn.Linear | None = None  # [H] -> [V_d]: those rows of the target's LM head
        self.fits_by_fingerprint = False  # loaded for other weights than its own target's (``load_head``)

    def use_draft_vocab(self, ids: Sequence[int], lm_head: nn.Module) -> None:
        """Restrict drafting to the tokens ``ids``: keep a copy of their LM-head rows (``[V_d, H]``, in
        the head's dtype) so ``logits`` computes only those.  Called once at load time; the head is
        read-only afterwards."""
        device = lm_head.weight.device
        self.draft_ids = torch.as_tensor(sorted(set(ids)), dtype=torch.long, device=device)
        rows = lm_head.weight.detach()[self.draft_ids].to(self.norm.weight.dtype)
        self.draft_lm_head = nn.Linear(rows.shape[1], rows.shape[0], bias=False, device=device, dtype=rows.dtype)
        self.draft_lm_head.weight = nn.Parameter(rows, requires_grad=False)

    def embed(self, input_ids: torch.Tensor, target: LoadedModel) -> torch.Tensor:
        """Token embeddings ``[..., H]`` (the target's)."""
        return target.model.get_input_embeddings()(input_ids)

    def fuse_features(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """``[..., len(feature_layers), H]`` target states -> ``[..., H]`` features."""
        return self.fuse(target_hidden.flatten(-2).to(self.fuse.weight.dtype))

    def forward(
        self,
        features: torch.Tensor,
        token_embeds: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: Cache,
    ) -> torch.Tensor:
        """``features`` and ``token_embeds`` ``[B, T, H]``, ``position_ids`` ``[B, T]``, bool
        ``attention_mask`` ``[B, 1, T, cache_len + T]``.  Appends to ``cache``; returns the head's
        output states ``[B, T, H]`` (before ``norm``)."""
        x = self.input_proj(torch.cat([features, token_embeds.to(features.dtype)], dim=-1))
        position_embeddings = self.rotary(x, position_ids)
        return self.layer(
            x,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            position_embeddings=position_embeddings,
        )

    def logits(self, states: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Next-token logits ``[..., vocab]`` from head output states ``[..., H]`` through the target's LM
        head; with a draft vocabulary, tokens outside it get ``-inf``."""
        return self._in_vocab(self._rows(states, lm_head), lm_head)

    def log_probs(self, states: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Float32 next-token log-probabilities ``[..., vocab]`` (``logits`` normalised; with a draft
        vocabulary over its columns before they are scattered: a third of the work)."""
        return self._in_vocab(torch.log_softmax(self._rows(states, lm_head).float(), dim=-1), lm_head)

    def _rows(self, states: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """``[..., V]`` logits over the draft vocabulary (``V_d``), or the target's LM head's without one."""
        head = lm_head if self.draft_ids is None else self.draft_lm_head
        return head(self.norm(states).to(head.weight.dtype))

    def _in_vocab(self, rows: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Draft-vocabulary columns ``rows`` over the target's vocabulary (``-inf`` elsewhere); rows already
        over it without a draft vocabulary."""
        return rows if self.draft_ids is None else scatter_draft_logits(rows, self.draft_ids, lm_head.weight.shape[0])

    # ---- files -----------------------------------------------------------------------------------
    def save(self, directory: str | Path, extra: dict | None = None) -> None:
        """Write ``head.safetensors`` (bfloat16) and ``head_config.json`` (+ ``extra`` metadata)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {
            k: v.detach().to("cpu", torch.bfloat16).contiguous()
            for k, v in self.state_dict().items()
            if not k.startswith(("rotary.", "draft_lm_head."))
        }
        # each file whole or not at all: a half-written file would fail the next load, not this save
        write_atomically(directory / HEAD_WEIGHTS, lambda f: f.write(tensor_bytes(state)))
        meta = {**asdict(self.config), "feature_layers": list(self.config.feature_layers), **(extra or {})}
        write_text_atomically(directory / HEAD_CONFIG, json.dumps(meta, indent=1))


def scatter_draft_logits(rows: torch.Tensor, draft_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Float32 logits ``[..., vocab_size]`` from logits over a draft vocabulary ``rows`` ``[..., Vd]``
    whose i-th column is token ``draft_ids[i]``; every other token gets ``-inf`` (probability 0)."""
    out = rows.new_full((*rows.shape[:-1], vocab_size), float("-inf"), dtype=torch.float32)
    out[..., draft_ids] = rows.float()
    return out


def resolve_head_dir(spec: str, files: Sequence[str] = tuple(HEAD_FILES), what: str = "draft head") -> Path:
    """A head directory from a local path, or from the Hugging Face Hub (local cache first, then the
    network when ``hub_reachable``), fetching only ``files``; ``what`` names the head in errors."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if looks_like_path(spec):  # not a Hub id: say the directory is missing, not that the Hub is away
        raise ModelLoadError(
            f"There is no directory {spec!r} on this machine for the {what}: give the path of a head "
            "directory (as the head trainer or an EAGLE-3 checkpoint writes it) or a Hugging Face id such as "
            "'owner/name'."
        )
    try:
        try:
            return Path(snapshot_download(spec, allow_patterns=list(files), local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached: try the network if there is one
            if not hub_reachable():
                raise ModelLoadError(
                    f"The {what} {spec!r} is not a local directory nor in this machine's "
                    "Hugging Face cache, and the Hub cannot be reached from here. Copy the head "
                    "directory to this machine and give its path."
                ) from None
            return Path(snapshot_download(spec, allow_patterns=list(files)))
    except ModelLoadError:
        raise
    except Exception as err:  # noqa: BLE001 - any hub failure becomes one clear message
        raise ModelLoadError(
            f"Could not find the {what} {spec!r} as a local directory or on the Hugging Face "
            f"Hub ({str(err).splitlines()[0]}). If offline, copy the head directory here "
            "and pass its path."
        ) from err


def load_head(
    spec: str | Path, target: LoadedModel, checksum: str | None = None, full_vocab: bool = False
) -> DraftHead:
    """Load a head for ``target``; refuses a head trained for another target (checksum mismatch, and
    the target's weights do not match the head's ``head_fingerprint``).
    ``checksum``: the target's ``target_checksum`` if already known (saves ~0.5 s).  The head drafts
    from its ``DRAFT_VOCAB`` when the directory has one, unless ``full_vocab``.  It runs in
    ``drafter_dtype`` (on the CPU float32 on TALON's kernel where it runs, else bfloat16: a drafter's
    rounding shapes the tree, never the output) through ``use_device_linears``."""
    directory = resolve_head_dir(str(spec))
    try:
        meta = json.loads((directory / HEAD_CONFIG).read_text())
        fields = {k: meta[k] for k in HeadConfig.__dataclass_fields__ if k in meta}
        fields["feature_layers"] = tuple(fields["feature_layers"])
        config = HeadConfig(**fields)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelLoadError(f"{directory} is not a draft-head directory ({err}).") from err
    if config.format != HEAD_FORMAT:
        raise ModelLoadError(f"Draft head format {config.format} is not supported (expected {HEAD_FORMAT}).")
    actual = checksum or target_checksum(target)
    if config.target_sha256 != actual and not fingerprint_matches(target, directory):
        raise HeadMismatch(
            f"The draft head in {directory} was trained for {config.target_name} (weights sha256 "
            f"{config.target_sha256[:12]}...), not for {target.name} ({actual[:12]}...). Use a head trained "
            "for this target, or another drafter."
        )
    layers = target.model.config.num_hidden_layers
    if any(not isinstance(i, int) or not 0 <= i <= layers for i in config.feature_layers):
        raise ModelLoadError(
            f"{directory / HEAD_CONFIG} reads features {list(config.feature_layers)} of its target, which has "
            f"hidden states 0..{layers} only."
        )
    head = DraftHead(config)
    head.fits_by_fingerprint = config.target_sha256 != actual
    state = load_file(directory / HEAD_WEIGHTS)
    missing, unexpected = head.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("rotary.") for k in missing):
        raise ModelLoadError(
            f"{directory / HEAD_WEIGHTS} does not match its config (missing {missing}, unexpected {unexpected})."
        )
    head.to(target.device, drafter_dtype(target.device, target.dtype)).eval().requires_grad_(False)
    use_gqa_attention_in(head, head.llama_config)
    if not full_vocab and (directory / DRAFT_VOCAB).is_file():
        try:
            ids = [int(t) for t in json.loads((directory / DRAFT_VOCAB).read_text())["ids"]]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ModelLoadError(f"{directory / DRAFT_VOCAB} is not a draft vocabulary ({err}).") from err
        if not ids or min(ids) < 0 or max(ids) >= config.vocab_size:
            raise ModelLoadError(f"{directory / DRAFT_VOCAB} holds token ids outside 0..{config.vocab_size - 1}.")
        head.use_draft_vocab(ids, target.model.get_output_embeddings())
    use_device_linears(head)
    return head


def use_device_linears(head: nn.Module) -> None:
    """Give a loaded head's linears (its draft LM head among them) this device's kernels: on a CPU packed
    (``pack_for_device``, the attention's query, key and value and the MLP's gate and up each one product,
    ``fused_linear.fuse``; on TALON's kernel a draft LM head whose rows are the target's 4- or 8-bit codes
    streams them) with int8 copies (``quantize_small_rows``) or, in float32, bfloat16 copies
    (``halve_small_rows``) for calls of a few rows, on a GPU cuBLASLt where it is faster
    (``use_row_linears``); in float32 on a CPU its norms in one C++ call (``use_row_ops``)."""
    pack_for_device(head, fuse)
    quantize_small_rows(head)
    halve_small_rows(head, fused_products(head))
    use_row_ops(head)
    use_row_linears(head)
