"""Fast tier: the CPU linear kernels per row count (``talon.models.cpu_linear``), a drafter's int8 copies
for few-row calls, and the bench CLI's tree options (``--budget auto``)."""

from __future__ import annotations

import argparse
import types

import pytest
import torch
from torch import nn

from talon.bench.cli import _budget, parse_args, tree_overrides
from talon.models import stream_gemm
from talon.models.cpu_linear import (
    INT8_ROWS,
    MKL_PROBE_ROWS,
    SMALL_ROWS,
    KernelChoices,
    PackedLinear,
    PackedWeight,
    choose_packed_kernel,
    choose_small_row_kernel,
    draft_int8_rows,
    fastest_each,
    fastest_seconds,
    int8_kernel_works,
    int8_weights,
    mkl_packs_any_rows,
    onednn_linear_works,
    pack_for_device,
    packed_kernel,
    quantize_small_rows,
    set_plain_rows,
    use_packed_kernel,
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
    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", lambda fns, reps=7: [1.0] * len(fns))  # a tie
    use_packed_kernel(model, "onednn")
    monkeypatch.setattr("talon.models.cpu_linear.same_outputs", lambda a, b: False)
    assert choose_small_row_kernel(model) == 0  # where the bits differ MKL must win by the margin
    monkeypatch.setattr("talon.models.cpu_linear.same_outputs", lambda a, b: True)
    assert choose_small_row_kernel(model) == SMALL_ROWS[-1]  # where they are the same a tie keeps MKL
    monkeypatch.setattr(
        "talon.models.cpu_linear.fastest_each", lambda fns, reps=7: [1.0 + 0.05 * (fn.__name__ == "mkl") for fn in fns]
    )
    assert choose_small_row_kernel(model) == SMALL_ROWS[-1]  # and 5 % slower still does
    if mkl_packs_any_rows(128, 128):
        use_packed_kernel(model, "mkl")
        monkeypatch.setattr(
            "talon.models.cpu_linear.fastest_each", lambda fns, reps=7: [1.0 + (fn.__name__ == "mkl") for fn in fns]
        )
        assert choose_small_row_kernel(model) == 1  # one row takes PyTorch's linear, unmeasured
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

    def timed(fns, reps=7):
        rows = fns[0].__defaults__[0][0].shape[0]  # the probe's inputs, one [rows, in] per layer
        measured.append(rows)
        return [0.5 if fn.__name__ == "mkl" and rows in mkl_wins_at else 1.0 for fn in fns]

    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", timed)
    monkeypatch.setattr("talon.models.cpu_linear.same_outputs", lambda a, b: False)
    assert choose_small_row_kernel(model) == chosen
    assert {m.plain_rows for m in model} == {chosen}
    assert max(measured) == min(chosen + 1, SMALL_ROWS[-1])


needs_mkl_packs = pytest.mark.skipif(
    not mkl_packs_any_rows(48, 64), reason="MKL's packed sgemm missing or tied to its row count in this build"
)


@needs_mkl_packs
def test_one_mkl_packed_copy_serves_every_row_count_as_copies_packed_for_each_would():
    """The load's check, done here by hand on another shape: at every row count the copy packed once is
    within float32's accuracy of PyTorch's linear, and from two rows it gives the bits of a copy packed
    for that count (what MKL documents); leading dimensions count as rows."""
    torch.manual_seed(0)
    lin = nn.Linear(96, 80)
    once = PackedWeight(lin.weight, "mkl")
    with torch.inference_mode():
        for shape in ((1, 96), (2, 96), (3, 96), (9, 96), (2, 20, 96), (130, 96)):
            x = torch.randn(shape)
            rows = x.numel() // 96
            got = once(x, lin.bias)
            assert got.shape == (*shape[:-1], 80)
            assert torch.allclose(got, lin(x), atol=1e-5)
            if rows > 1:
                for_rows = torch.ops.mkl._mkl_reorder_linear_weight(lin.weight.detach(), rows)
                assert torch.equal(got, torch.ops.mkl._mkl_linear(x, for_rows, lin.weight, lin.bias, rows))


def test_a_packed_copy_that_computes_otherwise_fails_the_check(monkeypatch):
    """The negative control: a copy whose products are off by more than float32's bound is refused (the
    check is cached per shape, so a shape of its own)."""
    real = PackedWeight.__call__
    monkeypatch.setattr(PackedWeight, "__call__", lambda self, x, bias=None: real(self, x, bias) * (1 + 2**-12))
    assert not mkl_packs_any_rows(40, 136)
    assert 1 in MKL_PROBE_ROWS and max(MKL_PROBE_ROWS) > 128  # one row and a 129-row tree are checked


def test_kernels_are_timed_in_turn_so_a_busy_spell_slows_each_alike(monkeypatch):
    """A scripted clock: kernel A takes 0.75, B 1.0, and each of the first 16 calls takes 3.0 more (another
    process loading beside this one).  Timed one after the other (A's warm-up and 15 calls, then B's), the
    spell lands on A alone and B looks faster; interleaved (``fastest_each``), both meet it in the first
    rounds and keep their least afterwards.  Each round starts one kernel later."""
    clock = types.SimpleNamespace(now=0.0, calls=[])
    monkeypatch.setattr("talon.models.cpu_linear.time", types.SimpleNamespace(perf_counter=lambda: clock.now))

    def kernel(name: str, cost: float):
        def run() -> None:
            clock.calls.append(name)
            clock.now += cost + (3.0 if len(clock.calls) <= 16 else 0.0)

        return run

    a, b = kernel("A", 0.75), kernel("B", 1.0)
    assert [fastest_seconds(a), fastest_seconds(b)] == [3.75, 1.0]  # the spell decides
    clock.calls.clear()
    assert fastest_each([a, b]) == [0.75, 1.0]
    assert clock.calls[:6] == ["A", "B", "A", "B", "B", "A"]  # warm-ups, then rounds from A, then from B


@needs_mkl_packs
@pytest.mark.parametrize("mkl_faster", [True, False])
def test_the_faster_packed_kernel_is_chosen_for_every_float32_layer(monkeypatch, mkl_faster):
    """Scripted timings: whichever kernel is timed faster lays out every float32 layer; a bfloat16 layer
    keeps oneDNN's (MKL's packed op is float32 only)."""
    monkeypatch.setenv("TALON_CPU_LINEAR", "onednn")
    model = nn.Sequential(nn.Linear(64, 48), nn.Linear(48, 64))
    pack_for_device(model)
    assert packed_kernel(model) == "onednn"

    def timed(fns, reps=15):  # each fn: functools.partial(run_products, packed, inputs)
        return [1.0 if (fn.args[0][0].kernel == "mkl") == mkl_faster else 2.0 for fn in fns]

    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", timed)
    chosen = "mkl" if mkl_faster else "onednn"
    assert choose_packed_kernel(model) == chosen == packed_kernel(model)
    assert {m.packed.kernel for m in model} == {chosen}
    x = torch.randn(5, 64)
    with torch.inference_mode():
        assert torch.allclose(
            model(x),
            nn.functional.linear(
                nn.functional.linear(x, model[0].weight, model[0].bias), model[1].weight, model[1].bias
            ),
            atol=1e-5,
        )
    bf16 = nn.Sequential(nn.Linear(64, 48)).to(torch.bfloat16)
    pack_for_device(bf16)
    # without AVX-512 / AVX-NE-CONVERT the bfloat16 layer stays PyTorch's own: nothing is packed
    assert choose_packed_kernel(bf16) == "onednn"
    assert packed_kernel(bf16) == ("onednn" if onednn_linear_works(torch.bfloat16) else None)


def test_a_models_shapes_are_timed_once_a_process(monkeypatch):
    """A second model of the same shapes takes the packed kernel and the small-row count the first was
    timed to, laid out without timing; other shapes, or another thread count, are timed again.  Scripted
    timing: a kernel other than oneDNN's (the one packing leaves) where this machine has one, 3 rows."""
    other = "stream" if stream_gemm.available() else "mkl" if mkl_packs_any_rows(48, 64) else "onednn"
    timed = []

    def choose(module, sample=16):
        timed.append(module)
        use_packed_kernel(module, other)
        return other

    def small_rows(module, fused=(), sample=16):
        set_plain_rows(module, fused, 3)
        return 3

    monkeypatch.setattr("talon.models.cpu_linear.choose_packed_kernel", choose)
    monkeypatch.setattr("talon.models.cpu_linear.choose_small_row_kernel", small_rows)
    monkeypatch.setenv("TALON_CPU_LINEAR", "onednn")  # packed, on oneDNN's kernel, no small rows

    def packed(*widths: int) -> nn.Sequential:
        model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
        pack_for_device(model)
        return model

    choices = KernelChoices()
    first, second, wider = packed(64, 48, 64), packed(64, 48, 64), packed(64, 80, 64)
    assert packed_kernel(second) == "onednn" and {m.plain_rows for m in second} == {0}
    choices.lay_out(first)
    choices.lay_out(second)
    assert timed == [first] and packed_kernel(second) == other and {m.plain_rows for m in second} == {3}
    choices.lay_out(wider)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)
    choices.lay_out(packed(64, 48, 64))
    assert len(timed) == 3


@needs_mkl_packs
def test_the_mkl_setting_takes_mkls_packed_kernel_at_every_row_count(monkeypatch):
    monkeypatch.setenv("TALON_CPU_LINEAR", "mkl")
    model = nn.Sequential(nn.Linear(64, 48))
    assert pack_for_device(model) == 1 and packed_kernel(model) == "mkl" and model[0].plain_rows == 0
    calls = []
    real = torch.ops.mkl._mkl_linear
    monkeypatch.setattr(torch.ops.mkl, "_mkl_linear", lambda *a: calls.append(a[-1]) or real(*a), raising=False)
    with torch.inference_mode():
        for rows in (1, 4, 33):
            model(torch.randn(rows, 64))
    assert calls == [1, 4, 33]


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
@pytest.mark.skipif(not onednn_linear_works(torch.bfloat16), reason="no packed bfloat16 linear on this CPU")
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
            packed = wide.packed_product(x)
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
    pack_for_device(head)  # packed where the CPU has the bfloat16 kernel, PyTorch's linear otherwise
    assert draft_int8_rows() == 0 and quantize_small_rows(head) == 0 and getattr(head[0], "int8_rows", 0) == 0
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
