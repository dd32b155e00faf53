"""Few-row linears through cuBLASLt on a GPU (``talon.models.gpu_linear``), checked on the CPU: the
choice per row count from timings, the wrapped layers' values, every method on static runners with the
zero-bias path at every row count equal to plain decoding, and nothing changed off a GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from talon.config import ConfigError
from talon.models import gpu_linear
from talon.models.gpu_linear import (
    GPU_LINEAR_ENV,
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
from tests.tiers import fast_only
from tests.tiny import random_head, tiny_target


def test_a_row_count_takes_the_choice_of_the_next_measured_count_above_it():
    layer = RowLinear(nn.Linear(8, 4, bias=False), lt_rows=(4, 8, 64), up_to=128)
    lt = [rows for rows in range(1, 200) if rows < len(layer._lt) and layer._lt[rows]]
    assert lt == [3, 4, 5, 6, 7, 8, *range(33, 65)]  # 1 row never; past 128 PyTorch's own


@pytest.mark.parametrize("lt_rows", [(), MEASURED_ROWS])
def test_a_row_linear_computes_the_linear_at_every_row_count(lt_rows):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40, bias=False)
    layer = RowLinear(linear, lt_rows=lt_rows, up_to=MEASURED_ROWS[-1])
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
    lt_rows, measured = choose_rows(layer, timer=lambda fn: (fn(), next(times))[1])
    assert lt_rows == (2, 8, 128)
    assert measured[8] == (50.0, 5.0)


def test_the_setting_is_checked_and_names_its_choices(monkeypatch):
    monkeypatch.delenv(GPU_LINEAR_ENV, raising=False)
    assert gpu_linear_mode() == "auto"
    monkeypatch.setenv(GPU_LINEAR_ENV, "LT")
    assert gpu_linear_mode() == "lt"
    monkeypatch.setenv(GPU_LINEAR_ENV, "cutlass")
    with pytest.raises(ConfigError, match="auto, lt, cublas"):
        gpu_linear_mode()


@pytest.mark.parametrize("mode", ["auto", "lt", "cublas"])
def test_a_cpu_model_is_left_as_it_is(monkeypatch, mode):
    monkeypatch.setenv(GPU_LINEAR_ENV, mode)
    target = tiny_target()
    assert use_row_linears(target.model) == {}
    assert lt_signature(target.model) is None
    assert type(target.model.lm_head) is nn.Linear


KERNEL_METHODS = ["talon", "eagle2", "hybrid", "talon-auto"]


@pytest.mark.parametrize("method", fast_only(("talon-auto",), KERNEL_METHODS, KERNEL_METHODS))
def test_every_method_with_the_zero_bias_path_on_static_runners_equals_its_plain_decoding(monkeypatch, method):
    """Every bias-less linear of the target and the head takes the zero-bias product at every row count
    above one (``lt`` mode, on the CPU's BLAS here): each method's greedy output equals plain decoding,
    which equals stock ``generate()``."""
    monkeypatch.setenv(graphs.GRAPHS_ENV, "eager")
    target = tiny_target()
    head = random_head(target)
    chosen = choose_for(target.model, "lt")
    choose_for(head, "lt")
    assert chosen[(64, 64)] == MEASURED_ROWS and type(target.model.lm_head) is RowLinear
    assert "64x64:2,4,8,16,32,64,128" in lt_signature(target.model)
    rows_seen = []
    forward = RowLinear.forward

    def counted(self, x):
        rows_seen.append(x.numel() // self.in_features)
        return forward(self, x)

    monkeypatch.setattr(gpu_linear.RowLinear, "forward", counted)
    assert_head_method_equals_plain(target, head, method)
    assert {1, 16} <= set(rows_seen)  # a plain step's row and a padded tree's
