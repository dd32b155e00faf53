"""EAGLE-3 heads in vLLM's ``speculators`` format: translated to and from the EAGLE layout that
``eagle3_model`` reads and writes.  The network is the same in both; only the config and the names of
the layer's weights differ, so reading is "translate, then load as EAGLE-3" and writing is "build the
EAGLE-layout files, then translate".  The ``speculators`` package is not imported (it caps
transformers below the version this project uses); the format is taken from its source.

The format, as ``speculators`` 0.9.0 defines it (``src/speculators/models/eagle3/config.py``:
``Eagle3SpeculatorConfig``; ``src/speculators/convert/eagle/eagle3_converter.py``: its converter from
the EAGLE layout) and as vLLM reads it (``vllm/transformers_utils/configs/speculators/algos.py``:
``update_eagle3``; ``vllm/model_executor/models/llama_eagle3.py``: ``load_weights``):

* ``config.json``: ``speculators_model_type: "eagle3"``; ``transformer_layer_config``, the decoder
  layer's own config (a Llama config written as a diff against the class defaults, so an absent key
  takes ``LlamaConfig``'s default; its ``vocab_size`` is the target's); at the top level
  ``draft_vocab_size``, ``target_hidden_size`` (null: the head's own width),
  ``eagle_aux_hidden_state_layer_ids`` (vLLM's convention: the state entering each target layer, our
  indexing as is; absent: 2, L//2, L-3, as in EAGLE), the variant flags ``norm_before_residual``,
  ``norm_before_fc``, ``fc_norm`` and ``norm_output``; and ``speculators_config`` (algorithm, proposal
  methods with ``speculative_tokens``, the verifier's ``name_or_path`` and ``architectures``), which
  vLLM requires.
* weights (``model.safetensors``): the EAGLE layout's keys with ``midlayer.`` named ``layers.0.``;
  ``d2t`` / ``t2d`` only with a reduced draft vocabulary; ``embed_tokens.weight`` optional.  Without
  it vLLM shares the target's embedding (``has_own_embed_tokens`` stays false: ``process_eagle_weight``
  in ``vllm/model_executor/models/utils.py``, ``load_eagle_model`` in
  ``vllm/v1/worker/gpu/spec_decode/eagle/utils.py``) and ``speculators`` fills it from the verifier
  (``DraftVocabMixin.load_verifier_weights`` in ``src/speculators/model.py``); heads it trained carry
  the verifier's copy.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig

from ..models.loaded import ModelLoadError

SPECULATORS_TYPE_KEY = "speculators_model_type"
SPECULATORS_EAGLE3 = "eagle3"
SPECULATORS_ARCHITECTURE = "Eagle3Speculator"
"""``Eagle3SpeculatorConfig``'s default ``architectures`` (vLLM replaces it with its own class)."""
SPECULATORS_LAYER = "layers.0."
EAGLE_LAYER = "midlayer."
VARIANT_FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
"""Flags of EAGLE-3 variants whose network differs from EAGLE-3's; all false in a plain head."""
EAGLE_TOP_LEVEL = (
    "architectures",
    "draft_vocab_size",
    "target_hidden_size",
    "eagle_aux_hidden_state_layer_ids",
    "eagle_config",
    "talon",
)
"""Keys of an EAGLE-layout config.json that are about the head, not its decoder layer."""
TRAINING_ONLY = ("verifier_lm_head.", "verifier_norm.")
"""Frozen copies of the verifier's LM head and norm that ``speculators`` uses for its training loss."""


def is_speculators(meta: dict) -> bool:
    """Whether a ``config.json``'s content is a ``speculators`` config (of any algorithm)."""
    return SPECULATORS_TYPE_KEY in meta


