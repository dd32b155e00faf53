"""Building TALON's C++ extensions (``stream_gemm``, ``row_ops``) on first use with PyTorch's extension
loader: one build at a time in a process (two models loading at once, two users of the app, never run
the loader side by side), and a build that fails (no compiler, no ninja, a build error) logged with its
reason and answered with None, so that the caller's fallback serves."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

_BUILD_LOCK = threading.Lock()


def build_or_none(what: str, duration: str, fallback: str, build: Callable[[], ModuleType]) -> ModuleType | None:
    """``build()`` (which builds or loads the cached build of ``what`` and imports it) under the lock; None,
    with a warning naming the reason and ``fallback`` (what serves instead), where it raises.  ``duration``:
    how long a machine's first build takes, for the log line."""
    with _BUILD_LOCK:
        log.info("Loading %s (built once a machine, %s)...", what, duration)
        try:
            return build()
        except Exception as exc:  # no compiler, no ninja, a build error
            reason = str(exc).strip().splitlines()[0][:200]
            log.warning("Could not build %s (%s); %s.", what, reason, fallback)
            return None


def source_digest(source: Path) -> str:
    """The first 16 hex digits of ``source``'s SHA-256: an extension's revision, for keys under which a
    measurement with another revision is not reused."""
    return hashlib.sha256(source.read_bytes()).hexdigest()[:16]
