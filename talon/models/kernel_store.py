"""The CPU kernel choices a load times (``cpu_linear.KernelChoices``, and whether the LM head is screened:
``lm_head.screen_for``), kept for the machine next to the model cache (``$TALON_CACHE_DIR/kernel-choices``)
when they were timed on a quiet machine.

Which packed kernel a model's linears take and up to how many rows PyTorch's own linear serves are
timed at load, and hold for the process's life.  Timed while another process works, they can be wrong
for that whole life: TALON's kernel splits a one-row product over both cores and waits for the slower,
so a busy neighbour doubles its time while MKL's one-row path, on one core, barely moves (on the 2-core
AVX2 EPYC 7.1 against 3.1 ms quiet; MKL 6.2 against 5.5), and two loads of the embedded model at once
gave one-row products to MKL, 1.7x slower on a quiet machine, in 4 of 6 loads.  So a choice is kept
only when the other processes (and the hypervisor, as steal time) used under ``device.QUIET_SHARE`` of
the machine while it was timed (``device.OtherWork``, from ``/proc``); later loads of those shapes read
it instead of timing (about 6 s of the embedded model's load on the AVX2 EPYC).  A choice timed on a
busy machine, or where ``/proc`` is missing, serves its own process only, and the next load times again.
``$TALON_RETIME_KERNELS=1`` times again and replaces a kept choice.

What a choice depends on is its key: the layers' shapes and dtypes, whether products are fused, the
thread count, the kernels this machine has (TALON's kernel by its source), PyTorch's version, the CPU,
and OpenMP's wait settings where the environment sets them (the app waits passively, which slows a
kernel that splits one row over both cores more than MKL's one-core path, so its choices are its own).
Reading and writing are best-effort: an unreadable or foreign file is timed again, a cache that cannot be
written is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import torch

from ..files import write_text_atomically
from .device import cpu_identity, openmp_wait
from .embedded import cache_root

CHOICES_DIR = "kernel-choices"
CHOICE_FORMAT = 1
"""Bumped when the way choices are timed changes (a kept choice is then timed again)."""
RETIME_ENV = "TALON_RETIME_KERNELS"


def machine_key(layers_key: tuple, kernels: str) -> dict:
    """The stored key of a model's choices: ``layers_key`` (what ``KernelChoices.key`` tells apart in a
    process: shapes, fusion, kernels, threads) and ``kernels``, the kernels' own identity (TALON's
    kernel's source digest, or ``""`` where it does not run), with PyTorch's version, the CPU and OpenMP's
    wait settings (only where set: choices timed under the default wait keep their keys)."""
    key = {
        "format": CHOICE_FORMAT,
        "layers": hashlib.sha256(repr(layers_key).encode()).hexdigest(),
        "kernels": kernels,
        "torch": torch.__version__,
        "cpu": cpu_identity(),
    }
    if wait := openmp_wait():
        key["openmp_wait"] = wait
    return key


def choice_path(key: dict, root: Path | None = None) -> Path:
    """Where the choice of ``key`` is kept."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return (root or cache_root()) / CHOICES_DIR / f"{digest}.json"


def retime() -> bool:
    """``$TALON_RETIME_KERNELS`` set to 1 / true / yes: time again, whatever is kept."""
    return os.environ.get(RETIME_ENV, "").strip().lower() in ("1", "true", "yes")


def cached_record(key: dict, root: Path | None = None) -> dict | None:
    """The record kept for ``key`` (its fields as ``store_record`` wrote them), or None (none kept,
    unreadable, another key, or ``retime()``)."""
    if retime():
        return None
    try:
        stored = json.loads(choice_path(key, root).read_text())
        return stored if isinstance(stored, dict) and stored.get("key") == key else None
    except (OSError, ValueError):
        return None


def store_record(key: dict, fields: dict, other_share: float, root: Path | None = None) -> Path | None:
    """Keep ``fields`` (JSON values), timed while others took ``other_share`` of the machine, for ``key``;
    None where the cache cannot be written."""
    record = {
        "key": key,
        **fields,
        "other_share": round(other_share, 4),
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        return write_text_atomically(choice_path(key, root), json.dumps(record, indent=1))
    except OSError:
        return None


def cached_choice(key: dict, root: Path | None = None) -> tuple[str, int] | None:
    """The kept ``(packed kernel, plain rows)`` of ``key``, or None (none kept, unreadable, another key,
    or ``retime()``)."""
    stored = cached_record(key, root)
    kernel, rows = (stored or {}).get("kernel"), (stored or {}).get("plain_rows")
    if kernel not in ("onednn", "mkl", "stream") or not isinstance(rows, int) or rows < 0:
        return None
    return kernel, rows


def store_choice(key: dict, kernel: str, plain_rows: int, other_share: float, root: Path | None = None) -> Path | None:
    """Keep a linears' choice (``store_record``)."""
    return store_record(key, {"kernel": kernel, "plain_rows": plain_rows}, other_share, root)
