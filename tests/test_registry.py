"""Fast tier: the model registry (one lock per entry) and heads cached by the target's weights, on tiny
models saved to temporary directories."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from talon.drafters.factory import draft_model, parse_drafter_spec, shipped_or_given_head
from talon.drafters.head_model import DraftHead, HeadConfig
from talon.models import registry as registry_module
from talon.models.loaded import ModelLoadError
from talon.models.loading import load_model
from talon.models.registry import ModelRegistry
from tests.tiny import tiny_target


def test_a_slow_load_blocks_only_its_own_entry():
    registry = ModelRegistry()
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(10)
        return "slow"

    worker = threading.Thread(target=lambda: registry.get_derived("slow", slow))
    worker.start()
    assert started.wait(5)
    t0 = time.perf_counter()
    assert registry.get_derived("fast", lambda: "fast") == "fast"
    assert registry.error("slow") is None and registry.loaded() == []
    assert time.perf_counter() - t0 < 1.0
    release.set()
    worker.join(5)
    assert registry.get_derived("slow", lambda: pytest.fail("loaded twice")) == "slow"


def test_a_failed_load_is_reported_and_retried():
    registry = ModelRegistry()
    calls = []

    def fail():
        calls.append(1)
        raise ModelLoadError("nope: do this instead")

    for _ in range(2):
        with pytest.raises(ModelLoadError):
            registry.get_derived("bad", fail)
    assert registry.error("bad") == "nope: do this instead" and len(calls) == 2


def test_heads_are_cached_by_the_targets_weights_not_its_name(tmp_path):
    """Two local directories both named ``model`` hold different targets: a head trained for the first
    is refused for the second, never handed out from the first one's cache entry."""
    paths = []
    for k, seed in enumerate((0, 1)):
        path = tmp_path / f"dir{k}" / "model"
        tiny = tiny_target(seed)
        tiny.model.save_pretrained(path)
        tiny.tokenizer.save_pretrained(path)
        paths.append(path)
    registry = ModelRegistry(torch.device("cpu"), torch.float32)
    first, second = (registry.get(str(p)) for p in paths)
    assert first.name == second.name == "model" and first.identity != second.identity
    torch.manual_seed(0)
    DraftHead(HeadConfig.for_target(first)).save(tmp_path / "head")
    head, _ = shipped_or_given_head(str(tmp_path / "head"), first, registry)
    assert shipped_or_given_head(str(tmp_path / "head"), first, registry)[0] is head  # loaded once
    with pytest.raises(ModelLoadError, match="trained for"):
        shipped_or_given_head(str(tmp_path / "head"), second, registry)


def test_a_self_drafters_copy_is_made_once_a_target_so_its_runners_are_shared(tmp_path):
    """``layers:K`` drafters of one target share one truncated copy (its pool of static runners: a run's
    drafter takes the runner the run before gave back); the target's stock twin, with the same weights'
    identity, gets its own copy of its own layers."""
    tiny = tiny_target(2, layers=3)
    tiny.model.save_pretrained(tmp_path / "m")
    tiny.tokenizer.save_pretrained(tmp_path / "m")
    registry = ModelRegistry(torch.device("cpu"), torch.float32)
    target, stock = registry.get(str(tmp_path / "m")), registry.get_stock(str(tmp_path / "m"))
    spec = parse_drafter_spec("layers:1")
    first = draft_model(spec, target, registry)
    assert draft_model(spec, target, registry) is first and first.runners is draft_model(spec, target, registry).runners
    assert draft_model(parse_drafter_spec("layers:2"), target, registry) is not first
    twin = draft_model(spec, stock, registry)
    assert twin is not first and twin.model.model.layers[0] is stock.model.model.layers[0]
    assert first.model.model.layers[0] is target.model.model.layers[0]


