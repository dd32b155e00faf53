"""Which targets a draft head may draft for besides the exact weights it was trained on: weights that a
block-wise quantization turned into them.

The embedded target is SmolLM2-135M-Instruct stored with 4-bit weights (GGUF Q4_1: blocks of 32
weights along a row, each block's values on 16 evenly spaced levels from its minimum to its maximum),
and where that package is not installed (a Hugging Face Space) the app loads the Hub's original
weights, which that quantization was made from.  A head's ``target_sha256`` names the 4-bit weights
exactly, so it refused the originals, although the hidden states it drafts from differ by quantization
noise only (on a simulated original, every weight moved within its quantization bin, the shipped head's
tokens a step were 2.92 against 2.71 on the embedded weights: docs/head.md).

A fingerprint (``FINGERPRINT`` beside the head's weights) samples ``SAMPLES`` weights of every matrix of
the head's target, each with its block's level spacing (``(max - min) / 15``).  A target matches when it
has the same matrices (names and shapes) and its sampled weights lie within one level spacing of the
fingerprint's values (a share ``MATCH_SHARE`` of them must, so one outlier is not decisive either way):
an original lies within half of one of its quantization, while another model's weights differ by about
their own spread, several spacings.  Only the sampled weights are read, so a check costs little even
for a large target.  The draft tokens are verified by the target as always,
so a head loaded this way changes speed, never the output.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as tensor_bytes

from ..files import write_atomically
from ..models.loaded import LoadedModel

FINGERPRINT = "target_fingerprint.safetensors"
SAMPLES = 32
"""Sampled weights per matrix."""
BLOCK = 32
"""Weights per quantization block along a row (GGUF's Q4_0 / Q4_1 / Q8_0)."""
LEVELS = 16
"""Levels of a 4-bit block: its spacing is ``(max - min) / (LEVELS - 1)``."""
MATCH_SHARE = 0.99
"""Share of the sampled weights that must lie within one spacing for a target to match."""


def _matrices(target: LoadedModel) -> dict[str, torch.Tensor]:
    """The target's 2-D weights whose rows split into whole blocks, by state-dict name (not copied)."""
    return {
        name: t.detach()
        for name, t in sorted(target.model.state_dict().items())
        if t.dim() == 2 and t.shape[1] % BLOCK == 0
    }


def _taken(w: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Rows ``rows`` of ``w`` (any view whose last dimension is what is sampled), as float32 on the CPU."""
    return w[rows.to(w.device)].to("cpu", torch.float32)


def _positions(name: str, count: int) -> torch.Tensor:
    """``SAMPLES`` flat positions of a matrix of ``count`` weights, the same for every target (seeded by
    the matrix's name)."""
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") % 2**63
    return torch.randint(0, count, (SAMPLES,), generator=torch.Generator().manual_seed(seed))


def fingerprint(target: LoadedModel) -> dict[str, torch.Tensor]:
    """For each matrix ``name``: ``name.shape`` (int64 ``[2]``), ``name.value`` (float32 ``[SAMPLES]``,
    the sampled weights) and ``name.spacing`` (float32 ``[SAMPLES]``, each sample's block's level
    spacing)."""
    out = {}
    for name, w in _matrices(target).items():
        where = _positions(name, w.numel())
        block = _taken(w.reshape(-1, BLOCK), where // BLOCK)
        spacing = (block.amax(1) - block.amin(1)) / (LEVELS - 1)
        out[f"{name}.shape"] = torch.tensor(list(w.shape), dtype=torch.int64)
        out[f"{name}.value"] = _taken(w.reshape(-1), where).contiguous()
        out[f"{name}.spacing"] = spacing.contiguous()
    return out


def write_fingerprint(target: LoadedModel, directory: str | Path) -> Path:
    """Write ``target``'s fingerprint beside a head trained for it (about 100 KB for the embedded model)."""
    path = Path(directory) / FINGERPRINT
    write_atomically(path, lambda f: f.write(tensor_bytes(fingerprint(target))))
    return path


def matches(target: LoadedModel, directory: str | Path) -> bool:
    """Whether ``target`` has the matrices of the fingerprint in ``directory`` with ``MATCH_SHARE`` of
    its sampled weights within one level spacing of the fingerprint's; False without a fingerprint or
    with an unreadable one."""
    try:
        stored = load_file(Path(directory) / FINGERPRINT)
    except (OSError, ValueError, SafetensorError):
        return False
    names = {key.rsplit(".", 1)[0] for key in stored}
    matrices = _matrices(target)
    if not names or names != set(matrices):
        return False
    fit = total = 0
    for name in names:
        w = matrices[name]
        if list(w.shape) != stored[f"{name}.shape"].tolist():
            return False
        got = _taken(w.reshape(-1), _positions(name, w.numel()))
        fit += int(((got - stored[f"{name}.value"]).abs() <= stored[f"{name}.spacing"]).sum())
        total += SAMPLES
    return fit >= MATCH_SHARE * total
