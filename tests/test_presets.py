"""Model-pair presets: every reason a pair cannot run is said before anything loads, and on this
machine (no GPU, Hub unreachable in tests) every pair says why (the picker that shows it is driven in
Chromium: tests/test_browser.py)."""

from __future__ import annotations

import pytest

from talon.drafters.factory import parse_drafter_spec
from talon.models.presets import PRESET_BY_NAME, PRESETS, gpu_memory_gb, preset_problems, problems_here

LLAMA = PRESET_BY_NAME["Llama-3.1-8B-Instruct + EAGLE-3 head (yuhuili)"]
QWEN_SMALL = PRESETS[0]


def test_presets_name_eagle3_drafters_the_factory_parses():
    assert {p.head for p in PRESETS} >= {
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "AngelSlim/Qwen3-1.7B_eagle3",
        "AngelSlim/Qwen3-4B_eagle3",
        "Tengyunw/qwen3_8b_eagle3",
    }
    for p in PRESETS:
        spec = parse_drafter_spec(p.drafter)
        assert spec.kind == "eagle3" and spec.location == p.head


def test_each_reason_is_given_and_a_capable_machine_gets_none():
    assert preset_problems(QWEN_SMALL, 80.0, 4, hub_ok=True) == []
    assert preset_problems(LLAMA, 80.0, 4, hub_ok=True, token="hf_x") == []  # 8 B x 4 bytes x 1.25 = 40 GB
    no_gpu = preset_problems(QWEN_SMALL, None, 4, hub_ok=True)
    assert len(no_gpu) == 1 and "needs a CUDA GPU" in no_gpu[0]
    small = preset_problems(LLAMA, 24.0, 4, hub_ok=True, token="hf_x")
    assert len(small) == 1 and "40 GB" in small[0] and "24 GB" in small[0]
    assert preset_problems(LLAMA, 24.0, 2, hub_ok=True, token="hf_x") == []  # bfloat16: 20 GB
    everything = preset_problems(LLAMA, None, 4, hub_ok=False, token=None)
    assert [("CUDA GPU" in p, "cannot be reached" in p, "gated" in p) for p in everything] == [
        (True, False, False),
        (False, True, False),
        (False, False, True),
    ]


@pytest.mark.skipif(gpu_memory_gb() is not None, reason="this machine has a GPU")
def test_on_a_machine_without_gpu_or_hub_every_pair_says_both():
    for preset in PRESETS:
        problems = problems_here(preset)  # tests run with HF_HUB_OFFLINE=1
        assert "needs a CUDA GPU" in problems[0] and "cannot be reached" in problems[1]