def test_a_local_directory_loads_with_its_resolved_path_as_identity(tmp_path):
    tiny = tiny_target(3)
    tiny.model.save_pretrained(tmp_path / "m")
    tiny.tokenizer.save_pretrained(tmp_path / "m")
    lm = load_model(str(tmp_path / "m"), device=torch.device("cpu"), dtype=torch.float32)
    assert lm.identity == str((tmp_path / "m").resolve())
    ids = torch.tensor([[5, 6, 7]])
    assert torch.allclose(lm.model(ids).logits, tiny.model(ids).logits, atol=1e-5)  # packed layers: float32 too


def test_past_its_cap_the_registry_lets_the_least_recently_used_model_go_with_its_heads(tmp_path, monkeypatch):
    """A shared app keeps at most ``max_models`` models: a new one lets the least recently used go (never a
    pinned one) before it loads, and the heads loaded for it go with it; asked again, it loads again."""
    paths = []
    for k in range(3):
        path = tmp_path / f"m{k}"
        tiny = tiny_target(k)
        tiny.model.save_pretrained(path)
        tiny.tokenizer.save_pretrained(path)
        paths.append(str(path))
    registry = ModelRegistry(torch.device("cpu"), torch.float32, max_models=2, pinned=(paths[0],))
    held_while_loading = []
    load = registry_module.load_model

    def recording_load(spec, **kwargs):
        held_while_loading.append(sorted(registry.loaded()))
        return load(spec, **kwargs)

    monkeypatch.setattr(registry_module, "load_model", recording_load)
    pinned, second = registry.get(paths[0]), registry.get(paths[1])
    torch.manual_seed(0)
    DraftHead(HeadConfig.for_target(second)).save(tmp_path / "head")
    head, _ = shipped_or_given_head(str(tmp_path / "head"), second, registry)
    registry.get(paths[0])  # the pinned one used last: the second is still the one to let go
    registry.get(paths[2])
    assert sorted(registry.loaded()) == sorted([paths[0], paths[2]])
    assert held_while_loading[-1] == [paths[0]]  # the second went before the third loaded, not after
    assert registry.get(paths[0]) is pinned  # never let go
    assert registry.get(paths[1]) is not second  # loaded again...
    assert (
        shipped_or_given_head(str(tmp_path / "head"), registry.get(paths[1]), registry)[0] is not head
    )  # ... its head too
    assert sorted(registry.loaded()) == sorted([paths[0], paths[1]])  # m2, least recently used, went


def test_a_head_reading_a_layer_its_target_lacks_is_refused_at_load(tmp_path):
    """A head_config.json naming hidden states past the target's last loaded, then failed at the first step
    with an IndexError; it is refused at load with the layers it names."""
    import json

    from talon.drafters.head_model import HEAD_CONFIG, load_head

    target = tiny_target(0)
    DraftHead(HeadConfig.for_target(target)).save(tmp_path / "head")
    meta = json.loads((tmp_path / "head" / HEAD_CONFIG).read_text())
    meta["feature_layers"] = [1, 2, target.model.config.num_hidden_layers + 3]
    (tmp_path / "head" / HEAD_CONFIG).write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match="reads features"):
        load_head(tmp_path / "head", target)


def test_a_mistyped_drafter_name_is_told_the_built_in_ones():
    """``--drafter heads`` was looked up as a Hub id and refused as one; a bare word now also lists the
    built-in drafters, while a path or an owner/name id keeps the load's own message."""
    from talon.drafters.factory import BUILT_IN_DRAFTERS, DRAFTER_HELP, NotADrafter, make_drafter

    target = tiny_target(4)
    with pytest.raises(NotADrafter, match=r"^Not a built-in drafter \(head, head:DIR_OR_HUB_ID, ") as err:
        make_drafter("heads", target, ModelRegistry())
    assert all(form in str(err.value) and f"'{form}'" in DRAFTER_HELP for form, _ in BUILT_IN_DRAFTERS)
    with pytest.raises(ModelLoadError) as err:
        make_drafter("someorg/some-model", target, ModelRegistry())
    assert "built-in" not in str(err.value) and not isinstance(err.value, NotADrafter)
