"""Faster float32 matrix products on the CPU: linear layers whose weights are laid out once, at load
time, in a packed kernel's layout (oneDNN's or MKL's), with the fastest kernel per row count.

``torch.nn.Linear`` on a CPU calls MKL's sgemm, which is slow for the few-row products of tree
verification (one row per tree node): on the 2-core AVX-512 machine a ``[17, 576] x [576, 1536]``
product took 345 us with ``F.linear`` and 92 us with the prepacked oneDNN kernel (docs/benchmarks.md,
"CPU arithmetic").  At one row, though, machines differ: there MKL's matrix-vector path took
10.5-11.5 ms for the model's linears against the packed kernel's 14-15 ms, while on the 2-core AMD EPYC
(AVX2) the packed kernel is faster at every row count.  So each packed model measures, once at load,
up to how many rows (at most ``SMALL_ROWS[-1]``) MKL wins on this CPU and uses it there
(``PackedLinear.plain_rows``): on the 2-core Xeon with AMX it won 1 to 3 rows against oneDNN's packed
kernel (a 3-node tree verified for 1.06 plain steps against 1.23-1.25), on the 2-core Zen 4 none.

The arithmetic stays float32; only the order of the additions inside a dot product differs, as it does
between any two BLAS kernels, and greedy losslessness is checked in every mode.  A drafter (never a
target) may also hold a weight-only int8 copy of each packed layer for calls of a few rows
(``quantize_small_rows``): a head call at one frontier node reads ~27 MB of bfloat16 weights, mostly
from memory after a verification has passed through the cache, and half the bytes make it ~25 %
cheaper; a drafter's rounding shapes the tree, never what verification emits.

Two packed kernels exist for float32 (``PackedWeight``): oneDNN's and MKL's own packed sgemm
(``cblas_sgemm_pack`` / ``cblas_sgemm_compute``).  On the 2-core Xeon with AMX MKL's was faster at every
row count from 4 (the model's linears at 16 rows: 28.7 against 31.7 ms; at 64: 61.1 against 74.7; a
16-node tree verified for 1.58-1.61 plain steps against 1.71-1.74), so a float32 model times the two at load
(``choose_packed_kernel``) before it chooses the few-row kernel against the winner.  MKL documents a
packed matrix for the m, n, k it was packed for; the packed size does not depend on m, and a copy packed
once serves every row count here with the bits of a copy packed for that count, which the load checks
on each shape before it uses it (``mkl_packs_any_rows``).  A third, on AVX-512 and AVX2 CPUs with a
C++ compiler, is TALON's own (``talon.models.stream_gemm``): it overlaps reading the weights with the
arithmetic, and on the AMX Xeon it beat both at every row count from 1 to 48 (the model's linears at
4 / 16 rows: 17.0 / 23.8 ms against MKL's packed 20.6 / 28.7; at one row 15.0 against PyTorch's 16.4),
losing from 64 rows (run 35); on the AVX2 EPYC it beat oneDNN's from 1 to 64 rows (1 / 4 / 16 rows:
22.1 / 26.7 / 60.6 ms against 31.3 / 38.4 / 78.6; PyTorch's own 37.5 at one row; run 36).  The load
times all it has over every decoder layer's linears, as the forward reads them from memory.  bfloat16 has only oneDNN's.

``$TALON_CPU_LINEAR``: ``auto`` (default) packs every ``nn.Linear`` of a CPU model and picks the packed
kernel and the kernel for 1-4 rows by measurement; ``onednn``, ``mkl`` and ``stream`` use that packed
kernel at every row count (``mkl`` for float32 layers that pass its check, ``stream`` where it runs;
others stay on oneDNN's); ``plain`` keeps PyTorch's own (what an unmodified transformers model runs).
Where the oneDNN op is missing (another PyTorch build) the model is left as it is.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from torch import nn

from . import device, kernel_store, stream_gemm
from .loaded import ModelLoadError

CPU_LINEAR_ENV = "TALON_CPU_LINEAR"
CPU_LINEAR_MODES = ("auto", "onednn", "mkl", "stream", "plain")
WEIGHT_CODES_ENV = "TALON_WEIGHT_CODES"
WEIGHT_CODES_MODES = ("auto", "off")
PACKED_KERNELS = ("onednn", "mkl", "stream")
SMALL_ROWS = (1, 2, 3, 4)
"""Row counts at which MKL may beat the packed kernel (measured per model at load in ``auto`` mode, from
1 up to the first count where it does not)."""
MARGIN = 0.9
"""At a few rows, where PyTorch's linear (MKL) and the packed kernel give other bits, MKL takes a row count
only when it takes at most this fraction of the packed kernel's time; where they give the same bits, the
packed kernel takes it only when it takes at most this fraction of MKL's."""
PACKED_DTYPES = (torch.float32, torch.bfloat16)
PACK_BATCH_HINT = 64
"""Rows the packed layout is tuned for (it serves any number; 64 was as fast as 17 or 512 here)."""
DRAFT_INT8_ENV = "TALON_DRAFT_INT8"
DRAFT_INT8_MODES = ("auto", "off")
INT8_ROWS = 4
"""A drafter's calls of at most this many rows take its int8 copies: up to 4 rows the int8 kernel read
back from memory is faster than the bfloat16 one on the AVX-512 machine (the draft LM head at 1 / 4 rows:
0.33 / 0.38 ms against 0.45 / 0.45 ms after a 40 MB read), from 8 rows the bfloat16 kernel wins."""
HALF_ROWS = {"AVX512": 16, "AVX2": 3}
"""Where a drafter runs in float32 on TALON's kernel, its calls of at most this many rows (by the kernel's
instruction set) read a bfloat16 copy of each weight, widened as it streams.  On the AVX2 EPYC the draft LM
head (16,384 x 576) took 1.02 / 1.28 / 1.43 / 1.68 ms at 1 / 2 / 3 / 4 rows against float32's 1.87 / 1.99 /
1.79 / 1.94 after a 48 MB read, and from 8 rows more than float32 (the widening then costs more than the
bytes it saves).  On the AMX Xeon (model 167) the shipped head's calls were cheapest with copies up to 16
rows (side by side against 3 and 8: a second call of 4 rows 0.165 plain steps against 0.198 with 3, of 16
rows 0.276 against 0.337 and 0.344; ``docs/bench/xeon-spr-r66/head_ab.txt``)."""
INT8_IN_MULTIPLE = 64
"""Only layers whose input width is a multiple of this take an int8 copy: PyTorch 2.13's CPU int8 kernel
reads past the end of rows whose width is not a multiple of its vector (it crashed at 8, 24 and 40)."""


