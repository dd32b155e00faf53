"""Fast tests of ``viz`` (no model): layout, tree figure, node table, HTML export, run charts."""

from __future__ import annotations

import dataclasses
import html
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from talon.metrics import acceptance_by_depth, acceptance_per_depth, mat, representative_step
from talon.trace import RunTrace, StepRecord
from talon.tree import STOP_COST, STOP_DEPTH, DraftTree
from viz.charts import (
    acceptance_by_depth_chart,
    committed_tokens_chart,
    run_charts,
    step_span,
    timing_chart,
    tree_shape_heatmap,
)
from viz.layout import TreeLayout, tidy_layout, tree_layout
from viz.style import NOTE_HEIGHT
from viz.tree_figure import (
    COLOR_MODE_LABELS,
    COLOR_MODES,
    RELATIVE_FLOOR,
    SOURCE_COLORS,
    SOURCE_NAMES,
    VERDICT_COLORS,
    VERDICT_SYMBOLS,
    default_title,
    node_table,
    relative_path_probs,
    shared_extent,
    tree_figure,
    tree_html,
    visible_text,
)

sys.path.insert(0, str(Path(__file__).parent))
from viz_fakes import random_parents, random_step, random_trace  # noqa: E402

ROOT_DIR = Path(__file__).resolve().parents[1]
SAMPLE = Path(__file__).parent / "data" / "sample_trace.json"
MODES = ("confidence", "verdict", "source")


@pytest.fixture(scope="module")
def trace() -> RunTrace:
    return RunTrace.from_json(SAMPLE.read_text())


@pytest.fixture(scope="module")
def rich_step(trace: RunTrace) -> StepRecord:
    """The sample step with the most accepted drafts (it also has rejections)."""
    return max(trace.steps, key=lambda s: (s.accepted_tokens, len(s.tree)))


def random_steps() -> list[StepRecord]:
    return [random_step(n, seed, wide=wide) for n in (60, 120) for seed in range(3) for wide in (0.15, 0.6)]


# ---- helpers -----------------------------------------------------------------------------------
def node_traces(fig):
    return [t for t in fig.data if t.meta == "node"]


def bonus_traces(fig):
    return [t for t in fig.data if t.meta == "bonus"]


def points_by_id(fig) -> dict[int, tuple]:
    """node id -> (trace, point index) over the node traces."""
    out = {}
    for t in node_traces(fig):
        for k, i in enumerate(t.customdata):
            assert i not in out, f"node {i} drawn twice"
            out[int(i)] = (t, k)
    return out


def assert_tidy(parent: list[int], lay: TreeLayout) -> None:
    n = len(parent)
    assert len(lay) == n
    depth = [0] * n
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        depth[i] = depth[parent[i]] + 1
        kids[parent[i]].append(i)
    assert lay.x == [float(d) for d in depth]
    assert min(lay.y) == pytest.approx(0.0)
    by_depth: dict[float, list[float]] = {}
    for x, y in zip(lay.x, lay.y):
        by_depth.setdefault(x, []).append(y)
    for ys in by_depth.values():
        ys.sort()
        assert all(b - a >= 1 - 1e-9 for a, b in zip(ys, ys[1:])), "overlapping nodes"
    for v in range(n):
        for c in kids[v]:
            assert lay.x[v] < lay.x[c]
        if kids[v]:  # centred on its children, which keep their order top to bottom
            assert lay.y[v] == pytest.approx((lay.y[kids[v][0]] + lay.y[kids[v][-1]]) / 2)
            ys = [lay.y[c] for c in kids[v]]
            assert ys == sorted(ys)


