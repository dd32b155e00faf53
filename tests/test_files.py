"""Atomic file writes (benchmark checkpoints, results, cached cost curves)."""

from __future__ import annotations

import stat

import pytest

from talon.files import FILE_MODE, write_text_atomically


def test_a_write_lands_whole_readable_and_leaves_no_temporary_file(tmp_path):
    path = write_text_atomically(tmp_path / "new" / "runs.csv", "a,b\n1,é\n")
    assert path.read_text(encoding="utf-8") == "a,b\n1,é\n"
    assert stat.S_IMODE(path.stat().st_mode) == FILE_MODE  # others can read it, as an ordinary file
    assert [p.name for p in path.parent.iterdir()] == ["runs.csv"]


def test_a_write_cut_short_keeps_the_last_whole_version(tmp_path):
    path = write_text_atomically(tmp_path / "summary.csv", "old\n")
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate fails once the file is open
        write_text_atomically(path, "new\udc80")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.csv"]
