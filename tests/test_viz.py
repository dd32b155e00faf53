"""Fast tests of ``viz`` (no model): layout, tree figure, node table, HTML export, run charts."""

from __future__ import annotations

import html
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from talon.metrics import acceptance_by_depth, mat
from talon.trace import RunTrace, StepRecord
from viz.charts import (
    acceptance_by_depth_chart,
    committed_tokens_chart,
    run_charts,
    step_span,
    timing_chart,
    tree_shape_heatmap,
)
from viz.layout import TreeLayout, tidy_layout, tree_layout
from viz.tree_figure import (
    COLOR_MODE_LABELS,
    COLOR_MODES,
    RELATIVE_FLOOR,
    SOURCE_COLORS,
    VERDICT_COLORS,
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
    loads neither torch nor gradio, and of ``talon`` only its data, definitions and benchmark descriptions."""
    code = (
        "import sys, viz, viz.layout, viz.tree_figure, viz.charts, viz.summary, viz.bench_charts, "
        "viz.bench_plots\n"
        "bad = [m for m in ('torch', 'transformers', 'gradio') if m in sys.modules]\n"
        "bad += [m for m in sys.modules if m.startswith('talon.') and m not in "
        "('talon.config', 'talon.tree', 'talon.trace', 'talon.metrics', 'talon.bench', "
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
    """One point per tree node (root included) in the node traces; in verdict mode exactly one
    extra point, the bonus token, in its own trace; none in the other modes."""
    for s in list(trace.steps) + random_steps():
        fig = tree_figure(s, mode)
        ids = points_by_id(fig)
        assert sorted(ids) == list(range(len(s.tree)))
        bonus = bonus_traces(fig)
        if mode == "verdict":
            assert len(bonus) == 1 and len(bonus[0].x) == 1
            assert list(bonus[0].customdata) == [len(s.tree)]
            assert "bonus" in bonus[0].text[0]
        else:
            assert bonus == []


def test_verdict_colours_match_statuses(trace: RunTrace):
    for s in list(trace.steps) + random_steps():
        fig = tree_figure(s, "verdict")
        for i, (t, k) in points_by_id(fig).items():
            color = t.marker.color if isinstance(t.marker.color, str) else t.marker.color[k]
            assert color == VERDICT_COLORS[s.status[i]], (i, s.status[i])
            assert t.name == s.status[i]
        assert bonus_traces(fig)[0].marker.color == VERDICT_COLORS["bonus"]
        assert bonus_traces(fig)[0].marker.symbol == "star"


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
            assert t.name == s.tree.source[i] and t.marker.color == SOURCE_COLORS[t.name]


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
                    assert ("target wanted: <b>" + html.escape(visible_text(wanted, 40), quote=False)) in hover
                    rejections += mode == "verdict"
    assert rejections > 10


def test_labels_show_whitespace_and_escape():
    s = random_step(60, 2)
    fig = tree_figure(s, "verdict")
    for i, (t, k) in points_by_id(fig).items():
        label = t.text[k]
        assert " " not in label.replace("<b>", "").replace("</b>", "")
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
    assert fa.layout.yaxis.range == fb.layout.yaxis.range
    assert fa.layout.height == fb.layout.height
    assert fa.layout.xaxis.range[1] >= depth + 1  # room for the bonus column


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
            "target wanted",
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
        for i in range(len(s.tree)):
            if s.status[i] == "rejected":
                assert df.loc[i, "target wanted"] == visible_text(s.target_text[s.tree.parent[i]])
            else:
                assert df.loc[i, "target wanted"] == ""


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
    (bars,) = acceptance_by_depth_chart(trace).data
    assert list(bars.y) == acceptance_by_depth(trace.steps)
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
    page = "<div>" + "".join(step_span(s, s.index == t.steps[1].index) for s in t.steps) + "</div>"
    parser = _Spans()
    parser.feed(page)
    assert "".join(parser.text) == t.output_text
    shown = [s for s in t.steps if s.committed_text]
    assert len(parser.titles) == len(shown)
    assert all(title.startswith(f"step {s.index + 1}:") for title, s in zip(parser.titles, shown))
    assert page.count("outline:") == 1
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
