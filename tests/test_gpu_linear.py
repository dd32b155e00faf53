"""Few-row linears through cuBLASLt or a Triton kernel on a GPU (``talon.models.gpu_linear``,
``talon.models.gpu_rows_kernel``), checked on the CPU: the choice per row count from timings, the
wrapped layers' values, every method on static runners with the zero-bias path (and, where Triton is
installed, the kernel in Triton's interpreter) at every row count equal to plain decoding, and nothing
changed off a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from talon.config import ConfigError
from talon.models import gpu_linear, gpu_rows_kernel
from talon.models.gpu_linear import (
    GPU_LINEAR_ENV,
    LT,
    MEASURED_ROWS,
    RowLinear,
    choose_for,
    choose_rows,
    gpu_linear_mode,
    lt_signature,
    use_row_linears,
)
from talon.runtime import graphs
from tests.test_tiny_engine import assert_head_method_equals_plain
from tests.tiny import random_head, tiny_target

ROOT = Path(__file__).resolve().parents[1]


def test_a_row_count_takes_the_choice_of_the_next_measured_count_above_it():
    layer = RowLinear(nn.Linear(8, 4, bias=False), ways={4: LT, 8: "k1", 64: LT}, up_to=128)
    ways = {rows: layer._way[rows] for rows in range(1, 200) if rows < len(layer._way) and layer._way[rows]}
    assert ways == {3: LT, 4: LT, **dict.fromkeys(range(5, 9), "k1"), **dict.fromkeys(range(33, 65), LT)}


@pytest.mark.parametrize("ways", [{}, dict.fromkeys(MEASURED_ROWS, LT)])
def test_a_row_linear_computes_the_linear_at_every_row_count(ways):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40, bias=False)
    layer = RowLinear(linear, ways=ways, up_to=MEASURED_ROWS[-1])
    assert layer.weight is linear.weight and layer.bias is None
    for rows in (1, 2, 5, 16, 33, 128, 300):
        x = torch.randn(1, rows, 24).transpose(0, 1)  # strided, as a transposed activation can be
        torch.testing.assert_close(layer(x), linear(x), rtol=1e-6, atol=1e-6)
        assert layer(x).shape == (rows, 1, 40)


def test_cuBLASLt_is_chosen_where_it_is_clearly_faster():
    """Timings alternate (cuBLAS, then the zero bias) per measured count; the choice needs MARGIN."""
    script = {2: (10.0, 4.0), 4: (10.0, 9.5), 8: (50.0, 5.0), 16: (9.0, 8.5), 32: (7.0, 9.0), 64: (8.0, 8.0)}
    script[128] = (20.0, 17.0)
    times = iter(t for rows in MEASURED_ROWS for t in script[rows])
    layer = RowLinear(nn.Linear(16, 8, bias=False))
    ways, measured = choose_rows(layer, timer=lambda fn: (fn(), next(times))[1])
    assert ways == {2: LT, 8: LT, 128: LT}
    assert measured[8] == {"cublas": 50.0, LT: 5.0}


def test_the_fastest_way_is_chosen_among_cuBLASLt_and_the_kernel_configurations(monkeypatch):
    """With the kernel, counts up to MAX_ROWS time cuBLAS, cuBLASLt, then each configuration (scripted
    here; the kernel itself is not called: ``rows_product`` is replaced), larger counts the two libraries."""
    configs = len(gpu_rows_kernel.CONFIGS)
    monkeypatch.setattr(gpu_rows_kernel, "rows_product", lambda x, w, config: x @ w.T)
    script = {
        2: (10.0, 4.0, *[5.0] * configs),  # cuBLASLt fastest
        4: (10.0, 6.0, 7.0, 3.0, *[8.0] * (configs - 2)),  # the second configuration
        8: (10.0, 9.5, *[9.2] * configs),  # nothing within MARGIN: cuBLAS
        16: (50.0, 5.0, *[4.0] * configs),  # a tie among configurations: the first
    }
    script |= {rows: (7.0, 9.0) for rows in MEASURED_ROWS if rows > gpu_rows_kernel.MAX_ROWS}
    times = iter(t for rows in MEASURED_ROWS for t in script[rows])
    layer = RowLinear(nn.Linear(16, 8, bias=False))
    ways, measured = choose_rows(layer, timer=lambda fn: (fn(), next(times))[1], kernel=True)
    assert ways == {2: LT, 4: "k1", 16: "k0"}
    assert list(measured[16]) == ["cublas", LT, *[f"k{i}" for i in range(configs)]]
    assert list(measured[32]) == ["cublas", LT]
    with pytest.raises(StopIteration):
        next(times)


def test_a_kernel_that_fails_to_run_is_left_out_with_a_warning(monkeypatch):
    """A Triton that cannot build the kernel must not stop the model loading: the libraries decide."""

    def broken(x, w, config):
        raise RuntimeError("no kernel here")

    monkeypatch.setattr(gpu_rows_kernel, "rows_product", broken)
    layer = RowLinear(nn.Linear(16, 8, bias=False))
    seconds = iter([10.0, 4.0] * len(MEASURED_ROWS))
    with pytest.warns(UserWarning, match="few-row kernel"):
        ways, measured = choose_rows(layer, timer=lambda fn: (fn(), next(seconds))[1], kernel=True)
    assert ways == dict.fromkeys(MEASURED_ROWS, LT)
    assert all(list(t) == ["cublas", LT] for t in measured.values())


def test_the_setting_is_checked_and_names_its_choices(monkeypatch):
    monkeypatch.delenv(GPU_LINEAR_ENV, raising=False)
    assert gpu_linear_mode() == "auto"
    monkeypatch.setenv(GPU_LINEAR_ENV, "LT")
    assert gpu_linear_mode() == "lt"
    monkeypatch.setenv(GPU_LINEAR_ENV, "cutlass")
    with pytest.raises(ConfigError, match="auto, blas, lt, cublas"):
        gpu_linear_mode()


@pytest.mark.parametrize("mode", ["auto", "blas", "lt", "cublas"])
def test_a_cpu_model_is_left_as_it_is(monkeypatch, mode):
    monkeypatch.setenv(GPU_LINEAR_ENV, mode)
    target = tiny_target()
    assert use_row_linears(target.model) == {}
    assert lt_signature(target.model) is None
    assert type(target.model.lm_head) is nn.Linear


@pytest.mark.parametrize("method", ["talon", "eagle2", "hybrid", "talon-auto"])
def test_every_method_with_the_zero_bias_path_on_static_runners_equals_its_plain_decoding(monkeypatch, method):
    """Every bias-less linear of the target and the head takes the zero-bias product at every row count
    above one (``lt`` mode, on the CPU's BLAS here): each method's greedy output equals plain decoding,
    which equals stock ``generate()``."""
    monkeypatch.setenv(graphs.GRAPHS_ENV, "eager")
    target = tiny_target()
    head = random_head(target)
    chosen = choose_for(target.model, "lt")
    choose_for(head, "lt")
    assert chosen[(64, 64)] == dict.fromkeys(MEASURED_ROWS, LT) and type(target.model.lm_head) is RowLinear
    assert "64x64:2,4,8,16,32,64,128" in lt_signature(target.model)
    rows_seen = []
    forward = RowLinear.forward

    def counted(self, x):
        rows_seen.append(x.numel() // self.in_features)
        return forward(self, x)

    monkeypatch.setattr(gpu_linear.RowLinear, "forward", counted)
    assert_head_method_equals_plain(target, head, method)
    assert {1, 16} <= set(rows_seen)  # a plain step's row and a padded tree's


def in_triton_interpreter(call: str) -> None:
    """Run ``call`` (a function of ``tests.interpreted_kernel``) in a fresh process with Triton's
    interpreter on: Triton reads the setting when it is imported, and importing torch imports it.
    Skipped where Triton is not installed (the CI's CPU install has none: the lent GPU's runs check
    the kernel there)."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", f"from tests import interpreted_kernel as k; k.{call}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_the_few_row_kernel_multiplies_in_float32_and_a_row_is_summed_alone():
    in_triton_interpreter("products_are_float32_and_row_alone()")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["talon", "talon-auto"])
def test_every_method_with_the_few_row_kernel_on_static_runners_equals_its_plain_decoding(method):
    in_triton_interpreter(f"method_equals_plain({method!r})")