def from_speculators(meta: dict, state: dict[str, torch.Tensor], where: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """A speculators-format EAGLE-3 head's ``config.json`` content and weights -> the EAGLE-layout
    config and weights ``eagle3_model.load_eagle3`` reads (module docstring).  Refuses other
    algorithms, decoder layers other than Llama's, and heads of more than one layer; the variant
    flags are passed on for ``eagle3_model`` to refuse.  ``where`` names the head in errors."""
    kind = meta.get(SPECULATORS_TYPE_KEY)
    if kind != SPECULATORS_EAGLE3:
        raise ModelLoadError(
            f"{where} holds a speculators {kind!r} model; of that format only "
            f"{SPECULATORS_EAGLE3!r} heads (EAGLE-3) are read here."
        )
    layer = meta.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise ModelLoadError(
            f"{where}: its speculators config has no transformer_layer_config (the draft layer's "
            "shape), so the head cannot be built."
        )
    layer_type = layer.get("model_type", "llama")
    if layer_type != "llama":
        raise ModelLoadError(
            f"{where}: its draft layer is a {layer_type!r} layer (e.g. Qwen3's adds q/k norms); only "
            "EAGLE-3 heads with a Llama layer are read here."
        )
    # speculators and vLLM build the layer's config from this diff with the class defaults filled in
    try:
        llama = LlamaConfig(**{k: v for k, v in layer.items() if k != "model_type"}).to_dict()
    except (TypeError, ValueError) as err:
        raise ModelLoadError(f"{where}: its transformer_layer_config is not a Llama config ({err}).") from err
    extra_layers = [k for k in state if k.startswith("layers.") and not k.startswith(SPECULATORS_LAYER)]
    if llama["num_hidden_layers"] != 1 or extra_layers:
        raise ModelLoadError(
            f"{where}: a speculators head with {llama['num_hidden_layers']} decoder layers; only "
            "one-layer EAGLE-3 heads are read here."
        )
    lm_head = state.get("lm_head.weight")
    view = {
        **{k: v for k, v in llama.items() if k != "architectures"},
        "draft_vocab_size": int(
            meta.get("draft_vocab_size") or (lm_head.shape[0] if lm_head is not None else llama["vocab_size"])
        ),
    }
    if meta.get("target_hidden_size") is not None:
        view["target_hidden_size"] = int(meta["target_hidden_size"])
    if meta.get("eagle_aux_hidden_state_layer_ids"):  # vLLM's convention, as the EAGLE layout's top-level key
        view["eagle_aux_hidden_state_layer_ids"] = list(meta["eagle_aux_hidden_state_layer_ids"])
    # An absent flag is false, Eagle3SpeculatorConfig's default (vLLM alone takes an absent
    # norm_before_residual as true; every config speculators writes carries the key).
    view.update({flag: True for flag in VARIANT_FLAGS if meta.get(flag)})
    if isinstance(meta.get("talon"), dict):
        view["talon"] = meta["talon"]
    weights = {}
    for key, value in state.items():
        if key.startswith(TRAINING_ONLY):
            continue
        weights[EAGLE_LAYER + key.removeprefix(SPECULATORS_LAYER) if key.startswith(SPECULATORS_LAYER) else key] = value
    return view, weights


def to_speculators(
    meta: dict,
    state: dict[str, torch.Tensor],
    verifier: str,
    verifier_architectures: list[str],
    speculative_tokens: int = 3,
) -> tuple[dict, dict[str, torch.Tensor]]:
    """EAGLE-layout ``config.json`` content and weights, as ``eagle3_model.save_eagle3`` builds them
    (a full Llama config, feature layers in the top-level key) -> the speculators format's.

    ``verifier`` / ``verifier_architectures``: the target's Hub id or path and its architectures
    (vLLM serves that target when given only the head); ``speculative_tokens``: the draft length
    vLLM defaults to.  The embedding is written only when the head has its own: without one, vLLM
    and speculators both take the target's (module docstring)."""
    layer = {k: v for k, v in meta.items() if k not in EAGLE_TOP_LEVEL}
    layer.update(model_type="llama", num_hidden_layers=1, tie_word_embeddings=False)
    config = {
        "architectures": [SPECULATORS_ARCHITECTURE],
        SPECULATORS_TYPE_KEY: SPECULATORS_EAGLE3,
        "transformer_layer_config": layer,
        "draft_vocab_size": int(meta["draft_vocab_size"]),
        # null = the head's width (what speculators writes when the widths agree)
        "target_hidden_size": meta.get("target_hidden_size"),
        "eagle_aux_hidden_state_layer_ids": meta.get("eagle_aux_hidden_state_layer_ids"),
        # explicit: vLLM takes an absent norm_before_residual as true
        **{flag: False for flag in VARIANT_FLAGS},
        "speculators_config": {
            "algorithm": SPECULATORS_EAGLE3,
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": int(speculative_tokens)}],
            "verifier": {"name_or_path": verifier, "architectures": list(verifier_architectures)},
        },
        "torch_dtype": meta.get("torch_dtype"),
    }
    if "talon" in meta:
        config["talon"] = meta["talon"]
    d2t = state.get("d2t")
    # speculators has d2t / t2d only for a reduced vocabulary; one of the first Vd tokens has an all-zero d2t
    reduced = int(meta["draft_vocab_size"]) != int(meta.get("vocab_size", meta["draft_vocab_size"]))
    identity = d2t is None or not (reduced or bool(d2t.any()))
    weights = {}
    for key, value in state.items():
        if identity and key in ("d2t", "t2d"):
            continue
        weights[SPECULATORS_LAYER + key.removeprefix(EAGLE_LAYER) if key.startswith(EAGLE_LAYER) else key] = value
    return config, weights
