"""App tier: gradio_client against the app launched in the test process."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from gradio_client import Client, handle_file

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.decode import run_to_end
from talon.engine.frozen_step import step_context
from talon.trace import RunTrace

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
)


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
    last = trace.steps[-1]
    assert _figure_nodes(out["plot"]) == len(last.tree)
    assert len(out["table"]["data"]) == len(last.tree)
    assert out["slider"]["minimum"] == 1 and out["slider"]["maximum"] == n and out["slider"]["value"] == n
    assert f"**Step {n} of {n}**" in out["caption"] and "The run ends here" in out["caption"]
    assert f"Step {n}:" in _figure(out["plot"])["layout"]["title"]["text"]
    assert "MAT" in out["summary"]
    assert all(out[c] is not None for c in VIEW[7:])
    assert _figure(out["committed"])["data"][0]["x"][0] == 1  # charts: step 1 first
    pieces = out["text"]["pieces"]
    assert [p[0] for p in pieces] == list(range(1, n + 1))[: len(pieces)] and "talon-step" in pieces[0][1]
    assert out["text"]["highlight"] == n
    assert "source" not in [c[1] if isinstance(c, list) else c for c in out["colour"]["choices"]]


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
    settings, view, note = out[:13], dict(zip(VIEW, out[13:26])), out[26]
    assert settings[0] == PROMPT and settings[3] == "eagle2" and settings[4] == 12 and settings[7] == 4
    assert settings[10] == 20 and settings[12] == "sync"
    assert view["caption"].startswith(f"**Step 1 of {len(original.steps)}**")
    assert _figure_nodes(view["plot"]) == len(original.steps[0].tree)
    assert "Loaded a eagle2 run" in note and original.target in note
    assert RunTrace.from_json(Path(other.predict(api_name="/export_json")).read_text()) == original


def test_html_export_is_named_and_titled_like_the_step(client):
    _run(client)
    path = Path(client.predict(2, "verdict", api_name="/export_html"))
    assert path.name == "talon_tree_step2.html"
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
    while time.time() < deadline and len(job.outputs()) < 2:
        time.sleep(0.1)
    assert client.predict(api_name="/stop_run").startswith("Stopping")
    final = dict(zip(VIEW, job.result()))
    trace = _exported_trace(client)
    assert trace.stop_reason == "stopped" and 0 < len(trace.output_ids) < 400
    assert "the Stop button" in final["summary"] and "MAT" in final["summary"]
    assert "you pressed Stop" in final["caption"] and final["committed"] is not None


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"prompt": "   "}, "empty"),
        ({"mu": 5.0}, "greater than maximum value 1"),  # the slider's own bound check
        ({"budget": 0}, "less than minimum value 1"),
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


def test_compare_aligns_the_two_runs_by_output_position(client):
    position, plot_a, plot_b, table, caption, adaptation, number_a, number_b = client.predict(
        "static",
        "talon",
        "verdict",
        PROMPT,
        "embedded",
        "ngram",
        "talon",
        16,
        6,
        0.03,
        5,
        4,
        0.0,
        16,
        0,
        "sync",
        api_name="/run_compare",
    )
    assert [row[0] for row in table["data"]] == ["ar: autoregressive", "A: static tree", "B: TALON"]
    speedups = [row[table["headers"].index("speedup")] for row in table["data"]]
    assert all(s is not None and s > 0 for s in speedups)
    fig_a, fig_b = _figure(plot_a), _figure(plot_b)
    assert fig_a["layout"]["xaxis"]["range"] == fig_b["layout"]["xaxis"]["range"]
    token = position["value"]
    assert caption.startswith(f"Output token {token}")
    for fig, number in ((fig_a, number_a), (fig_b, number_b)):  # each tree is the step that committed that token
        first, last = (int(x) for x in fig["layout"]["title"]["text"].split("tokens ")[1].split("–"))
        assert first <= token <= last
        assert f"step {number} of" in fig["layout"]["title"]["text"]  # the "go to step" boxes show it
    moved = client.predict(3, "verdict", api_name="/compare_view")
    assert moved[0]["value"] == 3
    by_step = client.predict(2, "verdict", api_name="/go_to_step_of_a")
    assert "step 2 of" in _figure(by_step[1])["layout"]["title"]["text"] and by_step[6] == 2


def test_compare_checks_both_methods_before_decoding(client):
    with pytest.raises(Exception, match="Method B: EAGLE-2 needs root width K >= 1"):
        client.predict(
            "talon",
            "eagle2",
            "verdict",
            PROMPT,
            "embedded",
            "ngram",
            "talon",
            16,
            0,
            0.03,
            5,
            4,
            0.0,
            16,
            0,
            "sync",
            api_name="/run_compare",
        )


def test_async_run_matches_sync_and_draws_both_timelines(client):
    plot, table, verdict = client.predict(
        PROMPT, "embedded", "layers:4", "talon", 8, 4, 0.03, 5, 4, 0.0, 12, 0, "sync", api_name="/run_sync_async"
    )
    assert "Outputs are identical" in verdict
    assert [row[0] for row in table["data"]][:2] == ["sync", "async"]
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
    with pytest.raises(Exception, match="hybrid method merges a model drafter"):
        _run(client, PROMPT, method="hybrid", drafter_spec="ngram")


# ---- the tree lab ------------------------------------------------------------------------------------------
LAB_DRAFTER = "layers:4"  # always proposes (prompt lookup can have nothing to offer at a step)


def _freeze(client: Client, number: int, drafter: str = LAB_DRAFTER):
    return client.predict(number, "embedded", drafter, api_name="/freeze")


def _redraw(client: Client, method="talon", budget=16, topk=6, mu=0.03, depth=5, gamma=4, colour="verdict"):
    return client.predict(method, budget, topk, mu, depth, gamma, colour, api_name="/redraw")


def test_a_new_n_or_mu_at_a_frozen_step_gives_what_a_fresh_decode_gives(client, target):
    _run(client)
    trace = _exported_trace(client)
    number = min(3, len(trace.steps))
    status, *sliders = _freeze(client, number)
    assert f"step {number} of {len(trace.steps)}" in status and sliders[1]["value"] == 16
    context = step_context(trace, number - 1)
    for budget, topk, mu in ((8, 6, 0.03), (24, 6, 0.03), (16, 6, 0.3), (16, 6, 0.005), (16, 0, 0.1)):
        plot, caption, gate = _redraw(client, budget=budget, topk=topk, mu=mu)
        cfg = TreeConfig(method="talon", budget=budget, topk=topk, mu=mu)
        fresh = run_to_end(
            target, drafter_for("talon", LAB_DRAFTER, target), cfg, DecodeConfig(max_new_tokens=2), prompt_ids=context
        ).steps[0]
        nodes = sum(len(t.get("x", [])) for t in _figure(plot)["data"] if t.get("meta") == "node")
        assert nodes == len(fresh.tree)
        assert f"{fresh.accepted_tokens} accepted" in caption
        verdicts = {t["name"]: len(t["x"]) for t in _figure(plot)["data"] if t.get("meta") == "node"}
        assert verdicts.get("accepted", 0) == fresh.accepted_tokens
        assert gate["visible"] is True and _figure(gate["value"])["data"]


def test_the_same_context_row_matches_the_engine_and_rerolls_count(client, target):
    _run(client)
    trace = _exported_trace(client)
    _freeze(client, 2)
    table = client.predict(16, 6, 0.03, 5, 4, api_name="/every_method")
    rows = {row[0]: dict(zip(table["headers"], row)) for row in table["data"]}
    assert set(rows) == {"TALON", "EAGLE-2", "static tree", "chain"}
    context = step_context(trace, 1)
    for label, method in (("TALON", "talon"), ("EAGLE-2", "eagle2"), ("chain", "chain")):
        cfg = TreeConfig(method=method, budget=16, topk=6, mu=0.03, depth=5, gamma=4)
        fresh = run_to_end(
            target, drafter_for(method, LAB_DRAFTER, target), cfg, DecodeConfig(max_new_tokens=2), prompt_ids=context
        ).steps[0]
        assert rows[label]["accepted"] == fresh.accepted_tokens and rows[label]["draft nodes"] == fresh.tree.num_drafts
    _redraw(client)
    plot, sampling, note = client.predict(api_name="/reroll")
    bars = _figure(plot)["data"]
    emitted = next(b for b in bars if b["name"].startswith("emitted"))
    assert "200 re-rolls" in note and sum(emitted["y"]) <= 1.0 + 1e-9
    gated = client.predict(16, 0, 0.03, 5, 4, api_name="/every_method")  # K=0: EAGLE-2 cannot run, and says so
    assert [row[0] for row in gated["data"]][1].startswith("EAGLE-2: needs root width K >= 1")  # in its place
    sweep = client.predict("mu", "talon", 16, 6, 0.03, 5, 4, api_name="/sweep")
    assert {t["name"] for t in _figure(sweep)["data"]} == {"accepted drafts", "depth reached", "widest layer"}
    for k in (6, 0):  # EAGLE-2 needs K >= 1: its K sweep starts there, also with the slider at K=0
        roots = _figure(client.predict("topk", "eagle2", 16, k, 0.03, 5, 4, api_name="/sweep"))
        assert roots["data"][0]["x"][0] == 1


def test_the_lab_needs_a_run_and_a_frozen_step(app_url):
    fresh = Client(app_url, verbose=False)
    with pytest.raises(Exception, match="Freeze a step first"):
        _redraw(fresh)
    with pytest.raises(Exception, match="run or load a trace"):
        _freeze(fresh, 1)
