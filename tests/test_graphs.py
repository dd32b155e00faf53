"""The static-shape forward path that CUDA graphs replay (``talon.runtime.graphs``), run eagerly on the
CPU (``TALON_CUDA_GRAPHS=eager``): padded queries, whole-buffer attention, index writes.  What a graph
replays is exactly this computation, so these tests check its logic; the capture itself needs a GPU
(docs/benchmarks.md has the CUDA runs)."""

from __future__ import annotations

import pytest
import torch

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.head import HeadDrafter
from talon.drafters.model import ModelDrafter
from talon.engine.cost_measure import measure_curve
from talon.engine.decode import run_to_end
from talon.runtime import graphs
from talon.runtime.graphs import BUCKETS, StaticRunner, capacity_for, spans_for, static_mode
from talon.runtime.kv_cache import CachedLM
from tests.test_tiny_engine import (
    METHODS,
    NEW_TOKENS,
    PROMPT_SEEDS,
    assert_head_method_equals_plain,
    curve_of,
    random_tree,
)
from tests.tiers import fast_only
from tests.tiny import greedy_generate, greedy_references, prompt_ids, random_head, tiny_target


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.fixture(scope="module")
def head(target):
    return random_head(target)


@pytest.fixture(scope="module")
def reference(target):
    return greedy_references(target, PROMPT_SEEDS, NEW_TOKENS)


@pytest.fixture
def static(monkeypatch):
    """Turn the static path on (eagerly) and count the forwards that take it."""
    monkeypatch.setenv(graphs.GRAPHS_ENV, "eager")
    calls = []
    forward = StaticRunner.forward

    def counted(self, fn, shape, length, ids, *args, **kwargs):
        calls.append((shape[0], ids.shape[0]))
        return forward(self, fn, shape, length, ids, *args, **kwargs)

    monkeypatch.setattr(StaticRunner, "forward", counted)
    return calls


