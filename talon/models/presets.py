"""Target + EAGLE-3 head pairs from the Hugging Face Hub, the setting of the TALON paper, offered as
presets on GPU machines (Spaces), and why one cannot run on this machine, said before anything loads."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from huggingface_hub import get_token

from .device import pick_device
from .hub import hub_reachable


@dataclass(frozen=True)
class Preset:
    """A target and the EAGLE-3 draft head trained for it.

    Attributes:
        name: what the app shows.
        target: the target's Hub id.
        head: the EAGLE-3 head's Hub id (drafter spec ``eagle3:<head>``).
        target_params_b: the target's parameters, in billions (embeddings included).
        gated: whether the target's Hub page makes you accept a licence (a token with access needed).
        head_format: the head's file format, ``"eagle"`` (EAGLE's layout: EAGLE releases, SpecForge,
            AngelSlim) or ``"speculators"`` (vLLM's); ``eagle3:`` reads both.
    """

    name: str
    target: str
    head: str
    target_params_b: float
    gated: bool = False
    head_format: str = "eagle"

    @property
    def drafter(self) -> str:
        return f"eagle3:{self.head}"

    def memory_gb(self, bytes_per_param: int) -> float:
        """GPU memory the target's weights take at ``bytes_per_param`` (4 for float32, 2 for bfloat16),
        plus a quarter for the head, KV caches and activations."""
        return self.target_params_b * bytes_per_param * 1.25


PRESETS = (
    Preset("Qwen3-1.7B + AngelSlim EAGLE-3 head", "Qwen/Qwen3-1.7B", "AngelSlim/Qwen3-1.7B_eagle3", 2.03),
    Preset("Qwen3-4B + AngelSlim EAGLE-3 head", "Qwen/Qwen3-4B", "AngelSlim/Qwen3-4B_eagle3", 4.02),
    Preset("Qwen3-8B + Tengyunw EAGLE-3 head", "Qwen/Qwen3-8B", "Tengyunw/qwen3_8b_eagle3", 8.19),
    Preset(
        "Llama-3.1-8B-Instruct + EAGLE-3 head (yuhuili)",
        "meta-llama/Llama-3.1-8B-Instruct",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        8.03,
        gated=True,
    ),
    # speculators-format heads (RedHatAI, listed by vLLM's speculators project and paired with these
    # targets in vLLM's own integration test); not loaded here: no Hub access from this machine.
    Preset(
        "Qwen3-8B + RedHatAI EAGLE-3 head (speculators format)",
        "Qwen/Qwen3-8B",
        "RedHatAI/Qwen3-8B-speculator.eagle3",
        8.19,
        head_format="speculators",
    ),
    Preset(
        "Llama-3.1-8B-Instruct + RedHatAI EAGLE-3 head (speculators format)",
        "meta-llama/Llama-3.1-8B-Instruct",
        "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
        8.03,
        gated=True,
        head_format="speculators",
    ),
)
PRESET_BY_NAME = {p.name: p for p in PRESETS}


def preset_problems(
    preset: Preset,
    gpu_memory_gb: float | None,
    bytes_per_param: int,
    hub_ok: bool | None = None,
    token: str | None = None,
) -> list[str]:
    """Every reason ``preset`` cannot run here (empty when it can).  ``gpu_memory_gb``: the GPU's memory
    (``None``: no GPU); ``bytes_per_param``: of the dtype the target would load in; ``hub_ok``: whether
    the Hub is reachable (``None``: check now, once per process); ``token``: a Hugging Face token."""
    need = preset.memory_gb(bytes_per_param)
    problems = []
    if gpu_memory_gb is None:
        problems.append(
            f"it needs a CUDA GPU (about {need:.0f} GB for {preset.target} at {bytes_per_param} bytes a "
            "weight) and this machine has none (on a CPU a target this size takes seconds per token). "
            "Run it on a GPU Space, or keep the embedded model here."
        )
    elif gpu_memory_gb < need:
        problems.append(
            f"it needs about {need:.0f} GB of GPU memory ({preset.target} at {bytes_per_param} bytes a "
            f"weight) and this GPU has {gpu_memory_gb:.0f} GB. Pick a smaller pair, or set "
            "TALON_DTYPE=bfloat16."
        )
    if not (hub_reachable() if hub_ok is None else hub_ok):
        problems.append(
            f"it loads {preset.target} and {preset.head} from the Hugging Face Hub, which cannot be "
            "reached from here. Copy both to this machine and type their directories as the target "
            "and 'eagle3:DIR' as the drafter."
        )
    if preset.gated and not token:
        problems.append(
            f"{preset.target} is gated: accept its licence on its Hub page, then give this app a token "
            "with access (the HF_TOKEN environment variable; a secret on Spaces)."
        )
    return problems


def gpu_memory_gb() -> float | None:
    """The first CUDA GPU's memory in GB, ``None`` without one."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 1e9


def problems_here(preset: Preset) -> list[str]:
    """``preset_problems`` on this machine: its GPU, the dtype targets load in (``pick_device``), the
    Hub's reachability and the token the Hugging Face libraries would use."""
    bytes_per_param = torch.finfo(pick_device()[1]).bits // 8
    return preset_problems(preset, gpu_memory_gb(), bytes_per_param, token=get_token())
