"""docs/decisions.md's package table matches the tree: every module it names exists, and every module of
``talon/``, ``ui/`` and ``viz/`` (package ``__init__`` files and ``__main__`` aside) is named in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def named_modules(text: str) -> set[str]:
    """The ``path/to/module.py`` names in backticks inside the "Package layout" section of ``text``."""
    section = text.split("## Package layout", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`((?:talon|ui|viz)/[\w/]+\.py)`", section))


def package_modules(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for top in ("talon", "ui", "viz")
        for p in (root / top).rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }


def test_the_layout_table_names_exactly_the_modules_there_are():
    named = named_modules((ROOT / "docs" / "decisions.md").read_text(encoding="utf-8"))
    actual = package_modules(ROOT)
    assert named - actual == set(), "the table names modules that do not exist"
    assert actual - named == set(), "modules missing from the table"


def test_the_checker_sees_a_missing_and_an_unnamed_module(tmp_path):
    (tmp_path / "talon").mkdir()
    (tmp_path / "talon" / "a.py").write_text("")
    text = "## Package layout\n| `talon/a.py` | `talon/gone.py` |\n## Next\n`talon/later.py`"
    assert named_modules(text) == {"talon/a.py", "talon/gone.py"}
    assert named_modules(text) - package_modules(tmp_path) == {"talon/gone.py"}
