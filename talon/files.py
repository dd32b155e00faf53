"""Writing a file so that a reader never sees half of it, and a crash while writing leaves the last
complete version in place (benchmark checkpoints and results, cached cost curves, training checkpoints);
a lock file that lets one process at a time build something other processes share (the model cache)."""

from __future__ import annotations

import contextlib
import os

try:  # POSIX; elsewhere the lock below is a no-op
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

FILE_MODE = 0o644
"""Permissions of a file written here: what ``open`` gives under the usual umask (``mkstemp`` alone would
make it readable by its owner only)."""


def file_in_the_way(folder: Path) -> Path | None:
    """The first of ``folder`` and its parents that exists and is not a directory (so ``folder`` cannot
    be made or written into), or None."""
    return next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)


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


@contextlib.contextmanager
def exclusive_lock(path: Path, on_wait: Callable[[], object] | None = None) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if missing) for the ``with`` block: another
    process (or another open of the same file) taking it waits until the block ends. ``on_wait`` is called
    once, before waiting, when the lock is held elsewhere. The lock goes with the process if it dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        if fcntl is None:  # pragma: no cover - no advisory locks on this system
            yield
            return
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
