"""Import rules, read from the source (AST, nothing is imported):

* ``talon/`` (the algorithm package) imports no UI: not gradio, plotly, spaces, ``viz`` or ``ui``;
* ``viz/`` imports neither torch / transformers nor the parts of ``talon`` that run models: only
  ``talon``'s data and definitions (config, tree, trace, metrics) and its torch-free benchmark
  descriptions (``talon.bench.prompts`` / ``suites`` / ``results``);
* ``ui/`` (and ``app.py``) import no torch: the engine offers what the pages need as plain data;
* the floors of ``talon/`` point one way: ``runtime/`` imports neither ``engine/`` nor ``drafters/``,
  ``drafters/`` does not import ``engine/``, and ``models/`` imports none of the three;
* no import cycle between the modules of ``talon/`` (imports inside functions count too);
* module-level imports sit at the top of a file, never in the middle of it.

The checkers are plain functions so the negative controls at the bottom can show that each rule
fails on code that breaks it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UI_MODULES = ("gradio", "plotly", "spaces", "viz", "ui", "app")
VIZ_ALLOWED_TALON = (
    "talon.config",
    "talon.tree",
    "talon.trace",
    "talon.metrics",
    "talon.bench.prompts",
    "talon.bench.suites",
    "talon.bench.results",
)
VIZ_FORBIDDEN = ("torch", "transformers", "gradio", "spaces", "ui", "app")
UI_FORBIDDEN = ("torch", "transformers")
FLOORS = {
    "talon.runtime": ("talon.engine", "talon.drafters"),
    "talon.drafters": ("talon.engine",),
    "talon.models": ("talon.engine", "talon.drafters", "talon.runtime"),
}
"""Package -> the packages of ``talon`` it may not import (each sits above it)."""


def module_name(path: Path, root: Path) -> str:
    """``talon/engine/decode.py`` -> ``talon.engine.decode``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path) -> list[tuple[str, int]]:
    """Absolute names of everything ``path`` imports (relative imports resolved; for ``from X import
    Y`` both ``X`` and ``X.Y``, since Y may be a submodule), with line numbers."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.append((prefix, node.lineno))
            found += [(f"{prefix}.{a.name}", node.lineno) for a in node.names if a.name != "*"]
    return found


def python_files(root: Path, top: str) -> list[Path]:
    base = root / top
    return sorted(base.rglob("*.py")) if base.is_dir() else ([base] if base.is_file() else [])


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def rule_violations(root: Path) -> list[str]:
    """Broken import rules under ``root`` (a checkout), one line each."""
    bad = []
    for path in python_files(root, "talon"):
        for name, line in imports_of(path, root):
            if _under(name, UI_MODULES):
                bad.append(f"{path.relative_to(root)}:{line} imports {name} (talon/ imports no UI)")
    for path in python_files(root, "viz"):
        for name, line in imports_of(path, root):
            ancestor = any(allowed.startswith(name + ".") for allowed in VIZ_ALLOWED_TALON)  # a package's __init__
            talon_bad = _under(name, ("talon",)) and not ancestor and not _under(name, VIZ_ALLOWED_TALON)
            if _under(name, VIZ_FORBIDDEN) or talon_bad:
                bad.append(f"{path.relative_to(root)}:{line} imports {name} (viz/ draws data only)")
    for path in python_files(root, "ui") + python_files(root, "app.py"):
        for name, line in imports_of(path, root):
            if _under(name, UI_FORBIDDEN):
                bad.append(f"{path.relative_to(root)}:{line} imports {name} (ui/ does no tensor maths)")
    for package, above in FLOORS.items():
        for path in python_files(root, package.replace(".", "/")):
            for name, line in imports_of(path, root):
                if _under(name, above):
                    bad.append(f"{path.relative_to(root)}:{line} imports {name} (an import back up the floors)")
    return bad


def import_graph(root: Path, package: str = "talon") -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (only names that are modules of ``package``)."""
    files = python_files(root, package)
    modules = {module_name(p, root) for p in files}
    graph = {m: set() for m in modules}
    for path in files:
        me = module_name(path, root)
        for name, _ in imports_of(path, root):
            if name in modules and name != me:
                graph[me].add(name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def _is_import_block(stmt: ast.stmt) -> bool:
    """An import, or a try / if block made only of imports and fallbacks (optional dependencies)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, ast.Try):
        return any(isinstance(s, (ast.Import, ast.ImportFrom)) for s in stmt.body)
    if isinstance(stmt, ast.If):
        return all(_is_import_block(s) for s in stmt.body)
    return False


def late_imports(path: Path) -> list[int]:
    """Line numbers of module-level imports that come after other module-level code."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    seen_code, late = False, []
    for k, stmt in enumerate(body):
        is_doc = k == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        if _is_import_block(stmt):
            if seen_code:
                late.append(stmt.lineno)
        elif not is_doc:
            seen_code = True
    return late


def all_sources(root: Path) -> list[Path]:
    return [p for top in ("talon", "viz", "ui", "app.py") for p in python_files(root, top)]


# ---- the rules on this checkout ------------------------------------------------------------------------
def test_talon_imports_no_ui_and_viz_imports_no_engine():
    assert rule_violations(ROOT) == []


def test_talon_has_no_import_cycle():
    graph = import_graph(ROOT)
    assert len(graph) > 20 and "talon.engine.decode" in graph
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_imports_sit_at_the_top_of_every_file():
    late = {str(p.relative_to(ROOT)): lines for p in all_sources(ROOT) if (lines := late_imports(p))}
    assert late == {}


def test_the_package_is_grouped_by_job():
    subpackages = {p.name for p in (ROOT / "talon").iterdir() if (p / "__init__.py").is_file()}
    assert subpackages == {"engine", "drafters", "runtime", "models", "training", "bench"}
    root_modules = {p.stem for p in (ROOT / "talon").glob("*.py")} - {"__init__"}
    assert root_modules == {"config", "tree", "trace", "metrics", "files"}


# ---- negative controls: each checker fails on code that breaks its rule -----------------------------------
def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    "files, needle",
    [
        ({"talon/__init__.py": "", "talon/x.py": "import gradio\n"}, "talon/x.py:1 imports gradio"),
        ({"talon/__init__.py": "", "talon/x.py": "def f():\n    from viz import charts\n"}, "imports viz"),
        ({"viz/__init__.py": "", "viz/c.py": "import torch\n"}, "viz/c.py:1 imports torch"),
        ({"viz/__init__.py": "", "viz/c.py": "from talon.engine.decode import run\n"}, "imports talon.engine"),
        ({"ui/__init__.py": "", "ui/t.py": "import torch\n"}, "ui/t.py:1 imports torch"),
        (
            {
                "talon/__init__.py": "",
                "talon/drafters/__init__.py": "",
                "talon/drafters/d.py": "from ..engine import kv_cache\n",
            },
            "talon/drafters/d.py:1 imports talon.engine",
        ),
        (
            {
                "talon/__init__.py": "",
                "talon/runtime/__init__.py": "",
                "talon/runtime/r.py": "from ..drafters.base import Drafter\n",
            },
            "talon/runtime/r.py:1 imports talon.drafters",
        ),
    ],
)
def test_rule_checker_catches_a_broken_rule(tmp_path, files, needle):
    assert any(needle in v for v in rule_violations(_write(tmp_path, files)))


