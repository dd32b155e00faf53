"""Fast tier: the CPU linear kernels per row count (``talon.models.cpu_linear``) and the bench CLI's
tree options (``--budget auto``)."""

from __future__ import annotations

import argparse

import pytest
import torch
from torch import nn

from talon.bench.cli import _budget, parse_args, tree_overrides
from talon.models.cpu_linear import (
    PackedLinear,
    choose_small_row_kernel,
    onednn_linear_works,
    pack_for_device,
)

pytestmark = pytest.mark.skipif(not onednn_linear_works(), reason="no oneDNN linear op in this torch build")


def test_small_inputs_take_mkl_and_larger_ones_the_packed_kernel(monkeypatch):
    torch.manual_seed(0)
    lin = nn.Linear(64, 32)
    packed = PackedLinear(lin)
    packed.plain_rows = 2
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(1) or real(*a), raising=False)
    with torch.inference_mode():
        for rows, packed_kernel in ((1, False), (2, False), (3, True), (17, True)):
            calls.clear()
            x = torch.randn(1, rows, 64)
            out = packed(x)
            assert bool(calls) == packed_kernel, rows
            assert torch.allclose(out, lin(x), atol=1e-5)
            if not packed_kernel:
                assert torch.equal(out, nn.functional.linear(x, lin.weight, lin.bias))  # MKL itself


def test_the_small_row_choice_is_measured_and_shared_by_every_layer(monkeypatch):
    model = nn.Sequential(*[nn.Linear(128, 128) for _ in range(4)])
    monkeypatch.setenv("TALON_CPU_LINEAR", "auto")
    assert pack_for_device(model) == 4
    rows = {m.plain_rows for m in model if isinstance(m, PackedLinear)}
    assert len(rows) == 1 and rows <= {0, 1, 2}
    monkeypatch.setattr("talon.models.cpu_linear.fastest_seconds", lambda fn, reps=7: 1.0)  # a tie
    assert choose_small_row_kernel(model) == 0  # MKL must win by the margin
    onednn = nn.Sequential(nn.Linear(16, 16))
    monkeypatch.setenv("TALON_CPU_LINEAR", "onednn")
    pack_for_device(onednn)
    assert onednn[0].plain_rows == 0
    plain = nn.Sequential(nn.Linear(16, 16))
    monkeypatch.setenv("TALON_CPU_LINEAR", "plain")
    assert pack_for_device(plain) == 0 and type(plain[0]) is nn.Linear


def test_budget_auto_leaves_the_fixed_n_and_passes_the_cap():
    assert _budget("auto") == "auto" and _budget("16") == 16
    with pytest.raises(argparse.ArgumentTypeError):
        _budget("many")
    # auto renames the sizable methods (talon.bench.suites.auto_sized); the fixed N stays the default's
    args = parse_args(["--prompts", "p.jsonl", "--budget", "auto"])
    assert tree_overrides(args) == {}
    args = parse_args(["--prompts", "p.jsonl", "--budget", "auto", "--max-nodes", "40", "--mu", "0.2"])
    assert tree_overrides(args) == {"cap": 40, "mu": 0.2}
    assert tree_overrides(parse_args(["--prompts", "p.jsonl", "--budget", "8"])) == {"budget": 8}
    assert tree_overrides(parse_args(["--prompts", "p.jsonl"])) == {}