class PackedWeight:
    """A weight ``[out_features, in_features]`` laid out once for a packed kernel (``PACKED_KERNELS``):
    oneDNN's blocked layout, MKL's packed sgemm (float32 only), or TALON's own streaming kernel's column
    blocks (float32 on AVX-512 or AVX2, ``talon.models.stream_gemm``; a float32 weight dequantized from 4- or
    8-bit blocks as its exact codes, ``stream_gemm.pack_codes``, unless ``$TALON_WEIGHT_CODES`` is ``off``).  Not a
    tensor: call it."""

    def __init__(self, weight: torch.Tensor, kernel: str = "onednn") -> None:
        self.kernel = kernel
        self.dtype = weight.dtype
        self.codes = False
        """Whether ``data`` holds the codes the weight was dequantized from (``stream_gemm.pack_codes``)."""
        self.out_features, self.in_features = weight.shape
        weight = weight.detach().contiguous()
        if kernel == "mkl":
            self.data = torch.ops.mkl._mkl_reorder_linear_weight(weight, PACK_BATCH_HINT)
            # MKL's op reads only the weight's sizes and dtype (its own fallback, at another row count
            # than the one passed, never runs): a stride-0 view holds them without a copy
            self.sizes = torch.zeros((), dtype=weight.dtype).expand(weight.shape)
        elif kernel == "stream":
            coded = weight.dtype == torch.float32 and weight_codes_mode() == "auto"
            codes = stream_gemm.pack_codes(weight) if coded else None
            self.data = stream_gemm.pack(weight) if codes is None else codes
            self.codes = codes is not None
        elif kernel == "onednn":
            self.data = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_BATCH_HINT)
        else:
            raise ValueError(f"packed kernel {kernel!r}: choose one of {', '.join(PACKED_KERNELS)}")

    def __call__(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, add: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``x`` ``[..., in_features]`` (the weight's dtype) -> ``x @ weight.T + bias``, ``[..., out_features]``;
        ``add + (x @ weight.T + bias)`` where ``add`` is given (the streaming kernel adds it as it stores)."""
        if self.kernel == "stream":
            return stream_gemm.linear(x, self.data, self.out_features, bias, add)
        if self.kernel == "mkl":
            out = torch.ops.mkl._mkl_linear(x, self.data, self.sizes, bias, x.numel() // self.in_features)
        else:
            out = torch.ops.mkldnn._linear_pointwise(x, self.data, bias, "none", [], "")
        return out if add is None else add + out


class PackedLinear(nn.Module):
    """``nn.Linear`` with its weight also held in a packed kernel's layout.  ``weight`` and ``bias`` stay
    the original parameters (shared, so ``state_dict``, tied embeddings and readers of ``.weight`` see
    no change); the packed copy is a plain attribute, not saved."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.packed: PackedWeight | None = PackedWeight(linear.weight)
        """The weight laid out for a packed kernel (oneDNN's until ``choose_packed_kernel`` says otherwise);
        None where a fused product of several layers holds it (``talon.models.fused_linear``)."""
        self.plain_rows = 0
        """Inputs of at most this many rows take PyTorch's own linear (MKL) instead of the packed kernel."""
        self.min_rows = 0
        """Inputs of fewer rows are multiplied with rows of zeros appended up to this many
        (``talon.models.row_invariant``: on the Zen 4 the packed bfloat16 kernel computes a lone row of a
        long product another way than two or more)."""
        self.block_rows = 0
        """When > 0, every product runs over blocks of exactly this many rows, the last padded with rows of
        zeros (``talon.models.row_invariant``: with AMX the packed bfloat16 kernel changes its algorithm
        with the row count at every scale, but gives a row of a fixed-size block the same bits wherever
        it sits and whatever rows sit beside it)."""
        self.call_rows = 0
        """With ``block_rows``: the most rows (whole blocks) one call of the kernel takes, where a call of
        several blocks gives each the bits a call of it alone does (two blocks of 16 on the AMX Xeon, read
        the weights once); 0: one block a call."""
        self.int8_rows = 0
        """Inputs of at most this many rows take ``int8_weight`` (``quantize_small_rows``; drafters only)."""
        self.half_rows = 0
        """Inputs of at most this many rows take ``half`` (``halve_small_rows``; drafters only)."""
        self.half: PackedWeight | None = None
        """A bfloat16 copy of the weight for TALON's kernel (half the bytes; float32 arithmetic)."""
        self.int8_weight: torch.Tensor | None = None  # [out, in] int8, row k is weight row k / int8_scales[k]
        self.int8_scales: torch.Tensor | None = None  # [out] in the weight's dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., in_features]`` (float32 or bfloat16, on the CPU) -> ``[..., out_features]``.  When
        a gradient is wanted (training a draft head through the target's LM head) it takes PyTorch's own
        linear, because the packed op has no backward."""
        return self._product(x)

    def plus(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual + self(x)`` with its bits (``residual`` ``[..., out_features]``: a decoder layer's).
        Where ``x`` takes TALON's streaming kernel the residual is added as the outputs are stored: at 32
        rows the separate addition read outputs that partly lay in the other core's cache."""
        return self._product(x, residual)

    def _product(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``self(x)``, plus ``residual`` where given (``plus``)."""
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad) or self.packed is None:
            out = self.plain_product(x)  # (no packed copy: a fused product has it)
        elif self.int8_rows and x.numel() <= self.int8_rows * self.in_features:
            # a drafter's few rows: half the bytes to read
            rows = x.reshape(-1, self.in_features)
            out = torch._weight_int8pack_mm(rows, self.int8_weight, self.int8_scales)
            if self.bias is not None:
                out = out + self.bias
            out = out.reshape(*x.shape[:-1], self.out_features)
        elif self.half_rows and x.numel() <= self.half_rows * self.in_features:
            out = self.half(x, self.bias)
        elif x.numel() <= self.plain_rows * self.in_features:
            out = self.plain_product(x)
        elif (
            residual is not None
            and self.packed.kernel == "stream"
            and residual.dtype == torch.float32
            and not (self.min_rows or self.block_rows)
        ):
            return self.packed(x, self.bias, add=residual)
        else:
            out = product_in_rows(self.packed_product, x, self)
        return out if residual is None else residual + out

    def plain_product(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., in_features]`` -> ``[..., out_features]`` through PyTorch's own linear (MKL)."""
        return nn.functional.linear(x, self.weight, self.bias)

    def packed_product(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., in_features]`` -> ``[..., out_features]`` through the packed kernel, whatever the
        row count (``forward`` may take MKL or the int8 copy instead)."""
        return self.packed(x, self.bias)


class RowRules(Protocol):
    """A packed product's row rules (``PackedLinear``'s attributes of these names, and a fused product's)."""

    out_features: int
    min_rows: int
    block_rows: int
    call_rows: int


def product_in_rows(product, x: torch.Tensor, rules: RowRules) -> torch.Tensor:
    """``product`` (a packed product, ``[rows, in] -> [rows, rules.out_features]``) of ``x`` ``[..., in]``,
    its rows padded by rows of zeros to ``rules.min_rows``, or to whole blocks of ``rules.block_rows``
    multiplied ``rules.call_rows`` rows a call (one block where 0; the row-invariant forward's rules,
    ``talon.models.row_invariant``); neither set: as is."""
    block_rows, min_rows = rules.block_rows, rules.min_rows
    if not block_rows and x.numel() >= min_rows * x.shape[-1]:
        return product(x)
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if n == 0:
        return product(x)
    block = block_rows or max(min_rows, n)
    padded = nn.functional.pad(rows, (0, 0, 0, -n % block))  # one op: a plain step pays it 121-211 times
    call = max(rules.call_rows, block) if block_rows else block
    if len(padded) <= call:
        out = product(padded)
    else:
        out = torch.cat([product(part) for part in padded.split(call)])
    return out[:n].view(*x.shape[:-1], rules.out_features)


@functools.cache
def onednn_linear_works(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this PyTorch build and this CPU have the prepacked oneDNN linear op for ``dtype`` and it
    computes ``F.linear`` (the bfloat16 path needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT: an AVX2-only CPU
    has the float32 op but not the bfloat16 one)."""
    try:
        lin = nn.Linear(8, 4).to(dtype)
        x = torch.randn(3, 8, dtype=dtype)
        tol = 1e-5 if dtype == torch.float32 else 5e-2
        return torch.allclose(PackedLinear(lin)(x).float(), lin(x).float(), atol=tol)
    except (AttributeError, RuntimeError):
        return False


def _env_choice(name: str, modes: tuple[str, ...]) -> str:
    """``$name``, lower-cased, one of ``modes`` (the first when unset or empty); another value raises
    ``ModelLoadError`` naming the choices."""
    mode = os.environ.get(name, modes[0]).strip().lower() or modes[0]
    if mode not in modes:
        raise ModelLoadError(f"${name}={mode!r}: choose one of {', '.join(modes)}.")
    return mode


def weight_codes_mode() -> str:
    """``$TALON_WEIGHT_CODES``: ``auto`` (default: TALON's kernel streams a float32 weight dequantized from
    4- or 8-bit blocks as its exact codes, 0.75 or 1.125 bytes a weight, the same bits) or ``off`` (the
    float32 weights); an unknown value raises ``ModelLoadError``."""
    return _env_choice(WEIGHT_CODES_ENV, WEIGHT_CODES_MODES)


def cpu_linear_mode() -> str:
    """``$TALON_CPU_LINEAR`` (``auto`` unless set to ``onednn``, ``mkl``, ``stream`` or ``plain``); an
    unknown value raises ``ModelLoadError``."""
    return _env_choice(CPU_LINEAR_ENV, CPU_LINEAR_MODES)


def pack_linears(module: nn.Module) -> int:
    """Replace every float32 / bfloat16 CPU ``nn.Linear`` inside ``module`` by a ``PackedLinear`` (in
    place, shared submodules once); returns how many were packed (0 when the op is unavailable)."""
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if (
                type(child) is nn.Linear
                and child.weight.device.type == "cpu"
                and child.weight.dtype in PACKED_DTYPES
                and onednn_linear_works(child.weight.dtype)
            ):
                setattr(parent, name, PackedLinear(child))
                count += 1
    return count


def pack_for_device(module: nn.Module, fuse: Callable[[nn.Module], Sequence[Product]] | None = None) -> int:
    """``pack_linears(module)`` when its weights are float32 or bfloat16 on the CPU and
    ``$TALON_CPU_LINEAR`` is not ``plain``, then (in ``auto`` mode) ``choose_packed_kernel``, ``fuse`` if
    given (it fuses products of ``module`` and returns them: ``talon.models.fused_linear.fuse``), and in
    ``auto`` mode ``choose_small_row_kernel`` on the products the forward then runs (both timed once a
    process for a model's shapes: ``KernelChoices``); otherwise nothing.  Returns how many layers were
    packed."""
    weight = next((p for p in module.parameters()), None)
    mode = cpu_linear_mode()
    if weight is None or weight.device.type != "cpu" or weight.dtype not in PACKED_DTYPES or mode == "plain":
        return 0
    count = pack_linears(module)
    if not count:
        return 0
    if mode == "auto":
        KERNEL_CHOICES.lay_out(module, fuse)
        return count
    if mode in ("mkl", "stream"):
        use_packed_kernel(module, mode)
    if fuse is not None:
        fuse(module)
    return count


MKL_PROBE_ROWS = (1, 2, 3, 4, 5, 8, 16, 17, 33, 64, 65, 129)
"""Row counts at which a copy packed once for MKL is checked against copies packed for each count."""
MKL_BOUND_COLUMNS = 1024
"""Outputs of a probed shape checked against float64 (all are checked against the copies packed per count)."""


@functools.cache
def mkl_packs_any_rows(out_features: int, in_features: int) -> bool:
    """Whether this build has MKL's packed float32 sgemm and a ``[out_features, in_features]`` weight packed
    once (``PackedWeight(weight, "mkl")``) serves every count of ``MKL_PROBE_ROWS``: from two rows with
    the bits of a copy packed for that count (the use MKL documents), at every count within float32's
    bound for a dot product of ``in_features`` terms of the float64 product (on the first
    ``MKL_BOUND_COLUMNS`` outputs).  Random rows; a few ms a shape, 0.9 s for the embedded model's LM
    head (49,152 x 576; 3.6 s with every output in float64)."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=gen)
    head = weight[:MKL_BOUND_COLUMNS].double()
    try:
        once = PackedWeight(weight, "mkl")
        with torch.inference_mode():
            for rows in MKL_PROBE_ROWS:
                x = torch.randn(rows, in_features, generator=gen)
                got = once(x)
                exact = x.double() @ head.T
                bound = in_features * 2.0**-23 * (x.double().abs() @ head.abs().T)
                if not bool(((got[:, : len(head)].double() - exact).abs() <= bound).all()):
                    return False
                packed_for_rows = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
                if rows > 1 and not torch.equal(got, torch.ops.mkl._mkl_linear(x, packed_for_rows, weight, None, rows)):
                    return False
    except (AttributeError, RuntimeError):
        return False
    return True


def use_packed_kernel(module: nn.Module, kernel: str) -> int:
    """Lay out every float32 ``PackedLinear`` of ``module`` that holds a packed copy for ``kernel`` (for
    ``"mkl"`` only those whose shape passes ``mkl_packs_any_rows``, for ``"stream"`` only where
    ``stream_gemm.available()``); returns how many now use it."""
    if kernel == "stream" and not stream_gemm.available():
        return 0
    count = 0
    for m in module.modules():
        if not isinstance(m, PackedLinear) or m.packed is None or m.weight.dtype != torch.float32:
            continue
        if kernel == "mkl" and not mkl_packs_any_rows(m.out_features, m.in_features):
            continue
        if m.packed.kernel != kernel:
            m.packed = PackedWeight(m.weight, kernel)
        count += 1
    return count


KERNEL_PROBE_ROWS = (4, 16, 32)
"""Row counts a tree's verification often takes, at which the packed kernels are timed at load."""
KERNEL_PROBE_REPS = 5
"""Timings per kernel and row count (the least is kept)."""
KERNEL_PROBE_BYTES = 256 << 20
"""Float32 weight bytes a packed kernel is timed over at most: far more than any CPU's cache, so the
weights come from memory as in a forward, and every kernel's copies can be held at once."""


def choose_packed_kernel(module: nn.Module, sample: int = 16) -> str:
    """Time the packed kernels this machine has (oneDNN's; MKL's where ``mkl_packs_any_rows`` holds for
    the first ``sample`` float32 packed layers' shapes; TALON's streaming kernel where
    ``stream_gemm.available()``) at ``KERNEL_PROBE_ROWS`` (least of ``KERNEL_PROBE_REPS`` timings each,
    the kernels interleaved: ``fastest_each``; summed) and lay every float32 layer out for the fastest.
    Timed over the layers that share a shape with those first ones (the decoder layers of a Llama, not
    its LM head), up to ``KERNEL_PROBE_BYTES`` of weights: the weights as a forward reads them, from
    memory, where a cache that holds two layers had made the kernel that multiplies fastest from cache
    look faster than the one that reads memory best.  About 2 s a kernel on the embedded model on the
    2-core AVX2 EPYC (the streaming kernel's first build, once a machine, about 25 s).  Returns the
    kernel chosen (``"onednn"`` when nothing is float32)."""
    layers = [m for m in module.modules() if isinstance(m, PackedLinear) and m.weight.dtype == torch.float32]
    layers = [m for m in layers if m.packed is not None]
    shapes = {(m.out_features, m.in_features) for m in layers[:sample]}
    probe, held = [], 0
    for m in layers:
        if (m.out_features, m.in_features) in shapes and held < KERNEL_PROBE_BYTES:
            probe.append(m)
            held += m.weight.numel() * m.weight.element_size()
    candidates = ["onednn"]
    if probe and all(mkl_packs_any_rows(*shape) for shape in shapes):
        candidates.append("mkl")
    if probe and stream_gemm.available():
        candidates.append("stream")
    if len(candidates) == 1:
        return "onednn"
    seconds = dict.fromkeys(candidates, 0.0)
    with torch.inference_mode():
        copies = {
            k: [m.packed if m.packed.kernel == k else PackedWeight(m.weight, k) for m in probe] for k in candidates
        }
        for rows in KERNEL_PROBE_ROWS:
            inputs = [torch.randn(rows, m.in_features) for m in probe]
            timed = fastest_each(
                [functools.partial(run_products, copies[k], inputs) for k in candidates], KERNEL_PROBE_REPS
            )
            for k, t in zip(candidates, timed):
                seconds[k] += t
        del copies
    kernel = min(candidates, key=seconds.__getitem__)
    use_packed_kernel(module, kernel)
    return kernel


def run_products(packed: Sequence[PackedWeight], inputs: Sequence[torch.Tensor]) -> None:
    """Each packed weight times its input (what ``choose_packed_kernel`` times)."""
    for weight, x in zip(packed, inputs):
        weight(x)


class KernelChoices:
    """What a load times, kept per model shape for this process: the packed kernel
    (``choose_packed_kernel``) and the row count up to which PyTorch's own linear serves
    (``choose_small_row_kernel``).  A later load of a model of the same shapes (the tests', the
    benchmark's and a Space's reloads, a second model of one family) takes them without timing (~6 s of
    the embedded model's load on the 2-core AVX2 EPYC), and so two loads of one model in a process run
    the same kernels and give the same bits.  A measurement of the machine, the same for every user;
    with ``persist`` it is also kept for the machine's later processes when it was timed on a quiet
    machine (``talon.models.kernel_store``)."""

    def __init__(self, persist: bool = False) -> None:
        self._chosen: dict[tuple, tuple[str, int]] = {}  # key -> (packed kernel, plain rows)
        self._lock = threading.Lock()
        self.persist = persist

    @staticmethod
    def key(module: nn.Module, fused: bool) -> tuple:
        """What the timings depend on: the packed layers' shapes and dtypes in order, whether products
        are fused, the kernels this machine has, whether TALON's kernel streams weights as their codes
        (``weight_codes_mode``: a quarter of the bytes moves where PyTorch's linear stops being faster),
        and PyTorch's thread count."""
        layers = tuple(
            (m.out_features, m.in_features, str(m.weight.dtype))
            for m in module.modules()
            if isinstance(m, PackedLinear) and m.packed is not None
        )
        return layers, fused, stream_gemm.available(), weight_codes_mode(), torch.get_num_threads()

    def lay_out(self, module: nn.Module, fuse: Callable[[nn.Module], Sequence[Product]] | None = None) -> list[Product]:
        """Lay ``module``'s float32 layers out for the packed kernel chosen for its shapes, ``fuse`` it
        (if given) and set every product's ``plain_rows`` to the count chosen; both are timed now where
        neither this process nor (``persist``) a quiet earlier one has timed these shapes.  Returns the
        fused products."""
        key = self.key(module, fuse is not None)
        with self._lock:  # two users loading at once time once, and not against each other
            known = self._chosen.get(key)
            stored_key = None
            if known is None and self.persist:
                stored_key = kernel_store.machine_key(key, stream_gemm.source_digest())
                known = kernel_store.cached_choice(stored_key)
            if known is not None:
                if known[0] != "onednn":
                    use_packed_kernel(module, known[0])
                fused = list(fuse(module)) if fuse is not None else []
                set_plain_rows(module, fused, known[1])
            else:
                with device.OtherWork() as others:
                    kernel = choose_packed_kernel(module)
                    fused = list(fuse(module)) if fuse is not None else []
                    known = (kernel, choose_small_row_kernel(module, fused))
                if stored_key is not None and others.quiet:
                    kernel_store.store_choice(stored_key, *known, others.share)
            self._chosen[key] = known
        return fused


KERNEL_CHOICES = KernelChoices(persist=True)


def fastest_seconds(fn, reps: int = 15) -> float:
    """The least wall clock of ``reps`` calls (after one warm-up): the kernel's own speed, least
    disturbed by whatever else the machine runs."""
    return fastest_each([fn], reps)[0]


def fastest_each(fns: Sequence[Callable[[], object]], reps: int = 15) -> list[float]:
    """Per function of ``fns``, the least wall clock of ``reps`` calls (after one warm-up each), the
    calls interleaved: round r runs every function once, starting at the r-th (mod len).  Timed one
    after the other, a busy spell (a neighbour's burst) that covers one function's calls and not the
    next's decides which is "faster"; interleaved, every function meets the same spells, and each keeps
    its least.  A spell that lasts through the whole timing still decides it (another process loading
    beside this one): ``talon.models.kernel_store`` keeps only choices timed on a quiet machine."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for r in range(reps):
        for k in range(len(fns)):
            i = (r + k) % len(fns)
            t0 = time.perf_counter()
            fns[i]()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


class Product(Protocol):
    """A product the forward runs (a ``PackedLinear``, or a fused product of several): PyTorch's linear up
    to ``plain_rows`` rows, the packed kernel above."""

    plain_rows: int
    in_features: int
    packed: PackedWeight

    def plain_product(self, x: torch.Tensor) -> torch.Tensor: ...

    def packed_product(self, x: torch.Tensor) -> torch.Tensor: ...


def choose_small_row_kernel(module: nn.Module, fused: Sequence[Product] = (), sample: int = 16) -> int:
    """Measure, on up to ``sample`` of the products ``module``'s forward runs (its ``fused`` products and
    packed layers, half each where both exist: two to four decoder layers of a Llama), whether MKL
    (PyTorch's own linear) beats the packed kernel at each of ``SMALL_ROWS`` from 1 up, least of 15
    timings each, the two interleaved (``fastest_each``), and set every packed layer's and fused
    product's ``plain_rows`` to the largest row count before the first where it does not (0 when it
    never does).  MKL must win by ``MARGIN`` where the two give other bits, so that a busy neighbour
    does not decide which bits a load gets; where they give the same bits the packed kernel must win by
    it to take the count (a busy neighbour should not decide the speed either).  Against MKL's packed
    kernel one row always takes PyTorch's own linear, unmeasured: an unmodified model's bits, as fast
    here.  About 0.1 s a count measured.  Returns that count."""
    layers = [m for m in module.modules() if isinstance(m, PackedLinear)]
    own = [m for m in layers if m.packed is not None]
    half = sample // 2 if fused and own else sample
    probe: list[Product] = [*fused[:half], *own[:half]]
    mkl_packed = bool(probe) and all(m.packed.kernel == "mkl" for m in probe)
    plain_rows = 0
    with torch.inference_mode():
        for rows in SMALL_ROWS:
            if rows == 1 and mkl_packed:
                plain_rows = 1
                continue
            inputs = [torch.randn(rows, m.in_features, dtype=m.packed.dtype) for m in probe]

            def mkl(inputs=inputs) -> list[torch.Tensor]:
                return [m.plain_product(x) for m, x in zip(probe, inputs)]

            def packed(inputs=inputs) -> list[torch.Tensor]:
                return [m.packed_product(x) for m, x in zip(probe, inputs)]

            margin = 1.0 / MARGIN if same_outputs(mkl(), packed()) else MARGIN
            mkl_seconds, packed_seconds = fastest_each([mkl, packed])
            if mkl_seconds > margin * packed_seconds:
                break
            plain_rows = rows
    set_plain_rows(module, fused, plain_rows)
    return plain_rows


def set_plain_rows(module: nn.Module, fused: Sequence[Product], rows: int) -> None:
    """Every packed layer of ``module`` and every product of ``fused`` takes PyTorch's own linear up to
    ``rows`` rows."""
    for m in [*(m for m in module.modules() if isinstance(m, PackedLinear)), *fused]:
        m.plain_rows = rows


def same_outputs(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Whether two kernels' outputs for the same inputs are equal bit for bit, pair by pair."""
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def draft_int8_mode() -> str:
    """``$TALON_DRAFT_INT8`` (``auto`` unless set to ``off``); an unknown value raises ``ModelLoadError``."""
    return _env_choice(DRAFT_INT8_ENV, DRAFT_INT8_MODES)


def int8_weights(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 copy of ``weight`` ``[out, in]``: ``(q [out, in] int8, scales [out])``, scales
    in ``weight``'s dtype, with ``|weight - q * scales[:, None]| <= scales / 2`` (the scales are rounded
    first, a hair up, so no entry needs more than 127 steps)."""
    w = weight.detach().float()
    amax = w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny)
    scales = (amax / 127.0 * (1.0 + 2.0**-7)).to(weight.dtype)
    q = torch.round(w / scales.float()[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
    return q, scales


@functools.cache
def int8_kernel_works() -> bool:
    """Whether this PyTorch build has the CPU int8 weight-only kernel and it computes the product of a
    copy made by ``int8_weights`` (to the kernel's bfloat16 output)."""
    try:
        lin = nn.Linear(INT8_IN_MULTIPLE * 2, 48, bias=False).to(torch.bfloat16)
        q, scales = int8_weights(lin.weight)
        with torch.inference_mode():
            x = torch.randn(3, lin.in_features, dtype=torch.bfloat16)
            got = torch._weight_int8pack_mm(x, q, scales).float()
        want = x.float() @ (q.float() * scales.float()[:, None]).T
        return torch.allclose(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def draft_int8_rows() -> int:
    """The row count up to which a drafter's packed bfloat16 layers take their int8 copies on this CPU:
    ``INT8_ROWS`` where ``$TALON_DRAFT_INT8`` is ``auto``, the int8 kernel works (``int8_kernel_works``)
    and at one row it takes at most ``MARGIN`` of the packed bfloat16 kernel's time on the shipped head's
    draft LM head shape, each call timed after a pass over 48 MB (as a head call follows a verification
    that pushed the head's weights out of the cache; warm, the two are about even on the AVX-512
    machine); least of 7 timings each, interleaved.  Else 0.  About 0.2 s, once a process."""
    if draft_int8_mode() == "off" or not onednn_linear_works(torch.bfloat16) or not int8_kernel_works():
        return 0
    lin = nn.Linear(576, 16384, bias=False).to(torch.bfloat16)
    packed = PackedLinear(lin)
    q, scales = int8_weights(lin.weight)
    flush = torch.ones(12 * 1024 * 1024)
    best = {"int8": float("inf"), "bfloat16": float("inf")}
    with torch.inference_mode():
        x = torch.randn(1, lin.in_features, dtype=torch.bfloat16)
        calls = {"int8": lambda: torch._weight_int8pack_mm(x, q, scales), "bfloat16": lambda: packed(x)}
        for k in range(8):  # round 0 warms up
            for name, call in calls.items():
                flush.sum()
                t0 = time.perf_counter()
                call()
                if k:
                    best[name] = min(best[name], time.perf_counter() - t0)
    return INT8_ROWS if best["int8"] <= MARGIN * best["bfloat16"] else 0


def quantize_small_rows(module: nn.Module) -> int:
    """Give every packed bfloat16 layer of a drafter ``module`` whose input width is a multiple of
    ``INT8_IN_MULTIPLE`` a weight-only int8 copy for inputs of at most ``draft_int8_rows()`` rows (in
    place; the bfloat16 weights stay for wider calls and for readers of ``.weight``).  Never for a
    target: its products must be the float32 ones.  Returns that row count (0: nothing changed)."""
    layers = [
        m
        for m in module.modules()
        if isinstance(m, PackedLinear) and m.weight.dtype == torch.bfloat16 and m.in_features % INT8_IN_MULTIPLE == 0
    ]
    rows = draft_int8_rows() if layers else 0  # (a float32 drafter's load does not time the int8 kernel)
    if not rows:
        return 0
    for m in layers:
        m.int8_weight, m.int8_scales = int8_weights(m.weight)
        m.int8_rows = rows
    return rows


def draft_half_rows() -> int:
    """The row count up to which a float32 drafter's layers on TALON's kernel take bfloat16 copies here:
    ``HALF_ROWS`` for this CPU's instruction set where drafters run on the kernel (``drafter_on_stream``),
    else 0."""
    return HALF_ROWS.get(stream_gemm.instruction_set(), 0) if drafter_on_stream() else 0


def streams_float32(packed: PackedWeight | None) -> bool:
    """Whether ``packed`` streams float32 weights on TALON's kernel, which a bfloat16 copy would halve (not
    their codes: fewer bytes than bfloat16)."""
    return packed is not None and packed.kernel == "stream" and packed.dtype == torch.float32 and not packed.codes


class Halvable(Protocol):
    """A product that can take a bfloat16 copy for a few rows (``fused_linear.FusedRows``)."""

    def halve(self, rows: int) -> None: ...


def halve_small_rows(module: nn.Module, fused: Sequence[Halvable] = ()) -> int:
    """Give every float32 layer of a drafter ``module`` that runs on TALON's kernel, and every product of
    ``fused`` (its fused products), a bfloat16 copy for inputs of at most ``draft_half_rows()`` rows (in
    place; the float32 copy stays for wider calls; a weight streamed as its codes keeps them, fewer bytes
    than bfloat16).  A drafter's rounding shapes the tree, never the output; never for a target.  Returns
    that row count (0: nothing changed)."""
    rows = draft_half_rows()
    if not rows:
        return 0
    for m in module.modules():
        if isinstance(m, PackedLinear) and streams_float32(m.packed):
            m.half = PackedWeight(m.weight.detach().to(torch.bfloat16), "stream")
            m.half_rows = rows
    for product in fused:
        product.halve(rows)
    return rows


def packed_kernel(module: nn.Module) -> str | None:
    """The packed kernel (``PACKED_KERNELS``) of ``module``'s first packed linear that holds its own copy;
    None when none does."""
    packed = next((m.packed for m in module.modules() if isinstance(m, PackedLinear) and m.packed is not None), None)
    return None if packed is None else packed.kernel


def mkl_rows(module: nn.Module) -> int | None:
    """The row count up to which ``module``'s packed linears take MKL (``PackedLinear.plain_rows``, chosen
    at load in ``auto`` mode); None when none is packed."""
    packed = next((m for m in module.modules() if isinstance(m, PackedLinear)), None)
    return None if packed is None else packed.plain_rows


def block_rows(module: nn.Module) -> int:
    """Rows of every product of ``module``'s packed linears where they run in fixed blocks
    (``PackedLinear.block_rows``, set by the row-invariant forward); 0 where they do not."""
    return max((m.block_rows for m in module.modules() if isinstance(m, PackedLinear)), default=0)


def call_rows(module: nn.Module) -> int:
    """The most rows one kernel call of ``module``'s blocked linears takes (``PackedLinear.call_rows``);
    0 where a call takes one block (or nothing runs in blocks)."""
    return max((m.call_rows for m in module.modules() if isinstance(m, PackedLinear)), default=0)


def drafter_dtype(device: torch.device, target_dtype: torch.dtype) -> torch.dtype:
    """The precision a draft head runs in on a float32 target: on a CPU where TALON's kernel runs
    (``drafter_on_stream``) float32, its calls of a few rows reading bfloat16 copies (``halve_small_rows``)
    and a draft LM head its target's codes; else bfloat16 on a CPU whose linear layers are packed and
    that has the oneDNN bfloat16 kernels (30 % faster per head call than float32 on oneDNN on the AVX-512
    machine); else the target's.  Side by side on the AMX Xeon (model 167) the first took 0.099 / 0.131 /
    0.157 plain steps for a later / second / first call of one row against bfloat16's 0.120 / 0.151 /
    0.169, and 0.201 against 0.250 for a second call of 8 rows (``docs/bench/xeon-spr-r66/head_ab.txt``).
    Only the drafter: its rounding changes which tree is proposed, never what verification emits."""
    if device.type != "cpu" or target_dtype != torch.float32 or cpu_linear_mode() == "plain":
        return target_dtype
    if drafter_on_stream() or not onednn_linear_works(torch.bfloat16):
        return torch.float32
    return torch.bfloat16


def drafter_on_stream() -> bool:
    """Whether drafters run in float32 on TALON's kernel here: it runs (AVX-512 or AVX2) and
    ``$TALON_CPU_LINEAR`` lets it (``auto`` or ``stream``)."""
    return cpu_linear_mode() in ("auto", "stream") and stream_gemm.available()
