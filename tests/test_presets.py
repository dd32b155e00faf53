"""Model-pair presets: every reason a pair cannot run is said before anything loads, and on this
machine (no GPU, Hub unreachable in tests) the picker leaves the fields alone and says why."""
from __future__ import annotations

from talon.drafters.factory import parse_drafter_spec
from talon.models.presets import PRESET_BY_NAME, PRESETS, preset_problems
from ui.presets import NO_PRESET, apply_preset

LLAMA = PRESET_BY_NAME["Llama-3.1-8B-Instruct + EAGLE-3 head (yuhuili)"]
QWEN_SMALL = PRESETS[0]


def test_presets_name_eagle3_drafters_the_factory_parses():
    assert {p.head for p in PRESETS} >= {"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "AngelSlim/Qwen3-1.7B_eagle3",
                                          "AngelSlim/Qwen3-4B_eagle3", "Tengyunw/qwen3_8b_eagle3"}
    for p in PRESETS:
        spec = parse_drafter_spec(p.drafter)
        assert spec.kind == "eagle3" and spec.location == p.head


def test_each_reason_is_given_and_a_capable_machine_gets_none():
    assert preset_problems(QWEN_SMALL, 80.0, 4, hub_ok=True) == []
    assert preset_problems(LLAMA, 80.0, 4, hub_ok=True, token="hf_x") == []      # 8 B x 4 bytes x 1.25 = 40 GB
    no_gpu = preset_problems(QWEN_SMALL, None, 4, hub_ok=True)
    assert len(no_gpu) == 1 and "needs a CUDA GPU" in no_gpu[0]
    small = preset_problems(LLAMA, 24.0, 4, hub_ok=True, token="hf_x")
    assert len(small) == 1 and "40 GB" in small[0] and "24 GB" in small[0]
    assert preset_problems(LLAMA, 24.0, 2, hub_ok=True, token="hf_x") == []        # bfloat16: 20 GB
    everything = preset_problems(LLAMA, None, 4, hub_ok=False, token=None)
    assert [("CUDA GPU" in p, "cannot be reached" in p, "gated" in p) for p in everything] == \
        [(True, False, False), (False, True, False), (False, False, True)]


def test_picker_on_this_machine_says_why_and_leaves_the_fields():
    target, drafter, method, note = apply_preset(QWEN_SMALL.name)
    assert target == drafter == method == {"__type__": "update"}
    assert note.startswith(f"**{QWEN_SMALL.name} cannot run here:**") and "needs a CUDA GPU" in note
    assert "cannot be reached" in note                       # tests run with HF_HUB_OFFLINE=1
    assert apply_preset(NO_PRESET)[3] == ""
