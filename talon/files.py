"""Writing a file so that a reader never sees half of it, and a crash while writing leaves the last
complete version in place (benchmark checkpoints, results, cached cost curves)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644
"""Permissions of a file written here: what ``open`` gives under the usual umask (``mkstemp`` alone would
make it readable by its owner only)."""


def write_text_atomically(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path``, creating its folder: first to a temporary file of its own in the
    same folder (two processes writing the same path never share one), then renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, FILE_MODE)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
