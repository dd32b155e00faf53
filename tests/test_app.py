"""App tier: gradio_client against the app launched in the test process."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path

import pytest
from gradio_client import Client, handle_file

from talon.config import TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.decode import replay
from talon.engine.frozen_step import FrozenStep
from talon.metrics import CONFIDENCE_EDGES, representative_step
from talon.models.registry import ModelRegistry
from talon.trace import RunTrace
from ui.explore import opening_step
from ui.tree_lab import AUTO_RUN_LAB_BUDGET
from viz import summary

pytestmark = pytest.mark.app

PROMPT = "Repeat this list exactly: apples, pears, plums, apples, pears, plums."
RUN_ARGS = dict(
    target_spec="embedded",
    drafter_spec="ngram",
    method="talon",
    budget=16,
    topk=6,
    mu=0.03,
    depth=5,
    gamma=4,
    temperature=0.0,
    max_new=24,
    seed=0,
    execution="sync",
)
"""The settings panel after the prompt (``ui.settings.SETTING_NAMES`` order)."""
VIEW = (
    "slider",
    "plot",
    "text",
    "table",
    "caption",
    "summary",
    "colour",
    "committed",
    "acceptance",
    "shape",
    "timing",
    "timeline",
    "adaptation",
    "calibration",
    "path_calibration",
)
SETTINGS = len(RUN_ARGS) + 1  # the settings panel: the prompt, then RUN_ARGS


def _run(client: Client, prompt: str = PROMPT, color_mode: str = "verdict", **overrides) -> dict:
    args = {**RUN_ARGS, **overrides}
    return dict(zip(VIEW, client.predict(color_mode, prompt, *args.values(), api_name="/run_explore")))


def _figure(plot: dict) -> dict:
    return json.loads(plot["plot"])


def _figure_nodes(plot: dict) -> int:
    """Drawn tree nodes (root included, bonus marker excluded) in a gr.Plot payload."""
    return sum(len(t.get("x", [])) for t in _figure(plot)["data"] if t.get("meta") == "node")


def _exported_trace(client: Client) -> RunTrace:
    path = client.predict(api_name="/export_json")
    return RunTrace.from_json(Path(path).read_text(encoding="utf-8"))


@pytest.fixture()
def client(app_url):
    return Client(app_url, verbose=False)


def test_run_figure_matches_trace_and_every_view_counts_steps_from_one(client):
    out = _run(client)
    trace = _exported_trace(client)
    n = len(trace.steps)
    assert trace.prompt == PROMPT and n
    shown = opening_step(trace)  # a finished run opens on a typical step, not the last
    step = trace.steps[shown - 1]
    assert _figure_nodes(out["plot"]) == len(step.tree)
    assert len(out["table"]["data"]) == len(step.tree)
    assert out["slider"]["minimum"] == 1 and out["slider"]["maximum"] == n and out["slider"]["value"] == shown
    assert out["caption"].startswith(f"**Step {shown} of {n}**")
    assert f"Step {shown}:" in _figure(out["plot"])["layout"]["title"]["text"]
    deepest = max(s.tree.max_depth for s in trace.steps)  # every step on the run's one depth scale
    room = 0.0 if deepest + 2 > 9 else 0.9  # deep trees label above / below instead of to the right
    assert _figure(out["plot"])["layout"]["xaxis"]["range"][1] == pytest.approx(deepest + 1 + 0.9 + room)
    assert "MAT" in out["summary"] and "Mean depth (draft layers below the root)" in out["summary"]
    assert all(out[c] is not None for c in VIEW[7:])
    assert _figure(out["committed"])["data"][0]["x"][0] == 1  # charts: step 1 first
    pieces = out["text"]["pieces"]
    assert [p[0] for p in pieces] == list(range(1, n + 1))[: len(pieces)] and "talon-step" in pieces[0][1]
    assert out["text"]["highlight"] == shown
    assert "source" not in [c[1] if isinstance(c, list) else c for c in out["colour"]["choices"]]
    last = client.predict(n, "verdict", api_name="/show_step")[3]
    assert last.startswith(f"**Step {n} of {n}**") and "The run ends here" in last


def test_step_slider_rerenders_from_trace(client):
    _run(client)
    trace = _exported_trace(client)
    for number in (1, len(trace.steps)):
        plot, text, table, caption = client.predict(number, "confidence", api_name="/show_step")
        assert _figure_nodes(plot) == len(trace.steps[number - 1].tree)
        assert caption.startswith(f"**Step {number} of {len(trace.steps)}**")
        assert f"Step {number}:" in _figure(plot)["layout"]["title"]["text"]
        assert text["highlight"] == number and text["pieces"] == []  # the text is outlined, not re-sent
        assert len(table["data"]) == len(trace.steps[number - 1].tree)


def test_export_loads_back_with_its_prompt_and_settings(client, app_url):
    _run(client, method="eagle2", budget=12, topk=4, depth=4, max_new=20)
    path = client.predict(api_name="/export_json")
    original = RunTrace.from_json(Path(path).read_text(encoding="utf-8"))
    other = Client(app_url, verbose=False)  # a fresh session with no run of its own
    out = other.predict(handle_file(path), "verdict", api_name="/load_trace")
    settings, view, note = out[:SETTINGS], dict(zip(VIEW, out[SETTINGS : SETTINGS + len(VIEW)])), out[-1]
    assert settings[0] == PROMPT and settings[3] == "eagle2" and settings[4] == 12 and settings[7] == 4
    assert settings[10] == 20 and settings[12] == "sync"
    opened = opening_step(original)  # where the run opened when it finished
    assert view["caption"].startswith(f"**Step {opened} of {len(original.steps)}**")
    assert f"*Opened on step {opened}: a typical tree" in view["caption"] or opened == len(original.steps)
    assert _figure_nodes(view["plot"]) == len(original.steps[opened - 1].tree)
    assert "Loaded an EAGLE-2 run" in note and original.target in note
    assert RunTrace.from_json(Path(other.predict(api_name="/export_json")).read_text()) == original


def test_html_export_is_named_and_titled_like_the_step(client):
    _run(client)
    path = Path(client.predict(2, "verdict", api_name="/export_html"))
    method = RUN_ARGS["method"]  # each download says its method, its step and when: several keep apart
    named = "talon" if method == "talon" else f"talon_{method}"  # not talon_talon_...
    assert re.fullmatch(rf"{named}_\d{{8}}-\d{{6}}_step2\.html", path.name), path.name
    json_path = Path(client.predict(api_name="/export_json"))
    assert re.fullmatch(rf"{named}_\d{{8}}-\d{{6}}_trace\.json", json_path.name), json_path.name
    html = path.read_text(encoding="utf-8")
    assert "<html" in html and "plotly" in html.lower() and "Step 2:" in html


def test_two_users_get_their_own_traces(app_url):
    prompts = ["Name three colours.", "Count from one to five in words."]
    results: dict[str, RunTrace] = {}

    def user(prompt: str) -> None:
        c = Client(app_url, verbose=False)
        _run(c, prompt, max_new=12)
        results[prompt] = _exported_trace(c)

    threads = [threading.Thread(target=user, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert {p: results[p].prompt for p in prompts} == {p: p for p in prompts}


def test_an_unreachable_hub_id_fails_at_once_naming_the_field(client):
    for overrides, field in (
        ({"drafter_spec": "nonexistent-org/nonexistent-model"}, "Drafter:"),
        ({"target_spec": "nonexistent-org/nonexistent-model"}, "Target model:"),
    ):
        t0 = time.perf_counter()
        with pytest.raises(Exception, match=field) as err:
            _run(client, **overrides)
        assert time.perf_counter() - t0 < 3.0
        assert "cannot be reached" in str(err.value)
    with pytest.raises(Exception) as err:
        _run(client, drafter_spec="nonexistent-org/nonexistent-model")
    assert "'embedded'" not in str(err.value)  # target advice is not given for the drafter field


def test_a_users_run_does_not_wait_for_another_users_model_load(app_url):
    """B's run while A loads an unreachable Hub id takes about as long as B's run alone."""
    b = Client(app_url, verbose=False)
    t0 = time.perf_counter()
    _run(b, max_new=24)
    alone = time.perf_counter() - t0
    timings: dict[str, float] = {}

    def user_a() -> None:
        start = time.perf_counter()
        with pytest.raises(Exception, match="Drafter"):
            _run(Client(app_url, verbose=False), drafter_spec="nonexistent-org/slow-model")
        timings["a"] = time.perf_counter() - start

    thread = threading.Thread(target=user_a)
    thread.start()
    t0 = time.perf_counter()
    _run(b, max_new=24)
    timings["b"] = time.perf_counter() - t0
    thread.join(30)
    assert timings["a"] < 3.0
    assert timings["b"] < alone + 3.0, timings


def test_stop_ends_the_run_through_the_engine_and_keeps_its_summary(client):
    job = client.submit(
        "verdict", PROMPT, *{**RUN_ARGS, "max_new": 400, "drafter_spec": "layers:4"}.values(), api_name="/run_explore"
    )
    deadline = time.time() + 60

    def streaming() -> bool:  # a step is on show (the first updates say the prompt is being read)
        return any(isinstance(out[4], str) and out[4].startswith("**Step") for out in job.outputs())

    while time.time() < deadline and not streaming():
        time.sleep(0.1)
    assert client.predict(api_name="/stop_run").startswith("Stopping")
    final = dict(zip(VIEW, job.result()))
    trace = _exported_trace(client)
    assert trace.stop_reason == "stopped" and 0 < len(trace.output_ids) < 400
    assert "the Stop button" in final["summary"] and "MAT" in final["summary"]
    n = len(trace.steps)
    # followed, the run stays on its last step, the one on show when Stop was pressed (not its typical one)
    assert final["caption"].startswith(f"**Step {n} of {n}**") and "you pressed Stop" in final["caption"]
    assert "you pressed Stop" in client.predict(n, "verdict", api_name="/show_step")[3]
    assert final["committed"] is not None


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"prompt": "   "}, "empty"),
        ({"mu": 5.0}, "greater than maximum value 1"),  # the slider's own bound check
        ({"budget": -1}, "less than minimum value 0"),  # 0 is auto
        ({"method": "beam"}, "not in the list of choices"),
        ({"drafter_spec": "layers:abc"}, "whole number"),
        ({"max_new": 100000}, "greater than maximum value 512"),
    ],
)
def test_bad_input_gives_a_clear_error(client, overrides, message):
    prompt = overrides.pop("prompt", PROMPT)
    with pytest.raises(Exception, match=message):
        _run(client, prompt, **overrides)


def test_load_rejects_non_trace_json(client, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(Exception, match="not a TALON trace"):
        client.predict(handle_file(str(bad)), "verdict", api_name="/load_trace")


def test_uploads_and_long_prompts_are_refused_before_the_page_changes(client, tmp_path):
    """The checks the page runs before a load or a run changes anything (no API: the browser's events):
    a file that is not a trace, and, the default target being loaded with the app, a prompt too long."""
    import gradio as gr

    from ui.explore import check_trace_file
    from ui.settings import RunSettings, check

    binary = tmp_path / "random.json"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(gr.Error, match=r"not a TALON trace: it is not text\. Load a file saved with"):
        check_trace_file(str(binary))
    long_prompt = "Summarise this: " + "the cat sat on the mat and looked out of the window. " * 300
    with pytest.raises(gr.Error, match=r"This prompt is [\d,]+ tokens .*shorten it to about"):
        check(RunSettings(prompt=long_prompt))
    check(RunSettings(prompt="List three colours."))  # a prompt that fits passes
    # The two refusals name one length: a prompt over the 20,000-character limit is told the CPU's token
    # limit in characters of its own text, as one under it but over 2,048 tokens is.
    sentence = "the cat sat on the mat and looked out of the window. "
    told = []
    for repeats in (300, 500):
        with pytest.raises(gr.Error) as refused:
            check(RunSettings(prompt="Summarise this: " + sentence * repeats))
        told.append(int(re.search(r"about ([\d,]+) characters", refused.value.message).group(1).replace(",", "")))
        assert refused.value.duration is None  # it says what to change: it stays until closed
    assert abs(told[0] - told[1]) <= 200  # both counted in this prompt's own characters a token
    assert "the limit that counts is 2,048 tokens: shorten it to about" in refused.value.message
    # Following the advice passes, also where the prompt's start packs more tokens a character than its
    # average: a count at the average told 3,400 characters here, and 3,400 were refused again.
    dense = "Summarise: " + " ".join(str(k) for k in range(2000)) + " " + sentence * 200
    with pytest.raises(gr.Error) as refused:
        check(RunSettings(prompt=dense))
    fits = int(re.search(r"about ([\d,]+) characters", refused.value.message).group(1).replace(",", ""))
    check(RunSettings(prompt=dense[:fits]))
    assert fits >= 1_500  # not a length far below what fits


COMPARE_OUT = ("position", "a", "b", "table", "caption", "adaptation", "number_a", "number_b", "verdict", "acceptance")


def _compare(
    client: Client, method_a: str, method_b: str, repeats: int = 2, budget_a="", budget_b="", **overrides
) -> dict:
    args = {**RUN_ARGS, "max_new": 16, **overrides}
    out = client.predict(
        method_a, method_b, budget_a, budget_b, "verdict", repeats, PROMPT, *args.values(), api_name="/run_compare"
    )
    return dict(zip(COMPARE_OUT, out))


def test_compare_runs_one_method_at_two_sizes(client):
    """Which N on this machine, in the app: A at N = auto and B at a fixed N, side by side (each side's N
    blank takes the panel's)."""
    out = _compare(client, "talon", "talon", repeats=1, budget_a="auto", budget_b="8", drafter_spec="head")
    names = [row[0] for row in out["table"]["data"]]
    assert names == ["ar: autoregressive", "A: TALON, N=auto (cap 128)", "B: TALON, N=8"]
    verdict = out["verdict"]
    assert "**A (TALON, N=auto (cap 128))**" in verdict and "**B (TALON, N=8)**" in verdict
    assert "Other settings, both methods" in verdict and "N=16" not in verdict
    assert _figure(out["b"])["layout"]["title"]["text"].startswith("B: TALON, N=8 · step")


def test_compare_aligns_the_two_runs_by_output_position_and_repeats_them(client):
    out = _compare(client, "static", "talon", repeats=2)
    table = out["table"]
    assert [row[0] for row in table["data"]] == ["ar: autoregressive", "A: static tree, N=16", "B: TALON, N=16"]
    column = {h: [row[k] for row in table["data"]] for k, h in enumerate(table["headers"])}
    assert all(s is not None and s > 0 for s in column[summary.SPEEDUP_COLUMN])
    assert column["repetitions"] == [2, 2, 2] and all("–" in s for s in column["spread (low–high)"])
    verdict = out["verdict"]
    assert "× plain decoding in this app (spread" in verdict and "over 2 repetitions" in verdict
    assert "N=16 · K=6 · μ=0.03 · depth 5 · γ=4 · greedy · max 16 new tokens" in verdict
    assert any(w in verdict for w in ("was faster in all 2 repetitions", "No clear winner", "same speed"))
    fig_a, fig_b = _figure(out["a"]), _figure(out["b"])
    assert fig_a["layout"]["xaxis"]["range"] == fig_b["layout"]["xaxis"]["range"]
    assert {t["name"].split(":")[0] for t in _figure(out["acceptance"])["data"]} == {"A", "B"}
    token = out["position"]["value"]
    assert out["caption"].startswith(f"Output token {token}")
    for fig, box in ((fig_a, out["number_a"]), (fig_b, out["number_b"])):  # each tree committed that token
        number = box["value"]  # the box also learns the run's last step (a number past it is clamped)
        assert f"of {box['maximum']} ·" in fig["layout"]["title"]["text"]
        span = re.search(r"· tokens? (\d+)(?:–(\d+))?$", fig["layout"]["title"]["text"]).groups()
        assert int(span[0]) <= token <= int(span[1] or span[0])
        assert f"step {number} of" in fig["layout"]["title"]["text"]  # the "go to step" boxes show it
    moved = client.predict(3, "verdict", api_name="/compare_view")
    assert moved[0]["value"] == 3
    by_step = client.predict(2, "verdict", api_name="/go_to_step_of_a")
    assert "step 2 of" in _figure(by_step[1])["layout"]["title"]["text"] and by_step[6]["value"] == 2


def test_compare_checks_both_methods_before_decoding(client):
    with pytest.raises(Exception, match="Method B: EAGLE-2 needs root width K >= 1"):
        _compare(client, "talon", "eagle2", repeats=1, topk=0)


def test_async_run_matches_sync_and_draws_both_timelines(client):
    plot, table, verdict = client.predict(
        2, PROMPT, "embedded", "layers:4", "talon", 8, 4, 0.03, 5, 4, 0.0, 12, 0, "sync", api_name="/run_sync_async"
    )
    assert "Outputs are identical" in verdict and "Measured over 2 interleaved repetitions" in verdict
    assert [row[0] for row in table["data"]][:2] == ["sync", "async"]
    assert table["data"][0][table["headers"].index("repetitions")] == 2
    lanes = {y for t in _figure(plot)["data"] for y in t.get("y", [])}
    assert {"sync · drafter", "sync · target", "async · drafter", "async · target"} <= lanes


def test_hybrid_method_labels_sources(client):
    out = _run(client, PROMPT, method="hybrid", drafter_spec="layers:4", max_new=16)
    trace = _exported_trace(client)
    assert trace.tree_config["method"] == "hybrid" and trace.drafter.startswith("hybrid")
    assert all("retrieval_weight" in s.drafter_info for s in trace.steps)
    assert any("retrieval" in s.tree.source for s in trace.steps)  # the list repeats, so lookup fires
    assert "source" in [c[1] if isinstance(c, list) else c for c in out["colour"]["choices"]]


def test_hybrid_refuses_ngram_as_its_model(client):
    with pytest.raises(Exception, match="merged with a model drafter \\(the hybrid method"):
        _run(client, PROMPT, method="hybrid", drafter_spec="ngram")


# ---- the tree lab ------------------------------------------------------------------------------------------
LAB_DRAFTER = "layers:4"  # always proposes (prompt lookup can have nothing to offer at a step)


def _freeze(client: Client, number: int, drafter: str = LAB_DRAFTER):
    return client.predict(number, "embedded", drafter, api_name="/freeze")


def _redraw(client: Client, method="talon", budget=16, topk=6, mu=0.03, depth=5, gamma=4, colour="verdict"):
    return client.predict(method, budget, topk, mu, depth, gamma, colour, api_name="/redraw")


def _at_the_runs_step(target, trace: RunTrace, index: int, cfg: TreeConfig):
    """The tree of ``cfg`` built where the lab builds it: the run replayed up to step ``index`` (from 0)."""
    replayed = replay(trace, target, drafter_for(trace.tree_config["method"], LAB_DRAFTER, target), index)
    assert replayed is not None
    return FrozenStep.of_run(target, ModelRegistry(), LAB_DRAFTER, trace, index, replayed=replayed).explore(cfg)


def test_a_new_n_or_mu_at_a_frozen_step_gives_what_the_run_replayed_there_gives(client, target):
    _run(client, drafter_spec=LAB_DRAFTER)
    trace = _exported_trace(client)
    number = min(3, len(trace.steps))
    status, *sliders = _freeze(client, number)
    assert f"step {number} of {len(trace.steps)}" in status and sliders[1]["value"] == 16
    for budget, topk, mu in ((8, 6, 0.03), (24, 6, 0.03), (16, 6, 0.3), (16, 6, 0.005), (16, 0, 0.1)):
        plot, caption, gate, nodes_table = _redraw(client, budget=budget, topk=topk, mu=mu)
        cfg = TreeConfig(method="talon", budget=budget, topk=topk, mu=mu)
        fresh = _at_the_runs_step(target, trace, number - 1, cfg)
        nodes = sum(len(t.get("x", [])) for t in _figure(plot)["data"] if t.get("meta") == "node")
        assert nodes == len(fresh.tree)
        assert f"{fresh.accepted_tokens} accepted" in caption
        verdicts = {t["name"]: len(t["x"]) for t in _figure(plot)["data"] if t.get("meta") == "node"}
        assert verdicts.get("accepted", 0) == fresh.accepted_tokens
        assert gate["visible"] is True and _figure(gate["value"])["data"]
        column = {h: [row[k] for row in nodes_table["data"]] for k, h in enumerate(nodes_table["headers"])}
        assert column["id"] == list(range(len(fresh.tree)))  # the table lists the tree drawn, node by node
        assert column["verdict"] == list(fresh.status)


def test_freezing_a_step_of_an_auto_sized_run_says_what_the_lab_builds_instead(client):
    _run(client, drafter_spec=LAB_DRAFTER, budget=0, max_new=12)
    status, *sliders = _freeze(client, 1)
    assert "N=auto" in status and "Draw the price against N" in status
    assert sliders[1]["value"] == AUTO_RUN_LAB_BUDGET
    _run(client, drafter_spec=LAB_DRAFTER, max_new=12)  # a fixed N: the lab starts at the run's own
    status, *sliders = _freeze(client, 1)
    assert "N=auto" not in status and sliders[1]["value"] == RUN_ARGS["budget"]
    _run(client, drafter_spec=LAB_DRAFTER, method="ar", budget=0, max_new=12)  # no N of its own (it read 128)
    status, *sliders = _freeze(client, 1)
    assert sliders[1]["value"] == AUTO_RUN_LAB_BUDGET and "not one of this run's steps" not in status
    steps = len(_exported_trace(client).steps)
    status, *sliders = _freeze(client, 999)  # a step past the run's: the last is frozen, and the line says so
    assert f"Step 999 is not one of this run's steps (1 to {steps}), so step {steps} was frozen." in status
    assert sliders[-1] == steps


def test_the_same_context_row_matches_the_engine_and_rerolls_count(client, target):
    _run(client, drafter_spec=LAB_DRAFTER)
    trace = _exported_trace(client)
    _freeze(client, 2)
    table = client.predict(16, 6, 0.03, 5, 4, api_name="/every_method")
    rows = {row[0]: dict(zip(table["headers"], row)) for row in table["data"]}
    assert set(rows) == {"TALON", "EAGLE-2", "static tree", "chain (γ=4)"}
    for label, method in (("TALON", "talon"), ("EAGLE-2", "eagle2"), ("chain (γ=4)", "chain")):
        cfg = TreeConfig(method=method, budget=16, topk=6, mu=0.03, depth=5, gamma=4)
        fresh = _at_the_runs_step(target, trace, 1, cfg)
        assert rows[label]["accepted"] == fresh.accepted_tokens
        assert str(rows[label]["draft nodes"]).split()[0] == str(fresh.tree.num_drafts)
    assert rows["chain (γ=4)"]["draft nodes"] == "4 (γ, not N=16)"  # honest about what it counts
    assert sum(r["best"] == "★ winner" for r in rows.values()) >= 1
    _redraw(client)
    plot, sampling, note = client.predict(api_name="/reroll")
    bars = _figure(plot)["data"]
    emitted = next(b for b in bars if b["name"].startswith("emitted"))
    assert "200 re-rolls" in note and sum(emitted["y"]) <= 1.0 + 1e-9
    gated = client.predict(16, 0, 0.03, 5, 4, api_name="/every_method")  # K=0: EAGLE-2 cannot run, and says so
    assert [row[0] for row in gated["data"]][1].startswith("EAGLE-2: needs root width K >= 1")  # in its place
    sweep = client.predict("mu", "talon", 16, 6, 0.03, 5, 4, api_name="/sweep")
    assert {t["name"] for t in _figure(sweep)["data"]} == {
        "accepted drafts",
        "depth reached (layers)",
        "widest layer (nodes, right axis)",
    }
    for k in (6, 0):  # EAGLE-2 needs K >= 1: its K sweep starts there, also with the slider at K=0
        roots = _figure(client.predict("topk", "eagle2", 16, k, 0.03, 5, 4, api_name="/sweep"))
        assert roots["data"][0]["x"][0] == 1
        assert roots["layout"]["title"]["text"].endswith(f"<br><sup>EAGLE-2 · N=16 · K={max(k, 1)} · depth 5</sup>")
    chain = _figure(client.predict("budget", "chain", 16, 6, 0.03, 5, 4, api_name="/sweep"))  # named as swept
    assert (
        "TALON · N=16 · K=6 · μ=0.03 (the chain has no N, K or μ: swept as TALON)" in chain["layout"]["title"]["text"]
    )


def test_the_lab_needs_a_run_and_a_frozen_step(app_url):
    fresh = Client(app_url, verbose=False)
    with pytest.raises(Exception, match="Freeze a step first"):
        _redraw(fresh)
    with pytest.raises(Exception, match="run or load a trace"):
        _freeze(fresh, 1)


# ---- issue 25: two prompts, why each tree stopped, both acceptance rates, calibration, price --------------------
PROMPTS_OUT = (  # the results column and the question group are layout: the API leaves them out
    "table",
    "caption",
    "slider_a",
    "slider_b",
    "plot_a",
    "plot_b",
    "heat_a",
    "heat_b",
    "dist",
    "acceptance",
    "nodes_a",
    "nodes_b",
)
PREDICTABLE = "List the twelve months of the year in order, numbered 1 to 12, one per line."
OPEN = "What are three good habits for getting better sleep? Explain each briefly."


def _prompts(client: Client, predict: bool = False, **overrides) -> dict:
    args = {**RUN_ARGS, "drafter_spec": "head", "budget": 12, "max_new": 20, **overrides}
    out = client.predict(PREDICTABLE, OPEN, predict, "verdict", "ignored", *args.values(), api_name="/run_prompts")
    return dict(zip(PROMPTS_OUT, out))


def test_two_prompts_run_with_the_same_settings_on_one_scale(client):
    out = _prompts(client)
    paths = client.predict(api_name="/export_prompts")
    a, b = (RunTrace.from_json(Path(p).read_text(encoding="utf-8")) for p in paths)
    assert (a.prompt, b.prompt) == (PREDICTABLE, OPEN)
    assert a.tree_config == b.tree_config and a.decode_config == b.decode_config
    assert a.tree_config["budget"] == 12 and a.drafter == b.drafter and a.target == b.target
    rows = {row[0][0]: dict(zip(out["table"]["headers"], row)) for row in out["table"]["data"]}
    for label, trace in (("A", a), ("B", b)):
        depth = sum(s.tree.max_depth for s in trace.steps) / len(trace.steps)
        assert rows[label]["mean depth"] == pytest.approx(round(depth, 2))
        assert rows[label]["draft nodes / step"] == pytest.approx(
            round(sum(s.tree.num_drafts for s in trace.steps) / len(trace.steps), 1)
        )
    fig_a, fig_b = _figure(out["plot_a"]), _figure(out["plot_b"])
    assert fig_a["layout"]["xaxis"]["range"] == fig_b["layout"]["xaxis"]["range"]
    span = lambda fig: fig["layout"]["yaxis"]["range"][0] - fig["layout"]["yaxis"]["range"][1]  # noqa: E731
    assert span(fig_a) == pytest.approx(span(fig_b))  # one width scale (a narrower tree sits in its middle)
    assert fig_a["layout"]["height"] == fig_b["layout"]["height"]
    heat_a, heat_b = _figure(out["heat_a"]), _figure(out["heat_b"])
    assert heat_a["layout"]["yaxis"]["range"] == heat_b["layout"]["yaxis"]["range"]
    assert heat_a["data"][0]["zmax"] == heat_b["data"][0]["zmax"]
    assert out["slider_a"]["value"] == representative_step(a.steps, around="mean") + 1  # the depth nearest the mean
    assert "Same settings for both: TALON · N=12" in out["caption"]
    # each tree on show has its node table (the tree's nodes, root first), and a slider moves both
    assert len(out["nodes_a"]["data"]) == len(a.steps[out["slider_a"]["value"] - 1].tree)
    assert len(out["nodes_b"]["data"]) == len(b.steps[out["slider_b"]["value"] - 1].tree)
    other, nodes = client.predict(1, "verdict", api_name="/prompt_b_step")
    assert _figure(other)["layout"]["xaxis"]["range"] == fig_a["layout"]["xaxis"]["range"]
    tree = b.steps[0].tree
    assert [row[:3] for row in nodes["data"]] == [[i, tree.parent[i], tree.depth[i]] for i in range(len(tree))]


def test_class_mode_hides_the_trees_until_the_guess(client):
    out = _prompts(client, predict=True, max_new=8)
    assert "Both prompts are decoded" in out["caption"] and "press **Reveal**" in out["caption"]
    assert not out["table"]["data"] and out["plot_a"] is None and out["plot_b"] is None  # nothing to peek at
    assert not out["nodes_a"]["data"] and not out["nodes_b"]["data"]
    with pytest.raises(Exception, match="Pick an answer first"):
        client.predict(None, "verdict", api_name="/reveal")
    revealed = dict(zip((*PROMPTS_OUT, "verdict", "lesson"), client.predict("A", "verdict", api_name="/reveal")))
    assert len(revealed["table"]["data"]) == 2 and revealed["plot_a"] is not None and revealed["nodes_a"]["data"]
    assert revealed["verdict"].startswith("You said: *A grows deeper trees*.")
    assert revealed["lesson"].startswith("**The lesson of this app.**")  # hidden until the answer is in
    revealed = {"verdict": revealed["verdict"]}
    assert ("**Right.**" in revealed["verdict"]) != ("**Not this time.**" in revealed["verdict"])


STOP_FACTS = {
    # what the caption says -> what must then be true of the tree (checked on the exported trace)
    "the budget N=16 was used up in layer": lambda step, cfg: step.tree.num_drafts == cfg["budget"],
    "the drafter proposed nothing more": lambda step, cfg: step.tree.num_drafts < cfg["budget"],
    "its depth of 3 layers was drafted": lambda step, cfg: step.drafter_forwards == cfg["depth"],
    "its length γ=4 was reached": lambda step, cfg: step.tree.num_drafts == cfg["gamma"],
    "the run's end:": lambda step, cfg: step.tree.max_depth == cfg["left"] - 1,
}
STOP_KEY = {
    "the budget N=16 was used up in layer": "cap",
    "the drafter proposed nothing more": "drafter",
    "its depth of 3 layers was drafted": "depth",
    "its length γ=4 was reached": "depth",
    "the run's end:": "end",
}


@pytest.mark.parametrize(
    "overrides",
    [
        {"method": "talon", "drafter_spec": "ngram", "max_new": 40},  # prompt lookup runs dry at some steps
        {"method": "eagle2", "drafter_spec": "layers:4", "depth": 3, "max_new": 16},
        {"method": "chain", "drafter_spec": "ngram", "max_new": 24},
    ],
)
def test_every_steps_caption_says_why_its_tree_stopped_and_the_tree_agrees(client, overrides):
    _run(client, **overrides)
    trace = _exported_trace(client)
    said, left = [], overrides["max_new"]  # new tokens the run had left before the step
    for number in range(1, len(trace.steps) + 1):
        caption = client.predict(number, "verdict", api_name="/show_step")[3]
        step = trace.steps[number - 1]
        phrase = next((p for p in STOP_FACTS if f"Stopped: {p}" in caption), None)
        assert phrase is not None, caption
        assert STOP_KEY[phrase] == step.stop, (number, caption, step.stop)
        assert STOP_FACTS[phrase](step, {**trace.tree_config, "left": left}), (number, caption)
        said.append(STOP_KEY[phrase])
        left -= len(step.committed_ids)
    if overrides["method"] == "talon":
        assert {"cap", "drafter"} <= set(said)  # both happen in this run, so a caption stuck on one fails


RECORDED = Path(__file__).parent / "data" / "recorded_talon_head.json"


def _load_recorded(client: Client) -> dict:
    out = client.predict(handle_file(str(RECORDED)), "verdict", api_name="/load_trace")
    return dict(zip(VIEW, out[SETTINGS : SETTINGS + len(VIEW)]))


def test_the_conditional_acceptance_rates_equal_a_hand_count(client):
    """On the recorded run (a real TALON run with the head): per depth d, accepted at d ÷ trees that reached
    d, and accepted at d ÷ steps whose accepted node at d - 1 had children, counted by hand here."""
    trace = RunTrace.from_json(RECORDED.read_text(encoding="utf-8"))
    bars, line = _figure(_load_recorded(client)["acceptance"])["data"]
    deepest = max(s.tree.max_depth for s in trace.steps)
    for d in range(1, deepest + 1):
        reached = accepted = checked = 0
        for step in trace.steps:
            depth_of = step.tree.depth
            if any(x == d for x in depth_of):
                reached += 1
            if len(step.accepted_path) - 1 >= d:
                accepted += 1
            if len(step.accepted_path) - 1 >= d - 1:
                node = step.accepted_path[d - 1]
                if node in step.tree.parent:
                    checked += 1
        assert bars["y"][d - 1] == pytest.approx(accepted / reached)
        assert line["y"][d - 1] == (pytest.approx(accepted / checked) if checked else None), d
    assert bars["y"] != line["y"]  # this run tells the two rates apart


def test_the_reliability_data_bin_the_runs_own_verdicts(client):
    """Every node the target checked in the recorded run is in the draft-probability chart, binned by its
    own draft probability, with the share accepted counted by hand."""
    trace = RunTrace.from_json(RECORDED.read_text(encoding="utf-8"))
    figure = _figure(_load_recorded(client)["calibration"])
    raw = [t for t in figure["data"] if t.get("name", "").startswith("draft probability (raw)")]
    calibrated = [t for t in figure["data"] if t.get("name", "").startswith("calibrated")]
    counts: dict[tuple[int, int], list[int]] = {}
    for step in trace.steps:
        for node in range(1, len(step.tree)):
            if step.tree.parent[node] not in step.accepted_path:
                continue  # never checked: its parent was not accepted
            q = math.exp(step.tree.draft_logprob[node])
            b = max(k for k in range(len(CONFIDENCE_EDGES) - 1) if q >= CONFIDENCE_EDGES[k])
            cell = counts.setdefault((min(step.tree.depth[node], 4), b), [0, 0])
            cell[0] += 1
            cell[1] += node in step.accepted_path
    drawn = {}
    for t in raw:
        panel = 1 if t["xaxis"] == "x" else int(t["xaxis"][1:])
        for low, _high, count, hits in t["customdata"]:
            drawn[(panel, CONFIDENCE_EDGES.index(low))] = [count, hits]
    assert drawn == counts
    assert sum(c[2] for t in calibrated for c in t["customdata"]) == sum(c for c, _ in counts.values())
    assert "ECE" in raw[0]["name"]


def test_the_lab_at_a_runs_last_step_drafts_no_deeper_than_the_run_could(client):
    """At a run's last step the lab's trees stop where the run's did (the tokens it had left), and the
    status line says so: before, it drew a 3-layer tree committing past the run's max new tokens."""
    _run(client, drafter_spec=LAB_DRAFTER, max_new=10)
    trace = _exported_trace(client)
    left = 10 - sum(len(s.committed_ids) for s in trace.steps[:-1])
    status, *_ = _freeze(client, len(trace.steps))
    said = "one new token left" if left == 1 else f"{left} new tokens left"
    assert said in status
    _, caption, _, _ = _redraw(client, method="chain", gamma=8)  # as deep as it can go
    if left == 1:  # no room for a draft: the lab's tree is the root alone, a plain step
        assert "a plain decoding step, no draft tree" in caption and "the run's end" in caption
    else:
        layers = int(re.search(r"in (\d+) layers?", caption).group(1))
        assert layers <= left - 1 and "the run's end" in caption
    status, *_ = _freeze(client, 1)  # the first step had 10 left: no note, and the chain is 8 deep
    assert "new tokens left" not in status and "in 8 layers" in _redraw(client, method="chain", gamma=8)[1]


def test_the_gate_of_a_step_is_one_click_from_its_tree(client):
    _run(client, drafter_spec=LAB_DRAFTER, max_new=12)
    # the run's own drafter, whatever the Drafter field holds since
    figure, note = client.predict(2, "embedded", "ngram", api_name="/show_gate")
    assert figure["visible"] is True and "(the same tree as the run's)" in note
    layers = _figure(figure["value"])["data"]
    assert any(t.get("name") == "admitted" for t in layers)
    status, *_ = _freeze(client, 2, drafter="ngram")  # the lab now holds that step: freezing it again is immediate
    assert "step 2 of" in status and f"drafter `{LAB_DRAFTER}`" in status
    status, *_, shown = _freeze(client, 0)  # a step typed outside the run is clamped, and the box says so
    assert "step 1 of" in status and shown == 1


def test_the_price_of_a_tree_against_n_marks_the_pick_and_projects(client):
    _run(client, drafter_spec="head", max_new=10)
    _freeze(client, 2, drafter="head")
    plot, note = client.predict("cost-cuda-h100", "talon", 16, 4, 0.1, 5, 4, api_name="/price")
    fig = _figure(plot)
    assert fig["layout"]["title"]["text"].startswith("Projection: the trees of step 2 priced with GPU (NVIDIA H100")
    texts = [a["text"] for a in fig["layout"]["annotations"]]
    picks = [t for t in fig["data"] if "cost rule" in (t.get("name") or "")]  # its stars; a plain step: a line
    assert "your N = 16" in texts and (picks or "cost rule: a plain step" in texts)
    committed = next(t for t in fig["data"] if t["name"].startswith("committed by the verifier"))
    assert all(isinstance(v, int) and v >= 1 for v in committed["y"])
    assert "**Projection:**" in note and "The cost rule would grow" in note


def test_a_too_long_prompt_gets_a_clear_message(client):
    long_prompt = "Summarise this: " + "the cat sat on the mat and looked out of the window. " * 300
    t0 = time.perf_counter()
    with pytest.raises(Exception, match=r"This prompt is [\d,]+ tokens .*shorten it to about"):
        _run(client, long_prompt)
    assert time.perf_counter() - t0 < 10


def test_html_export_names_the_prompt_and_settings(client):
    _run(client)
    page = Path(client.predict(1, "verdict", api_name="/export_html")).read_text(encoding="utf-8")
    assert "<title>TALON tree, step 1 of" in page and "Repeat this list exactly" in page
    assert "TALON · N=16 · K=6 · μ=0.03 · greedy" in page
