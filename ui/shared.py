"""What every user of the app shares: the read-only model registry, the machine's defaults and the
choices offered.  Nothing here holds per-run state: a run's trace lives in that user's ``gr.State``."""
from __future__ import annotations

import json
import threading

from talon.config import ASSETS, device_default_tree
from talon.drafters.head_model import SHIPPED_HEAD
from talon.models.device import pick_device
from talon.models.embedded import EMBEDDED, default_target_spec
from talon.models.loaded import ModelLoadError
from talon.models.registry import ModelRegistry

try:  # Hugging Face Spaces ZeroGPU: request a GPU per run; elsewhere a no-op.
    import spaces

    gpu = spaces.GPU
except ImportError:  # pragma: no cover - depends on the host
    def gpu(fn):
        return fn

REGISTRY = ModelRegistry()  # read-only models shared by all users; no per-run state
ON_GPU = pick_device()[0].type == "cuda"
DEFAULT_TARGET = default_target_spec()
DEFAULT_DRAFTER = "head" if SHIPPED_HEAD.is_dir() and DEFAULT_TARGET == EMBEDDED else "ngram"
DEFAULT_TREE, DEFAULT_NOTE = device_default_tree(ON_GPU)
EXAMPLES = [json.loads(line) for line in (ASSETS / "prompts.jsonl").read_text().splitlines() if line]
METHOD_CHOICES = [("Autoregressive (no drafts)", "ar"), ("Chain (classic speculative decoding)", "chain"),
                  ("Static tree (fixed shape)", "static"), ("EAGLE-2 dynamic tree", "eagle2"),
                  ("TALON adaptive tree", "talon"),
                  ("Hybrid: model + prompt-lookup drafts in one TALON tree", "hybrid")]
METHOD_LABEL = {v: k for k, v in METHOD_CHOICES}
DRAFTER_CHOICES = [("Trained draft head (EAGLE-style, 1 layer; embedded target only)", "head"),
                   ("n-gram prompt lookup (free, copies from the context)", "ngram"),
                   ("Target's first 6 layers (self-draft)", "layers:6"),
                   ("Target's first 12 layers (self-draft)", "layers:12")]
EXECUTION_CHOICES = [("Synchronous: draft, then verify", "sync"),
                     ("Asynchronous: draft the next tree while the target verifies", "async")]
MAX_NEW_TOKENS = 512


def preload_default_model() -> threading.Thread:
    """Start loading the default model in the background so the first Run does not wait for it
    (a failure is kept by the registry and shown in the status banner)."""
    def load():
        try:
            REGISTRY.get(DEFAULT_TARGET)
        except ModelLoadError:
            pass

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    return thread
