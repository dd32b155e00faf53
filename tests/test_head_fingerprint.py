"""Fast tier: a draft head trained for block-quantized weights also loads for the weights they were
quantized from (``talon.drafters.head_fingerprint``), and only for those: on tiny random Llamas."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from talon.drafters.factory import make_drafter
from talon.drafters.head_fingerprint import BLOCK, FINGERPRINT, LEVELS, fingerprint, matches, write_fingerprint
from talon.drafters.head_model import load_head
from talon.models.loaded import ModelLoadError
from tests.tiny import random_head, tiny_target


def quantized(target):
    """``target`` with every matrix quantized as GGUF's Q4_1 does: per block of ``BLOCK`` weights along a
    row, the nearest of ``LEVELS`` levels from the block's minimum to its maximum."""
    model = copy.deepcopy(target.model)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2 and p.shape[1] % BLOCK == 0:
                blocks = p.reshape(-1, BLOCK)
                lo, hi = blocks.amin(1, keepdim=True), blocks.amax(1, keepdim=True)
                step = (hi - lo) / (LEVELS - 1)
                p.copy_((((blocks - lo) / step).round() * step + lo).reshape(p.shape))
    return dataclasses.replace(target, model=model, identity=f"{target.identity}-q4")


@pytest.fixture(scope="module")
def original():
    return tiny_target(seed=0)


@pytest.fixture
def head_dir(original, tmp_path):
    """A head trained (here: drawn) for the quantized target, with its fingerprint."""
    four_bit = quantized(original)
    random_head(four_bit).save(tmp_path)
    write_fingerprint(four_bit, tmp_path)
    return tmp_path


def test_a_head_for_quantized_weights_loads_for_the_weights_they_were_quantized_from(original, head_dir):
    assert not load_head(head_dir, quantized(original)).fits_by_fingerprint  # its own target, by checksum
    assert matches(original, head_dir)
    assert load_head(head_dir, original).fits_by_fingerprint


def test_a_drafter_with_a_head_fitted_by_fingerprint_says_so_in_its_name(original, head_dir):
    """The name is what the run's summary shows beside the target: a user reads that the head meets
    weights it was not trained on (its acceptance there is not what docs/head.md measured)."""
    own = make_drafter(f"head:{head_dir}", quantized(original)).name
    other = make_drafter(f"head:{head_dir}", original).name
    assert own == f"EAGLE-style head {head_dir}"
    assert other.startswith(own) and other.endswith(", loaded by its fingerprint")


def test_other_weights_are_refused(original, head_dir):
    with pytest.raises(ModelLoadError, match="trained for"):
        load_head(head_dir, tiny_target(seed=1))  # another model of the same shapes
    moved = copy.deepcopy(original.model)
    with torch.no_grad():
        for p in moved.parameters():
            if p.dim() == 2:
                p.add_(p.std() * 0.5)  # a fine-tune-sized shift, far past a 4-bit level
    assert not matches(dataclasses.replace(original, model=moved), head_dir)
    (head_dir / FINGERPRINT).unlink()  # a head without a fingerprint takes its exact weights only
    with pytest.raises(ModelLoadError, match="trained for"):
        load_head(head_dir, original)
    (head_dir / FINGERPRINT).write_bytes(b"not a safetensors file")
    assert not matches(original, head_dir)


def test_the_fingerprint_samples_every_matrix_the_same_way_for_every_target(original):
    a, b = fingerprint(original), fingerprint(tiny_target(seed=1))
    assert a.keys() == b.keys() and any(k.endswith("lm_head.weight.value") for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a if k.endswith(".shape"))
    spacings = torch.cat([a[k] for k in a if k.endswith(".spacing")])
    assert (spacings >= 0).all() and (spacings > 0).float().mean() > 0.95  # 0: a block of zeros (EOS's row)