# ---- imports -----------------------------------------------------------------------------------
def test_viz_imports_no_torch_gradio_or_engine():
    """At run time too (``tests/test_imports.py`` reads the source): importing every ``viz`` module
    loads neither torch nor gradio, and of ``talon`` only its data, definitions, benchmark descriptions and
    atomic file writes."""
    code = (
        "import sys, viz, viz.layout, viz.tree_figure, viz.charts, viz.summary, viz.bench_charts, "
        "viz.bench_plots\n"
        "bad = [m for m in ('torch', 'transformers', 'gradio') if m in sys.modules]\n"
        "bad += [m for m in sys.modules if m.startswith('talon.') and m not in "
        "('talon.config', 'talon.tree', 'talon.trace', 'talon.metrics', 'talon.files', 'talon.bench', "
        "'talon.bench.prompts', 'talon.bench.suites', 'talon.bench.results')]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT_DIR, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# ---- layout ------------------------------------------------------------------------------------
def test_layout_small_example():
    lay = tidy_layout([-1, 0, 0, 1, 1, 2])
    assert lay.x == [0, 1, 1, 2, 2, 2]
    assert lay.y[3:] == [0.0, 1.0, 2.0]
    assert lay.y[1] == 0.5 and lay.y[2] == 2.0 and lay.y[0] == 1.25
    assert lay.width == 3.0 and lay.depth == 2


def test_layout_chain_is_straight():
    lay = tidy_layout([-1, 0, 1, 2, 3])
    assert lay.y == [0.0] * 5 and lay.width == 1.0


def test_layout_rejects_bad_parents():
    with pytest.raises(ValueError):
        tidy_layout([-1, 2, 0])
    with pytest.raises(ValueError):
        tidy_layout([0, 0])


def test_layout_sample_trace(trace: RunTrace):
    for s in trace.steps:
        assert_tidy(s.tree.parent, tree_layout(s.tree))
        lay = tree_layout(s.tree, bonus_parent=s.accepted_path[-1])
        assert_tidy(s.tree.parent + [s.accepted_path[-1]], lay)
        assert lay.x[: len(s.tree)] == tree_layout(s.tree).x


def test_a_label_of_punctuation_alone_is_drawn_larger():
    """A full stop or a comma at the labels' size was a speck beside its node: marks alone are drawn bold and
    ``PUNCTUATION_BOOST`` px larger; words, whitespace signs and the empty token are not."""
    from viz.tree_figure import PUNCTUATION_BOOST

    step = random_step(6, 3)
    step.node_text[1:6] = [".", " (", "ing", " ", ",\n"]
    fig = tree_figure(step, "verdict")
    texts = {i: t for tr in fig.data if tr.meta == "node" for i, t in zip(tr.customdata, tr.text)}
    big = f"font-size:{11 + PUNCTUATION_BOOST}px"
    assert big in texts[1] and ">.<" in texts[1] and big in texts[2] and big in texts[5]  # ".", "␣(", ",⏎"
    assert "font-size" not in texts[3] and "font-size" not in texts[4]  # a word; a space alone (␣)


def test_layout_keeps_room_below_the_bonus_star():
    """The bonus star is drawn larger than a node: an inner node right below it in its column had its
    label (drawn above the node) under the star, so the next node below is kept BONUS_ROOM further off."""
    from talon.tree import DraftTree
    from viz.layout import BONUS_ROOM

    parent = [-1, 0, 0, 1, 2, 2, 4]  # the bonus hangs off node 1, beside node 2's subtree below it
    tree = DraftTree.with_root(0)
    for p in parent[1:]:
        tree.add(p, 5, -1.0, "model")
    plain = tidy_layout(parent + [1])
    lay = tree_layout(tree, bonus_parent=1)
    bonus = len(tree)
    assert plain.y[4] - plain.y[bonus] == 1.0  # node 4 (inner, depth 2) right below the bonus
    assert lay.y[4] - lay.y[bonus] == 1.0 + BONUS_ROOM
    assert_tidy(parent + [1], lay)
    assert tidy_layout(parent, room_below={6: 2.0}) == tidy_layout(parent)  # room below the lowest: no change


@pytest.mark.parametrize("n", [60, 120])
@pytest.mark.parametrize("wide", [0.1, 0.5, 0.9])
def test_layout_random_trees(n: int, wide: float):
    import random

    for seed in range(15):
        parent = random_parents(n, random.Random(seed), wide)
        lay = tidy_layout(parent)
        assert_tidy(parent, lay)
        assert tidy_layout(parent) == lay  # deterministic


# ---- tree figure ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_figure_node_count(trace: RunTrace, mode: str):
    """One point per tree node (root included) in the node traces, and in every colour mode exactly one
    extra point, the bonus token (the caption counts it: "+ bonus"), in its own trace."""
    for s in list(trace.steps) + random_steps():
        fig = tree_figure(s, mode)
        ids = points_by_id(fig)
        assert sorted(ids) == list(range(len(s.tree)))
        bonus = bonus_traces(fig)
        assert len(bonus) == 1 and len(bonus[0].x) == 1
        assert list(bonus[0].customdata) == [len(s.tree)]
        word = "bonus" if s.tree.num_drafts else "next"  # a plain step drafted nothing to be a bonus to
        assert word in bonus[0].text[0] and bonus[0].marker.symbol == "star"


def test_verdict_colours_match_statuses(trace: RunTrace):
    for s in list(trace.steps) + random_steps():
        fig = tree_figure(s, "verdict")
        for i, (t, k) in points_by_id(fig).items():
            color = t.marker.color if isinstance(t.marker.color, str) else t.marker.color[k]
            assert color == VERDICT_COLORS[s.status[i]], (i, s.status[i])
            assert t.name == s.status[i]
        assert bonus_traces(fig)[0].marker.color == VERDICT_COLORS["bonus"]
        assert bonus_traces(fig)[0].marker.symbol == "star"


def test_verdicts_differ_in_shape_and_rim_not_only_in_colour(trace: RunTrace):
    # Red and green look alike to a red-green colour-blind reader: a refused node is a cross, an accepted
    # one a disc with a dark rim, a node never reached a pale disc with a grey rim.
    seen = set()
    for s in list(trace.steps) + random_steps():
        for t in node_traces(tree_figure(s, "verdict")):
            if t.name == "root":
                continue
            seen.add(t.name)
            expected = {"accepted": ("circle", "#1B1B1B", 2.0), "rejected": ("x", "#FFFFFF", 1.0)}
            symbol, rim, width = expected.get(t.name, ("circle", "#8A93A0", 1.0))
            assert (t.marker.symbol, t.marker.line.color, t.marker.line.width) == (symbol, rim, width), t.name
            assert t.marker.symbol == VERDICT_SYMBOLS[t.name]
    assert {"accepted", "rejected", "not reached"} <= seen
    assert "✕" in COLOR_MODE_LABELS["verdict"]


def test_bonus_hangs_off_last_accepted_node(rich_step: StepRecord):
    fig = tree_figure(rich_step, "verdict")
    lay = tree_layout(rich_step.tree, bonus_parent=rich_step.accepted_path[-1])
    b = bonus_traces(fig)[0]
    last = rich_step.accepted_path[-1]
    assert b.x[0] == lay.x[last] + 1 and b.y[0] == lay.y[len(rich_step.tree)]
    edge = next(t for t in fig.data if t.meta == "bonus-edge")
    assert list(edge.x[:2]) == [lay.x[last], b.x[0]]
    expected = html.escape(visible_text(rich_step.target_text[last], 40), quote=False)
    assert expected in b.hovertext[0]


def test_confidence_mode_fixed_scale(trace: RunTrace):
    for s in list(trace.steps) + random_steps():
        fig = tree_figure(s, "confidence")
        drafts = [t for t in node_traces(fig) if t.name == "drafts"]
        if len(s.tree) == 1:
            assert drafts == []
            continue
        (t,) = drafts
        assert t.marker.cmin == 0 and t.marker.cmax == 1 and t.marker.showscale
        for k, i in enumerate(t.customdata):
            assert t.marker.color[k] == pytest.approx(math.exp(s.tree.draft_logprob[i]))
        root = next(t for t in node_traces(fig) if t.name == "root")
        assert list(root.customdata) == [0] and root.marker.symbol == "diamond"


def test_source_mode_colours():
    s = random_step(60, 11)
    fig = tree_figure(s, "source")
    for i, (t, _) in points_by_id(fig).items():
        if i == 0:
            assert t.name == "root"
        else:
            source = s.tree.source[i]  # named as the help text and the Drafter box name it
            assert t.name == SOURCE_NAMES[source] and t.marker.color == SOURCE_COLORS[source]
            # blue and purple look alike to a red-blind reader: prompt lookup's nodes are squares too
            assert t.marker.symbol == {"model": "circle", "retrieval": "square"}[source]
    assert SOURCE_NAMES["retrieval"] == "prompt lookup"


def test_hover_text_every_node(trace: RunTrace):
    rejections = 0
    for s in list(trace.steps) + random_steps():
        for mode in MODES:
            fig = tree_figure(s, mode)
            for i, (t, k) in points_by_id(fig).items():
                hover = t.hovertext[k]
                assert hover and html.escape(visible_text(s.node_text[i], 40), quote=False) in hover
                if i == 0:
                    continue
                for word in ("depth", "draft prob", "path prob", "target prob", "verdict"):
                    assert word in hover
                if s.status[i] == "rejected":
                    wanted = s.target_text[s.tree.parent[i]]
                    assert wanted  # the parent was visited, so the target chose something there
                    assert ("target chose: <b>" + html.escape(visible_text(wanted, 40), quote=False)) in hover
                    rejections += mode == "verdict"
    assert rejections > 10


def test_labels_show_whitespace_and_escape():
    s = random_step(60, 2)
    fig = tree_figure(s, "verdict")
    for i, (t, k) in points_by_id(fig).items():
        label = t.text[k]
        assert " " not in re.sub(r"<[^>]*>", "", label)  # the text, without its tags
        assert "\n" not in label and "\t" not in label
        if s.node_text[i] == "<|im_end|>":
            assert "&lt;|im" in label
    assert visible_text(" a\nb\tc") == "␣a⏎b⇥c"
    assert visible_text("") == "∅"
    assert visible_text("abcdefghijkl", 5) == "abcd…"


def test_accepted_path_drawn_thicker(rich_step: StepRecord):
    for mode in MODES:
        fig = tree_figure(rich_step, mode)
        path = next(t for t in fig.data if t.meta == "accepted-path")
        edges = next(t for t in fig.data if t.meta == "edges")
        assert path.line.width > 2 * edges.line.width
        assert len(path.x) == 3 * rich_step.accepted_tokens
        assert len(edges.x) == 3 * (len(rich_step.tree) - 1 - rich_step.accepted_tokens)


def test_shared_extent_aligns_two_figures(trace: RunTrace):
    a = next(s for s in trace.steps if len(s.tree) > 1)
    b = random_step(60, 4, wide=0.3)
    depth, width = shared_extent([a, b])
    fa = tree_figure(a, "confidence", max_depth=depth, max_width=width)
    fb = tree_figure(b, "verdict", max_depth=depth, max_width=width)
    assert fa.layout.xaxis.range == fb.layout.xaxis.range
    span = lambda f: f.layout.yaxis.range[0] - f.layout.yaxis.range[1]  # noqa: E731
    assert span(fa) == pytest.approx(span(fb))  # one scale
    assert fa.layout.height == fb.layout.height
    assert fa.layout.xaxis.range[1] >= depth + 1  # room for the bonus column


def test_a_narrow_tree_sits_in_the_middle_of_a_shared_extent():
    chain = random_step(6, 0, parents=[-1, 0, 1, 2, 3, 4])
    wide = random_step(31, 0, parents=[-1] + [0] * 10 + [1 + i % 10 for i in range(20)])
    depth, width = shared_extent([chain, wide])
    assert width >= 10
    for step in (chain, wide):
        fig = tree_figure(step, "verdict", max_depth=depth, max_width=width)
        ys = [y for t in node_traces(fig) for y in t.y if y is not None]
        bottom, top = fig.layout.yaxis.range
        assert (min(ys) + max(ys)) / 2 == pytest.approx((bottom + top) / 2, abs=0.3)


def test_figure_scales_with_tree():
    chain = random_step(60, 0, parents=[-1] + list(range(59)))
    wide = random_step(120, 0, parents=[-1] + [0] * 10 + [1 + i % 10 for i in range(109)])
    f_chain, f_wide = tree_figure(chain, "verdict"), tree_figure(wide, "verdict")
    assert f_wide.layout.height > 2 * f_chain.layout.height
    size = lambda f: node_traces(f)[0].textfont.size  # noqa: E731
    assert size(f_wide) < 11 and size(f_chain) < 11


def test_title_and_bad_mode(rich_step: StepRecord):
    fig = tree_figure(rich_step, "verdict")
    assert f"Step {rich_step.index + 1}:" in fig.layout.title.text  # numbered from 1, like the slider
    assert tree_figure(rich_step, title="custom").layout.title.text == "custom"
    with pytest.raises(ValueError):
        tree_figure(rich_step, "rainbow")


def test_node_table(trace: RunTrace):
    for s in list(trace.steps) + random_steps():
        df = node_table(s)
        assert len(df) == len(s.tree)
        assert list(df.columns) == [
            "id",
            "parent",
            "depth",
            "token",
            "source",
            "draft prob",
            "path prob",
            "÷ layer's best",
            "target prob",
            "verdict",
            "target chose",
        ]
        assert list(df["verdict"]) == s.status
        assert df["draft prob"].between(0, 1).all()
        best = {}
        for d, lp in zip(s.tree.depth, s.tree.path_logprob):
            best[d] = max(best.get(d, -math.inf), lp)
        for i in range(len(s.tree)):
            assert df.loc[i, "÷ layer's best"] == pytest.approx(
                round(math.exp(s.tree.path_logprob[i] - best[s.tree.depth[i]]), 4), abs=1e-4
            )
        assert (df.groupby("depth")["÷ layer's best"].max() == 1.0).all()
        # Tiny probabilities keep four significant digits (they read 0 when rounded to 4 decimals).
        for i in range(len(s.tree)):
            p = float(s.target_prob[i])
            assert df.loc[i, "target prob"] == pytest.approx(p, rel=5e-4) and (p == 0) == (
                df.loc[i, "target prob"] == 0
            )
        for i in range(len(s.tree)):
            if s.status[i] == "rejected":
                assert df.loc[i, "target chose"] == visible_text(s.target_text[s.tree.parent[i]])
            else:
                assert df.loc[i, "target chose"] == ""


def test_tree_html_is_standalone(rich_step: StepRecord):
    page = tree_html(rich_step, "verdict")
    assert page.lstrip().lower().startswith("<html") or "<!doctype" in page[:50].lower()
    assert len(page) > 1_000_000 and "plotly.js v" in page.lower()  # the bundle, inline
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", page, re.I)


# ---- run charts ----------------------------------------------------------------------------------
def test_charts_build_for_sample_trace(trace: RunTrace):
    t = trace
    figs = run_charts(t)
    assert set(figs) == {"committed", "acceptance", "shape", "timing"}
    for fig in figs.values():
        assert fig.data and fig.layout.title.text


def test_chart_values(trace: RunTrace):
    fig = committed_tokens_chart(trace)
    acc, bonus, line = fig.data
    assert [a + b for a, b in zip(acc.y, bonus.y)] == [len(s.committed_ids) for s in trace.steps]
    assert list(acc.x) == [s.index + 1 for s in trace.steps]  # steps numbered from 1
    assert line.y[0] == pytest.approx(mat(trace.steps))
    for k, s in enumerate(trace.steps):  # the hover names the accepted drafts, then the bonus token apart
        if len(s.committed_ids) == s.accepted_tokens + 1:  # nothing cut off by the end of the run
            accepted = "".join(s.node_text[i] for i in s.accepted_path[1:])
            assert acc.customdata[k] == html.escape(visible_text(accepted, 60), quote=False)
            assert bonus.customdata[k] == html.escape(visible_text(s.target_text[s.accepted_path[-1]], 60), quote=False)
    bars, line = acceptance_by_depth_chart(trace).data
    assert list(bars.y) == acceptance_by_depth(trace.steps)
    assert list(line.y) == [r["conditional"] for r in acceptance_per_depth(trace.steps)]
    heat = tree_shape_heatmap(trace).data[0]
    deepest = max(s.tree.max_depth for s in trace.steps)
    assert len(heat.z) == deepest and len(heat.z[0]) == len(trace.steps)
    for k, s in enumerate(trace.steps):
        assert [heat.z[d - 1][k] for d in range(1, s.tree.max_depth + 1)] == s.layer_widths[1:]
    draft, verify = timing_chart(trace).data
    assert list(draft.y) == [s.draft_seconds for s in trace.steps]
    assert list(verify.y) == [s.verify_seconds for s in trace.steps]


def test_charts_on_empty_and_random_traces():
    empty = RunTrace("p", [1], {}, {}, "t", "d", "cpu")
    for fig in run_charts(empty).values():
        assert fig.layout.annotations  # "no steps yet"
    for fig in run_charts(random_trace(6, 120)).values():
        assert fig.data


class _Spans(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.titles: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        if tag == "span":
            self.depth += 1
            self.titles.append(dict(attrs)["title"])
        else:
            assert tag == "div", f"unexpected tag {tag}"

    def handle_endtag(self, tag):
        if tag == "span":
            self.depth -= 1

    def handle_data(self, data):
        assert self.depth == 1, "text outside a step span"
        self.text.append(data)


@pytest.mark.parametrize("which", ["sample", "random"])
def test_tinted_text(trace: RunTrace, which: str):
    t = trace if which == "sample" else random_trace(8, 40, seed=3)
    if which == "random":
        t.steps[0].committed_text = '<b>x & y</b>\n\t"q"'
    page = "<div>" + "".join(step_span(s) for s in t.steps) + "</div>"
    parser = _Spans()
    parser.feed(page)
    assert "".join(parser.text) == t.output_text
    shown = [s for s in t.steps if s.committed_text]
    assert len(parser.titles) == len(shown)
    assert all(title.startswith(f"step {s.index + 1}:") for title, s in zip(parser.titles, shown))
    if which == "random":
        assert "<b>" not in page and "&lt;b&gt;x &amp; y&lt;/b&gt;" in page


def test_relative_colour_mode_draws_the_gate_quantity(rich_step: StepRecord):
    fig = tree_figure(rich_step, "relative")
    drafts = next(t for t in fig.data if t.meta == "node" and t.name == "drafts")
    ratios = relative_path_probs(rich_step)
    floor = math.log10(RELATIVE_FLOOR)
    expected = [max(floor, math.log10(ratios[i])) if ratios[i] > 0 else floor for i in drafts.customdata]
    assert list(drafts.marker.color) == pytest.approx(expected)
    assert "best" in drafts.marker.colorbar.title.text
    assert set(COLOR_MODE_LABELS) == set(COLOR_MODES)


@pytest.mark.parametrize("mode", COLOR_MODES)
def test_tree_figure_is_valid_plotly_though_built_unvalidated(mode):
    """tree_figure skips plotly's validation for speed: every property it sets must still be valid."""
    import plotly.graph_objects as go

    for seed in range(5):
        go.Figure(
            tree_figure(random_step(seed=seed, n=30), mode).to_dict()
        )  # raises ValueError on any invalid property


# ---- issue 25: shared scales, two rates, calibration, price, explanations ------------------------------------
RECORDED = Path(__file__).parent / "data" / "recorded_talon_head.json"


@pytest.fixture(scope="module")
def recorded() -> RunTrace:
    """A real TALON run with the shipped head (N=12, K=3, μ=0.2, 48 tokens of the months list), with stop
    reasons; its trees ran out at some depths, so its two acceptance rates differ."""
    return RunTrace.from_json(RECORDED.read_text())


def test_acceptance_chart_draws_both_rates_for_each_run(recorded: RunTrace):
    from viz.charts import acceptance_per_depth_chart

    fig = acceptance_per_depth_chart({"one": recorded, "two": random_trace(4, 20)}, max_depth=9)
    assert [t.name for t in fig.data] == [
        "one: accepted at d ÷ drafted to d",
        "one: accepted at d ÷ d−1 accepted",
        "two: accepted at d ÷ drafted to d",
        "two: accepted at d ÷ d−1 accepted",
    ]
    rows = acceptance_per_depth(recorded.steps)
    assert list(fig.data[1].y) == [r["conditional"] for r in rows]
    assert [c[2] for c in fig.data[1].customdata] == [r["checked"] for r in rows]
    assert list(fig.layout.xaxis.range) == [0.4, 9.6]
    assert any(r["rate"] != r["conditional"] for r in rows)  # the recorded run tells the two apart
    # each run's line over its own bars (A's to the left of the depth, B's to the right), not on the seam
    depths = [r["depth"] for r in rows]
    assert [round(x - d, 2) for x, d in zip(fig.data[1].x, depths)] == [-0.2] * len(depths)
    assert all(x - round(x) == pytest.approx(0.2) for x in fig.data[3].x)
    # a label inside a bar's foot where it fits at full size, above a bar too low to hold it (0 % included;
    # plotly shrank a 13 % bar's label to about 5 px inside it)
    positions = dict(zip([r["rate"] or 0 for r in rows], fig.data[0].textposition))
    assert all(p == ("inside" if rate >= 0.25 else "outside") for rate, p in positions.items())
    # every bar says how many trees its share is of: on the bar, or above the line's marker where that
    # marker would sit in a low bar's label (a 12 % bar's label ran through a 33 % marker)
    labels = [f"{r['rate']:.0%}<br>{r['accepted']}/{r['reached']}" for r in rows]
    moved = {a.text: (a.x, a.y) for a in fig.layout.annotations}
    for r, label, text, x in zip(rows, labels, fig.data[0].text, fig.data[1].x):
        assert text == label or (text == "" and moved.pop(label) == (x, r["conditional"]))
    assert all(text == label for text, label in zip(fig.data[0].text, labels) if text)
    hatched = [shape == "/" for shape in fig.data[0].marker.pattern.shape]
    assert hatched == [r["reached"] < 10 for r in rows] and any(hatched) and not all(hatched)
    # a run of plain steps draws no bars and takes no place: the other's line stays over its bars
    plain = dataclasses.replace(recorded, steps=[])
    alone = acceptance_per_depth_chart({"A": plain, "B": recorded}, max_depth=9)
    assert len(alone.data) == 2 and list(alone.data[1].x) == depths


def test_a_low_bars_label_goes_above_the_marker_it_would_cover():
    from viz.charts import _label_height

    assert _label_height(0.12, [0.33]) == 0.33 and _label_height(0.0, [0.0]) == 0.0  # the two the page showed
    assert _label_height(0.12, [1.0]) is None and _label_height(0.2, [0.05]) is None  # clear of the label
    assert _label_height(0.5, [0.6]) is None and _label_height(None, [0.1]) is None  # inside the bar; no bar
    assert _label_height(0.1, [None]) is None  # no line at this depth
    # the other run's marker at this depth counts too, and a label moved over one marker steps over the
    # next one it would then cover (the highest in its way wins)
    assert _label_height(0.1, [None, 0.2]) == 0.2
    assert _label_height(0.1, [0.2, 0.45]) == 0.45 and _label_height(0.1, [0.2, 0.9]) == 0.2


def test_two_runs_low_bar_labels_clear_the_other_runs_marker():
    """Compare prompts at many depths: a low bar's label above its bar sat level with the other run's line
    marker a bar's width away; it now goes above every marker at its depth that it would cover."""
    from viz.charts import LABEL_BAND, LABEL_INSIDE, acceptance_per_depth_chart

    a, b = random_trace(20, 8, seed=26), random_trace(20, 8, seed=126)  # B's marker over one of A's low bars
    fig = acceptance_per_depth_chart({"A": a, "B": b})
    rows = {label: acceptance_per_depth(t.steps) for label, t in (("A", a), ("B", b))}
    markers = {}
    for rs in rows.values():
        for r in rs:
            markers.setdefault(r["depth"], []).append(r["conditional"])
    moved = [n for n in fig.layout.annotations if n.yshift == 7]
    only_other = 0
    for shift, bar, rs in zip((-0.2, 0.2), [t for t in fig.data if t.type == "bar"], rows.values()):
        for r, text in zip(rs, bar.text):
            if r["rate"] is None or r["rate"] >= LABEL_INSIDE:
                continue
            crowd = [m for m in markers[r["depth"]] if m is not None and r["rate"] - 0.05 <= m <= r["rate"] + 0.3]
            label = f"{r['rate']:.0%}<br>{r['accepted']}/{r['reached']}"
            if not crowd:
                assert text == label  # above its own bar, as before
                continue
            only_other += r["conditional"] not in crowd  # only another run's marker in the way
            [note] = [n for n in moved if n.text == label and n.x == pytest.approx(r["depth"] + shift)]
            assert text == "" and note.y >= max(crowd)
            # nothing of any run at this depth sits inside the label's band
            assert not [m for m in markers[r["depth"]] if m is not None and note.y < m <= note.y + LABEL_BAND]
    assert only_other


def test_a_hatched_bars_label_sits_on_a_white_patch_at_its_foot(recorded: RunTrace):
    from viz.charts import acceptance_per_depth_chart

    short = dataclasses.replace(recorded, steps=recorded.steps[:6])  # six trees: every bar hatched
    fig = acceptance_per_depth_chart({"run": short})
    rows = acceptance_per_depth(short.steps)
    patches = {a.text: a for a in fig.layout.annotations if a.bgcolor}
    tall = [r for r in rows if r["rate"] is not None and r["rate"] >= 0.25]
    assert tall and all(r["reached"] < 10 for r in tall)
    for r in tall:  # on the hatching the label was unreadable: a patch at the bar's foot, none on the bar
        label = f"{r['rate']:.0%}<br>{r['accepted']}/{r['reached']}"
        assert patches[label].x == r["depth"] and patches[label].y == 0
        assert fig.data[0].text[rows.index(r)] == ""
    whole = acceptance_per_depth_chart({"run": recorded})  # enough trees: labels on the bars, no patch
    assert not [a for a in whole.layout.annotations if a.bgcolor]
    assert "hatched bars: fewer than 10 trees" in fig.layout.xaxis.title.text  # the hatching had no legend
    assert "hatched" not in acceptance_per_depth_chart({"run": random_trace(30, 2)}).layout.xaxis.title.text


def test_two_runs_labels_off_their_bars_take_their_runs_colour():
    """Compare prompts: a 0 % bar of one run is no bar at all, and its "0% 0/1" stood between the two runs'
    places: a label outside its bar (or moved off it) is written in its run's colour; inside a bar it
    stays dark."""
    from viz.charts import LABEL_INSIDE, acceptance_per_depth_chart
    from viz.style import RUN_COLORS

    a, b = random_trace(12, 8, seed=1), random_trace(12, 8, seed=50)
    fig = acceptance_per_depth_chart({"A": a, "B": b})
    bars = [t for t in fig.data if t.type == "bar"]
    for k, (bar, trace) in enumerate(zip(bars, (a, b))):
        for r, ink in zip(acceptance_per_depth(trace.steps), bar.textfont.color):
            assert ink == (RUN_COLORS[k] if (r["rate"] or 0) < LABEL_INSIDE else "#263238")
    assert {a.font.color for a in fig.layout.annotations} <= set(RUN_COLORS[:2])
    single = acceptance_per_depth_chart({"run": a})
    assert set(single.data[0].textfont.color) == {"#263238"}


def test_a_run_keeps_its_colour_from_chart_to_chart(recorded: RunTrace):
    """Compare methods draws A and B in the adaptation and acceptance charts side by side: one run, one
    colour in both (they had different palettes: A was blue in one and green in the other)."""
    from viz.charts import acceptance_per_depth_chart
    from viz.lab_charts import adaptation_figure

    runs = {"A: EAGLE-2": recorded, "B: TALON": recorded}
    dots = {t.name: t.marker.color for t in adaptation_figure(runs).data}
    bars = {
        t.name.rsplit(": accepted", 1)[0]: t.marker.color
        for t in acceptance_per_depth_chart(runs).data
        if t.type == "bar"
    }
    assert dots["A: EAGLE-2"] == bars["A: EAGLE-2"] != dots["B: TALON"] == bars["B: TALON"]
    # plain decoding: empty axes said nothing; it says why there are no dots, as the other charts do
    empty = adaptation_figure({"ar": dataclasses.replace(recorded, steps=[])})
    assert not empty.data and [a.text for a in empty.layout.annotations] == ["no draft trees in this run"]
    assert empty.layout.xaxis.visible is False and empty.layout.yaxis.visible is False  # no empty frame


def test_a_plain_decoding_runs_timing_shows_verification_alone():
    """A run that never drafted listed "draft" in the timing chart's legend over bars of a few
    microseconds (building its root-only trees): it shows the target's forwards alone and says so."""
    plain = RunTrace("p", [1], {"method": "ar"}, {}, "t", "", "cpu", steps=[random_step(1, k, k) for k in range(4)])
    fig = timing_chart(plain)
    assert [t.name for t in fig.data] == ["verify"] and "nothing drafted" in fig.layout.title.text
    assert [t.name for t in timing_chart(random_trace(4, 20)).data] == ["draft", "verify"]
    # nor "accepted drafts" in the committed tokens' legend, and no empty 300-px frames: a note's height
    assert [t.name for t in committed_tokens_chart(plain).data][:1] == ["bonus token"]
    assert "accepted drafts" in [t.name for t in committed_tokens_chart(random_trace(4, 20)).data]
    shape = tree_shape_heatmap(plain)
    assert shape.layout.height == NOTE_HEIGHT and shape.layout.annotations[0].text == "no draft trees in this run"


def test_a_short_runs_step_axis_has_a_tick_per_step():
    """A run of one step drew its step axis as 0.6, 0.8, 1, 1.2, 1.4: short runs tick every step."""
    one = RunTrace("p", [1], {"method": "talon"}, {}, "t", "d", "cpu", steps=[random_step(6, 1, 0)])
    for fig in (committed_tokens_chart(one), timing_chart(one), tree_shape_heatmap(one)):
        assert (fig.layout.xaxis.tick0, fig.layout.xaxis.dtick) == (1, 1), fig.layout.title.text
    assert timing_chart(random_trace(40, 10)).layout.xaxis.dtick is None  # plotly's own spacing for long runs


def test_heatmaps_share_depth_axis_and_colour_scale(recorded: RunTrace):
    a = tree_shape_heatmap(recorded, max_depth=12, max_width=20)
    b = tree_shape_heatmap(random_trace(3, 10), max_depth=12, max_width=20)
    assert list(a.layout.yaxis.range) == list(b.layout.yaxis.range) == [12.5, 0.5]
    assert a.data[0].zmax == b.data[0].zmax == 20


def test_shape_distribution_counts_every_step(recorded: RunTrace):
    from viz.charts import shape_distribution_chart

    fig = shape_distribution_chart({"A": recorded, "B": random_trace(5, 12)})
    depth_a = next(t for t in fig.data if t.name == "A" and t.xaxis == "x")
    assert sum(depth_a.customdata) == len(recorded.steps)
    assert sum(depth_a.y) == pytest.approx(1.0)


def test_reliability_chart_plots_each_bin_in_its_depth_panel(recorded: RunTrace):
    from talon.metrics import calibration_error, reliability_points, reliability_table
    from viz.charts import reliability_chart

    rows = reliability_table(reliability_points(recorded.steps, "draft"))
    fig = reliability_chart({"raw": rows}, "t", "x", "y")
    points = [t for t in fig.data if t.name and t.name.startswith("raw")]
    assert sum(c[2] for t in points for c in t.customdata) == sum(r["count"] for r in rows)
    for t in points:
        panel = 1 if t.xaxis == "x" else int(t.xaxis[1:])
        assert all(r["depth"] == panel for r in rows if r["confidence"] in list(t.x))
    assert f"ECE {calibration_error(rows):.3f}" in points[0].name
    # the x axes' meaning is the title's second line (under the first panel alone it ran off the figure's
    # left edge) and the legend sits at the figure's foot (its wrapped rows ran into the title at 150 %)
    assert fig.layout.title.text == "t" and fig.layout.title.subtitle.text == "x: x"
    assert [fig.layout[f"xaxis{a}"].title.text for a in ("", "2", "3", "4")] == [
        "depth 1",
        "depth 2",
        "depth 3",
        "depth 4+",
    ]
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0
    empty = reliability_chart({"raw": []}, "t", "x", "y")
    assert empty.layout.annotations
    shallow = reliability_chart({"raw": [r for r in rows if r["depth"] == 1]}, "t", "x", "y")
    notes = {a.xref: a.text for a in shallow.layout.annotations if "this deep" in a.text}
    assert set(notes) == {"x2", "x3", "x4"}  # each empty panel says why; depth 1 has its points


def test_price_figure_marks_the_pick_and_your_n_and_says_projection():
    from viz.lab_charts import PLAIN_DECODING, price_figure

    rows = [{"budget": n, "committed": 2, "expected": 1 + n / 10, "price": 1 + n / 20} for n in (1, 4, 8, 16, 32)]
    fig = price_figure(rows, your_n=16, pick={"nodes": 8, "expected": 1.8, "price": 1.4}, step_number=3)
    names = [t.name for t in fig.data]
    assert names[:2] == ["expected tokens (calibrated confidence)", "committed by the verifier (accepted + bonus)"]
    assert any("price" in n for n in names) and fig.data[3].yaxis == "y2"
    verticals = [shape for shape in fig.layout.shapes if shape.x0 == shape.x1]
    assert {shape.x0 for shape in verticals} == {16}  # your N; the pick is not a point of the lines
    assert "your N = 16" in [a.text for a in fig.layout.annotations]
    # N on a log axis, its labels where the lines' points are (an annotation's x on a log axis is log10)
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8, 16, 32]
    [yours] = [a for a in fig.layout.annotations if a.text == "your N = 16"]
    assert yours.x == pytest.approx(math.log10(16))
    [even] = [shape for shape in fig.layout.shapes if shape.y0 == shape.y1]  # plain decoding's 1 token a step
    assert even.y0 == 1.0 and even.yref == "y" and PLAIN_DECODING in names  # named in the legend
    assert not [t for t in fig.data if "verifying" in (t.name or "")]  # no verification share given
    split = price_figure([{**r, "verify_price": 1.2} for r in rows], 16)
    [verifying] = [t for t in split.data if "of which verifying" in (t.name or "")]
    assert verifying.yaxis == "y2" and set(verifying.y) == {1.2}  # beside the price, on its axis
    unpriced = price_figure([{k: v for k, v in r.items() if k != "price"} for r in rows], 16)
    assert not [shape for shape in unpriced.layout.shapes if shape.y0 == shape.y1]  # no price, no break-even
    stars = [t for t in fig.data if "cost rule's own tree" in (t.name or "")]
    assert len(stars) == 1 and list(stars[0].x) == [8, 8] and list(stars[0].y) == [1.8, 1.8 / 1.4]
    [label] = [a for a in fig.layout.annotations if a.text == "cost rule's tree: 8 nodes, 1.40 plain steps"]
    assert label.x == pytest.approx(math.log10(8))  # at its star
    assert not [t for t in fig.data if t.yaxis == "y2" and "cost rule" in (t.name or "")]  # its price: the label
    assert "step 3" in fig.layout.title.text
    # the legend sits at the figure's foot, which Plotly lifts the plot above: placed a share of the plot's
    # height below it, seven entries wrapped one a row (a zoomed page) ran into the x axis's title
    assert (fig.layout.legend.yref, fig.layout.legend.y, fig.layout.legend.yanchor) == ("container", 0, "bottom")
    projected = price_figure(rows, 16, {"nodes": 0}, "the H100's cost table", projection=True)
    assert projected.layout.title.text.startswith("Projection")
    assert "cost rule: a plain step" in [a.text for a in projected.layout.annotations]


def test_methods_table_marks_the_winner_and_the_chains_own_size():
    from viz.lab_charts import METHODS_WIDTHS, PRICE_DECIMALS, methods_decimals, methods_table

    rows = {
        "TALON": {
            "nodes": 16,
            "depth": 4,
            "accepted": 3,
            "drafter_calls": 4,
            "cost": 2.0,
            "draft_ms": 5,
            "verify_ms": 9,
        },
        "static tree": {
            "nodes": 16,
            "depth": 3,
            "accepted": 1,
            "drafter_calls": 3,
            "cost": 2.0,
            "draft_ms": 4,
            "verify_ms": 9,
        },
        "chain (γ=4)": {
            "nodes": 4,
            "size_note": "γ, not N=16",
            "depth": 4,
            "accepted": 2,
            "drafter_calls": 4,
            "cost": 2.0,
            "draft_ms": 4,
            "verify_ms": 7,
        },
        "EAGLE-2": "EAGLE-2 needs root width K >= 1 (K=0, a gated root, is for TALON and hybrid trees).",
    }
    table = methods_table(rows, price_note="plain steps, this machine")
    best = table.set_index("method")["best"]
    assert best["TALON"] == "★ winner" and best["static tree"] == "" and best["chain (γ=4)"] == ""
    assert table.set_index("method")["draft nodes"]["chain (γ=4)"] == "4 (γ, not N=16)"
    assert "price (plain steps, this machine)" in table.columns
    assert list(table.columns[:2]) == ["method", "best"]  # the answer stays in view when the table scrolls
    assert len(METHODS_WIDTHS) == len(table.columns)  # a width for each column, as the page sets them
    decimals = methods_decimals(table)  # names the table's own columns: a rename must follow
    assert set(decimals) <= set(table.columns) and decimals["price (plain steps, this machine)"] == PRICE_DECIMALS


@pytest.mark.parametrize(
    "stop, method, extra, phrase",
    [
        ("cap", "talon", {}, "the budget N=12 was used up in layer"),
        ("cap", "talon", {"auto": True, "budget": 128}, "the cap of 128 nodes (N = auto) was used up"),
        ("cost", "talon", {}, "the cost rule: one more node or layer would not have paid"),
        ("drafter", "talon", {}, "the drafter proposed nothing more"),
        ("depth", "eagle2", {}, "its depth of 5 layers was drafted"),
        ("depth", "eagle2", {"depth": 1, "budget": 100}, "its depth of 1 layer was drafted (all "),
        ("depth", "eagle2", {"depth": 1, "budget": 1}, "its depth of 1 layer was drafted (then the best candidate "),
        ("depth", "chain", {}, "its length γ=4 was reached"),
        ("depth", "static", {}, "its fixed shape (N=12, at most 5 layers) was complete"),
        ("plain", "ar", {}, "plain decoding: no drafts asked for"),
        ("end", "talon", {}, "the run's end:"),
    ],
)
def test_every_stop_reason_has_its_own_sentence(recorded: RunTrace, stop, method, extra, phrase):
    from viz.summary import step_explanation

    step = recorded.steps[0]
    cfg = {**recorded.tree_config, "method": method, "depth": 5, "gamma": 4, **extra}
    original = step.stop
    try:
        step.stop = stop
        text = step_explanation(step, cfg)
    finally:
        step.stop = original
    assert f"Stopped: {phrase}" in text
    others = {
        "cap": "was used up",
        "cost": "the cost rule",
        "drafter": "proposed nothing",
        "plain": "plain decoding",
        "end": "the run's end",
    }
    assert not any(p in text for k, p in others.items() if k != stop and not (stop == "cost" and k == "plain"))


def test_growth_sentence_reads_the_layers(recorded: RunTrace):
    from viz.summary import growth_sentence

    step = recorded.steps[0]
    widths = step.layer_widths[1:]
    text = growth_sentence(step, recorded.tree_config)
    assert text.startswith(f"Top-K root: {widths[0]} of K=3 children (no gate)")
    assert f"gated layers 2–{len(widths)} (μ=0.2): {', '.join(map(str, widths[1:]))} nodes" in text
    gated = growth_sentence(step, {**recorded.tree_config, "topk": 0})
    assert gated.startswith(f"gated root: {widths[0]}")
    two = dataclasses.replace(step, tree=DraftTree([5, 6, 7, 8], [-1, 0, 0, 1], [0, 1, 1, 2], [0.0] * 4, [0.0] * 4))
    assert growth_sentence(two, recorded.tree_config).endswith("; gated layer 2 (μ=0.2): 1 node")
    # a root of fewer than K children says what held it: the cost rule (N = auto) or the budget N
    assert growth_sentence(two, recorded.tree_config).startswith("Top-K root: 2 of K=3 children (no gate)")
    auto = {**recorded.tree_config, "auto": True, "budget": 128}
    assert growth_sentence(two, auto).startswith("Top-K root: 2 of K=3 children (no gate; the cost rule kept 2)")
    small = {**recorded.tree_config, "budget": 2}
    assert growth_sentence(two, small).startswith("Top-K root: 2 of K=3 children (no gate; the budget N=2 held it)")
    full = {**recorded.tree_config, "auto": True, "topk": 2}
    assert growth_sentence(two, full).startswith("Top-K root: 2 of K=2 children (no gate); gated")


def test_a_fixed_trees_step_on_a_priced_run_says_what_it_was_expected_to_commit(recorded: RunTrace):
    """A fixed N's tree, priced on the cached cost curve, says its expected tokens and price after its stop
    (the cost rule's sentence says them itself, once); without a price, nothing is added."""
    from viz.summary import step_explanation

    priced = dataclasses.replace(recorded.steps[0], stop="cap", expected=2.31, price=1.42)
    text = step_explanation(priced, recorded.tree_config)
    assert text.endswith(
        "was used up in layer " + f"{priced.tree.max_depth}.** Expected 2.31 tokens for 1.42 plain steps."
    )
    assert "Expected" not in step_explanation(dataclasses.replace(priced, price=None), recorded.tree_config)
    by_cost = step_explanation(dataclasses.replace(priced, stop=STOP_COST), {**recorded.tree_config, "auto": True})
    assert by_cost.count("2.31 tokens") == 1


def test_a_plain_step_of_the_cost_rule_says_what_its_price_holds(recorded: RunTrace):
    from viz.summary import stop_sentence

    plain = dataclasses.replace(
        recorded.steps[0], tree=DraftTree.with_root(5), stop=STOP_COST, expected=1.0, price=1.08
    )
    text = stop_sentence(plain, {**recorded.tree_config, "auto": True})
    assert text.startswith("the cost rule made this a plain step")
    assert text.endswith(
        "1.00 tokens for 1.08 plain steps (one plain step and the drafter's call that proposed the "
        "candidates it declined)"
    )


def test_a_tree_kept_at_under_a_token_per_plain_step_says_why_it_beat_the_root_alone(recorded: RunTrace):
    """The cost rule weighs a tree against the root alone, whose price holds the step's first drafter call
    (already made): a tree of 1.22 tokens for 1.25 plain steps beats 1 token for 1.08."""
    from viz.summary import stop_sentence

    step = recorded.steps[0]
    kept = dataclasses.replace(step, stop=STOP_COST, expected=1.22, price=1.25)
    text = stop_sentence(kept, {**recorded.tree_config, "auto": True})
    assert text.endswith(
        "expected 1.22 tokens for 1.25 plain steps (under one token per plain step, yet the root alone would "
        "give fewer: its price also holds the drafter's first call, already made)"
    )
    paying = dataclasses.replace(step, stop=STOP_COST, expected=2.5, price=1.3)
    assert stop_sentence(paying, {**recorded.tree_config, "auto": True}).endswith("for 1.30 plain steps")


def test_a_one_node_tree_is_worded_in_the_singular(recorded: RunTrace):
    """N = 1 (a pass of the app read "1 drafts", "draft layers 1 to 1" and "the best 1 candidates were
    kept"): the figure's title, the depth scale's note, EAGLE-2's depth sentence and a chain's shape."""
    from ui.explore import deepest_note
    from viz.summary import growth_sentence, stop_sentence

    tree = DraftTree.with_root(5)
    tree.add(0, 7, -0.1)
    step = dataclasses.replace(recorded.steps[0], tree=tree, accepted_path=[0], stop=STOP_DEPTH)
    assert "1 draft · " in default_title(step) and "1 drafts" not in default_title(step)
    one_layer = dataclasses.replace(recorded, steps=[step])
    assert "draft layer 1, and the bonus token's column 2" in deepest_note(one_layer)
    eagle = {**recorded.tree_config, "method": "eagle2", "budget": 1, "depth": 2}
    assert stop_sentence(step, eagle).endswith("(then the best candidate was kept)")
    assert growth_sentence(step, {**recorded.tree_config, "method": "chain"}) == "a chain of 1 draft"


def test_summary_gives_depth_width_and_nodes_per_step(recorded: RunTrace):
    from viz.summary import summary_markdown

    text = summary_markdown(recorded)
    st_depth = sum(s.tree.max_depth for s in recorded.steps) / len(recorded.steps)
    assert f"| Mean depth (draft layers below the root) | {st_depth:.2f} |" in text
    assert "| Draft nodes per step (mean; N = 12) | 12.0 |" in text
    assert "Widest layer (mean per step · largest)" in text
    assert "accepted at d ÷ d−1 accepted" in text
    assert text.startswith("**TALON · N=12 · K=3 · μ=0.2 · greedy · max 48 new tokens")


def test_html_export_is_titled_with_the_prompt(recorded: RunTrace):
    page = tree_html(recorded.steps[0], "verdict", page_title="TALON <tree>", heading="<p>Prompt: x</p>")
    assert "<title>TALON &lt;tree&gt;</title>" in page and "<p>Prompt: x</p>" in page
    assert re.search(r"<title>Step 1: ", tree_html(recorded.steps[0], "verdict"))


def test_async_verdict_never_contradicts_itself(recorded: RunTrace):
    """Async measured 2.3× faster with no right guess: the verdict calls it noise, not a win."""
    from dataclasses import replace

    from viz.summary import async_verdict

    sync = replace(recorded, execution="sync")
    fast = replace(recorded, execution="async", steps=[replace(s, speculate_hit=False) for s in recorded.steps])
    fast.prefill_seconds = recorded.prefill_seconds - (recorded.seconds - recorded.seconds / 2.3)
    text = async_verdict({"sync": sync, "async": fast}, {"sync": [sync], "async": [fast]})
    assert "0% of the guesses were right" in text and "not async's doing" in text
    assert "Async was faster" not in text
    tie = async_verdict({"sync": sync, "async": sync}, {"sync": [sync, sync], "async": [sync, sync]})
    assert "No clear difference" in tie
    # With no right guess overlap hides nothing ("at most 0 %"); waiting for the wrong guesses' drafts where
    # they outlast verification makes the projection slower than sync, and the verdict says so.
    assert "could have hidden at most 0% of the sync time" in text and "would save" not in text
    assert "async would take about 1% longer than sync" in text
    # Async faster every time, once within 3 %: said so, not "the repetitions disagree".
    hits = replace(recorded, execution="async", steps=[replace(s, speculate_hit=True) for s in recorded.steps])
    slower = [replace(sync, prefill_seconds=sync.prefill_seconds + f * sync.seconds) for f in (0.01, 0.04)]
    narrow = async_verdict({"sync": slower[0], "async": hits}, {"sync": slower, "async": [hits, hits]})
    assert "Async was faster in all 2 repetitions, in some by less than 3%" in narrow


def test_identical_outputs_with_another_mat_say_why_the_trees_differ(recorded: RunTrace):
    """Async drafts each tree from a guess at the last verdict: the same tokens in fewer, longer steps
    (another MAT) is said to be expected, not left beside "identical" unexplained."""
    from dataclasses import replace

    from viz.summary import async_verdict

    sync = replace(recorded, execution="sync")
    same = async_verdict({"sync": sync, "async": replace(sync, execution="async")})
    assert "Outputs are identical." in same and "their trees are not" not in same
    first, second, *rest = recorded.steps
    merged = replace(first, committed_ids=[*first.committed_ids, *second.committed_ids])
    fewer = replace(recorded, execution="async", steps=[merged, *rest])  # the same tokens, one step fewer
    text = async_verdict({"sync": sync, "async": fewer})
    assert "Outputs are identical (their trees are not: async drafts each tree before the last verdict" in text


def test_a_saving_within_the_noise_margin_is_not_put_down_to_the_machine(recorded: RunTrace):
    """With no right guess overlap can hide nothing; async 3 % faster is within a run's noise (NOISE, 5 %
    of the sync time), 7 % faster is more than overlap or noise explains."""
    from dataclasses import replace

    from viz.summary import NOISE, async_verdict

    sync = replace(recorded, execution="sync")
    misses = [replace(s, speculate_hit=False) for s in recorded.steps]

    def verdict(share: float) -> str:  # async taking ``share`` of sync's time
        asyn = replace(recorded, execution="async", steps=misses)
        asyn.prefill_seconds = recorded.prefill_seconds - recorded.seconds * (1 - share)
        return async_verdict({"sync": sync, "async": asyn})

    assert NOISE == 0.05
    assert "could have hidden at most 0%" in verdict(0.97) and "not async's doing" not in verdict(0.97)
    assert "not async's doing" in verdict(0.93)


def test_async_projection_is_a_saving_on_the_sync_median(recorded: RunTrace):
    # A slow first sync repetition must not make the projected overlap slower than sync itself.
    from dataclasses import replace

    from talon.metrics import projected_async_seconds
    from viz.summary import ASYNC_DECIMALS, async_table

    slow = replace(recorded, execution="sync", prefill_seconds=recorded.prefill_seconds + recorded.seconds)
    sync = replace(recorded, execution="sync")
    asyn = replace(recorded, execution="async", steps=[replace(st, speculate_hit=True) for st in recorded.steps])
    table = async_table({"sync": slow, "async": asyn}, {"sync": [slow, sync, sync], "async": [asyn] * 3})
    walls = table.set_index("run")["wall s (median)"]
    share = projected_async_seconds(slow, 1.0) / slow.seconds
    assert walls["async, projected"] == pytest.approx(round(sync.seconds * share, 2))
    assert walls["async, projected"] <= walls["sync"]
    assert set(ASYNC_DECIMALS) <= set(table.columns)  # the shown decimals name real columns


def test_comparison_table_gives_median_and_spread_over_repetitions(recorded: RunTrace):
    from viz.summary import COMPARISON_DECIMALS, SPEEDUP_COLUMN, comparison_table

    table = comparison_table(
        {"ar: plain": recorded, "B: TALON": recorded}, {"ar: plain": [4.0, 5.0, 6.0], "B: TALON": [2.0, 4.0, 5.0]}
    )
    row = table.set_index("run").loc["B: TALON"]
    assert row[SPEEDUP_COLUMN] == pytest.approx(1.25)  # 4/2, 5/4, 6/5 -> median 1.25
    assert row["spread (low–high)"] == "1.20–2.00" and row["repetitions"] == 3
    assert list(table.columns[:2]) == ["run", SPEEDUP_COLUMN]  # the answer first
    assert set(COMPARISON_DECIMALS) <= set(table.columns)  # the shown decimals name real columns
    # without plain decoding there is no reference: no speedup, not one over the first run listed
    alone = comparison_table({"B: TALON": recorded, "C: static": recorded}, {"B: TALON": [2.0], "C: static": [4.0]})
    assert alone[SPEEDUP_COLUMN].isna().all() and (alone["tokens/s (median)"] > 0).all()


def test_the_last_steps_caption_says_why_the_run_ended_on_its_own_line(recorded: RunTrace):
    from ui.explore import caption

    assert recorded.stop_reason
    text = caption(recorded, recorded.steps[-1])
    assert "  \nThe run ends here: " in text and ".." not in text
    assert "The run ends here" not in caption(recorded, recorded.steps[0])
    n = len(recorded.steps)
    assert caption(recorded, recorded.steps[2]).startswith(f"**Step 3 of {n}**: ")
    running = dataclasses.replace(recorded, stop_reason="")  # steps still arriving: the count is not the run's
    assert caption(running, running.steps[2]).startswith(f"**Step 3 of {n} so far**: ")


def test_a_plain_step_is_called_one_and_its_token_no_bonus(recorded: RunTrace):
    """A step that drafted nothing (a root-only tree: autoregressive, or the cost rule's plain step) is named a
    plain decoding step in the caption, the figure's title and its star's label and hover, not "0 draft
    nodes in 0 layers (widest 0), 0 accepted + bonus"; a step that drafted keeps its counts and its bonus."""
    from ui.explore import caption

    plain = dataclasses.replace(random_step(1, index=4), committed_ids=[11])
    run = dataclasses.replace(recorded, steps=[*recorded.steps[:4], plain], stop_reason="")
    text = caption(run, plain)
    assert text.startswith("**Step 5 of 5 so far**: a plain decoding step, no draft tree")
    assert "1 token committed" in text and "bonus" not in text and "0 layers" not in text
    fig = tree_figure(plain, "verdict")
    star = bonus_traces(fig)[0]
    assert star.text[0].startswith("<b>next ") and "bonus" not in star.hovertext[0] + star.name
    assert "plain decoding step" in star.hovertext[0] and "bonus" not in default_title(plain)
    drafted = next(s for s in recorded.steps if s.tree.num_drafts)
    assert "accepted + bonus" in caption(recorded, drafted) and "accepted + bonus" in default_title(drafted)
    assert bonus_traces(tree_figure(drafted, "verdict"))[0].text[0].startswith("<b>bonus ")


def test_a_run_not_followed_ends_on_the_step_moved_to_with_its_final_caption(recorded: RunTrace):
    """Follow the run off, a step moved to while the run decoded ("Step 3 of 36 so far") is drawn again from
    the finished run when it ends ("Step 3 of n", nothing stale); not moved, or followed, the run opens on its
    typical step as before (it ended on "Starting..." and no tree, not followed and never moved)."""
    from types import SimpleNamespace

    from ui.explore import finished_view, opening_step, show_step
    from ui.session import Session

    live = SimpleNamespace(id=7, waits=0, waited=0.0)  # the few counts of a LiveRun the end view reads
    n = len(recorded.steps)
    session = Session(trace=recorded, follow=False)
    show_step(session, 3, "verdict")
    slider, fig, text, table, cap, *_ = finished_view(session, recorded, live, "verdict")
    assert slider["value"] == 3 and text["highlight"] == 3 and fig is not None and table is not None
    assert cap.startswith(f"**Step 3 of {n}**: ")
    session.viewed_step = None  # a new run began, the slider not moved since
    slider, fig, _, _, cap, *_ = finished_view(session, recorded, live, "verdict")
    assert slider["value"] == opening_step(recorded) and fig is not None
    assert cap.startswith(f"**Step {opening_step(recorded)} of {n}**: ")
    session.follow = True  # followed: a step moved to while it ran is not kept
    show_step(session, 3, "verdict")
    assert finished_view(session, recorded, live, "verdict")[0]["value"] == opening_step(recorded)
    stopped = dataclasses.replace(recorded, stop_reason="stopped")  # Stop pressed: the last step stays on show
    slider, _, _, _, cap, *_ = finished_view(session, stopped, live, "verdict")
    assert slider["value"] == n and cap.startswith(f"**Step {n} of {n}**") and "you pressed Stop" in cap


def test_a_run_without_drafts_opens_without_calling_its_step_a_typical_tree(recorded: RunTrace):
    from ui.explore import opening_note

    plain = dataclasses.replace(recorded, steps=[random_step(1, index=i) for i in range(5)])
    note = opening_note(plain, 3)
    assert note.startswith("*Opened on step 3 of 5: no step of this run drafted") and "typical tree" not in note
    assert "a typical tree of this run (median depth" in opening_note(recorded, 2)


def test_a_run_of_mostly_plain_steps_opens_on_a_step_that_drafted(recorded: RunTrace):
    """Hybrid at temperature 2 made plain steps of 75 % of a run and opened on a root alone: the view opens
    on a typical tree among the steps that drafted, and says how many were plain."""
    from ui.explore import opening_note, opening_step

    drafted = [s for s in recorded.steps if s.tree.num_drafts][:2]
    steps = [random_step(1, index=i) for i in range(6)] + drafted
    steps = [dataclasses.replace(s, index=i) for i, s in enumerate(steps)]
    mostly_plain = dataclasses.replace(recorded, steps=steps)
    number = opening_step(mostly_plain)
    assert number in (7, 8) and steps[number - 1].tree.num_drafts
    assert opening_note(mostly_plain, number).startswith(
        f"*Opened on step {number}: a typical tree among the steps that drafted; 75% of this run's steps were plain"
    )
    assert opening_step(recorded) == representative_step(recorded.steps) + 1  # a run that drafts: as before


def test_the_lab_says_when_a_tree_took_far_longer_than_its_price_stands_for():
    from talon.runtime.cost_curve import CostCurve
    from ui.tree_lab import busier_than_priced

    curve = CostCurve(plain=0.060, verify=((1, 0.060), (32, 0.180)), call=((1, 0.005),))
    step = dataclasses.replace(random_step(8), draft_seconds=0.046, verify_seconds=0.287)  # 333 ms
    note = busier_than_priced(step, 3.06, curve)  # priced 3.06 x 60 ms = 184 ms
    assert "busier than when its cost curve was measured" in note and "took 333 ms, 1.8× the 184 ms" in note
    assert busier_than_priced(dataclasses.replace(step, verify_seconds=0.180), 3.06, curve) == ""  # 226 ms: within 1.3x
    assert busier_than_priced(step, None, curve) == "" and busier_than_priced(step, 3.06, None) == ""


def test_the_gate_chart_draws_every_status_a_candidate_can_have():
    # An auto-sized tree's candidates can be cut by the cost rule: those must be drawn too, not dropped.
    from talon.tree import ADMITTED, BELOW_GATE, BEYOND_K, CUT_BY_BUDGET, CUT_BY_COST, GateLayer
    from viz.lab_charts import gate_figure

    root = GateLayer(1, [0, 0, 0], [5, 6, 7], [-0.1, -0.5, -3.0], [ADMITTED, CUT_BY_COST, BEYOND_K], -0.1, None)
    deeper = GateLayer(2, [1, 1, 1], [8, 9, 10], [-0.2, -0.4, -6.0], [ADMITTED, CUT_BY_BUDGET, BELOW_GATE], -0.2, -2.5)
    fig = gate_figure([root, deeper], 0.1)
    drawn = {t.name: len(t.x) for t in fig.data if t.mode == "markers"}
    assert drawn == {ADMITTED: 2, CUT_BY_BUDGET: 1, CUT_BY_COST: 1, BELOW_GATE: 1, BEYOND_K: 1}
    assert sum(t.mode == "lines" for t in fig.data) == 1  # the gate's line of layer 2 only
    # Every layer's column keeps its width: one layer alone does not spread over the chart like many.
    assert tuple(fig.layout.xaxis.range) == (0.4, 2.6)
    alone = gate_figure([root], 0.1).layout.xaxis.range
    assert tuple(alone) == (0.4, 1.6)
    spread = [x for t in gate_figure([root], 0.1).data for x in t.x]
    assert all(alone[0] < x < alone[1] for x in spread)


def test_the_gate_charts_log_axis_reads_as_probabilities_without_crowding():
    """One layer's candidates span a decade or two: plotly labelled every minor tick with a digit, a
    column of 2-9s; the axis is labelled at 1, 2 and 5 x each power of ten, as decimals, over a few
    decades, and once a decade over more.  A single kind of mark keeps its legend entry."""
    import math

    from talon.tree import ADMITTED, BELOW_GATE, GateLayer
    from viz.lab_charts import gate_figure, log_ticks

    assert log_ticks(0.02, 0.6)["ticktext"] == ["0.02", "0.05", "0.1", "0.2", "0.5"]
    assert log_ticks(0.003, 0.9)["tickvals"] == [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1]
    assert log_ticks(1e-6, 0.5) == {"dtick": 1, "exponentformat": "power"}
    one = GateLayer(1, [0] * 3, [4, 5, 6], [math.log(p) for p in (0.6, 0.1, 0.03)], [ADMITTED] * 3, math.log(0.6), None)
    fig = gate_figure([one], 0.1)
    assert list(fig.layout.yaxis.ticktext) == ["0.02", "0.05", "0.1", "0.2", "0.5"]
    assert fig.layout.showlegend is True
    paths = [math.log(0.3), math.log(1e-6)]
    deep = GateLayer(2, [1, 1], [7, 8], paths, [ADMITTED, BELOW_GATE], math.log(0.3), math.log(0.03))
    assert gate_figure([one, deep], 0.1).layout.yaxis.dtick == 1
    # over many decades the chart grows (nine decades in 380 px piled a layer's circles into a column)
    assert fig.layout.height == 380 and 380 < gate_figure([one, deep], 0.1).layout.height <= 560


def test_depth_ticks_stop_at_the_bonus_column(recorded: RunTrace):
    # Past the bonus token's column the axis only makes room for labels: no depth ticks there.
    from viz.tree_figure import tree_layout

    step = max(recorded.steps, key=lambda s: s.tree.max_depth)
    drawn = tree_layout(step.tree, bonus_parent=step.accepted_path[-1]).depth  # the bonus's column included
    for room, last in ((None, drawn), (step.tree.max_depth, step.tree.max_depth + 1), (12, 13)):
        fig = tree_figure(step, "verdict", max_depth=room)  # the run's depth scale: its deepest tree + bonus
        assert list(fig.layout.xaxis.tickvals) == list(range(last + 1))
        assert fig.layout.xaxis.range[1] > last + 0.5  # the room for labels past it has no tick


def test_tree_shape_by_category_tells_nine_categories_apart():
    # The headline suite has nine categories: each line needs its own look, and the legend must not sit
    # on the panels' axis titles.
    import pandas as pd

    from viz.bench_charts import tree_shape_figure

    cats = [f"category {k}" for k in range(9)]
    summary = pd.DataFrame(
        [
            {"kind": "categories", "category": c, "method": m, "temperature": 0.0, "mean_layer_widths": [3.0, 2.0]}
            for c in cats
            for m in ("eagle2", "talon")
        ]
    )
    fig = tree_shape_figure(summary)
    looks = {(t.line.color, t.line.dash) for t in fig.data if t.showlegend}
    assert len(looks) == len(cats) == sum(bool(t.showlegend) for t in fig.data)
    # colours alone do not tell them apart for a colour-blind reader: shapes and dashes do, from the first
    shapes = [t.marker.symbol for t in fig.data if t.showlegend]
    assert len(set(shapes)) == len(cats)
    assert len({t.line.dash for t in fig.data if t.showlegend}) == 3
    assert fig.layout.legend.orientation == "v" and fig.layout.legend.x > 1


def test_a_step_that_commits_part_of_a_character_is_titled_with_its_bytes(recorded: RunTrace):
    # Its text is empty (the next step shows the character whole): the title read "→ 1 committed (“∅”)".
    from dataclasses import replace

    from viz.tree_figure import committed_label, default_title

    step = next(s for s in recorded.steps if s.accepted_tokens >= 1)
    first, bonus = step.accepted_path[1], step.accepted_path[-1]
    node_text, target_text = list(step.node_text), list(step.target_text)
    node_text[first], target_text[bonus] = "\\xe3", "\\x81"
    part = replace(step, committed_text="", node_text=node_text, target_text=target_text)
    path_text = "".join(node_text[u] for u in step.accepted_path[1:])
    assert committed_label(part) == path_text + "\\x81" and path_text.startswith("\\xe3")
    assert "(“\\xe3" in default_title(part) and "∅" not in default_title(part)
    assert committed_label(step) == step.committed_text  # a step with text keeps it
    cut = replace(part, committed_ids=part.committed_ids[:1])  # the run's end cut the step: its tokens only
    assert committed_label(cut) == "\\xe3"


def test_the_lab_sweep_puts_the_widest_layer_on_its_own_axis_and_labels_the_current_value():
    # Accepted drafts and depth are a few units, the widest layer up to the budget: on one axis the first
    # two lay flat on the floor.
    from viz.lab_charts import sweep_figure

    rows = [{"budget": n, "accepted": min(3, n // 8), "depth": min(4, n // 6), "widest": n // 2} for n in (4, 8, 128)]
    fig = sweep_figure(rows, "budget", 24)
    assert [t.yaxis for t in fig.data] == ["y", "y", "y2"]
    assert fig.layout.yaxis2.overlaying == "y" and fig.layout.yaxis2.side == "right"
    assert [a.text for a in fig.layout.annotations] == ["now: 24"]
    assert list(fig.data[2].x) == [4, 8, 128]
    assert sweep_figure(rows, "budget", 128, "auto (cap 128)").layout.annotations[0].text == "now: auto (cap 128)"
    # on the μ sweep's log axis the label stands at the line (plotly places it in log units)
    mu_rows = [{**r, "mu": m} for r, m in zip(rows, (0.001, 0.03, 1.0))]
    mu = sweep_figure(mu_rows, "mu", 0.03)
    assert mu.layout.xaxis.type == "log" and mu.layout.annotations[0].x == pytest.approx(math.log10(0.03))
    # the title names the tree swept, and K=0's note stands only where K=0 was swept (EAGLE-2 starts at 1)
    k_rows = [{**r, "topk": k} for r, k in zip(rows, (0, 1, 6))]
    talon = sweep_figure(k_rows, "topk", 6, swept="TALON · N=24 · K=6 · μ=0.1").layout.title.text
    assert "(K=0: the gate picks" in talon and talon.endswith("<br><sup>TALON · N=24 · K=6 · μ=0.1</sup>")
    assert "K=0" not in sweep_figure(k_rows[1:], "topk", 6, swept="EAGLE-2 · N=24 · K=6").layout.title.text
    # the accepted line under the depth's, wider (where they meet it was hidden); whole nodes on the right
    # axis (plotly lined them up with the left one's ticks at 1.95, 3.91 nodes); μ's ticks as decimals
    assert fig.data[0].name == "accepted drafts" and fig.data[0].line.width > fig.data[1].line.width
    assert fig.layout.yaxis2.dtick == 13 and fig.layout.yaxis2.tick0 == 0
    assert "0.01" in mu.layout.xaxis.ticktext and "0.5" in mu.layout.xaxis.ticktext


def test_a_sweep_of_a_setting_the_lab_method_ignores_is_refused_with_what_to_do():
    import gradio as gr

    from ui.session import LabState, Session
    from ui.tree_lab import check_sweep

    session = Session()
    session.lab = LabState.__new__(LabState)  # a frozen step: the check reads no more of it
    check_sweep(session, "mu", "talon")
    check_sweep(session, "budget", "chain")  # the chain is swept as TALON
    with pytest.raises(
        gr.Error, match=r"^\W?The confidence gate μ does not shape .* \(EAGLE-2\): .* TALON and hybrid tr"
    ):
        check_sweep(session, "mu", "eagle2")
    with pytest.raises(gr.Error, match=r"\(static tree\): .* shapes TALON, hybrid and EAGLE-2 trees"):
        check_sweep(session, "topk", "static")


def test_the_reroll_chart_keeps_digit_tokens_as_categories_and_tells_alike_tokens_apart():
    from viz.lab_charts import reroll_figure

    texts = {0: "7", 1: "2", 2: "x", 3: "x"}
    fig = reroll_figure({0: 180, 1: 20}, [0.9, 0.08, 0.01, 0.01], texts.get)
    assert fig.layout.xaxis.type == "category"
    assert list(fig.data[0].x) == ["7", "2", "x (2)", "x (3)"]


def test_a_tree_configuration_names_only_the_settings_its_method_reads():
    """The lab's tree titles named "chain N=24, K=6, μ=0.1" (the chain reads γ) and gave EAGLE-2 and static
    trees a μ they have no use for; they use Explore's words now."""
    from talon.config import TreeConfig
    from viz.summary import tree_parts

    assert tree_parts(vars(TreeConfig(method="chain", gamma=4))) == ["chain", "γ=4"]
    assert tree_parts(vars(TreeConfig(method="eagle2", budget=24, topk=6, depth=5)))[1:] == ["N=24", "K=6", "depth 5"]
    assert tree_parts(vars(TreeConfig(method="static", budget=24, depth=5)))[1:] == ["N=24", "depth 5"]
    assert tree_parts(vars(TreeConfig(method="talon", budget=16, topk=6, mu=0.1)))[1:] == ["N=16", "K=6", "μ=0.1"]


def test_the_accepted_depth_marks_are_no_wider_than_a_step():
    """A 16 px mark spanned about eight steps of a 250-step run, so the marks merged into lines."""
    from viz.charts import SHAPE_PLOT_PX, accepted_marker_size

    assert accepted_marker_size(20) == 16
    assert accepted_marker_size(250) <= SHAPE_PLOT_PX / 250 and accepted_marker_size(2000) == 3


def test_tree_shape_panels_name_the_size_they_draw():
    """A panel per method, titled with its Budget N as the tables name rows; a method run at two sizes
    draws the first one's widths, not a mix."""
    import pandas as pd

    from viz.bench_charts import tree_shape_figure

    summary = pd.DataFrame(
        [
            {
                "kind": "categories",
                "category": "chat",
                "method": m,
                "budget": n,
                "temperature": 0.0,
                "mean_layer_widths": widths,
            }
            for m, n, widths in (("eagle2", 24, [4.0, 2.0]), ("talon", 24, [5.0, 1.0]), ("talon", 8, [1.0, 1.0]))
        ]
    )
    fig = tree_shape_figure(summary)
    assert [a.text for a in fig.layout.annotations] == ["EAGLE-2, N=24", "TALON, N=24"]
    assert [list(t.y) for t in fig.data] == [[4.0, 2.0], [5.0, 1.0]]
    auto = {**summary.iloc[0].to_dict(), "method": "talon+auto", "budget": 128, "auto": True}
    with_auto = tree_shape_figure(pd.concat([summary, pd.DataFrame([{**auto, "mean_layer_widths": [4.9, 0.2]}])]))
    assert len(with_auto.layout.annotations) == 3 and "auto" in with_auto.layout.annotations[2].text
    assert list(with_auto.data[-1].y) == [4.9, 0.2]  # the cost rule's trees beside the fixed-size ones


def test_the_peers_bars_are_labelled_with_the_speedup_they_draw():
    import pandas as pd

    from viz.bench_charts import ALL, peers_figure

    summary = pd.DataFrame(
        [
            {"kind": "methods", "experiment": "e", "temperature": 0.0, "method": m, "drafter": "", "budget": None,
             "category": ALL, "auto": False, "speedup": s, "MAT": mat, "delta": 0.0, "tokens_per_s": 10.0}
            for m, s, mat in (("ar", 1.0, 1.0), ("talon", 1.38, 1.91))
        ]
    )  # fmt: skip
    bars, labels = peers_figure(summary).data
    assert list(labels.text) == ["1.00× · MAT 1.00", "1.38× · MAT 1.91"] and list(bars.y) == [1.0, 1.38]
    lift = 1.38 * 0.03  # clear of the 1× line: a share of the tallest bar
    assert list(labels.y) == [1.0 + lift, 1.38] and labels.textposition == "top center"  # each over its bar
    near = peers_figure(summary.assign(speedup=[1.0, 0.95], MAT=[1.0, 1.77])).data[1]
    assert list(near.y) == [1.03, 1.03] and near.text[1] == "0.95× · MAT 1.77"  # over the 1× line, not through it
    low = peers_figure(summary.assign(speedup=[1.0, 0.56])).data[1]
    assert list(low.y) == [1.03, 0.56]  # well under the line: on its own bar
    tall = peers_figure(summary.assign(speedup=[1.0, 4.0])).data[1]  # a 4x bar: labels stand taller on the axis
    assert peers_figure(summary.assign(speedup=[4.0, 0.84])).data[1].y[1] == 1.0 + 4.0 * 0.03 and tall.y[1] == 4.0
    without_ar = summary.assign(speedup=[float("nan"), None])  # a run without ar has no speedups
    assert list(peers_figure(without_ar).data[1].text) == ["MAT 1.00", "MAT 1.91"]


def test_an_export_is_named_once_by_the_app_and_titled_by_whole_words(recorded: RunTrace):
    from ui.explore import export_name, page_title

    assert re.fullmatch(r"talon_\d{8}-\d{6}_trace\.json", export_name(recorded, "trace.json"))  # TALON: not talon_talon
    eagle = dataclasses.replace(recorded, tree_config={**recorded.tree_config, "method": "eagle2"})
    assert re.fullmatch(r"talon_eagle2_\d{8}-\d{6}_step3\.html", export_name(eagle, "step3.html"))
    long = dataclasses.replace(
        recorded,
        prompt="Write a Python function `is_palindrome(s)` that ignores case and "
        "non-letters, with a docstring and two examples.",
    )
    title = page_title(long, 2)
    assert title.startswith(f"TALON tree, step 2 of {len(recorded.steps)}: Write a Python function")
    assert title.endswith(" non-letters,…") and len(title.split(": ", 1)[1]) <= 80


def test_a_loaded_run_is_named_as_the_page_names_its_method(recorded: RunTrace):
    from ui.explore import run_kind

    named = lambda method: run_kind(dataclasses.replace(recorded, tree_config={"method": method}))  # noqa: E731
    assert (named("ar"), named("eagle2"), named("talon")) == ("an autoregressive", "an EAGLE-2", "a TALON")


def test_a_step_the_run_ended_inside_is_marked_on_the_committed_chart():
    # The run's last step accepted 3 drafts, the output kept 2: the Tree shape chart's accepted depth 3
    # beside a bar of 2 accepted drafts and no bonus read as a contradiction; a mark over the bar says why.
    trace = random_trace(5, 30, seed=2)
    whole = committed_tokens_chart(trace)
    assert [t.name for t in whole.data] == ["accepted drafts", "bonus token", f"MAT {mat(trace.steps):.2f}"]
    last = max(trace.steps, key=lambda s: s.accepted_tokens)  # a step with drafts to cut
    assert last.accepted_tokens >= 1
    kept = last.committed_ids[: last.accepted_tokens]  # the bonus token and nothing else cut
    steps = [dataclasses.replace(s, committed_ids=kept) if s is last else s for s in trace.steps]
    cut = dataclasses.replace(trace, steps=steps, stop_reason="max_new_tokens")
    mark = committed_tokens_chart(cut).data[-1]
    assert mark.name == "run ended inside this step (max new tokens)"
    assert list(mark.x) == [last.index + 1] and mark.y[0] > len(kept)
    assert f"the output kept {len(kept)} token" in mark.hovertext[0]


def _run_of_depths(depths: list[int], prompt: str) -> RunTrace:
    """A trace whose steps' trees have ``depths`` (random steps picked by their depth)."""
    from tests.viz_fakes import random_step, random_trace

    pool = {}
    for n in (2, 3, 4, 6):
        for seed in range(40):
            pool.setdefault(random_step(n, seed).tree.max_depth, (n, seed))
    steps = [random_step(*pool[d], index=k) for k, d in enumerate(depths)]
    return dataclasses.replace(random_trace(1), prompt=prompt, steps=steps)


def test_compare_prompts_opens_each_prompt_on_a_step_near_its_mean_depth():
    """The teacher's pair: code at depths 1, 1, 1, 3, 3, 4 (mean 2.17) and chat at 1, 1, 1, 1, 2 (mean 1.2)
    opened both on "typical" (median) steps of depth 1 under "A grew deeper trees: 2.17 against 1.20";
    now on the depth nearest each mean (3 and 1), which the caption and the tree titles say."""
    from ui.prompts import prompts_caption, typical_step

    code = _run_of_depths([1, 1, 1, 3, 4, 3], "code")
    chat = _run_of_depths([1, 1, 1, 1, 2], "chat")
    assert code.steps[typical_step(code)].tree.max_depth == 3
    assert chat.steps[typical_step(chat)].tree.max_depth == 1
    text = prompts_caption({"A": code, "B": chat})
    assert "Prompt A grew deeper trees" in text and "depth nearest its prompt's mean (A: 3, B: 1)" in text
    assert "Both trees below have depth" not in text
    assert "about the same nodes a step" not in text  # fixed-N runs: no word on the cost rule
    auto = {
        k: dataclasses.replace(t, tree_config={"method": "talon", "auto": True}) for k, t in (("A", code), ("B", chat))
    }
    sizes = [sum(s.tree.num_drafts for s in t.steps) / len(t.steps) for t in auto.values()]
    said = "Both used about the same nodes a step" in prompts_caption(auto)
    assert said == (max(sizes) <= 1.15 * min(sizes))
    same = dataclasses.replace(auto["A"], steps=[dataclasses.replace(s, index=k) for k, s in enumerate(chat.steps)])
    assert "Both used about the same nodes a step (" in prompts_caption({"A": same, "B": auto["B"]})
    # means apart, pictures alike: the caption says where the difference shows instead
    close = _run_of_depths([1, 1, 1, 2, 2, 2], "code")  # mean 1.5: as near 1 as 2, so 1, as chat's
    text = prompts_caption({"A": close, "B": chat})
    assert "(A: 1, B: 1)" in text and "Both trees below have depth 1: the difference is in how often" in text


def test_the_example_pair_button_clears_the_last_pairs_results():
    """After a run and Reveal, "Use the example pair" put the list and the chat in the prompt boxes under
    the last pair's caption, table, trees and "You said: A grows deeper trees. Right.": they go (and in
    class mode the question comes back); nothing goes where the results are of these prompts already, or
    while a pair decodes."""
    import gradio as gr

    from ui.prompts import CLASS_INTRO, EMPTY_TABLE, NO_PROMPTS, example_pair, pair_chosen, use_example_pair
    from ui.session import Session

    session = Session()
    code, chat = _run_of_depths([1, 2], "code"), _run_of_depths([1, 1], "chat")
    session.prompts = {"A": code, "B": chat, "guess": "A", "hidden": True}
    same = pair_chosen(session, "code", "chat", True)
    assert all(v == gr.skip() for v in same) and session.prompts["A"] is code
    session.start_work("prompts")  # a pair on its way: its results will be of the prompts it runs
    assert all(v == gr.skip() for v in pair_chosen(session, "list", "open chat", True))
    session.stop_work("prompts")
    out = pair_chosen(session, "list", "open chat", True)
    assert session.prompts == {} and out[3] == NO_PROMPTS and list(out[2].columns) == [EMPTY_TABLE]
    assert out[-3:] == ("", None, CLASS_INTRO) and all(v is None for v in out[6:12])
    assert all(v == gr.skip() for v in pair_chosen(session, "x", "y", False))  # nothing left to clear
    session.prompts = {"A": code, "B": chat, "guess": None, "hidden": False}
    filled = use_example_pair(session, False)  # the boxes and the emptied tab in one answer
    assert filled[:2] == example_pair() and session.prompts == {} and filled[2 + 3] == NO_PROMPTS


def test_a_prompt_typed_into_after_a_run_is_named_in_the_caption():
    """Editing a prompt after a pair ran left the old pair's results under the new text, the table's prompt
    column the only sign; the caption now says which prompt changed since the run (nothing is cleared),
    and reads as before once the prompts read as run again; nothing while a pair decodes or before one ran."""
    import gradio as gr

    from ui.prompts import EDITED, HIDDEN, prompts_caption, prompts_edited
    from ui.session import Session

    session = Session()
    assert prompts_edited(session, "a", "b") == gr.skip()  # no pair run yet
    code, chat = _run_of_depths([1, 2], "code"), _run_of_depths([1, 1], "chat")
    session.prompts = {"A": code, "B": chat, "guess": None, "hidden": False}
    caption = prompts_caption({"A": code, "B": chat})
    assert prompts_edited(session, "code", "chat") == caption
    edited = prompts_edited(session, "code", "chat, edited")
    assert edited == EDITED.format(which="prompt B") + "\n\n" + caption
    assert "both prompts changed" in prompts_edited(session, "x", "y")
    session.prompts["hidden"] = True  # class mode before the guess: the question stays, under the note
    assert prompts_edited(session, "x", "chat").endswith(HIDDEN)
    session.start_work("prompts")
    assert prompts_edited(session, "x", "y") == gr.skip()  # a pair on its way fills the caption itself


def test_a_calibrated_run_shows_expected_against_realised_tokens(recorded: RunTrace):
    """The engineer's calibration question, for one run: the summary gives the mean expected tokens a
    step beside the realised, and the committed chart a tick of each step's expected tokens over its bar;
    a run whose steps recorded no expectation shows neither."""
    from viz.summary import summary_markdown

    expected = [1.0 + 0.25 * (k % 5) for k in range(len(recorded.steps))]
    run = dataclasses.replace(
        recorded, steps=[dataclasses.replace(s, expected=e) for s, e in zip(recorded.steps, expected)]
    )
    mean = sum(expected) / len(expected)
    realised = sum(s.accepted_tokens + 1 for s in run.steps) / len(run.steps)
    text = summary_markdown(run)
    assert (
        f"| Tokens a step: expected by calibrated confidence · realised (bonus included) | {mean:.2f} · "
        f"{realised:.2f} (realised ÷ expected {realised / mean:.2f}) |"
    ) in text
    [ticks] = [t for t in committed_tokens_chart(run).data if (t.name or "").startswith("expected")]
    assert ticks.name == f"expected (calibrated; mean {mean:.2f})" and list(ticks.y) == expected
    assert list(ticks.x) == [s.index + 1 for s in run.steps]
    bare = dataclasses.replace(recorded, steps=[dataclasses.replace(s, expected=None) for s in recorded.steps])
    assert "expected by calibrated" not in summary_markdown(bare)
    assert not any((t.name or "").startswith("expected") for t in committed_tokens_chart(bare).data)


def test_counts_rebuilt_from_shares_are_whole_counts_not_truncated_floats():
    # 13/23 * 23 is 12.999...: truncated, a method that matched plain decoding on every prompt read
    # "12/23 same tokens as AR", and a run's 13 plain steps of 23 read "12 of 23".
    from viz import summary
    from viz.bench_charts import _share_of

    for n in range(1, 41):
        assert [_share_of(k / n, n) for k in range(n + 1)] == [f"{k}/{n}" for k in range(n + 1)]
    trace = random_trace(steps=23, n=10)
    trace.steps = [random_step(1, k, index=k) if k < 13 else s for k, s in enumerate(trace.steps)]
    rows = dict(summary.shape_rows(trace))
    assert rows["Plain steps (no drafts)"] == "13 of 23 (57%)"


def test_a_centred_note_is_readable_grey_at_the_size_asked():
    from viz.style import centre_note

    assert centre_note("nothing to draw")["font"] == {"color": "#6B7280", "size": 13}  # 4.8:1 on white
    assert centre_note("x", size=11)["font"]["size"] == 11 and "size" not in centre_note("x", size=None)["font"]