def test_cycle_finder_catches_a_cycle_through_a_relative_import(tmp_path):
    root = _write(
        tmp_path,
        {
            "talon/__init__.py": "",
            "talon/a.py": "from .b import x\n",
            "talon/sub/__init__.py": "",
            "talon/b.py": "def f():\n    from .sub import c\n",
            "talon/sub/c.py": "from .. import a\n",
        },
    )
    assert find_cycle(import_graph(root)) == ["talon.a", "talon.b", "talon.sub.c", "talon.a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_late_import_is_found(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        '"""doc"""\nimport os\ntry:\n    import spaces\nexcept ImportError:\n    pass\nX = 1\nimport json\n'
    )
    assert late_imports(path) == [8]


def test_every_page_error_is_a_refusal():
    """The page's errors are made by ``ui.shared.refusal`` alone: a ``gr.Error`` with Gradio's 10-s timer
    closed a second message a moment after it appeared (the timer of the group's first message)."""
    made = []
    for path in [ROOT / "app.py", *sorted((ROOT / "ui").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Attribute) and func.attr == "Error" and getattr(func.value, "id", "") == "gr":
                made.append(str(path.relative_to(ROOT)))
    assert made == ["ui/shared.py"]  # in ``refusal``, with ``duration=None``
    assert "gr.Error(message, duration=None," in (ROOT / "ui" / "shared.py").read_text(encoding="utf-8")
