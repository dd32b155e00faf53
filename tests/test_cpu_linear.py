"""Fast tier: the CPU linear kernels per row count (``talon.models.cpu_linear``), a drafter's int8 copies
for few-row calls, and the bench CLI's tree options (``--budget auto``)."""

from __future__ import annotations

import argparse

import pytest
import torch
from torch import nn

from talon.bench.cli import _budget, parse_args, tree_overrides
from talon.models.cpu_linear import (
    INT8_ROWS,
    SMALL_ROWS,
    PackedLinear,
    choose_small_row_kernel,
    draft_int8_rows,
    int8_kernel_works,
    int8_weights,
    onednn_linear_works,
    pack_for_device,
    quantize_small_rows,
)
from talon.models.loaded import ModelLoadError

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
    assert len(rows) == 1 and rows <= set(range(SMALL_ROWS[-1] + 1))
    monkeypatch.setattr("talon.models.cpu_linear.fastest_seconds", lambda fn, reps=7: 1.0)  # a tie
    assert choose_small_row_kernel(model) == 0  # MKL must win by the margin
    onednn = nn.Sequential(nn.Linear(16, 16))
    monkeypatch.setenv("TALON_CPU_LINEAR", "onednn")
    pack_for_device(onednn)
    assert onednn[0].plain_rows == 0
    plain = nn.Sequential(nn.Linear(16, 16))
    monkeypatch.setenv("TALON_CPU_LINEAR", "plain")
    assert pack_for_device(plain) == 0 and type(plain[0]) is nn.Linear


@pytest.mark.parametrize(("mkl_wins_at", "chosen"), [((), 0), ((1, 2, 3), 3), ((1, 3, 4), 1), ((1, 2, 3, 4), 4)])
def test_mkl_takes_the_row_counts_from_one_up_to_the_first_where_it_loses(monkeypatch, mkl_wins_at, chosen):
    """Scripted timings: MKL twice as fast at the counts in ``mkl_wins_at``, a tie elsewhere (a tie is a
    loss: MKL must win by MARGIN).  The probe stops at the first loss and measures nothing past it."""
    model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(3)])
    monkeypatch.setenv("TALON_CPU_LINEAR", "onednn")
    pack_for_device(model)
    measured = []

    def timed(fn, reps=7):
        rows = fn.__defaults__[0][0].shape[0]  # the probe's inputs, one [rows, in] per layer
        measured.append(rows)
        return 0.5 if fn.__name__ == "mkl" and rows in mkl_wins_at else 1.0

    monkeypatch.setattr("talon.models.cpu_linear.fastest_seconds", timed)
    assert choose_small_row_kernel(model) == chosen
    assert {m.plain_rows for m in model} == {chosen}
    assert max(measured) == min(chosen + 1, SMALL_ROWS[-1])


@pytest.fixture
def int8_setting(monkeypatch):
    """``draft_int8_rows`` re-read under the test's environment, and again after it."""
    draft_int8_rows.cache_clear()
    yield monkeypatch
    draft_int8_rows.cache_clear()


def test_without_a_working_int8_kernel_no_layer_takes_one(int8_setting):
    int8_setting.setenv("TALON_DRAFT_INT8", "auto")
    int8_setting.setattr("talon.models.cpu_linear.int8_kernel_works", lambda: False)
    assert draft_int8_rows() == 0


@pytest.mark.skipif(not int8_kernel_works(), reason="no working int8 weight-only kernel in this torch build")
def test_a_drafter_takes_its_int8_copies_for_few_rows_only(int8_setting):
    int8_setting.setattr("talon.models.cpu_linear.draft_int8_rows", lambda: INT8_ROWS)  # not the timing's call
    torch.manual_seed(0)
    head = nn.Sequential(nn.Linear(128, 96, bias=True), nn.Linear(40, 8)).to(torch.bfloat16)
    assert pack_for_device(head) == 2
    assert quantize_small_rows(head) == INT8_ROWS
    wide, narrow = head
    assert wide.int8_rows == INT8_ROWS and narrow.int8_rows == 0  # 40 inputs: the kernel would read past a row
    q, scales = int8_weights(wide.weight)
    assert q.dtype == torch.int8 and int(q.abs().max()) >= 125  # the range is used
    dequantised = q.float() * scales.float()[:, None]
    assert ((dequantised - wide.weight.float()).abs() <= scales.float()[:, None] / 2).all()
    with torch.inference_mode():
        for rows in (1, INT8_ROWS, INT8_ROWS + 1, 9):
            x = torch.randn(1, rows, 128, dtype=torch.bfloat16)
            out = wide(x)
            packed = torch.ops.mkldnn._linear_pointwise(x, wide.packed, wide.bias, "none", [], "")
            if rows <= INT8_ROWS:  # the int8 product (bias added), not the bfloat16 one
                want = x.float() @ dequantised.T + wide.bias.float()
                assert torch.allclose(out.float(), want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))
                assert not torch.equal(out, packed)
            else:
                assert torch.equal(out, packed)
    with torch.enable_grad():  # training reads the bfloat16 weights through PyTorch's own linear
        x = torch.randn(2, 128, dtype=torch.bfloat16, requires_grad=True)
        assert torch.equal(wide(x), nn.functional.linear(x, wide.weight, wide.bias))


def test_a_float32_target_gets_no_int8_copies(monkeypatch):
    monkeypatch.setattr("talon.models.cpu_linear.draft_int8_rows", lambda: INT8_ROWS)
    target = nn.Sequential(nn.Linear(128, 64))  # float32: a target's products stay float32
    pack_for_device(target)
    quantize_small_rows(target)
    assert target[0].int8_rows == 0 and target[0].int8_weight is None


def test_the_off_switch_and_a_bad_value(int8_setting):
    int8_setting.setenv("TALON_DRAFT_INT8", "off")
    draft_int8_rows.cache_clear()
    head = nn.Sequential(nn.Linear(128, 64)).to(torch.bfloat16)
    pack_for_device(head)
    assert draft_int8_rows() == 0 and quantize_small_rows(head) == 0 and head[0].int8_rows == 0
    int8_setting.setenv("TALON_DRAFT_INT8", "sometimes")
    draft_int8_rows.cache_clear()
    with pytest.raises(ModelLoadError, match="TALON_DRAFT_INT8"):
        draft_int8_rows()


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
