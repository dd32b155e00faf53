"""A bad environment variable never breaks ``import app``: the page says what to fix (fast tier)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from talon.config import ConfigError
from talon.runtime.graphs import graphs_setting
from ui.shared import FALLBACK_EXAMPLES, read_examples, setup_problem

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("TALON_DTYPE", "fp8", "choose one of float32"),
        ("TALON_CPU_LINEAR", "blas", "choose one of auto, onednn, mkl, stream, plain"),
        ("TALON_DRAFT_INT8", "yes", "choose one of auto, off"),
        ("TALON_CUDA_GRAPHS", "maybe", "use 1"),
        ("TALON_GPU_ATTENTION", "flash", "choose one of grouped, sdpa"),
        ("TALON_GPU_LINEAR", "cutlass", "choose one of auto, lt, cublas"),
    ],
)
def test_each_bad_setting_is_named_with_its_choices(monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    problem = setup_problem()
    assert name in problem and words in problem and "restart" in problem


def test_good_settings_give_no_problem(monkeypatch):
    names = ("TALON_DTYPE", "TALON_CPU_LINEAR", "TALON_DRAFT_INT8", "TALON_CUDA_GRAPHS", "TALON_GPU_ATTENTION")
    for name in (*names, "TALON_GPU_LINEAR"):
        monkeypatch.delenv(name, raising=False)
    assert setup_problem() == ""
    monkeypatch.setenv("TALON_CUDA_GRAPHS", "eager")
    assert graphs_setting() == "eager" and setup_problem() == ""
    monkeypatch.setenv("TALON_CUDA_GRAPHS", "nope")
    with pytest.raises(ConfigError):
        graphs_setting()


@pytest.mark.slow  # seconds each: CI's second stage
def test_import_app_with_a_bad_dtype_shows_the_problem_on_the_page():
    env = {**os.environ, "TALON_DTYPE": "fp8"}
    out = subprocess.run(
        [sys.executable, "-c", "import app\nfrom ui.shared import model_status\nprint(model_status()[0])"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "settings need fixing" in out.stdout and "TALON_DTYPE" in out.stdout


def test_unreadable_examples_give_the_built_in_pair_and_say_so(tmp_path, capsys):
    """A lost or broken examples file must not stop the app starting (its first prompt fills the box)."""
    bad, empty = tmp_path / "prompts.jsonl", tmp_path / "empty.jsonl"
    bad.write_text("{not json\n")
    empty.write_text('{"category": "chat"}\n')
    for path in (bad, empty, tmp_path / "missing.jsonl"):
        assert read_examples(path) == list(FALLBACK_EXAMPLES)
        assert str(path) in capsys.readouterr().err
    shipped = read_examples()
    assert len(shipped) > 2 and not capsys.readouterr().err
    assert all(e in shipped for e in FALLBACK_EXAMPLES)  # the fallbacks are the shipped pair


@pytest.mark.parametrize("budget", [0, 8, 24])
def test_compare_tabs_default_pair_is_one_method_fixed_against_auto_whatever_the_panels_budget(budget):
    # The tab opens on a contrast the cost rule explains: the same method at a fixed N and at N = auto, both
    # set in the side boxes, so the panel's N (auto, or one a user set) changes neither side.
    from ui.compare import DEFAULT_BUDGETS, DEFAULT_METHODS, side_settings
    from ui.settings import RunSettings

    panel = RunSettings(method="talon", budget=budget)
    sides = [side_settings(panel, m, n).configs()[0] for m, n in zip(DEFAULT_METHODS, DEFAULT_BUDGETS)]
    assert [t.method for t in sides] == ["talon", "talon"]
    assert [t.auto for t in sides] == [False, True] and sides[0].budget == 24


@pytest.mark.parametrize(
    ("typed", "budget", "auto"),
    [("", 24, False), ("  ", 24, False), (None, 24, False), ("8", 8, False), (" Auto ", 128, True), ("0", 128, True)],
)
def test_compare_side_budget_box_blank_is_the_panels_and_auto_is_zero(typed, budget, auto):
    # What the per-side text box sends: blank keeps the panel's N (24 here), "auto" or 0 the auto position.
    from ui.compare import side_settings
    from ui.settings import RunSettings

    tree, _ = side_settings(RunSettings(method="talon", budget=24), "talon", typed).configs()
    assert (tree.budget, tree.auto) == (budget, auto)


def test_compare_side_budget_box_refuses_what_is_not_a_budget():
    from ui.compare import side_settings
    from ui.settings import ConfigError, RunSettings

    for typed in ("eight", "2.5", "-1", "1e6", "129"):  # past the slider's top (the auto cap) too
        with pytest.raises(ConfigError, match="Budget N"):
            side_settings(RunSettings(method="talon", budget=24), "talon", typed).configs()


def test_compare_settings_line_says_n_as_the_sides_with_a_tree_ran_it():
    # N=auto (cap 128) where the cost rule sized the trees; a plain run beside a tree method does not lend
    # the line its config's cap ("N=128" under "A (hybrid, N=auto (cap 128))"); and plain decoding timed
    # against the app's plain run is said to be the machine's noise, not a method's slowdown.
    from dataclasses import asdict, replace

    from talon.config import TreeConfig
    from talon.trace import RunTrace
    from ui.compare import PLAIN_AGAINST_PLAIN, verdict_markdown
    from ui.session import Session

    recorded = RunTrace.from_json((Path(__file__).parent / "data" / "recorded_talon_head.json").read_text())

    def verdict(a: TreeConfig, b: TreeConfig) -> str:
        sides = {k: replace(recorded, tree_config=asdict(t)) for k, t in (("A", a), ("B", b))}
        session = Session()
        session.compare = {**sides, "repeats": {"ar": [recorded], "A": [sides["A"]], "B": [sides["B"]]}}
        return verdict_markdown(session)

    auto = TreeConfig(method="hybrid", budget=128, auto=True)
    text = verdict(auto, TreeConfig(method="ar", budget=128))
    assert "Settings, both methods (each uses those that apply to it): N=auto (cap 128) · K=" in text
    assert "N=128" not in text and text.count(PLAIN_AGAINST_PLAIN) == 1
    assert text.index(PLAIN_AGAINST_PLAIN) > text.index("**B (")
    text = verdict(TreeConfig(method="static", budget=24), TreeConfig(method="static", budget=24))
    assert "Settings, both methods (each uses those that apply to it): N=24 · K=" in text
    assert PLAIN_AGAINST_PLAIN not in text
    text = verdict(TreeConfig(method="static", budget=24), auto)
    assert "Other settings, both methods (each uses those that apply to it): K=" in text
    text = verdict(TreeConfig(method="ar"), TreeConfig(method="ar"))
    assert "Settings, both methods (each uses those that apply to it): K=" in text
    assert text.count(PLAIN_AGAINST_PLAIN) == 2


def test_a_loaded_trace_gives_back_settings_its_controls_accept_and_that_run_the_same_way():
    # An auto run's trace holds the cap (128) as its budget: restored as is, the next Run would be a fixed
    # N=128.  Auto comes back as 0 (auto), a command line's N past the slider at its top.
    from dataclasses import asdict

    import gradio as gr

    from talon.config import DecodeConfig, TreeConfig
    from talon.trace import RunTrace
    from ui.settings import BUDGET_MAX, SETTING_NAMES, RunSettings, settings_of

    slider = gr.Slider(0, BUDGET_MAX, step=1)
    for tree, budget in (
        (TreeConfig(method="talon", budget=128, auto=True), 0),
        (TreeConfig(method="eagle2", budget=12), 12),
        (TreeConfig(method="static", budget=200), BUDGET_MAX),
    ):
        trace = RunTrace("List three colours.", [1], asdict(tree), asdict(DecodeConfig()), "t", "d", "cpu")
        settings = settings_of(trace)
        assert settings["budget"] == budget and slider.preprocess(settings["budget"]) == budget
        again, _ = RunSettings(**{n: settings[n] for n in SETTING_NAMES if settings.get(n) is not None}).configs()
        size = tree.budget if tree.auto else min(tree.budget, BUDGET_MAX)  # auto: the cap, 128 both times
        assert (again.method, again.auto, again.budget) == (tree.method, tree.auto, size)


def test_compare_calls_a_method_faster_every_time_by_a_little_neither_a_tie_nor_a_disagreement():
    # B's time / A's time 0.86, 0.98, 0.90 read "No clear winner: the repetitions disagree".
    from dataclasses import replace

    from talon.trace import RunTrace
    from ui.compare import verdict_markdown
    from ui.session import Session

    recorded = RunTrace.from_json((Path(__file__).parent / "data" / "recorded_talon_head.json").read_text())

    def taking(seconds: float) -> RunTrace:
        return replace(recorded, prefill_seconds=recorded.prefill_seconds + seconds - recorded.seconds)

    session = Session()
    a_runs, b_runs = [taking(1.0)] * 3, [taking(r) for r in (0.86, 0.98, 0.90)]
    session.compare = {"A": a_runs[0], "B": b_runs[0], "repeats": {"ar": [taking(2.0)] * 3, "A": a_runs, "B": b_runs}}
    text = verdict_markdown(session)
    assert "was faster in all 3 repetitions**, in some by less than 3%" in text and text.index("**B (") < 200
    assert "No clear winner" not in text and "A took 1.11× B's time, median" in text
    assert "the same tree at every step" in text  # both sides replay one recorded run

    # a repetition of three asked for: no call yet, and no advice to raise a setting the user already raised
    session.compare = {**session.compare, "repeats": {k: v[:1] for k, v in session.compare["repeats"].items()}}
    session.compare["asked"] = 3
    text = verdict_markdown(session)
    assert "Repetition 1 of 3 done: the verdict comes when all 3 have run." in text
    assert "raise the repetitions" not in text and "was faster" not in text
    session.compare["asked"] = 1
    assert "One repetition: no spread to judge a winner by" in verdict_markdown(session)


def test_compare_says_why_one_side_is_faster_by_tokens_a_step_over_price_a_step():
    # The default pair (a fixed N against N = auto) differs in tokens a step and in what a step costs; the
    # verdict divides them, which is what the cost rule maximises and what the speedups follow.
    from dataclasses import replace

    from talon.trace import RunTrace
    from ui.compare import priced_speed_line

    recorded = RunTrace.from_json((Path(__file__).parent / "data" / "recorded_talon_head.json").read_text())

    def priced(price: float) -> RunTrace:
        return replace(recorded, steps=[replace(s, price=price) for s in recorded.steps])

    tokens = sum(len(s.committed_ids) for s in recorded.steps) / len(recorded.steps)
    line = priced_speed_line(priced(4.0), priced(2.0))
    assert f"A {tokens:.2f} ÷ 4.00 = {tokens / 4:.2f}×, B {tokens:.2f} ÷ 2.00 = {tokens / 2:.2f}× plain" in line
    assert "N = auto grows" not in line  # neither side is auto-sized: the rule is not what chose their size
    auto = replace(priced(2.0), tree_config={**recorded.tree_config, "auto": True})
    assert "N = auto grows each tree only while" in priced_speed_line(priced(4.0), auto)
    assert priced_speed_line(recorded, priced(2.0)) == ""  # a run with no cost curve: no prices to divide by


def test_the_labs_source_colours_are_offered_for_the_hybrid_method_only():
    # Picking "source" for a TALON tree painted every node "model".
    from ui.tree_lab import lab_colour_choices

    talon = lab_colour_choices("talon", "source")
    assert "source" not in talon["choices"] and talon["value"] == "relative" and "hybrid" in talon["info"]
    hybrid = lab_colour_choices("hybrid", "source")
    assert "source" in hybrid["choices"] and hybrid["value"] == "source"
    assert lab_colour_choices("eagle2", "confidence")["value"] == "confidence"
    assert "verdict: verdict" not in talon["info"]  # each mode named once


def test_compare_titles_name_one_committed_token_once():
    from ui.compare import token_span

    assert token_span(31, 1) == "token 31"
    assert token_span(31, 3) == "tokens 31–33"


def test_every_run_button_refuses_bad_settings_before_the_page_changes(tmp_path):
    # Each tab's run button first asks its check (no model needed): gr.Error there leaves the page as it was.
    import gradio as gr

    from ui.async_tab import check_async
    from ui.compare import check_compare
    from ui.explore import check_run
    from ui.prompts import check_prompts
    from ui.settings import SETTING_NAMES, RunSettings, check_prompt_length
    from ui.shared import TARGET_ADVICE

    def panel(**changes) -> list:
        settings = RunSettings(prompt="List three colours.", budget=0).but(**changes)
        return [getattr(settings, name) for name in SETTING_NAMES]

    check_run(*panel())
    check_compare("eagle2", "talon", None, None, *panel())
    check_async(*panel())
    check_prompts("a", "b", *panel())
    with pytest.raises(gr.Error, match=r"^\W?The prompt is empty"):
        check_run(*panel(prompt=" \n"))
    with pytest.raises(gr.Error, match=r"^\W?The prompt is empty"):
        check_compare("static", "talon", None, None, *panel(prompt=""))
    with pytest.raises(gr.Error, match=r"^\W?Method A: A static tree has a fixed size"):
        check_compare("static", "talon", None, None, *panel())
    check_compare("static", "talon", 8, None, *panel())  # A's own N: a static tree of 8 beside auto TALON
    rule = r"Budget N is 0 \(auto\) or a whole number of draft nodes from 1 to 128"
    side = r"Budget N is blank \(the Budget N above\), auto, or a whole number of draft nodes from 1 to 128"
    with pytest.raises(gr.Error, match=rf"^\W?B's {side} \(got 2.5\)"):
        check_compare("talon", "talon", 0, 2.5, *panel())
    for typed, shown in (("abc", "'abc'"), (-5, "-5"), (100_000, "100000")):  # each refusal says what N takes
        with pytest.raises(gr.Error, match=rf"^\W?A's {side} \(got {shown}\)"):
            check_compare("talon", "talon", typed, None, *panel())
    check_compare("talon", "talon", " Auto ", "", *panel())
    with pytest.raises(gr.Error, match=rf"^\W?{rule} \(got 'many'\)"):
        check_run(*panel(budget="many"))
    with pytest.raises(gr.Error, match=rf"^\W?{rule} \(got 2.5\)"):
        check_run(*panel(budget=2.5))  # was run as N=2 while the slider showed 3
    check_run(*panel(budget=3.0, seed="7"))
    with pytest.raises(gr.Error, match="no drafter to overlap"):
        check_async(*panel(method="ar"))
    with pytest.raises(gr.Error, match=r"^\W?Prompt B is empty"):
        check_prompts("a", "", *panel())
    with pytest.raises(gr.Error, match=r"30,000 characters\. On (a|this) CPU the limit that counts"):
        check_prompts("a", "b" * 30_000, *panel())
    # the two length limits agree: the characters' one names the CPU's tokens' one (in characters of
    # English before the model is loaded, of this text once it is: another test may have loaded it) ...
    limit = r"^\W?The prompt has 30,000 characters\. On (a|this) CPU the limit that counts is 2,048 tokens"
    with pytest.raises(gr.Error, match=limit):
        check_run(*panel(prompt="word " * 6_000))
    # ... and the tokens' one counts the prompt's own characters a token (19,825 over 4,436 tokens)
    with pytest.raises(gr.Error, match=r"4,436 tokens \(19,825 characters\).* 2,048 tokens here: .* about 9,100 char"):
        check_prompt_length([0] * 4436, "cpu", 19_825)
    check_prompt_length([0] * 4436, "cuda", 19_825)  # no limit on a GPU
    # a Target folder that is not there, or holds no model, is refused before any load step starts
    # (the choices said once: by the loader's sentence where it lists them, else by the app's advice)
    with pytest.raises(gr.Error, match=r"^\W?Target model: There is no directory") as refused:
        check_compare("eagle2", "talon", None, None, *panel(target_spec=str(tmp_path / "gone")))
    assert refused.value.message.count("'embedded'") == 1 and TARGET_ADVICE not in refused.value.message
    with pytest.raises(gr.Error, match=r"^\W?Target model: .* has no config.json") as refused:
        check_async(*panel(target_spec=str(tmp_path)))
    assert refused.value.message.count("'embedded'") == 1 and refused.value.message.endswith(TARGET_ADVICE)
    (tmp_path / "model.gguf").write_text("")  # a file where a folder is wanted: said so, not "no config.json"
    with pytest.raises(gr.Error, match=r"^\W?Target model: .*model.gguf is a file: point at a model directory"):
        check_run(*panel(target_spec=str(tmp_path / "model.gguf")))


def test_the_load_steps_refuse_a_target_that_cannot_load_with_the_fields_message_once(tmp_path):
    # Between each tab's check and its run (tests/test_browser.py drives it): the message names the field
    # and says the choices once (the loader's own sentence has them; the app's advice is not added twice).
    import gradio as gr

    from ui.compare import load_compare_models
    from ui.settings import SETTING_NAMES, RunSettings, load_panel_models

    assert all(hasattr(f, "__wrapped__") for f in (load_panel_models, load_compare_models))  # model work
    missing = RunSettings(prompt="List three colours.", target_spec=str(tmp_path / "no-such-model"))
    panel = [getattr(missing, name) for name in SETTING_NAMES]
    for load in (lambda: load_panel_models(*panel), lambda: load_compare_models("chain", "talon", None, None, *panel)):
        with pytest.raises(gr.Error) as refused:
            load()
        assert refused.value.message.startswith("Target model: There is no directory")
        assert refused.value.message.count("'embedded'") == 1


def test_the_run_handlers_do_the_model_work_and_the_checks_do_not():
    # The runs go through model_work (fresh threads; a GPU lease on Spaces); a check must stay a plain
    # call, or the button would take a GPU lease to say the prompt is empty.
    from ui.async_tab import check_async, run_sync_async
    from ui.compare import check_compare, run_compare
    from ui.explore import check_run, run_explore
    from ui.prompts import check_prompts, run_prompts

    assert all(hasattr(f, "__wrapped__") for f in (run_explore, run_prompts, run_compare, run_sync_async))
    assert not any(hasattr(f, "__wrapped__") for f in (check_run, check_prompts, check_compare, check_async))


def test_the_price_menu_offers_each_measured_machine_once():
    """Projections: the newest cost suite of each machine and dtype in docs/bench, each labelled with its
    machine (repeats of one machine were five entries that differed only in a folder's suffix)."""
    from ui.shared import machine_label, measured_curves

    curves = measured_curves()
    labels = [label for label, _ in curves.values()]
    machines = [label.split(", measured")[0] for label in labels]
    assert len(machines) == len(set(machines)) >= 3
    assert any(m.startswith("GPU (NVIDIA H200)") for m in machines)
    assert "CPU (AMD EPYC), AVX-512, 2 cores, float32" in machines
    # each names its folder by a path that is there ("docs/bench/cost-auto-a" was in two machines' folders)
    for key, label in zip(curves, labels):
        assert label.endswith(f"(docs/bench/{key})") and (ROOT / "docs" / "bench" / key / "meta.json").is_file()
    assert any("/" in key for key in curves)
    assert machine_label({"device": "cpu", "cpu": "Intel Xeon", "cpu_flags": "avx2 fma", "cpu_count": 4}) == (
        "CPU (Intel Xeon), AVX2, 4 cores"
    )


def test_the_example_pair_command_says_what_to_fix_instead_of_a_traceback(capsys, monkeypatch):
    """``python -m ui.prompts --max-new 0`` ended in a ``gradio.exceptions.Error`` traceback; it prints
    the page's message and exits with status 2, before any model loads."""
    from ui import prompts

    monkeypatch.setattr(prompts, "prepare", lambda *a, **k: pytest.fail("a model would load"))
    assert prompts.main(["--max-new", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and "new tokens" in err.lower()


def test_the_busy_note_compares_plain_steps_or_else_priced_steps_with_the_cost_curve(monkeypatch):
    import dataclasses

    from tests.viz_fakes import random_trace
    from ui import shared

    monkeypatch.setattr(shared.os, "getloadavg", lambda: (0.5, 0.5, 0.5), raising=False)  # a quiet load average
    curve = {"plain": 0.060}

    def run(step_seconds: float, price: float | None) -> object:
        trace = random_trace(4, 6)
        steps = [
            dataclasses.replace(s, verify_seconds=step_seconds, draft_seconds=0.0, price=price) for s in trace.steps
        ]
        return dataclasses.replace(trace, steps=steps, cost_curve=curve)

    assert shared.priced_step_ratio([run(0.120, 2.0)]) == pytest.approx(1.0)
    assert shared.busy_note([], [run(0.120, 2.0)]) == ""  # as fast as its prices say
    slow = shared.busy_note([], [run(0.240, 2.0)])
    assert slow.startswith("**The machine is busy**") and "the steps took 2.0× what their prices stand for" in slow
    assert shared.busy_note([], [run(0.240, None)]) == ""  # nothing priced: nothing to compare with
    overlapped = dataclasses.replace(run(0.240, 2.0), execution="async")  # drafting beside verifying: unpriced
    assert shared.priced_step_ratio([overlapped]) is None and shared.busy_note([], [overlapped]) == ""
    plain = run(0.120, None)  # plain steps of 120 ms against the curve's 60: the plain-step sentence, alone
    both = shared.busy_note([plain], [run(0.240, 2.0)])
    assert "a plain decoding step took 120 ms, 2.0× the 60 ms" in both and "what their prices stand for" not in both


def test_a_table_shows_each_number_column_to_its_decimals_and_keeps_its_numbers():
    import gradio as gr
    import pandas as pd

    from ui.table_view import MISSING, with_decimals

    table = pd.DataFrame(
        {"run": ["ar", "B", "C"], "speedup": [1.0, 1.3, None], "tokens/s": [10.84, 13.7, 9.0], "reps": [3, 3, None]}
    )
    shown = gr.Dataframe().postprocess(with_decimals(table, {"speedup": 2, "tokens/s": 1, "not a column": 3}))
    assert shown.metadata["display_value"] == [
        ["ar", "1.00", "10.8", "3"],  # a count in a float column (a cell is missing) still reads as a count
        ["B", "1.30", "13.7", "3"],
        ["C", MISSING, "9.0", MISSING],
    ]
    assert [row[1:3] for row in shown.data][:2] == [[1.0, 10.84], [1.3, 13.7]]  # what a client reads: numbers


def test_the_default_head_on_weights_it_does_not_fit_drafts_with_prompt_lookup_and_says_so():
    # A Space's default target is the Hub's original of the embedded model, which the head loads for only
    # where its fingerprint fits; on any other weights the default drafter must still run.
    import gradio as gr

    from talon.drafters.ngram import NgramDrafter
    from tests.tiny import tiny_target
    from ui.shared import make_drafter

    target = tiny_target()
    said: list[str] = []
    assert isinstance(make_drafter("talon", "head", target, said), NgramDrafter)
    assert len(said) == 1 and said[0].startswith("The trained head does not fit tiny-llama")
    with pytest.raises(gr.Error, match="Drafter: The draft head .* was trained for"):
        make_drafter("hybrid", "head", target)  # hybrid already merges prompt lookup: no silent swap


def test_a_mistyped_drafter_is_told_the_built_in_forms_once():
    """The Drafter box's refusal of a bare word lists the built-in forms once, first (a typo is the likely
    cause), not the load's advice and then every form's description again."""
    import gradio as gr

    from talon.drafters.factory import DRAFTER_FORMS
    from tests.tiny import tiny_target
    from ui.shared import make_drafter

    with pytest.raises(gr.Error) as err:
        make_drafter("talon", "zzz-not-a-drafter", tiny_target())
    message = str(err.value.message)
    assert message.startswith(f"Drafter: Not a built-in drafter ({DRAFTER_FORMS}), nor a model: ")
    assert message.count("head:DIR_OR_HUB_ID") == 1
    with pytest.raises(gr.Error) as err:  # a path: the load's own message, then the forms
        make_drafter("talon", "/no/such/drafter-dir", tiny_target())
    assert str(err.value.message).count(DRAFTER_FORMS) == 1


def test_the_prompts_table_shows_its_means_to_fixed_decimals():
    """Compare prompts: a mean depth of exactly 2 reads 2.00 beside 1.15 (as the caption says it), a MAT of
    1.6 reads 1.60 beside 2.32; the cells keep their numbers."""
    import gradio as gr

    from tests.viz_fakes import random_trace
    from ui.prompts import PROMPTS_DECIMALS, prompts_table, prompts_view
    from ui.session import Session

    session = Session()
    session.prompts.update(A=random_trace(steps=4, seed=1), B=random_trace(steps=6, seed=2))
    view = prompts_view(session, "verdict")
    table = prompts_table({k: session.prompts[k] for k in "AB"})
    shown = gr.Dataframe().postprocess(view[2]).metadata["display_value"]
    for row, (_, values) in zip(shown, table.iterrows()):
        for column, decimals in PROMPTS_DECIMALS.items():
            assert row[list(table.columns).index(column)] == f"{values[column]:.{decimals}f}"


def test_node_tables_show_a_tiny_probability_in_powers_of_ten():
    """A target probability of 6.878e-06 read 0.000006878 in its node-table cell, which broke across two
    lines at 1024 px; the page shows 6.878e-06 (at most nine characters for any probability), and the
    cell keeps its number for a client and for sorting."""
    import gradio as gr

    from tests.viz_fakes import random_trace
    from ui.table_view import node_rows

    step = random_trace(steps=1, seed=1).steps[0]
    step.target_prob[1] = 6.878e-06
    shown = gr.Dataframe().postprocess(node_rows(step))
    column = shown.headers.index("target prob")
    assert shown.metadata["display_value"][1][column] == "6.878e-06"
    assert shown.data[1][column] == 6.878e-06
    assert all(len(row[column]) <= 9 for row in shown.metadata["display_value"])


def test_class_mode_hides_the_lesson_that_answers_its_question():
    """Compare prompts' intro said where trees grow deep ("lists, code, math ... deep and narrow") above the
    class mode's question; in class mode it asks instead, and the lesson comes back with the answer."""
    from ui.prompts import LESSON, intro

    assert intro(False) == LESSON and "deep and narrow" in LESSON
    asked = intro(True)
    assert not any(word in asked for word in ("deep and narrow", "shallow", "lists", "chat", "sure"))


def test_a_trace_with_no_step_is_refused_when_loaded(tmp_path):
    # Loaded, it read "Loaded a TALON run of 0 steps", then every tab said no run had been loaded.
    from dataclasses import replace

    import gradio as gr

    from talon.trace import RunTrace
    from ui.explore import check_trace_file

    recorded = Path(__file__).parent / "data" / "recorded_talon_head.json"
    check_trace_file(str(recorded))
    empty = tmp_path / "no-steps.json"
    empty.write_text(replace(RunTrace.from_json(recorded.read_text()), steps=[]).to_json())
    with pytest.raises(gr.Error, match=r"not a TALON trace: it holds no decoding step .*'Export trace \(JSON\)'"):
        check_trace_file(str(empty))
