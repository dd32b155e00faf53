"""App tier: gradio_client against the app launched in the test process."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from gradio_client import Client, handle_file

from talon.trace import RunTrace

pytestmark = pytest.mark.app

PROMPT = "Repeat this list exactly: apples, pears, plums, apples, pears, plums."
RUN_ARGS = dict(target_spec="embedded", drafter_spec="ngram", method="talon", budget=16, topk=6, mu=0.03, depth=5,
                gamma=4, temperature=0.0, max_new=24, seed=0, execution="sync", color_mode="verdict")


def _run(client: Client, prompt: str = PROMPT, **overrides):
    args = {**RUN_ARGS, **overrides}
    return client.predict(prompt, *args.values(), api_name="/run_explore")


def _figure_nodes(plot: dict) -> int:
    """Drawn tree nodes (root included, bonus marker excluded) in a gr.Plot payload."""
    fig = json.loads(plot["plot"])
    return sum(len(t.get("x", [])) for t in fig["data"] if t.get("meta") == "node")


def _exported_trace(client: Client) -> RunTrace:
    path = client.predict(api_name="/export_json")
    return RunTrace.from_json(Path(path).read_text(encoding="utf-8"))


@pytest.fixture()
def client(app_url):
    return Client(app_url, verbose=False)


def test_run_figure_matches_trace(client):
    slider, plot, text_html, table, caption, summary_md, *charts = _run(client)
    trace = _exported_trace(client)
    assert trace.prompt == PROMPT and trace.steps
    last = trace.steps[-1]
    assert _figure_nodes(plot) == len(last.tree)
    assert len(table["data"]) == len(last.tree)
    assert slider["maximum"] >= len(trace.steps) - 1 and slider["value"] == len(trace.steps) - 1
    assert f"Step {len(trace.steps)} of {len(trace.steps)}" in caption
    assert "MAT" in summary_md
    assert all(c is not None for c in charts)
    assert "talon-step" in text_html


def test_step_slider_rerenders_from_trace(client):
    _run(client)
    trace = _exported_trace(client)
    for index in (0, len(trace.steps) - 1):
        plot, _text, table, caption = client.predict(index, "confidence", api_name="/show_step")
        assert _figure_nodes(plot) == len(trace.steps[index].tree)
        assert caption.startswith(f"Step {index + 1} of {len(trace.steps)}")
        assert len(table["data"]) == len(trace.steps[index].tree)


def test_export_loads_back(client, app_url):
    _run(client)
    path = client.predict(api_name="/export_json")
    original = RunTrace.from_json(Path(path).read_text(encoding="utf-8"))
    other = Client(app_url, verbose=False)  # a fresh session with no run of its own
    slider, plot, _text, _table, caption, summary_md, *_ = other.predict(handle_file(path), "verdict",
                                                                         api_name="/load_trace")
    assert caption.startswith(f"Step 1 of {len(original.steps)}")
    assert _figure_nodes(plot) == len(original.steps[0].tree)
    assert RunTrace.from_json(Path(other.predict(api_name="/export_json")).read_text()) == original


def test_html_export_is_standalone(client):
    _run(client)
    html = Path(client.predict(1, "verdict", api_name="/export_html")).read_text(encoding="utf-8")
    assert "<html" in html and "plotly" in html.lower()


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


@pytest.mark.parametrize("overrides, message", [
    ({"prompt": "   "}, "empty"),
    ({"mu": 5.0}, "greater than maximum value 1"),   # the slider's own bound check
    ({"budget": 0}, "less than minimum value 1"),
    ({"method": "beam"}, "not in the list of choices"),
    ({"drafter_spec": "layers:abc"}, "whole number"),
    ({"max_new": 100000}, "greater than maximum value 512"),
])
def test_bad_input_gives_a_clear_error(client, overrides, message):
    prompt = overrides.pop("prompt", PROMPT)
    with pytest.raises(Exception, match=message):
        _run(client, prompt, **overrides)


def test_load_rejects_non_trace_json(client, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(Exception, match="not a TALON trace"):
        client.predict(handle_file(str(bad)), "verdict", api_name="/load_trace")


def test_compare_runs_two_methods_on_the_same_axes(client):
    state_slider, plot_a, plot_b, table = client.predict(
        PROMPT, "embedded", "ngram", "static", "talon", 16, 6, 0.03, 5, 4, 0.0, 16, 0, "sync", "verdict",
        api_name="/run_compare")
    assert [row[0] for row in table["data"]] == ["A: Static tree (fixed shape)", "B: TALON adaptive tree"]
    speedups = [row[table["headers"].index("speedup")] for row in table["data"]]
    assert all(s is not None and s > 0 for s in speedups)
    fig_a, fig_b = json.loads(plot_a["plot"]), json.loads(plot_b["plot"])
    assert fig_a["layout"]["xaxis"]["range"] == fig_b["layout"]["xaxis"]["range"]
    assert fig_a["layout"]["height"] == fig_b["layout"]["height"]


def test_async_run_matches_sync_and_draws_both_timelines(client):
    plot, table, verdict = client.predict(PROMPT, "embedded", "layers:4", "talon", 8, 4, 0.03, 5, 4, 0.0, 12, 0,
                                          api_name="/run_sync_async")
    assert "Outputs are identical" in verdict
    assert [row[0] for row in table["data"]][:2] == ["sync", "async"]
    lanes = {y for t in json.loads(plot["plot"])["data"] for y in t.get("y", [])}
    assert {"sync · drafter", "sync · target", "async · drafter", "async · target"} <= lanes


def test_hybrid_method_labels_sources(client):
    _run(client, PROMPT, method="hybrid", drafter_spec="layers:4", max_new=16)
    trace = _exported_trace(client)
    assert trace.tree_config["method"] == "hybrid" and trace.drafter.startswith("hybrid")
    assert all("retrieval_weight" in s.drafter_info for s in trace.steps)
    assert any("retrieval" in s.tree.source for s in trace.steps)  # the list repeats, so lookup fires


def test_hybrid_refuses_ngram_as_its_model(client):
    with pytest.raises(Exception, match="hybrid method merges a model drafter"):
        _run(client, PROMPT, method="hybrid", drafter_spec="ngram")
