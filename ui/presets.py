"""The model-pair preset picker: fills the target and drafter fields with a Hub pair
(``talon.models.presets``) when this machine can run it, and otherwise says why not, before anything
loads."""

from __future__ import annotations

import gradio as gr

from talon.models.presets import PRESET_BY_NAME, problems_here

NO_PRESET = "None: use the fields"
PRESET_CHOICES = [NO_PRESET, *PRESET_BY_NAME]
PRESET_INFO = (
    "Targets with the EAGLE-3 draft heads trained for them, from the Hugging Face Hub: the TALON "
    "paper's setting. They need a GPU."
)


def apply_preset(name: str | None):
    """Preset chosen -> (target field, drafter field, method field, note).  A pair that can run here
    fills the fields (method: TALON); one that cannot leaves them and says why."""
    preset = PRESET_BY_NAME.get(name or "")
    if preset is None:
        return gr.update(), gr.update(), gr.update(), ""
    problems = problems_here(preset)
    if problems:
        reasons = " ".join(f"({k}) {p}" for k, p in enumerate(problems, 1))
        return gr.update(), gr.update(), gr.update(), f"**{preset.name} cannot run here:** {reasons}"
    note = (
        f"Target `{preset.target}` ({preset.target_params_b:g} B parameters) with drafter `{preset.drafter}`; "
        "both download from the Hub at the first run (minutes)."
    )
    return gr.update(value=preset.target), gr.update(value=preset.drafter), gr.update(value="talon"), note
