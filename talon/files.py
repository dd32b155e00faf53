"""Writing a file so that a reader never sees half of it, and a crash while writing leaves the last
complete version in place (benchmark checkpoints and results, cached cost curves, training checkpoints)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

FILE_MODE = 0o644
"""Permissions of a file written here: what ``open`` gives under the usual umask (``mkstemp`` alone would
make it readable by its owner only)."""


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write`` on a binary file, creating ``path``'s folder: first a temporary file of its own in the
    same folder (two processes writing the same path never share one), then renamed over ``path``; if
    ``write`` fails, ``path`` keeps what it held."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        with contextlib.suppress(OSError):  # a file system without modes keeps the write
            os.chmod(tmp, FILE_MODE)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomically(path: Path, text: str) -> Path:
    """``write_atomically`` of ``text`` in UTF-8."""
    return write_atomically(path, lambda f: f.write(text.encode("utf-8")))
