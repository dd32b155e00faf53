"""Fast tier: the kernel choices a load times are kept for the machine when they were timed on a quiet
one (``talon.models.kernel_store``), read back by later loads without timing, and timed again when the
key changes, the file is foreign or broken, or ``$TALON_RETIME_KERNELS`` asks."""

from __future__ import annotations

import functools
import json
import types

import pytest
from torch import nn

from talon.models import device, kernel_store, stream_gemm
from talon.models.cpu_linear import (
    WEIGHT_CODES_ENV,
    KernelChoices,
    PackedLinear,
    onednn_linear_works,
    pack_linears,
)
from tests.other_work import others_took

pytestmark = pytest.mark.skipif(not onednn_linear_works(), reason="no oneDNN linear op in this torch build")

WINNER = "stream" if stream_gemm.available() else "onednn"


def scripted_timings(mkl_rows: int):
    """``fastest_each`` scripted: ``WINNER`` the fastest packed kernel, MKL twice as fast as it up to
    ``mkl_rows`` rows; ``calls`` counts the timings asked for."""
    calls = []

    def fake(fns, reps=15):
        calls.append(len(fns))
        if isinstance(fns[0], functools.partial):  # choose_packed_kernel: run_products, one per kernel
            return [1.0 if fn.args[0][0].kernel == WINNER else 2.0 for fn in fns]
        rows = fns[0].__defaults__[0][0].shape[0]  # choose_small_row_kernel: mkl, then packed
        return [0.5 if fn.__name__ == "mkl" and rows <= mkl_rows else 1.0 for fn in fns]

    return fake, calls


def packed_model() -> nn.Module:
    model = nn.Sequential(nn.Linear(32, 48), nn.Linear(48, 32), nn.Linear(32, 48))
    assert pack_linears(model) == 3
    return model


def laid_out(model: nn.Module) -> tuple[set[str], set[int]]:
    layers = [m for m in model.modules() if isinstance(m, PackedLinear)]
    return {m.packed.kernel for m in layers}, {m.plain_rows for m in layers}


@pytest.fixture
def store(monkeypatch, tmp_path):
    monkeypatch.setattr(kernel_store, "cache_root", lambda: tmp_path)
    monkeypatch.delenv(kernel_store.RETIME_ENV, raising=False)
    monkeypatch.setattr("talon.models.cpu_linear.same_outputs", lambda a, b: False)
    return tmp_path


def test_a_choice_timed_on_a_quiet_machine_is_kept_and_later_loads_read_it_without_timing(monkeypatch, store):
    fake, calls = scripted_timings(mkl_rows=2)
    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", fake)
    monkeypatch.setattr(device, "OtherWork", others_took(0.02))
    first = packed_model()
    KernelChoices(persist=True).lay_out(first)
    assert laid_out(first) == ({WINNER}, {2}) and calls
    [kept] = (store / kernel_store.CHOICES_DIR).iterdir()
    record = json.loads(kept.read_text())
    assert (record["kernel"], record["plain_rows"], record["other_share"]) == (WINNER, 2, 0.02)

    def no_timing(fns, reps=15):
        raise AssertionError("a kept choice is read, not timed")

    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", no_timing)
    second = packed_model()
    KernelChoices(persist=True).lay_out(second)  # another process: nothing in memory
    assert laid_out(second) == ({WINNER}, {2})

    monkeypatch.setenv(kernel_store.RETIME_ENV, "1")  # asked to time again: it does, and replaces the choice
    fake, calls = scripted_timings(mkl_rows=0)
    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", fake)
    third = packed_model()
    KernelChoices(persist=True).lay_out(third)
    assert calls and laid_out(third) == ({WINNER}, {0})
    assert json.loads(kept.read_text())["plain_rows"] == 0


def test_a_choice_timed_with_float32_weights_is_not_read_where_the_weights_stream_as_codes(monkeypatch, store):
    """Where TALON's kernel streams codes, a quarter of the bytes moves where PyTorch's linear stops being
    faster: a choice timed with ``$TALON_WEIGHT_CODES=off`` is timed again with codes, and kept apart."""
    fake, calls = scripted_timings(mkl_rows=2)
    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", fake)
    monkeypatch.setattr(device, "OtherWork", others_took(0.0))
    monkeypatch.setenv(WEIGHT_CODES_ENV, "off")
    KernelChoices(persist=True).lay_out(packed_model())
    timed = len(calls)
    monkeypatch.setenv(WEIGHT_CODES_ENV, "auto")
    fake, calls = scripted_timings(mkl_rows=0)
    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", fake)
    with_codes = packed_model()
    KernelChoices(persist=True).lay_out(with_codes)
    assert timed and calls and laid_out(with_codes) == ({WINNER}, {0})
    assert len(list((store / kernel_store.CHOICES_DIR).iterdir())) == 2


