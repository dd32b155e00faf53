"""Engine tier for the benchmark suites: transformers' peers on the real embedded model emit our
autoregressive tokens (float32, CPU), and a tiny suite runs through the CLI into a results directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from talon.bench import results as bench_results
from talon.bench.cli import main
from talon.bench.peers import assistant_for, run_peer
from talon.config import DecodeConfig, TreeConfig
from talon.engine.decode import encode_prompt, run_to_end
from talon.models.gqa_attention import GQA_ATTENTION
from viz.bench_plots import main as plots_main

pytestmark = pytest.mark.engine

EXAMPLES = {
    json.loads(line)["id"]: json.loads(line)["prompt"]
    for line in (Path(__file__).parent.parent / "assets" / "prompts.jsonl").read_text().splitlines()
}
PROMPTS = [EXAMPLES["extr-1"], EXAMPLES["code-1"]]
NEW_TOKENS = 16


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread while these tests run (restored after): on a 2-core machine shared with other
    work, two threads per process oversubscribe the cores and slow multi-token forwards several times."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("prompt", PROMPTS, ids=["extraction", "code"])
def test_hf_peers_emit_our_greedy_tokens(target, prompt):
    ids = encode_prompt(target, prompt)
    ar = run_to_end(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=NEW_TOKENS), prompt_ids=ids)
    config_before = target.model.generation_config.to_dict()
    plain = run_peer("hf_generate", target, ids, NEW_TOKENS)
    assert plain["token_ids"] == ar.output_ids
    assert plain["target_forwards"] == plain["new_tokens"] == len(ar.output_ids)  # MAT 1, like our ar
    lookup = run_peer("hf_prompt_lookup", target, ids, NEW_TOKENS)
    assert lookup["token_ids"] == ar.output_ids
    assert lookup["target_forwards"] <= lookup["new_tokens"]
    assisted = run_peer("hf_assisted", target, ids, NEW_TOKENS, assistant=assistant_for("layers:4", target))
    # Multi-token verification could flip a near-tie argmax in float32; none does on these prompts.  If one
    # ever does, this assertion shows where instead of the suite hiding it (matches_ar in runs.csv).
    assert assisted["token_ids"] == ar.output_ids, (assisted["token_ids"], ar.output_ids)
    assert assisted["draft_forwards"] > 0 and 0 < assisted["draft_seconds"] < assisted["seconds"]
    assert target.model.generation_config.to_dict() == config_before  # the peers leave the target as it was


def test_prompt_lookup_saves_forwards_on_extraction(target):
    ids = encode_prompt(target, EXAMPLES["extr-1"])
    lookup = run_peer("hf_prompt_lookup", target, ids, NEW_TOKENS)
    assert lookup["target_forwards"] < lookup["new_tokens"]


def test_tiny_suite_through_the_cli(tmp_path):
    out = tmp_path / "smoke"
    rc = main(
        [
            "--suite",
            "smoke",
            "--limit",
            "1",
            "--max-new-tokens",
            "10",
            "--drafter",
            "ngram",
            "--assistant",
            "layers:4",
            "--out-dir",
            str(out),
            "--threads",
            "1",
        ]
    )
    assert rc == 0
    assert plots_main([str(out), "--no-png"]) == 0
    for name in ("runs.csv", "summary.csv", "meta.json", "peers.html", "tree_shape.html"):
        assert (out / name).is_file(), name
    assert "cdn.plot.ly" in (out / "peers.html").read_text()
    meta, runs, summary = bench_results.read_results(out)
    assert set(runs["method"]) == {"ar", "hf_generate", "hf_prompt_lookup", "hf_assisted", "talon"}
    assert runs["matches_ar"].astype(bool).all()  # T=0: every method emitted the AR tokens
    assert (runs["new_tokens"] <= 10).all() and (runs["speedup"] > 0).all()
    assert (runs["speedup_hf"] > 0).all()  # ar too: it runs before transformers' generate, then is set against it
    assert runs.loc[runs["method"] == "talon", "mean_tree_nodes"].iloc[0] > 0
    assert meta["command"].startswith("python -m talon.bench --suite smoke")
    assert meta["drafter_spec"] == "ngram" and meta["assistant_spec"] == "layers:4"
    assert {"device", "date", "torch", "transformers", "cpu_count", "png"} <= set(meta)
    assert {"runs.csv", "summary.csv", "meta.json", "peers.html"} <= set(meta["files"])
    assert meta["torch_threads"] == 1 and meta["complete"] is True
    assert set(summary.loc[summary["category"] == "all", "method"]) == set(runs["method"])


def test_a_suite_hands_over_its_rows_after_every_prompt(target):
    """A cut run keeps what it measured: ``checkpoint`` gets the rows so far (marked incomplete) after
    each prompt, and the variants run with their own drafters."""
    from talon.bench import suites
    from talon.bench.runner import run_suite
    from talon.models.registry import ModelRegistry

    registry = ModelRegistry()
    registry.get_derived("embedded", lambda: target)  # the session's loaded target, not a second copy
    suite = suites.with_overrides(suites.get_suite("sources"), max_new_tokens=6)
    seen = []
    result = run_suite(suite, "embedded", limit=1, log=lambda _s: None, registry=registry, checkpoint=seen.append)
    prompts = len(suites.load_prompts(suite.experiments[0], 1)[0])
    assert len(seen) == prompts and [len(c["runs"]) for c in seen] == [4 * (i + 1) for i in range(prompts)]
    assert all(c["meta"]["complete"] is False for c in seen) and result["meta"]["complete"] is True
    assert seen[-1]["runs"] == result["runs"]
    drafters = result["meta"]["drafters"]
    assert "prompt lookup" in drafters["talon@ngram"].lower() or "n-gram" in drafters["talon@ngram"].lower()
    assert drafters["talon@head"] != drafters["talon@ngram"]
    assert all(bool(r["matches_ar"]) for r in result["runs"])


def test_a_budget_sweep_sets_auto_against_every_fixed_n(target):
    """The head suite's last experiment, shortened: the auto-sized tree runs once a prompt beside each
    fixed N, every run equals AR, and the comparison with the best fixed N comes out of the rows."""
    from talon.bench import suites
    from talon.bench.prompts import PromptSet
    from talon.bench.runner import run_suite
    from talon.models.registry import ModelRegistry

    registry = ModelRegistry()
    registry.get_derived("embedded", lambda: target)
    sweep = suites.Experiment(
        "auto_vs_fixed",
        "budget_sweep",
        (PromptSet("assets", per_category=1),),
        ("ar", "talon", "talon+auto"),
        values=(4, 16),
        max_new_tokens=12,
    )
    suite = suites.Suite("sizing", "test", (sweep,), drafter="head")
    result = run_suite(suite, "embedded", limit=2, log=lambda _s: None, registry=registry)
    runs = result["runs"]
    assert [(r["method"], r["setting"]) for r in runs[:4]] == [
        ("ar", ""),
        ("talon", "N=4"),
        ("talon+auto", "N=auto"),
        ("talon", "N=16"),
    ]
    assert len(runs) == 8 and all(bool(r["matches_ar"]) for r in runs)
    auto = [r for r in runs if r["method"] == "talon+auto"]
    assert all(r["auto"] and r["budget"] == 128 and r["mean_expected"] > 1 and r["mean_sq_miss"] > 0 for r in auto)
    pooled = [r for r in result["summary"] if r["method"] == "talon+auto" and r["category"] == bench_results.ALL]
    assert len(pooled) == 1 and 0 < pooled[0]["calibration_se"] < 1
    (c,) = bench_results.auto_against_fixed(runs)
    assert c["prompts"] == 2 and c["best_fixed"] in ("N=4", "N=16") and c["ratio"] > 0
    assert c["fixed_ratio"][c["best_fixed"]] == pytest.approx(c["ratio"])


def _prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"id": "extr-1", "category": "extraction", "prompt": EXAMPLES["extr-1"]}) + "\n")
    return path


def test_method_list_mixes_ours_and_the_peers_and_keeps_its_runs_when_the_summary_fails(tmp_path, monkeypatch, capsys):
    from talon.bench import runner

    out = tmp_path / "r.json"
    args = [
        "--prompts",
        str(_prompts_file(tmp_path)),
        "--methods",
        "ar,talon,hf_prompt_lookup,hf_generate",
        "--drafter",
        "ngram",
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    assert main(args) == 0
    result = json.loads(out.read_text())
    # Without --budget the tree methods run at the app's default: auto-sized.
    talon = "talon+auto"
    assert {r["method"] for r in result["runs"]} == {"ar", talon, "hf_prompt_lookup", "hf_generate"}
    by_method = {r["method"]: r for r in result["summary"]}
    assert by_method["hf_generate"]["speedup"] > 0 and by_method[talon]["MAT"] >= 1
    talon_steps = next(r for r in result["runs"] if r["method"] == talon)["steps"]
    assert all({"expected", "price", "stop"} <= set(s) for s in talon_steps)
    # each run says what ran, and whether it emitted plain decoding's tokens
    rows = {r["method"]: r for r in result["runs"]}
    assert (rows[talon]["auto"], rows[talon]["budget"], rows[talon]["drafter"]) == (True, 128, "n-gram prompt lookup")
    assert "auto" not in result["tree_config"] and "budget" not in rows["hf_generate"]
    assert all(r["matches_ar"] is True for r in result["runs"]) and result["complete"] is True
    assert {r["method"]: r["matches_ar"] for r in result["summary"]}[talon] == 1.0

    def broken(_runs):
        raise RuntimeError("summary failed")

    monkeypatch.setattr(runner, "summarize_runs", broken)
    with pytest.raises(RuntimeError, match="summary failed"):
        main(args + ["--out", str(tmp_path / "cut.json")])
    cut = json.loads((tmp_path / "cut.json").read_text())  # written before the summary was attempted
    assert len(cut["runs"]) == 4 and cut["summary"] is None and cut["complete"] is False

    def interrupt(_runs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "summarize_runs", interrupt)  # Ctrl-C after the last prompt's checkpoint
    assert main(args + ["--out", str(tmp_path / "stopped.json")]) == 130
    assert "interrupted: 4 runs of 1 whole prompts" in capsys.readouterr().err
    assert json.loads((tmp_path / "stopped.json").read_text())["complete"] is False


def test_a_datastore_from_the_command_line_feeds_prompt_lookup(tmp_path):
    """``--datastore``: a corpus holding what plain decoding writes for the prompt; prompt lookup then
    retrieves its continuations (more tokens a forward than without it), still emitting plain decoding's
    tokens, and the results say which corpus was read."""
    prompts = tmp_path / "poem.jsonl"  # open writing: the prompt itself has little to copy
    prompts.write_text('{"id": "poem", "category": "chat", "prompt": "Write a short poem about the sea."}\n')
    base = ["--prompts", str(prompts), "--methods", "ar,talon", "--drafter", "ngram"]
    base += ["--budget", "8", "--max-new-tokens", "24", "--threads", "1"]
    assert main([*base, "--out", str(tmp_path / "without.json")]) == 0
    without = {r["method"]: r for r in json.loads((tmp_path / "without.json").read_text())["runs"]}
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "answers.jsonl").write_text(json.dumps({"text": without["ar"]["text"]}) + "\n", encoding="utf-8")
    assert main([*base, "--datastore", str(corpus), "--out", str(tmp_path / "with.json")]) == 0
    result = json.loads((tmp_path / "with.json").read_text())
    rows = {r["method"]: r for r in result["runs"]}
    assert result["datastore"]["path"] == str(corpus)
    assert result["datastore"]["name"].startswith("datastore corpus (1 document, ")
    assert rows["talon"]["drafter"] == f"n-gram prompt lookup + {result['datastore']['name']}"
    assert rows["talon"]["matches_ar"] is True and rows["talon"]["token_ids"] == without["talon"]["token_ids"]
    assert rows["talon"]["MAT"] > without["talon"]["MAT"] + 0.5


def test_an_unreachable_drafter_names_the_option(tmp_path, capsys):
    args = [
        "--prompts",
        str(_prompts_file(tmp_path)),
        "--methods",
        "ar,talon",
        "--drafter",
        "nonexistent-org/nonexistent-model",
        "--out",
        str(tmp_path / "r.json"),
    ]
    assert main(args) == 2
    assert "Drafter (--drafter)" in capsys.readouterr().err


def test_the_peers_run_an_unmodified_transformers_model():
    from talon.models.cpu_linear import PackedLinear
    from talon.models.registry import ModelRegistry

    registry = ModelRegistry()
    stock, ours = registry.get_stock("embedded"), registry.get("embedded")
    assert not any(isinstance(m, PackedLinear) for m in stock.model.modules())
    assert any(isinstance(m, PackedLinear) for m in ours.model.modules())
    assert stock.model.config._attn_implementation == "sdpa"  # transformers' own attention
    assert ours.model.config._attn_implementation == GQA_ATTENTION
    assert stock.model is not ours.model and registry.get_stock("embedded") is stock
    ids = encode_prompt(ours, EXAMPLES["code-1"])
    ar = run_to_end(ours, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=NEW_TOKENS), prompt_ids=ids)
    assert run_peer("hf_generate", stock, ids, NEW_TOKENS)["token_ids"] == ar.output_ids
