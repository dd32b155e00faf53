"""Test tiers: plain tests are fast unit tests (no model); ``engine`` tests load the real embedded
model; ``app`` tests launch the Gradio app; ``slow`` ones take seconds each, or are the cases of a
tiny-model matrix the fast tier leaves out (``tests/tiers.py``); ``thorough`` ones (the largest
statistical checks) are left out of CI.  Fast tier:
``pytest -n 2 -m "not engine and not app and not slow and not thorough"`` (the README lists every tier)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach for the network


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (both stages of the test command run ``-n 2``) each worker computes on one
    thread: two workers of two threads each on a 2-core machine spend their time contending (the fast
    tier: 49 s against 35 s on the Zen 4).  The second stage gains more: its app and browser tests spend
    much of their time waiting on a server or a page (24 min against 38 on the AVX2 EPYC)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def settled_vector_math():
    """MKL's vector math settled before any test computes (``talon.models.vector_math``): the tests'
    tiny models are built without a load, which does it for the app and the benchmarks."""
    from talon.models.vector_math import warm_vector_math

    warm_vector_math()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on the test (``item.rep_call``), for fixtures that explain a failure."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session", autouse=True)
def private_cost_curves(tmp_path_factory):
    """Tests measure and store cost curves (the browser test measures the machine again): they go to a
    copy of the user's cached curves, so a test run never replaces the curve the app and the benchmarks
    size trees by with one measured while tests load the machine.  A test that sets ``$TALON_CACHE_DIR``
    gets that directory, as the app would."""
    import shutil
    from pathlib import Path

    from talon.models.embedded import cache_root
    from talon.runtime import cost_curve

    root = tmp_path_factory.mktemp("curve-cache")
    real = cache_root() / cost_curve.CURVES_DIR
    if real.is_dir():
        shutil.copytree(real, root / cost_curve.CURVES_DIR)
    at_start = os.environ.get("TALON_CACHE_DIR")

    def curve_root() -> Path:
        """The private copy, unless a test has pointed ``$TALON_CACHE_DIR`` somewhere of its own."""
        now = os.environ.get("TALON_CACHE_DIR")
        return Path(now) if now is not None and now != at_start else root

    patch = pytest.MonkeyPatch()
    patch.setattr(cost_curve, "cache_root", curve_root)
    yield root
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def private_kernel_choices(tmp_path_factory):
    """Kernel choices timed in tests (on one thread each, two workers at once) are kept in a directory of
    the test run's own, never beside the user's models."""
    from talon.models import kernel_store

    root = tmp_path_factory.mktemp("kernel-choices")
    patch = pytest.MonkeyPatch()
    patch.setattr(kernel_store, "cache_root", lambda: root)
    yield root
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def quick_cost_curves():
    """Curves measured in tests (on first use, or when the browser test measures again) take 2 rounds
    after the warm-up, not ``ROUNDS``: tests check that a curve is measured, cached, shown and used, the
    benchmarks how well it prices (8 rounds on one thread took about a minute on the AVX2 EPYC)."""
    from talon.engine import cost_measure

    patch = pytest.MonkeyPatch()
    patch.setattr(cost_measure, "ROUNDS", 2)
    yield
    patch.undo()


@pytest.fixture(scope="session")
def target():
    """The embedded SmolLM2-135M-Instruct, float32 on CPU (converted once into the cache)."""
    import torch

    from talon.models.loading import load_model

    torch.manual_seed(0)
    return load_model("embedded", device=torch.device("cpu"), dtype=torch.float32)


@pytest.fixture(scope="session")
def app_url():
    """The app, launched once in this process on a free port."""
    from tests.app_server import launch_app

    demo, url = launch_app()
    yield url
    demo.close()
    # Let model work still queued or running finish: a daemon worker thread inside torch when the
    # interpreter exits aborts the process ("terminate called without an active exception").
    import time

    from ui.compute import COMPUTE

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(COMPUTE.load()[k] for k in ("running", "waiting")):
        time.sleep(0.2)
