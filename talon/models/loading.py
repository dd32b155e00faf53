"""Loading target and drafter models: the embedded GGUF default (``talon.models.embedded``), a local
directory, or a Hub id; and the self-drafter cut from a target's first layers."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .cpu_linear import cpu_linear_mode, pack_for_device
from .device import pick_device
from .embedded import EMBEDDED, EMBEDDED_NAME, embedded_model_dir
from .fused_linear import fuse
from .gpu_linear import use_row_linears
from .gqa_attention import use_gqa_attention
from .hub import hub_reachable
from .lm_head import screen_for
from .loaded import ListsTheChoices, LoadedModel, ModelLoadError, Progress
from .row_invariant import make_row_invariant
from .row_ops import use_row_ops
from .vector_math import warm_vector_math
from .weight_arena import gather_stream_weights

log = logging.getLogger(__name__)


def _from_pretrained(source: str, dtype: torch.dtype, local_only: bool):
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=dtype, attn_implementation="sdpa", local_files_only=local_only
    )
    return tokenizer, model


def looks_like_path(spec: str) -> bool:
    """True for a spec that can only be a path (a Hub id is ``name`` or ``owner/name``)."""
    return spec.startswith(("/", "./", "../", "~", "\\")) or spec.count("/") > 1 or "\\" in spec


def spec_problem(spec: str) -> ModelLoadError | None:
    """Why ``spec`` names no model that could load, when that shows without loading anything (empty; a
    path that does not exist; a folder without ``config.json``), else None: what ``load_model`` refuses
    first, and what a settings check may say before a load starts."""
    spec = (spec or "").strip()
    if not spec:
        return ListsTheChoices("No model given: use 'embedded', a local directory or a Hugging Face id.")
    if spec == EMBEDDED:
        return None
    path = Path(spec).expanduser()
    if path.exists():
        if (path / "config.json").is_file():
            return None
        if not path.is_dir():
            return ModelLoadError(
                f"{path} is a file: point at a model directory written by save_pretrained (config, weights...)."
            )
        return ModelLoadError(
            f"{path} has no config.json: point at a directory written by save_pretrained (config, weights "
            "and tokenizer)."
        )
    if looks_like_path(spec):
        return ListsTheChoices(
            f"There is no directory {spec!r} on this machine: give the path of a model directory "
            "written by save_pretrained, a Hugging Face id such as 'owner/name', or 'embedded'."
        )
    return None


def load_model(
    spec: str = EMBEDDED,
    *,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
    progress: Progress = log.info,
    stock: bool = False,
) -> LoadedModel:
    """Load ``spec``: ``"embedded"``, a local directory, or a Hugging Face Hub id.  ``stock`` leaves the
    model exactly as transformers builds it (no packed CPU kernels, transformers' own attention): what
    the transformers peers run.

    A Hub id is tried from the local Hugging Face cache first; the network is tried only when the Hub
    is reachable (``talon.models.hub.hub_reachable``, decided once), so an unknown id fails at once
    offline.  Failures raise ``ModelLoadError`` saying what was looked for and where."""
    warm_vector_math()  # before anything computes on two threads (``talon.models.vector_math``)
    if device is None or dtype is None:
        auto_device, auto_dtype = pick_device()
        device, dtype = device or auto_device, dtype or auto_dtype
    spec = (spec or "").strip()
    problem = spec_problem(spec)
    if problem:
        raise problem
    if spec == EMBEDDED:
        source, name, local_only = str(embedded_model_dir(progress)), EMBEDDED_NAME, True
    elif Path(spec).expanduser().exists():
        path = Path(spec).expanduser()
        source, name, local_only = str(path), path.name, True
    else:
        source, name, local_only = spec, spec, False
    progress(f"Loading {name} on {device.type} ({str(dtype).removeprefix('torch.')})...")
    try:
        try:
            tokenizer, model = _from_pretrained(source, dtype, local_only=True)
        except OSError:
            if local_only:
                raise
            if not hub_reachable():
                raise ModelLoadError(
                    f"{spec!r} is not a local directory nor in this machine's Hugging Face cache, and the "
                    "Hugging Face Hub cannot be reached from here. Copy the model directory (as written by "
                    "save_pretrained) to this machine and give its path."
                ) from None
            tokenizer, model = _from_pretrained(source, dtype, local_only=False)
    except (OSError, ValueError) as err:
        where = "this directory" if local_only else "the Hugging Face Hub"
        raise ModelLoadError(
            f"Could not load {spec!r} from {where}: {str(err).splitlines()[0]} "
            "If this machine is offline, download the model elsewhere, copy the directory here and "
            "give its path."
        ) from err
    model.to(device).eval()
    model.requires_grad_(False)
    screen = None
    if not stock:
        if device.type == "cpu" and dtype == torch.float32 and cpu_linear_mode() != "plain":
            progress(
                "Choosing this CPU's fastest float32 kernels (timed once a process for a model's shapes; "
                "a machine's first load also builds TALON's own C++ kernels, about a minute)..."
            )
        pack_for_device(model, fuse=fuse)
        gather_stream_weights(model)
        use_row_ops(model)
        use_row_linears(model)
        if not make_row_invariant(model):  # bfloat16 on the CPU: exact; otherwise the fastest attention
            use_gqa_attention(model)
        screen = screen_for(model) if cpu_linear_mode() != "plain" else None
    identity = str(Path(source).resolve()) if local_only else spec
    return LoadedModel(name, model, tokenizer, device, dtype, identity, screen=screen)


def truncated_copy(target: LoadedModel, num_layers: int) -> LoadedModel:
    """A self-drafter: the target's first ``num_layers`` decoder layers, its final norm and LM head,
    sharing the target's weights (no copy of the tensors).  Needs a Llama-style model
    (``model.model.layers``)."""
    inner = getattr(target.model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ModelLoadError(f"{target.name} has no model.layers list; use another drafter.")
    total = len(layers)
    if not 1 <= num_layers < total:
        raise ModelLoadError(f"layers:K needs 1 <= K < {total} for {target.name} (got {num_layers}).")
    config = copy.deepcopy(target.model.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:num_layers]
    draft = copy.copy(target.model)  # shallow: shares parameters
    draft._modules = dict(target.model._modules)
    draft_inner = copy.copy(inner)
    draft_inner._modules = dict(inner._modules)
    draft_inner.layers = torch.nn.ModuleList(list(layers)[:num_layers])
    draft_inner.config = config
    draft._modules["model"] = draft_inner
    draft.config = config
    name = f"{target.name}, first {num_layers} of {total} layers (self-draft)"
    identity = f"{target.identity}#layers:{num_layers}" if target.identity else ""
    return LoadedModel(name, draft, target.tokenizer, target.device, target.dtype, identity)


def check_same_tokenizer(target: LoadedModel, drafter: LoadedModel) -> None:
    """Refuse a drafter whose tokenizer maps tokens differently from the target's, or whose embedding
    cannot take every token of it (a head padded to another size is fine: ``ModelDrafter`` fits it)."""
    vocab = target.tokenizer.get_vocab()
    if vocab != drafter.tokenizer.get_vocab():
        raise ModelLoadError(
            f"The drafter {drafter.name} does not share the tokenizer of the target {target.name}; "
            "tree verification compares token ids, so pick a drafter from the same model family."
        )
    rows = drafter.model.get_input_embeddings().weight.shape[0]
    if rows <= max(vocab.values(), default=0):
        raise ModelLoadError(
            f"The drafter {drafter.name} embeds {rows:,} token ids but the shared tokenizer has ids up to "
            f"{max(vocab.values()):,}: it could not read every token the target writes; pick another drafter."
        )
