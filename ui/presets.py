"""The model-pair preset picker: fills the target and drafter fields with a Hub pair
(``talon.models.presets``) when this machine can run it, and otherwise says why not, before anything
loads."""
from __future__ import annotations

import gradio as gr
import torch
from huggingface_hub import get_token

from talon.models.device import pick_device
from talon.models.presets import PRESET_BY_NAME, preset_problems

NO_PRESET = "None (use the target and drafter fields)"
PRESET_CHOICES = [NO_PRESET, *PRESET_BY_NAME]
PRESET_INFO = ("Targets with the EAGLE-3 draft heads trained for them, from the Hugging Face Hub: the TALON "
               "paper's setting. They need a GPU.")


def gpu_memory_gb() -> float | None:
    """The first CUDA GPU's memory in GB, ``None`` without one."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 1e9


def apply_preset(name: str | None):
    """Preset chosen -> (target field, drafter field, method field, note).  A pair that can run here
    fills the fields (method: TALON); one that cannot leaves them and says why."""
    preset = PRESET_BY_NAME.get(name or "")
    if preset is None:
        return gr.update(), gr.update(), gr.update(), ""
    bytes_per_param = torch.finfo(pick_device()[1]).bits // 8
    problems = preset_problems(preset, gpu_memory_gb(), bytes_per_param, token=get_token())
    if problems:
        reasons = " ".join(f"({k}) {p}" for k, p in enumerate(problems, 1))
        return gr.update(), gr.update(), gr.update(), f"**{preset.name} cannot run here:** {reasons}"
    note = (f"Target `{preset.target}` ({preset.target_params_b:g} B parameters) with drafter `{preset.drafter}`; "
            "both download from the Hub at the first run (minutes).")
    return gr.update(value=preset.target), gr.update(value=preset.drafter), gr.update(value="talon"), note