@pytest.mark.parametrize("share", [0.5, device.QUIET_SHARE, None])
def test_a_choice_timed_while_others_worked_serves_its_own_process_only(monkeypatch, store, share):
    """Others took half the machine, exactly the limit, or it could not be told (no ``/proc``): nothing
    is kept, and the next process times again; this one keeps its choice in memory."""
    fake, calls = scripted_timings(mkl_rows=1)
    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", fake)
    monkeypatch.setattr(device, "OtherWork", others_took(share))
    choices = KernelChoices(persist=True)
    choices.lay_out(packed_model())
    assert not (store / kernel_store.CHOICES_DIR).exists()
    timed = len(calls)
    choices.lay_out(packed_model())
    assert len(calls) == timed  # the same process: from memory
    KernelChoices(persist=True).lay_out(packed_model())
    assert len(calls) > timed  # another process: timed again


def test_without_persist_nothing_is_read_or_kept(monkeypatch, store):
    fake, calls = scripted_timings(mkl_rows=1)
    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", fake)
    monkeypatch.setattr(device, "OtherWork", others_took(0.0))
    KernelChoices().lay_out(packed_model())
    assert calls and not (store / kernel_store.CHOICES_DIR).exists()


def test_a_broken_or_foreign_file_is_timed_again(monkeypatch, store):
    key = kernel_store.machine_key(("layers",), "kernel")
    kernel_store.store_choice(key, "stream", 1, 0.0)
    assert kernel_store.cached_choice(key) == ("stream", 1)
    path = kernel_store.choice_path(key)
    record = json.loads(path.read_text())
    for broken in ("{not json", json.dumps({**record, "key": {**key, "cpu": "another CPU"}}),
                   json.dumps({**record, "plain_rows": -1}), json.dumps({**record, "kernel": "cublas"}),
                   json.dumps({k: v for k, v in record.items() if k != "kernel"})):  # fmt: skip
        path.write_text(broken)
        assert kernel_store.cached_choice(key) is None


def test_the_key_names_the_cpu_pytorch_the_kernels_the_shapes_and_a_set_openmp_wait(monkeypatch):
    for name in device.OPENMP_WAIT_ENV:
        monkeypatch.delenv(name, raising=False)
    base = kernel_store.machine_key(("layers",), "kernel")
    assert "openmp_wait" not in base  # choices timed under the default wait keep the keys they had
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # the app's
    passive = kernel_store.machine_key(("layers",), "kernel")
    assert passive != base and passive["openmp_wait"] == "OMP_WAIT_POLICY=PASSIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert kernel_store.machine_key(("other layers",), "kernel") != base
    assert kernel_store.machine_key(("layers",), "another revision") != base
    monkeypatch.setattr(kernel_store, "cpu_identity", lambda: "another CPU")
    assert kernel_store.machine_key(("layers",), "kernel") != base
    monkeypatch.undo()
    monkeypatch.setattr(kernel_store.torch, "__version__", "0.0")
    assert kernel_store.machine_key(("layers",), "kernel") != base


@pytest.mark.parametrize(("others", "quiet"), [(0.05, True), (0.2, False)])
def test_other_work_is_every_core_s_busy_time_less_this_process_s(monkeypatch, others, quiet):
    """Scripted ``/proc`` readings over 2 s: the machine's busy ticks (steal included) grew by this
    process's ticks plus ``others`` of every core's time."""
    available = 2.0 * device.os.sysconf("SC_CLK_TCK") * device.os.cpu_count()
    readings = iter([(1000, 400), (1000 + 300 + round(others * available), 400 + 300)])
    clock = iter([10.0, 12.0])
    monkeypatch.setattr(device, "_busy_ticks", lambda: next(readings))
    monkeypatch.setattr(device, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    with device.OtherWork() as work:
        pass
    assert work.share == pytest.approx(others, abs=1 / available) and work.quiet is quiet


def test_without_proc_the_share_is_unknown_and_not_quiet(monkeypatch):
    monkeypatch.setattr(device, "_busy_ticks", lambda: None)
    with device.OtherWork() as work:
        pass
    assert work.share is None and not work.quiet


def test_this_machine_s_proc_is_read():
    """On Linux both readings exist: whole tick counts."""
    start = device._busy_ticks()
    if start is None:
        pytest.skip("no /proc here")
    assert all(isinstance(v, int) and v >= 0 for v in start)
