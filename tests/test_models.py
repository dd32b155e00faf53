"""Model loading: the safetensors cache (detect and rebuild a bad one), loading from a local
directory, the offline Hub error, tokenizer checks, the truncated self-drafter."""

from __future__ import annotations

import copy
import multiprocessing
import os
import shutil
import time

import pytest
import torch

from talon.models import embedded
from talon.models.device import pick_device
from talon.models.embedded import cache_is_valid, embedded_model_dir, write_manifest
from talon.models.loaded import ModelLoadError
from talon.models.loading import check_same_tokenizer, load_model, truncated_copy


# ---- fast: the manifest check on tiny files --------------------------------------------------------
@pytest.fixture()
def tiny_cache(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "config.json").write_text("{}")
    write_manifest(tmp_path, source="test")
    return tmp_path


def test_float32_is_the_default_dtype_everywhere(monkeypatch):
    monkeypatch.delenv("TALON_DTYPE", raising=False)
    assert pick_device()[1] == torch.float32  # also on a GPU: exact greedy equality needs it
    monkeypatch.setenv("TALON_DTYPE", "bfloat16")
    assert pick_device()[1] == torch.bfloat16
    monkeypatch.setenv("TALON_DTYPE", "fp8")
    with pytest.raises(ModelLoadError, match="TALON_DTYPE"):
        pick_device()


def test_manifest_accepts_intact_cache(tiny_cache):
    assert cache_is_valid(tiny_cache)


def _slow_fake_conversion(gguf, target_dir, progress):
    """Stands in for the 30-50 s GGUF conversion: counts itself, then writes a cache as the real one does
    (a temporary folder renamed into place)."""
    with (target_dir.parent / "conversions.log").open("a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(1.0)
    tmp = target_dir.parent / f"tmp-{os.getpid()}"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes(b"weights")
    write_manifest(tmp, source=str(gguf))
    if target_dir.exists():
        shutil.rmtree(target_dir)
    tmp.rename(target_dir)


def _load_cache_dir(out):
    messages = []
    directory = embedded.embedded_model_dir(progress=messages.append)
    out.put((str(directory), cache_is_valid(directory), messages))


def test_two_processes_starting_together_convert_the_embedded_model_once(tmp_path, monkeypatch):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"gguf")
    cache = tmp_path / "cache"
    monkeypatch.setenv("TALON_CACHE_DIR", str(cache))
    monkeypatch.setattr(embedded, "embedded_gguf_path", lambda: gguf)
    monkeypatch.setattr(embedded, "_convert_embedded", _slow_fake_conversion)
    context = multiprocessing.get_context("fork")  # the children keep the patches above
    out = context.Queue()
    processes = [context.Process(target=_load_cache_dir, args=(out,)) for _ in range(2)]
    for p in processes:
        p.start()
    results = [out.get(timeout=30) for _ in processes]
    for p in processes:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert len((cache / "conversions.log").read_text().split()) == 1  # not converted twice
    assert {r[0] for r in results} == {str(cache / "smollm2-135m-instruct-4")}
    assert all(valid for _, valid, _ in results)
    waited = [m for _, _, messages in results for m in messages if "waiting" in m]
    assert len(waited) == 1  # the second one said why it waits


def test_manifest_rejects_truncated_file(tiny_cache):
    f = tiny_cache / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    assert not cache_is_valid(tiny_cache)


def test_manifest_rejects_flipped_byte(tiny_cache):
    f = tiny_cache / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[1000] ^= 0xFF
    f.write_bytes(bytes(data))
    assert not cache_is_valid(tiny_cache)


def test_manifest_rejects_missing_file_or_manifest(tiny_cache):
    (tiny_cache / "config.json").unlink()
    assert not cache_is_valid(tiny_cache)


def test_cache_without_manifest_is_invalid(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    assert not cache_is_valid(tmp_path)


# ---- engine: the real model ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved_copy(target, tmp_path_factory):
    """A local directory written by save_pretrained, as a Spaces user would have."""
    path = tmp_path_factory.mktemp("local_model")
    target.model.save_pretrained(path)
    target.tokenizer.save_pretrained(path)
    return path


def _logits(lm, ids=(1, 2, 3, 4, 5)):
    with torch.inference_mode():
        return lm.model(torch.tensor([list(ids)])).logits


@pytest.mark.engine
def test_load_from_local_directory(target, saved_copy):
    """The same weights, the same model, the same bits: a process lays a model's shapes out for the
    kernels it timed at their first load (``KernelChoices``), so under another process's load a second
    load does not pick others."""
    local = load_model(str(saved_copy), device=torch.device("cpu"), dtype=torch.float32)
    assert local.name == saved_copy.name
    theirs, ours = target.model.state_dict(), local.model.state_dict()
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    assert torch.equal(_logits(local), _logits(target))
    check_same_tokenizer(target, local)


@pytest.mark.engine
def test_local_directory_drafter(target, saved_copy):
    from talon.drafters.factory import make_drafter
    from talon.drafters.model import ModelDrafter

    drafter = make_drafter(str(saved_copy), target)
    assert isinstance(drafter, ModelDrafter)


@pytest.mark.engine
def test_directory_without_config_is_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(str(tmp_path))


@pytest.mark.engine
def test_hub_id_offline_fails_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="Hub cannot be reached.*Copy the model directory"):
        load_model("HuggingFaceTB/SmolLM2-1.7B-Instruct")


@pytest.mark.engine
def test_mismatched_tokenizer_is_refused(target):
    other_tok = copy.deepcopy(target.tokenizer)
    other_tok.add_tokens(["<talon-test-token>"])
    other = type(target)("other", target.model, other_tok, target.device, target.dtype)
    with pytest.raises(ModelLoadError, match="tokenizer"):
        check_same_tokenizer(target, other)


@pytest.mark.engine
def test_truncated_copy_shares_weights_and_matches_first_layers(target):
    draft = truncated_copy(target, 3)
    assert len(draft.model.model.layers) == 3 and len(target.model.model.layers) == 30
    assert draft.model.model.layers[0] is target.model.model.layers[0]
    assert draft.model.lm_head.weight.data_ptr() == target.model.lm_head.weight.data_ptr()
    with torch.inference_mode():
        ids = torch.tensor([[1, 2, 3, 4]])
        full = target.model(ids, output_hidden_states=True)
        # hidden_states[3] is the output of layer 3 before the final norm
        expected = target.model.lm_head(target.model.model.norm(full.hidden_states[3]))
        assert torch.allclose(draft.model(ids).logits, expected, atol=1e-4)


@pytest.mark.engine
@pytest.mark.slow
def test_corrupt_cache_is_rebuilt(target, tmp_path, monkeypatch):
    good = embedded_model_dir()
    monkeypatch.setenv("TALON_CACHE_DIR", str(tmp_path))
    copy_dir = tmp_path / good.name
    shutil.copytree(good, copy_dir)
    weights = copy_dir / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size // 2)  # a partial write
    messages = []
    rebuilt = embedded_model_dir(progress=messages.append)
    assert rebuilt == copy_dir and cache_is_valid(rebuilt)
    assert any("rebuilding" in m for m in messages)
    reloaded = load_model("embedded", device=torch.device("cpu"), dtype=torch.float32)
    assert torch.equal(_logits(reloaded), _logits(target))
