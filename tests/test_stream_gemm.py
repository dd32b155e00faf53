"""Fast tier: TALON's own float32 few-row CPU kernel (``talon.models.stream_gemm``): float32's error bound
against a float64 product, every row's bits whatever the row count, the layouts it pads, and how the
load takes it (or does without it)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from talon.models import stream_gemm
from talon.models.cpu_linear import (
    WEIGHT_CODES_ENV,
    PackedLinear,
    PackedWeight,
    choose_packed_kernel,
    pack_for_device,
    pack_linears,
    packed_kernel,
    use_packed_kernel,
)
from talon.models.fused_linear import fuse_projections, fused_products
from talon.models.loaded import ModelLoadError
from talon.models.weight_arena import coded_weights

needs_kernel = pytest.mark.skipif(
    not stream_gemm.available(), reason="neither AVX-512 nor AVX2, or no C++ compiler here"
)

# (out_features, in_features): the embedded model's fused shapes, outputs that are no multiple of 16 or of
# the three blocks a pass takes, a dot product that ends in a short chunk of k-steps, and short ones
SHAPES = [(960, 576), (576, 1536), (100, 200), (80, 40), (50, 64), (17, 33), (7, 5)]
ROWS = (1, 2, 3, 5, 8, 9, 12, 16, 17, 25, 33, 64)


def _within_float32(got: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """``got`` within float32's bound for a dot product of ``in_features`` terms (plus the bias's rounding)
    of the float64 product."""
    exact = x.double() @ weight.double().T
    bound = weight.shape[1] * 2.0**-23 * (x.double().abs() @ weight.double().abs().T)
    if bias is not None:
        exact = exact + bias.double()
        bound = bound + 2.0**-23 * (exact.abs() + bias.double().abs())
    return bool(((got.double() - exact).abs() <= bound).all())


def _layer_and_rows(
    shape: tuple[int, int], seed: int, rows: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A random layer of ``shape`` (``weight``, ``bias``, ``pack(weight)``) and ``x`` ``[rows, in_features]``."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(*shape, generator=gen)
    bias = torch.randn(shape[0], generator=gen)
    return weight, bias, stream_gemm.pack(weight), torch.randn(rows, shape[1], generator=gen)


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
def test_products_stay_within_float32s_bound_at_every_row_count(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    weight = torch.randn(*shape, generator=gen)
    bias = torch.randn(shape[0], generator=gen)
    packed = stream_gemm.pack(weight)
    assert packed.shape == ((shape[0] + 15) // 16, shape[1], 16)
    for rows in ROWS:
        x = torch.randn(rows, shape[1], generator=gen)
        for b in (None, bias):
            got = stream_gemm.linear(x, packed, shape[0], b)
            assert got.shape == (rows, shape[0]) and got.is_contiguous()
            assert _within_float32(got, x, weight, b), (shape, rows, b is None)


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
def test_a_row_gets_the_same_bits_alone_or_among_others(shape):
    """Every output is one chain of multiply-adds in column order, whatever the row count, the passes or
    the threads: a tree's rows get plain decoding's bits."""
    _, bias, packed, x = _layer_and_rows(shape, 7 + shape[0], 70)
    whole = stream_gemm.linear(x, packed, shape[0], bias)
    for rows in ROWS:
        for start in (0, 3, 70 - rows):
            part = stream_gemm.linear(x[start : start + rows], packed, shape[0], bias)
            assert torch.equal(part, whole[start : start + rows]), (rows, start)
    nudged = stream_gemm.linear(x[:1] * (1 + 2**-10), packed, shape[0], bias)
    assert not torch.equal(nudged, whole[:1])  # the control: other inputs, other bits


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
def test_a_prefill_of_many_rows_goes_in_tiles_with_the_same_bits(shape):
    """More rows than a tree verifies (a prompt's prefill) are multiplied a tile at a time, within the
    bound and with each row's bits of a few-row product."""
    weight, bias, packed, x = _layer_and_rows(shape, 11 + shape[1], 301)
    whole = stream_gemm.linear(x, packed, shape[0], bias)
    assert _within_float32(whole, x, weight, bias)
    parts = torch.cat([stream_gemm.linear(part, packed, shape[0], bias) for part in x.split(43)])
    assert torch.equal(whole, parts)


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
def test_a_residual_added_as_the_outputs_are_stored_gives_the_separate_additions_bits(shape):
    """``add`` (a decoder layer's residual) is added in the kernel's store: the bits of ``add + product``
    at every row count (one pass, chunked passes, tiles), with and without a bias, padded outputs too."""
    _, bias, packed, x = _layer_and_rows(shape, 5 + shape[0], 140)
    residual = torch.randn(140, shape[0], generator=torch.Generator().manual_seed(9)) * 3
    for rows in (*ROWS, 140):
        for b in (None, bias):
            want = residual[:rows] + stream_gemm.linear(x[:rows], packed, shape[0], b)
            got = stream_gemm.linear(x[:rows], packed, shape[0], b, residual[:rows])
            assert torch.equal(got, want), (rows, b is None)
    assert not torch.equal(stream_gemm.linear(x, packed, shape[0], bias, residual * 2), want)  # it is read
    leading = stream_gemm.linear(x[:6].view(2, 3, -1), packed, shape[0], None, residual[:6].view(2, 3, -1))
    assert torch.equal(leading.view(6, -1), residual[:6] + stream_gemm.linear(x[:6], packed, shape[0]))
    with pytest.raises(RuntimeError, match="add"):
        stream_gemm.extension().linear(x[:4], packed, shape[0], None, residual[:3])


@needs_kernel
def test_any_leading_shape_and_no_rows():
    weight = torch.randn(48, 32)
    packed = stream_gemm.pack(weight)
    x = torch.randn(2, 3, 32)
    flat = stream_gemm.linear(x.reshape(6, 32), packed, 48)
    assert torch.equal(stream_gemm.linear(x, packed, 48), flat.reshape(2, 3, 48))
    assert stream_gemm.linear(torch.randn(0, 32), packed, 48).shape == (0, 48)
    assert stream_gemm.linear(x.transpose(0, 1), packed, 48).shape == (3, 2, 48)  # not contiguous: copied


@needs_kernel
def test_a_packed_linear_on_it_answers_like_pytorchs():
    linear = nn.Linear(40, 24)
    layer = PackedLinear(linear)
    layer.packed = PackedWeight(linear.weight, "stream")
    x = torch.randn(5, 40)
    with torch.inference_mode():
        assert torch.allclose(layer(x), linear(x), atol=1e-5)
    with torch.enable_grad():  # a gradient wanted: PyTorch's own linear (the kernel has no backward)
        x.requires_grad_(True)
        layer(x).sum().backward()
        assert x.grad is not None


@needs_kernel
@pytest.mark.parametrize("shape", [(960, 576), (50, 64), (17, 33)])
def test_a_bfloat16_weight_gives_the_float32_kernels_bits_on_its_rounded_weight(shape):
    """A weight packed as bfloat16 is widened to float32 as it streams (exact), so every row count gives
    the float32 kernel's bits on the bfloat16-rounded weight, with half the bytes to read."""
    gen = torch.Generator().manual_seed(sum(shape))
    weight = torch.randn(*shape, generator=gen).to(torch.bfloat16)
    bias = torch.randn(shape[0], generator=gen)
    half, whole = stream_gemm.pack(weight), stream_gemm.pack(weight.float())
    assert half.dtype == torch.bfloat16 and half.shape == whole.shape
    for rows in ROWS + (200,):
        x = torch.randn(rows, shape[1], generator=gen)
        assert torch.equal(stream_gemm.linear(x, half, shape[0], bias), stream_gemm.linear(x, whole, shape[0], bias))


def four_bit_weight(shape: tuple[int, int], seed: int) -> torch.Tensor:
    """A float32 weight as GGUF's Q4_1 dequantizes one: every run of 32 inputs of an output is fl(fl(d * q) +
    m), float16 scale d and offset m, codes q in 0..15 (each run holding its least and greatest code, as
    the quantizer's min and max do)."""
    gen = torch.Generator().manual_seed(seed)
    out, inputs = shape
    d = (torch.rand(out, inputs // 32, 1, generator=gen) * 0.02).half().float()
    m = (torch.randn(out, inputs // 32, 1, generator=gen) * 0.1).half().float()
    q = torch.randint(0, 16, (out, inputs // 32, 32), generator=gen).float()
    q[..., 3], q[..., 17] = 0, 15
    return (d * q + m).reshape(out, inputs)  # two roundings: PyTorch fuses no multiply-add on the CPU


def eight_bit_weight(shape: tuple[int, int], seed: int) -> torch.Tensor:
    """A float32 weight as GGUF's Q8_0 dequantizes one: every run of 32 inputs of an output is fl(d * q),
    float16 scale d, codes q in -127..127 (each run holding a code of 127 or -127, as the quantizer's
    greatest magnitude does)."""
    gen = torch.Generator().manual_seed(seed)
    out, inputs = shape
    d = (torch.rand(out, inputs // 32, 1, generator=gen) * 0.001).half().float()
    q = torch.randint(-127, 128, (out, inputs // 32, 32), generator=gen).float()
    q[..., 9] = 127 * (1 - 2 * (torch.rand(out, inputs // 32, generator=gen) < 0.5).float())
    return (d * q).reshape(out, inputs)


CODED_SHAPES = [(960, 576), (576, 1536), (100, 96), (50, 64), (17, 32)]
CODED_KINDS = {"Q4_1": (four_bit_weight, 384), "Q8_0": (eight_bit_weight, 576)}


@needs_kernel
@pytest.mark.parametrize("kind", CODED_KINDS)
@pytest.mark.parametrize("shape", CODED_SHAPES)
def test_a_weight_from_4_or_8_bit_blocks_streams_as_codes_with_the_float32_kernels_bits(shape, kind):
    """``pack_codes`` finds the codes (scales, offsets) of a weight dequantized from 4- or 8-bit blocks, and
    the kernel decoding them as they stream gives the float32 kernel's bits at every row count (one pass,
    chunked passes, tiles), with a bias and a residual, padded outputs too: 0.75 or 1.125 bytes a weight in
    place of 4."""
    make, segment_bytes = CODED_KINDS[kind]
    weight = make(shape, sum(shape))
    codes, whole = stream_gemm.pack_codes(weight), stream_gemm.pack(weight)
    assert codes.dtype == torch.uint8 and codes.shape == ((shape[0] + 15) // 16, shape[1] // 32, segment_bytes)
    assert codes.numel() < whole.numel() * 4 * 0.3  # bytes against float32 elements
    gen = torch.Generator().manual_seed(1)
    bias = torch.randn(shape[0], generator=gen)
    for rows in ROWS + (140,):
        x = torch.randn(rows, shape[1], generator=gen)
        residual = torch.randn(rows, shape[0], generator=gen)
        for b, add in ((None, None), (bias, None), (bias, residual)):
            got = stream_gemm.linear(x, codes, shape[0], b, add)
            assert torch.equal(got, stream_gemm.linear(x, whole, shape[0], b, add)), (rows, b is None, add is None)
    assert _within_float32(stream_gemm.linear(x, codes, shape[0]), x, weight, None)


@needs_kernel
@pytest.mark.parametrize("kind", CODED_KINDS)
def test_a_weight_the_codes_would_not_give_back_bit_for_bit_keeps_its_float32_layout(kind):
    """Any weight whose value the decoding would not return with its bits is refused (None): random
    weights, one weight one ulp off, a NaN, a run of negative zeros (decoded: +0), inputs that are no
    multiple of 32; a constant run is taken."""
    weight = CODED_KINDS[kind][0]((48, 64), 5)
    assert stream_gemm.pack_codes(weight) is not None
    assert stream_gemm.pack_codes(torch.randn(48, 64)) is None
    for spoil in (
        lambda w: w.view(-1)[77].copy_(torch.nextafter(w.view(-1)[77], torch.tensor(9.0))),
        lambda w: w.view(-1)[500].fill_(float("nan")),
        lambda w: w[5, 32:].fill_(-0.0),
    ):
        spoilt = weight.clone()
        spoil(spoilt)
        assert stream_gemm.pack_codes(spoilt) is None
    assert stream_gemm.pack_codes(torch.randn(48, 40)) is None
    constant = weight.clone()
    constant[7, :32] = 0.0
    codes = stream_gemm.pack_codes(constant)
    x = torch.randn(3, 64)
    assert torch.equal(stream_gemm.linear(x, codes, 48), stream_gemm.linear(x, stream_gemm.pack(constant), 48))


@needs_kernel
def test_a_packed_weight_takes_the_codes_unless_the_setting_says_off(monkeypatch):
    linear = nn.Linear(64, 40)
    with torch.no_grad():
        linear.weight.copy_(four_bit_weight((40, 64), 2))
    layer = PackedLinear(linear)
    monkeypatch.delenv(WEIGHT_CODES_ENV, raising=False)
    layer.packed = PackedWeight(linear.weight, "stream")
    assert layer.packed.codes and layer.packed.data.dtype == torch.uint8 and coded_weights(layer) == 1
    x = torch.randn(5, 64)
    with torch.inference_mode():
        coded = layer(x)
    monkeypatch.setenv(WEIGHT_CODES_ENV, "off")
    layer.packed = PackedWeight(linear.weight, "stream")
    assert not layer.packed.codes and layer.packed.data.dtype == torch.float32 and coded_weights(layer) == 0
    with torch.inference_mode():
        assert torch.equal(layer(x), coded)
    assert not PackedWeight(linear.weight, "onednn").codes
    monkeypatch.setenv(WEIGHT_CODES_ENV, "sometimes")
    with pytest.raises(ModelLoadError, match="TALON_WEIGHT_CODES"):
        PackedWeight(linear.weight, "stream")


@needs_kernel
def test_a_float32_drafter_takes_bfloat16_copies_for_its_few_row_calls(monkeypatch):
    """Where drafters run in float32 on this kernel (``drafter_on_stream``), ``halve_small_rows`` gives each
    layer a bfloat16 copy that calls of up to ``HALF_ROWS`` rows (by instruction set) read; wider calls keep
    the float32 weights; a layer whose weights stream as codes (fewer bytes than bfloat16) and a layer on
    another kernel are left alone."""
    from talon.models import cpu_linear

    monkeypatch.setenv("TALON_CPU_LINEAR", "stream")
    monkeypatch.delenv(WEIGHT_CODES_ENV, raising=False)
    half = cpu_linear.HALF_ROWS[stream_gemm.instruction_set()]
    assert cpu_linear.drafter_on_stream() and cpu_linear.draft_half_rows() == half
    assert cpu_linear.drafter_dtype(torch.device("cpu"), torch.float32) == torch.float32
    assert cpu_linear.drafter_dtype(torch.device("cpu"), torch.bfloat16) == torch.bfloat16
    model = nn.Sequential(nn.Linear(64, 48), nn.Linear(48, 64), nn.Linear(64, 40))
    with torch.no_grad():
        model[2].weight.copy_(eight_bit_weight((40, 64), 3))
    pack_for_device(model)
    other = PackedLinear(nn.Linear(64, 48))  # oneDNN's layout
    assert cpu_linear.halve_small_rows(model) == half
    assert cpu_linear.halve_small_rows(other) == half and other.half is None and other.half_rows == 0
    coded = model[2]
    assert coded.packed.codes and coded.half is None and coded.half_rows == 0
    layer = model[0]
    rounded = stream_gemm.pack(layer.weight.detach().to(torch.bfloat16).float())
    with torch.inference_mode():
        for rows in (1, half, half + 1, 2 * half + 3):
            x = torch.randn(rows, 64)
            want = stream_gemm.linear(x, rounded if rows <= half else layer.packed.data, 48, layer.bias)
            assert torch.equal(layer(x), want), rows
    monkeypatch.setenv("TALON_CPU_LINEAR", "onednn")  # drafters off the kernel: bfloat16 where oneDNN has it
    assert cpu_linear.draft_half_rows() == 0 and cpu_linear.halve_small_rows(nn.Sequential()) == 0
    want = torch.bfloat16 if cpu_linear.onednn_linear_works(torch.bfloat16) else torch.float32
    assert cpu_linear.drafter_dtype(torch.device("cpu"), torch.float32) == want


@needs_kernel
def test_the_stream_setting_and_the_fused_products_take_it(monkeypatch):
    """``TALON_CPU_LINEAR=stream`` lays every float32 layer out for it (one row included: the same
    kernel at every count), and a fused product of its parts gives the parts' bits (``same_bits``)."""
    from tiny import tiny_config

    from tests.test_fused_linear import _logits, _twins

    monkeypatch.setenv("TALON_CPU_LINEAR", "stream")
    model = nn.Sequential(nn.Linear(64, 48), nn.Linear(48, 64))
    assert pack_for_device(model) == 2 and packed_kernel(model) == "stream" and model[0].plain_rows == 0
    torch.manual_seed(3)
    separate, fused = _twins(tiny_config(2))
    for m in (separate, fused):
        assert use_packed_kernel(m, "stream") == 15  # seven linears a layer and the LM head
    assert fuse_projections(fused) == 4  # every attention and every MLP: the bits do not depend on the stack
    assert {p.packed.kernel for p in fused_products(fused)} == {"stream"}
    for rows in (1, 2, 7, 16):
        assert torch.equal(_logits(fused, rows), _logits(separate, rows)), rows


def test_without_the_kernel_the_load_times_the_others_and_the_setting_does_nothing(monkeypatch):
    """Neither AVX-512 nor AVX2, or no compiler: ``available()`` is False, ``choose_packed_kernel`` never offers it and
    ``use_packed_kernel(..., "stream")`` lays nothing out."""
    monkeypatch.setattr(stream_gemm, "available", lambda: False)
    timed = []

    def fake(fns, reps=15):
        timed.extend(fn.args[0][0].kernel for fn in fns)  # functools.partial(run_products, packed, inputs)
        return [1.0] * len(fns)

    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", fake)
    model = nn.Sequential(nn.Linear(64, 48))
    assert pack_linears(model) == 1
    choose_packed_kernel(model)
    assert "stream" not in timed and packed_kernel(model) in ("onednn", "mkl")
    assert use_packed_kernel(model, "stream") == 0 and packed_kernel(model) != "stream"


@needs_kernel
def test_the_load_takes_it_where_it_is_timed_fastest(monkeypatch):
    """Scripted timings: the streaming kernel timed fastest lays out every float32 layer, over every layer
    that shares a shape with the first ones (the LM head's unique shape is not timed)."""
    timed_layers = []

    def fake(fns, reps=15):
        timed_layers.extend(len(fn.args[0]) for fn in fns)  # functools.partial(run_products, packed, inputs)
        return [0.5 if fn.args[0][0].kernel == "stream" else 1.0 for fn in fns]

    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", fake)
    model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(20)], nn.Linear(32, 96))
    pack_linears(model)
    assert choose_packed_kernel(model, sample=4) == "stream"
    assert {m.packed.kernel for m in model} == {"stream"}
    assert set(timed_layers) == {20}  # every 32 x 32 layer, not only the first four; not the 96-wide one


@pytest.mark.parametrize(
    "capability, isa", [("AVX512", "AVX512"), ("AVX512_BF16", "AVX512"), ("AVX2", "AVX2"), ("DEFAULT", None)]
)
def test_the_widest_build_this_cpu_runs_is_taken(monkeypatch, capability, isa):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert stream_gemm.instruction_set() == isa


@pytest.mark.slow
@pytest.mark.skipif(stream_gemm.instruction_set() != "AVX512", reason="only an AVX-512 CPU runs both builds")
def test_the_avx2_build_gives_the_avx512_builds_bits(tmp_path):
    """Both builds run every output as one FMA chain in column order, so an AVX2 machine and an AVX-512
    one decode with the same bits (builds the AVX2 one in a folder of its own, ~25 s)."""
    avx2 = stream_gemm.load_build("AVX2", build_directory=str(tmp_path))
    gen = torch.Generator().manual_seed(3)
    for out_features, in_features in SHAPES:
        weight, bias = torch.randn(out_features, in_features, generator=gen), torch.randn(out_features, generator=gen)
        packed = stream_gemm.pack(weight)
        assert torch.equal(avx2.pack(weight), packed)
        for rows in ROWS:
            x = torch.randn(rows, in_features, generator=gen)
            want = stream_gemm.linear(x, packed, out_features, bias)
            assert torch.equal(avx2.linear(x, packed, out_features, bias), want)
    for make, _ in CODED_KINDS.values():  # the codes decode to the same float32 weights on either build
        for shape in CODED_SHAPES[1:]:
            weight = make(shape, sum(shape))
            codes = stream_gemm.pack_codes(weight)
            assert torch.equal(avx2.pack_codes(weight), codes)
            for rows in (1, 9, 33):
                x = torch.randn(rows, shape[1], generator=gen)
                assert torch.equal(avx2.linear(x, codes, shape[0], None, None), stream_gemm.linear(x, codes, shape[0]))


def test_two_loads_at_once_build_one_after_the_other(monkeypatch):
    """Two models loading at once (two users) never run the extension loader side by side, and a build
    that fails (no compiler) leaves the kernel unavailable with the reason logged, not an error."""
    import threading
    import time

    from torch.utils import cpp_extension

    inside, overlapped = [], []

    def slow_load(*args, **kwargs):
        overlapped.append(bool(inside))
        inside.append(1)
        time.sleep(0.05)
        inside.pop()
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(stream_gemm, "instruction_set", lambda: "AVX2")
    monkeypatch.setattr(cpp_extension, "load", slow_load)
    try:
        stream_gemm.extension.cache_clear()
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(stream_gemm.extension())) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == [None, None] and overlapped and not any(overlapped)
    finally:
        stream_gemm.extension.cache_clear()  # the next caller loads the real one again