def test_mode_and_sizes(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv(graphs.GRAPHS_ENV, raising=False)
    assert static_mode(cpu) is None and static_mode(cuda) == "graph"
    monkeypatch.setenv(graphs.GRAPHS_ENV, "0")
    assert static_mode(cuda) is None
    monkeypatch.setenv(graphs.GRAPHS_ENV, "eager")
    assert static_mode(cpu) == "eager"
    assert capacity_for(100) == 1024 and capacity_for(1024 - BUCKETS[-1]) == 1024
    assert capacity_for(1024 - BUCKETS[-1] + 1) == 2048 and capacity_for(10_000) is None


def test_padded_tree_forward_equals_the_eager_forward(target, static):
    """A 14-node tree after a 12-token prompt, padded to 16 rows over a 1024-row buffer: the same
    hidden states as the eager forward over exactly the rows in use, on three consecutive steps (each
    commits a path, so writes land at moving offsets)."""
    eager, padded = CachedLM(target), CachedLM(target, rows=200)
    assert eager.runner is None and padded.runner is not None
    prefix = prompt_ids(1)
    for cache in (eager, padded):
        cache.extend_committed(prefix[:-1], logit_rows=None)
    root = prefix[-1]
    for step in range(3):
        tree = random_tree(step, root, size=13)
        outs = [
            cache.forward_nodes(tree, range(len(tree)), cache.committed_len, logit_rows="all")
            for cache in (eager, padded)
        ]
        torch.testing.assert_close(outs[1].hidden, outs[0].hidden, atol=2e-5, rtol=1e-5)
        assert torch.equal(outs[1].logits.argmax(-1), outs[0].logits.argmax(-1))
        path = tree.path_to(len(tree) - 1)
        for cache in (eager, padded):
            cache.commit_nodes(path)
        root = int(outs[0].logits[path[-1]].argmax())
    assert static == [(16, 11)] + [(16, 14)] * 3  # the prompt (11 rows), then the trees


STATIC_CASES = [(m, "sync") for m in METHODS] + [("talon", "async"), ("hybrid", "async")]


@pytest.mark.parametrize(
    ("method", "execution"),
    fast_only(("talon-auto-sync", "hybrid-async"), STATIC_CASES, [f"{m}-{e}" for m, e in STATIC_CASES]),
)
def test_every_method_on_static_runners_equals_generate(target, head, static, method, execution):
    # the eager path's tests (test_tiny_engine.py) take all three prompts
    assert_head_method_equals_plain(target, head, method, PROMPT_SEEDS[:2], NEW_TOKENS, execution)
    assert static, "the static path was not taken"


def test_autoregressive_and_a_model_drafter_on_static_runners(target, reference, static):
    for seed in PROMPT_SEEDS:
        assert (
            run_to_end(
                target,
                None,
                TreeConfig(method="ar"),
                DecodeConfig(max_new_tokens=NEW_TOKENS),
                prompt_ids=prompt_ids(seed),
            ).output_ids
            == reference[seed]
        )
        trace = run_to_end(
            target,
            ModelDrafter(target),
            METHODS["chain"],
            DecodeConfig(max_new_tokens=NEW_TOKENS),
            prompt_ids=prompt_ids(seed),
        )
        assert trace.output_ids == reference[seed]
    assert {size for size, _ in static} >= {1, 8}


def test_sampling_on_static_runners_equals_the_autoregressive_sample(target, head, static, monkeypatch):
    """The reference is plain sampling without the static path (set against the path under test)."""
    config = DecodeConfig(temperature=0.9, seed=5, max_new_tokens=NEW_TOKENS)
    monkeypatch.setenv(graphs.GRAPHS_ENV, "0")
    ar = run_to_end(target, None, TreeConfig(method="ar"), config, prompt_ids=prompt_ids(2)).output_ids
    assert not static
    monkeypatch.setenv(graphs.GRAPHS_ENV, "eager")
    for execution in ("sync", "async"):
        trace = run_to_end(
            target,
            HeadDrafter(head, target),
            METHODS["talon"],
            DecodeConfig(temperature=0.9, seed=5, max_new_tokens=NEW_TOKENS, execution=execution),
            prompt_ids=prompt_ids(2),
        )
        assert trace.output_ids == ar and static  # the tree run took the static path


def test_runs_reuse_runners_and_never_see_the_last_runs_rows(head, static):
    """A finished run gives its runners back; the next run takes the same ones (their buffers still
    hold the last run's rows, which the mask hides): outputs as on fresh runners."""
    fresh = tiny_target()
    outputs, runners = [], []
    for seed in (1, 2, 1):
        drafter = HeadDrafter(head, fresh)
        trace = run_to_end(
            fresh, drafter, METHODS["talon"], DecodeConfig(max_new_tokens=NEW_TOKENS), prompt_ids=prompt_ids(seed)
        )
        outputs.append(trace.output_ids)
        runners.append({key: list(idle) for key, idle in fresh.runners._idle.items()})
    assert outputs[0] == outputs[2] == greedy_generate(fresh, prompt_ids(1), NEW_TOKENS)
    assert len(runners[0]) == 2 and all(len(idle) == 1 for idle in runners[0].values())  # target's and head's
    assert runners[0] == runners[1] == runners[2]


def test_a_run_longer_than_every_runner_stays_eager(target, monkeypatch, static):
    monkeypatch.setattr(graphs, "CAPACITIES", (64,))
    trace = run_to_end(
        target, ModelDrafter(target), METHODS["chain"], DecodeConfig(max_new_tokens=8), prompt_ids=prompt_ids(1)
    )
    assert trace.output_ids == greedy_generate(target, prompt_ids(1), 8) and static == []


@pytest.mark.parametrize(
    "cfg",
    fast_only(
        ["static tree past the budget"],
        [
            TreeConfig(
                method="static",
                static_paths=tuple((r,) for r in range(64)) + tuple((r, s) for r in range(64) for s in range(15)),
            ),
            TreeConfig(method="eagle2", budget=4, topk=64, depth=20),
        ],
        ["static tree past the budget", "eagle2 expanding past the budget"],
    ),
)
def test_trees_holding_more_rows_than_the_budget_fit_the_static_buffers(target, static, cfg):
    """An explicit static tree of 1,024 nodes (budget 16), and EAGLE-2 feeding its drafter 64 nodes a layer
    over 19 layers while verifying 4: the fixed buffers were sized by the budget and overflowed ("a fixed KV
    buffer of 1024 rows cannot hold 1036"); they are sized for the rows now, or the run stays eager."""
    trace = run_to_end(
        target, ModelDrafter(target), cfg, DecodeConfig(max_new_tokens=24), prompt_ids=prompt_ids(1), texts=False
    )
    assert trace.output_ids == greedy_generate(target, prompt_ids(1), 24)


def test_cheapest_bucket_moves_rows_only_to_a_clearly_cheaper_larger_bucket():
    # the H200's float32 shape: 8 and 16 rows slower than 32
    ms = {1: 6.6, 2: 7.8, 4: 7.8, 8: 11.0, 16: 11.5, 32: 8.7, 64: 9.3, 128: 9.5}
    seconds = [(size, t / 1000) for size, t in ms.items()]

    def chosen(timings):
        return {size: graphs.cheapest_bucket(timings[i:]) for i, (size, _) in enumerate(timings)}

    assert chosen(seconds) == {1: 1, 2: 2, 4: 4, 8: 32, 16: 32, 32: 32, 64: 64, 128: 128}
    near = [(8, 10e-3), (16, 9.6e-3), (32, 9e-3)]  # 16 is within 5 % of 8
    assert chosen(near) == {8: 32, 16: 32, 32: 32}
    head = [(1, 0.30e-3), (2, 0.25e-3), (4, 0.22e-3)]  # a head's replays: 25 % apart but under 0.1 ms
    assert chosen(head) == {1: 1, 2: 2, 4: 4}
    rising = [(size, float(size)) for size in BUCKETS]
    assert chosen(rising) == {size: size for size in BUCKETS}


def prefer_64(runner: StaticRunner) -> dict:
    """Replay times under which the 64-row graph is the cheapest at every span (as on a GPU whose small
    buckets replay slower)."""
    return {(size, span): (1.0 if size == 64 else 2.0) for size in BUCKETS for span in runner.spans}


def test_rows_run_in_a_larger_bucket_compute_the_same_tokens(target, static):
    """Trees run in the cheaper larger bucket (here every size in the 64-row graph): the same hidden
    rows and the same greedy tokens, and near the buffer's end, where the larger bucket does not fit,
    the smallest one."""
    with torch.inference_mode():  # the pool's runners were made in runs, under inference mode
        cache = CachedLM(target, rows=200)
        runner = cache.runner
        runner.replay_seconds = prefer_64(runner)
        assert runner.bucket(0, 5) == (64, 256) and runner.bucket(runner.kv.capacity - 10, 5) == (8, 1024)
        assert runner.bucket(200, 5) == (64, 512) and runner.bucket(runner.kv.capacity - 3, 5) is None
        eager = CachedLM(target)
        prefix = prompt_ids(1)
        outs = [c.extend_committed(prefix, logit_rows="all") for c in (eager, cache)]
    torch.testing.assert_close(outs[1].hidden, outs[0].hidden, atol=2e-5, rtol=1e-5)
    assert static == [(64, len(prefix))]
    cache.release()
    runner.replay_seconds = {}  # the pool's runner goes back as it came

    original = StaticRunner.capture_all

    def capture_then_prefer_64(self, fn):
        original(self, fn)
        self.replay_seconds = prefer_64(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(StaticRunner, "capture_all", capture_then_prefer_64)
        fresh = tiny_target()  # a fresh pool: its runners are made (and "timed") under the patch
        for seed in PROMPT_SEEDS[:2]:
            trace = run_to_end(
                fresh,
                HeadDrafter(random_head(fresh), fresh),
                METHODS["talon"],
                DecodeConfig(max_new_tokens=NEW_TOKENS),
                prompt_ids=prompt_ids(seed),
                cost_curve=curve_of(METHODS["talon"]),
            )
            assert trace.output_ids == greedy_generate(fresh, prompt_ids(seed), NEW_TOKENS)
    assert {size for size, _ in static[1:]} == {64}


def test_forwards_attend_over_the_smallest_span_holding_their_rows(target, static, monkeypatch):
    """Trees after contexts of 100, 300 and 700 tokens read keys ``[0, 256)``, ``[0, 512)`` and the
    whole 1,024-row buffer, and compute what the eager forward over exactly the rows in use does."""
    assert spans_for(1024) == (256, 512, 1024) and spans_for(2048)[-1] == 2048 and spans_for(64) == (64,)
    spans = []
    forward = StaticRunner.forward

    def recorded(self, fn, shape, *args, **kwargs):
        spans.append(shape[1])
        return forward(self, fn, shape, *args, **kwargs)

    monkeypatch.setattr(StaticRunner, "forward", recorded)
    g = torch.Generator().manual_seed(3)
    for context in (100, 300, 700):
        prefix = torch.randint(2, 64, (context,), generator=g).tolist()
        tree = random_tree(context, prefix[-1], size=13)
        with torch.inference_mode():  # the pool's runners were made in runs, under inference mode
            eager, padded = CachedLM(target), CachedLM(target, rows=context + 20)
            for cache in (eager, padded):
                cache.extend_committed(prefix[:-1], logit_rows=None)
            outs = [
                cache.forward_nodes(tree, range(len(tree)), cache.committed_len, logit_rows="all")
                for cache in (eager, padded)
            ]
        padded.release()
        torch.testing.assert_close(outs[1].hidden, outs[0].hidden, atol=2e-5, rtol=1e-5)
        assert torch.equal(outs[1].logits.argmax(-1), outs[0].logits.argmax(-1))
    assert spans == [256, 256, 512, 1024]  # the 99-row prompt, then the three trees (longer prompts ran eagerly)


def test_measuring_a_cost_curve_after_a_run_reuses_its_runners(head, static):
    """A run leaves its runners in the model's pool, made under inference mode; measuring the cost
    curve afterwards (the app's first auto-sized run after a fixed one, on a GPU) takes them and must
    write them under inference mode too (it raised "Inplace update to inference tensor")."""
    fresh = tiny_target()
    run_to_end(
        fresh,
        HeadDrafter(head, fresh),
        METHODS["talon"],
        DecodeConfig(max_new_tokens=4),
        prompt_ids=prompt_ids(1),
    )
    assert fresh.runners._idle, "the run left no runner in the pool"
    curve = measure_curve(fresh, HeadDrafter(head, fresh), reps=1, sizes=(1, 2, 4), widths=(1, 2))
    assert curve.verify_seconds(4) > 0 and curve.call_seconds(2) > 0
