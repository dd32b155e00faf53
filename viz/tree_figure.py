"""One decoding step's draft tree as an interactive Plotly figure, a node table, standalone HTML.

Drawing conventions (see ``docs/viz.md``):

* x = depth (root at 0, left to right), y = spread of the leaves (tidy layout, ``viz.layout``);
  the y axis is reversed so a node's first child is drawn on top;
* edges are thin grey lines; the accepted path (root -> deepest accepted node) is thicker and green;
* the bonus token (the target's own token after the accepted path) is laid out as an extra child
  of the last accepted node and drawn in every colour mode (gold star, labelled "bonus", dotted
  edge): it is the target's own token, not a draft, so no colouring of drafts applies to it;
* the root is a dark diamond in every mode (it is the last committed token, not a draft).

Every node trace carries ``meta="node"`` (the bonus trace ``meta="bonus"``) and the node ids in
``customdata``; edge traces carry ``meta="edges"`` / ``"accepted-path"`` / ``"bonus-edge"``.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from talon.trace import StepRecord
from talon.tree import ACCEPTED, NOT_REACHED, REJECTED, ROOT

from .layout import TreeLayout, tree_layout
from .style import TEMPLATE
from .summary import plural

BONUS = "bonus"

COLOR_MODES = ("verdict", "confidence", "relative", "source")
COLOR_MODE_LABELS = {
    "verdict": "verdict (accepted ●, rejected ✕, not reached, bonus ★)",
    "confidence": "draft probability (of the token, given its parent)",
    "relative": "path probability ÷ best in its layer (what TALON's gate compares with μ)",
    "source": "source (model ●, prompt lookup ■)",
}
"""What each colour mode shows, for the mode picker and the legend."""


def colour_mode(mode: str | None) -> str:
    """``mode`` where it is one of ``COLOR_MODES``, else ``"verdict"`` (a radio that held nothing yet)."""
    return mode if mode in COLOR_MODES else "verdict"


def colour_help(modes) -> str:
    """The picker's line on ``modes`` (names from ``COLOR_MODES``): each with what it shows, its name
    said once."""
    labels = (COLOR_MODE_LABELS[m] for m in modes)
    return "; ".join(label if label.startswith(m) else f"{m}: {label}" for m, label in zip(modes, labels))


RELATIVE_FLOOR = 1e-3
"""The relative colour scale runs from this ratio (and below) to 1, log-scaled."""

VERDICT_COLORS = {
    ROOT: "#37474F",
    ACCEPTED: "#2E9E44",
    REJECTED: "#D62728",
    NOT_REACHED: "#C9CED6",
    BONUS: "#F5A623",
}
VERDICT_SYMBOLS = {ACCEPTED: "circle", REJECTED: "x", NOT_REACHED: "circle"}
"""Shapes carry the verdict as well as colours do: red and green look alike to a red-green colour-blind
reader, a cross does not look like a circle."""
VERDICT_OUTLINES = {ACCEPTED: ("#1B1B1B", 2.0), REJECTED: ("#FFFFFF", 1.0), NOT_REACHED: ("#8A93A0", 1.0)}
"""Marker outline (colour, px) per verdict: dark and thick on accepted nodes, a grey rim that keeps the
pale not-reached nodes visible on white."""
SOURCE_COLORS = {"model": "#4C78A8", "retrieval": "#B279A2"}
"""Not the verdict colours: a red node must not mean "rejected" in one mode and "prompt lookup" in another."""
SOURCE_SYMBOLS = {"model": "circle", "retrieval": "square"}
"""Blue and purple look alike to a red-blind reader: prompt lookup's nodes are squares as well."""
SOURCE_NAMES = {"model": "model", "retrieval": "prompt lookup"}
"""A node's source as the legend names it: the help text and the Drafter box call retrieval prompt lookup."""
OTHER_COLOR = "#9E9E9E"
PATH_COLOR = "#2E9E44"
EDGE_COLOR = "#8C95A3"  # 3:1 on white, the least a line that carries the structure should have
TITLE_TOP_PX = 30
"""The title's top edge below the figure's top, in pixels: clear of the label the app draws over a plot's
top-left corner."""
LEGEND_TOP_PX = TITLE_TOP_PX + 24
"""The legend's top edge below the figure's top, in pixels: under a one-line title."""
CONFIDENCE_SCALE = "Viridis"

_WHITESPACE = str.maketrans({" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"})
_WHITESPACE_SIGNS = {*"".join(_WHITESPACE.values()), "∅", "…"}  # visible_text's signs: whitespace, nothing, a cut


def visible_text(text: str, max_chars: int | None = None) -> str:
    """``text`` with whitespace made visible (space ␣, newline ⏎, tab ⇥, carriage return ␍),
    ``"∅"`` for the empty string, cut to ``max_chars`` characters (ellipsis included)."""
    out = text.translate(_WHITESPACE) if text else "∅"
    if max_chars is not None and len(out) > max_chars:
        out = out[: max(1, max_chars - 1)] + "…"
    return out


def committed_tokens(step: StepRecord) -> list[str]:
    """The labels of the tokens ``step`` committed, one per committed id: the accepted drafts, then the
    bonus token, cut like ``committed_ids``."""
    texts = [step.node_text[i] for i in step.accepted_path[1:]]
    texts.append(step.target_text[step.accepted_path[-1]])
    return texts[: len(step.committed_ids)]


def committed_label(step: StepRecord) -> str:
    """What ``step`` committed, as text for titles: its ``committed_text``, or, where that is empty while
    the step committed tokens, their labels: the bytes of part of a character (``\\xe3\\x81``; the text
    shows it whole in the step that completes it) or a special token the text leaves out (``<|im_end|>``)."""
    if step.committed_text or not step.committed_ids or not step.texts_filled:
        return step.committed_text
    return "".join(committed_tokens(step))


def _esc(text: str) -> str:
    """Escape for Plotly's HTML-like text (tokens such as ``<|im_end|>`` must stay literal)."""
    return html.escape(text, quote=False)


def _prob(logprob: float) -> float:
    return math.exp(logprob) if logprob > -745 else 0.0


def _sig(p: float) -> float:
    """``p`` to 4 significant digits: a probability of 2.361e-07 stays readable, not rounded to 0."""
    return float(f"{p:.4g}")


def _fmt(p: float) -> str:
    return f"{p:.3g}"


def target_wanted(step: StepRecord, node: int) -> str:
    """At a rejected node: the text of the token the target chose instead (the target's token after
    the node's parent); ``""`` for any other node."""
    if step.status[node] != REJECTED:
        return ""
    return step.target_text[step.tree.parent[node]]


def bonus_text(step: StepRecord) -> str:
    """Text of the bonus token: the target's token after the last accepted node."""
    return step.target_text[step.accepted_path[-1]]


def _committed_count(step: StepRecord, path_pos: int) -> bool:
    """Whether the token at position ``path_pos`` (1 = first accepted draft, len(path) = bonus)
    made it into the output (the output is cut at EOS / the max-new-tokens limit)."""
    return path_pos <= len(step.committed_ids)


# ---- sizing ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Style:
    label_font: int
    label_chars: int
    marker: int
    alternate: bool  # labels above/below by depth parity (deep trees) instead of to the right
    height: int


def _style(n_layers: int, rows: float, n_nodes: int) -> _Style:
    """Font and marker sizes for ``n_layers`` columns (depth 0..max + the bonus column) and
    ``rows`` y units, assuming a plot about 900 px wide."""
    alternate = n_layers > 9
    if n_layers <= 9:
        font, chars = 11, 12
    elif n_layers <= 16:
        font, chars = 10, 9
    elif n_layers <= 26:
        font, chars = 9, 7
    else:
        font, chars = 8, 5
    if n_nodes > 90 and font > 9:
        font -= 1
    row_px = 46.0 if alternate else 28.0
    row_px = max(18.0, min(row_px, 2400.0 / max(rows, 1.0)))
    if row_px < 24:
        font = min(font, 8)
    marker = 13 if row_px >= 40 else 11 if row_px >= 28 else 8
    height = int(max(300, min(2600, 130 + rows * row_px)))
    return _Style(font, chars, marker, alternate, height)


# ---- figure ----------------------------------------------------------------------------------
def _hover(step: StepRecord, i: int, ratios: Sequence[float]) -> str:
    """Hover text of node ``i`` (Plotly HTML)."""
    tree = step.tree
    tok = _esc(visible_text(step.node_text[i], 40))
    if i == 0:
        lines = [
            f"<b>{tok}</b>  (root: last committed token)",
            f"target's next token: <b>{_esc(visible_text(step.target_text[0], 40))}</b>" if step.target_text[0] else "",
        ]
        return "<br>".join(x for x in lines if x)
    status = step.status[i]
    lines = [
        f"<b>{tok}</b>  (node {i}, parent {tree.parent[i]})",
        f"depth {tree.depth[i]} · source {_esc(tree.source[i])}",
        f"draft prob {_fmt(_prob(tree.draft_logprob[i]))}",
        f"path prob {_fmt(_prob(tree.path_logprob[i]))} ({_fmt(ratios[i])} of the layer's best)",
        f"target prob {_fmt(step.target_prob[i])}",
        f"verdict: <b>{_esc(status)}</b>",
    ]
    if status == REJECTED:
        lines.append(f"target chose: <b>{_esc(visible_text(target_wanted(step, i), 40))}</b>")
    elif status == ACCEPTED:
        pos = step.accepted_path.index(i) if i in step.accepted_path else 0
        if pos and not _committed_count(step, pos):
            lines.append("not committed (output cut at EOS / token limit)")
    return "<br>".join(lines)


def _bonus_hover(step: StepRecord) -> str:
    last = step.accepted_path[-1]
    if not step.tree.num_drafts:  # a plain step: nothing was drafted, so nothing was a bonus
        lines = [
            f"<b>{_esc(visible_text(bonus_text(step), 40))}</b>  (the target's next token)",
            "a plain decoding step: no draft tree, one target forward, one token",
        ]
        if not _committed_count(step, 1):
            lines.append("not committed (output cut at EOS / token limit)")
        return "<br>".join(lines)
    lines = [
        f"<b>{_esc(visible_text(bonus_text(step), 40))}</b>  (bonus token)",
        f"the target's own token after node {last} (depth {step.tree.depth[last] + 1})",
        f"{step.accepted_tokens} draft(s) accepted + this token",
    ]
    if not _committed_count(step, len(step.accepted_path)):
        lines.append("not committed (output cut at EOS / token limit)")
    return "<br>".join(lines)


def _edge_xy(pairs: Sequence[tuple[int, int]], lay: TreeLayout) -> tuple[list, list]:
    xs: list = []
    ys: list = []
    for a, b in pairs:
        xs += [lay.x[a], lay.x[b], None]
        ys += [lay.y[a], lay.y[b], None]
    return xs, ys


PUNCTUATION_BOOST = 5
"""How many px larger a label of punctuation alone (".", ",", ")") is drawn: at the labels' size a full
stop was a speck beside its node, readable only by hovering."""


def _punctuation_only(label: str) -> bool:
    """Whether ``label`` (a token as drawn, whitespace made visible) is marks alone, no letter or digit."""
    return not any(c.isalnum() for c in label) and any(c not in _WHITESPACE_SIGNS for c in label)


def _labels(step: StepRecord, ids: Sequence[int], st: _Style, lay: TreeLayout) -> tuple[list, list]:
    shown = [visible_text(step.node_text[i], st.label_chars) for i in ids]
    text = [
        f'<b><span style="font-size:{st.label_font + PUNCTUATION_BOOST}px">{_esc(t)}</span></b>'
        if _punctuation_only(t)
        else _esc(t)
        for t in shown
    ]
    text = [f"<b>{t}</b>" if i == 0 else t for i, t in zip(ids, text)]  # the root stands out
    inner = set(step.tree.parent[1:]) | set(step.accepted_path)  # path: clear of the bonus edge
    return text, [_label_position(st, lay.x[i], i in inner) for i in ids]


def _label_position(st: _Style, x: float, inner: bool) -> str:
    """Deep trees: labels above / below by depth parity, so neighbouring columns do not collide;
    shallow trees: leaves labelled to the right, inner nodes above (clear of their fan of edges)."""
    if st.alternate:
        return "top center" if int(x) % 2 == 0 else "bottom center"
    return "top center" if inner else "middle right"


def _node_trace(
    step: StepRecord, ids: list[int], lay: TreeLayout, st: _Style, name: str, marker: dict, *, showlegend: bool = True
) -> dict:
    text, pos = _labels(step, ids, st, lay)
    ratios = relative_path_probs(step)
    return _scatter(
        x=[lay.x[i] for i in ids],
        y=[lay.y[i] for i in ids],
        mode="markers+text",
        name=name,
        legendgroup=name,
        showlegend=showlegend,
        meta="node",
        customdata=ids,
        text=text,
        textposition=pos,
        textfont={"size": st.label_font, "color": "#263238"},
        hovertext=[_hover(step, i, ratios) for i in ids],
        hovertemplate="%{hovertext}<extra></extra>",
        marker=marker,
        cliponaxis=False,
    )


def _scatter(**props) -> dict:
    """A scatter trace as a plain dict (the figure is built unvalidated)."""
    return {"type": "scatter", **props}


def _colorbar(title: str, st: _Style, ticks: list[float]) -> dict:
    return {
        "title": {"text": title, "side": "top"},
        "thickness": 12,
        "len": min(1.0, 260 / st.height + 0.2),
        "y": 1.0,
        "yanchor": "top",
        "tickvals": ticks,
    }


def _outline(step: StepRecord, ids: Sequence[int]) -> dict:
    """Marker outline: dark and thick on the accepted path, thin white elsewhere."""
    on_path = set(step.accepted_path)
    return {
        "color": ["#1B1B1B" if i in on_path else "#FFFFFF" for i in ids],
        "width": [2.0 if i in on_path else 0.8 for i in ids],
    }


def relative_path_probs(step: StepRecord) -> list[float]:
    """Per node, its path probability divided by the largest path probability at its depth (1.0 for
    the root): TALON admits a candidate when this ratio, over the layer's candidates, is at least μ."""
    tree = step.tree
    best: dict[int, float] = {}
    for d, lp in zip(tree.depth, tree.path_logprob):
        best[d] = max(best.get(d, -math.inf), lp)
    return [_prob(lp - best[d]) for d, lp in zip(tree.depth, tree.path_logprob)]


def default_title(step: StepRecord) -> str:
    """``Step k: N drafts · a accepted + bonus → c committed ("text")``, k counted from 1; a step that drafted
    nothing is named a plain decoding step."""
    text = _esc(visible_text(committed_label(step), 40))
    if not step.tree.num_drafts:
        committed = len(step.committed_ids)
        return f"Step {step.index + 1}: a plain decoding step, no drafts → {committed} committed (“{text}”)"
    return (
        f"Step {step.index + 1}: {plural(step.tree.num_drafts, 'draft')} · {step.accepted_tokens} accepted "
        f"+ bonus → {len(step.committed_ids)} committed (“{text}”)"
    )


# ---- the draft nodes, one function per colour mode -------------------------------------------------------
def _bonus_edge(step: StepRecord, lay: TreeLayout) -> dict:
    """The dotted edge from the last accepted node to the bonus token (drawn under the nodes)."""
    bx, by = _edge_xy([(step.accepted_path[-1], len(step.tree))], lay)
    return _scatter(
        x=bx,
        y=by,
        mode="lines",
        line={"color": VERDICT_COLORS[BONUS], "width": 3, "dash": "dot"},
        hoverinfo="skip",
        showlegend=False,
        meta="bonus-edge",
    )


def _bonus_point(step: StepRecord, lay: TreeLayout, st: _Style) -> dict:
    """The bonus token: a gold star labelled "bonus ...", the target's own token, in every colour mode (on a
    plain step, which drafted nothing, labelled "next ..." instead: the target's one token)."""
    bonus_id = len(step.tree)
    word = "bonus " if step.tree.num_drafts else "next "
    label = _esc(word + visible_text(bonus_text(step), st.label_chars))
    return _scatter(
        x=[lay.x[bonus_id]],
        y=[lay.y[bonus_id]],
        mode="markers+text",
        name="bonus token" if step.tree.num_drafts else "target's next token",
        meta="bonus",
        customdata=[bonus_id],
        text=[f"<b>{label}</b>"],
        textposition=[_label_position(st, lay.x[bonus_id], inner=False)],
        textfont={"size": st.label_font, "color": "#8A5A00"},
        hovertext=[_bonus_hover(step)],
        hovertemplate="%{hovertext}<extra></extra>",
        marker={
            "color": VERDICT_COLORS[BONUS],
            "symbol": "star",
            "size": st.marker + 9,
            "line": {"color": "#6D4C00", "width": 1},
        },
        cliponaxis=False,
    )


def _verdict_nodes(step: StepRecord, lay: TreeLayout, st: _Style) -> list[dict]:
    """Drafts grouped by verdict (accepted / rejected / not reached)."""
    groups: dict[str, list[int]] = {}
    for i in range(1, len(step.tree)):
        groups.setdefault(step.status[i], []).append(i)
    order = [ACCEPTED, REJECTED, NOT_REACHED] + sorted(set(groups) - {ACCEPTED, REJECTED, NOT_REACHED})
    return [
        _node_trace(
            step,
            groups[status],
            lay,
            st,
            status,
            {
                "color": VERDICT_COLORS.get(status, OTHER_COLOR),
                "size": st.marker + (2 if status == REJECTED else 0),  # a cross covers less than a disc
                "symbol": VERDICT_SYMBOLS.get(status, "circle"),
                "line": dict(zip(("color", "width"), VERDICT_OUTLINES.get(status, ("#FFFFFF", 1.0)))),
            },
        )
        for status in (s for s in order if groups.get(s))
    ]


def _confidence_nodes(step: StepRecord, lay: TreeLayout, st: _Style) -> list[dict]:
    """Drafts coloured by their draft probability given the parent, on a fixed 0..1 scale."""
    drafts = list(range(1, len(step.tree)))
    if not drafts:
        return []
    probs = [_prob(step.tree.draft_logprob[i]) for i in drafts]
    return [
        _node_trace(
            step,
            drafts,
            lay,
            st,
            "drafts",
            {
                "color": probs,
                "cmin": 0.0,
                "cmax": 1.0,
                "colorscale": CONFIDENCE_SCALE,
                "showscale": True,
                "size": st.marker,
                "line": _outline(step, drafts),
                "colorbar": _colorbar("draft prob<br>(given parent)", st, [0, 0.25, 0.5, 0.75, 1.0]),
            },
            showlegend=False,
        )
    ]


def _relative_nodes(step: StepRecord, lay: TreeLayout, st: _Style) -> list[dict]:
    """Drafts coloured by path probability over the layer's best (TALON's gate quantity), log scale."""
    drafts = list(range(1, len(step.tree)))
    if not drafts:
        return []
    ratios = relative_path_probs(step)
    floor = math.log10(RELATIVE_FLOOR)
    return [
        _node_trace(
            step,
            drafts,
            lay,
            st,
            "drafts",
            {
                "color": [max(floor, math.log10(ratios[i])) if ratios[i] > 0 else floor for i in drafts],
                "cmin": floor,
                "cmax": 0.0,
                "colorscale": CONFIDENCE_SCALE,
                "showscale": True,
                "size": st.marker,
                "line": _outline(step, drafts),
                "colorbar": {
                    **_colorbar("path prob ÷<br>layer's best", st, [floor, -2, -1, 0]),
                    "ticktext": [f"≤{RELATIVE_FLOOR:g}", "0.01", "0.1", "1"],
                },
            },
            showlegend=False,
        )
    ]


def _source_nodes(step: StepRecord, lay: TreeLayout, st: _Style) -> list[dict]:
    """Drafts grouped by where they came from (model / retrieval)."""
    groups: dict[str, list[int]] = {}
    for i in range(1, len(step.tree)):
        groups.setdefault(step.tree.source[i], []).append(i)
    return [
        _node_trace(
            step,
            groups[src],
            lay,
            st,
            SOURCE_NAMES.get(src, src),
            {
                "color": SOURCE_COLORS.get(src, OTHER_COLOR),
                "symbol": SOURCE_SYMBOLS.get(src, "circle"),
                "size": st.marker,
                "line": _outline(step, groups[src]),
            },
        )
        for src in sorted(groups, key=lambda s: (s not in SOURCE_COLORS, s))
    ]


NODE_TRACES = {
    "verdict": _verdict_nodes,
    "confidence": _confidence_nodes,
    "relative": _relative_nodes,
    "source": _source_nodes,
}
"""Colour mode -> the function drawing the draft nodes."""


def tree_figure(
    step: StepRecord,
    color_mode: str = "confidence",
    title: str | None = None,
    max_depth: int | None = None,
    max_width: float | None = None,
) -> go.Figure:
    """Draw one step's draft tree.

    Args:
        step: the step to draw.
        color_mode: one of ``COLOR_MODES``: ``"verdict"`` (accepted / rejected / not reached, plus
            the bonus token as an extra node), ``"confidence"`` (draft probability
            ``exp(draft_logprob)`` on a fixed 0..1 scale with a colour bar), ``"relative"`` (path
            probability over the best path probability at the same depth, log scale from
            ``RELATIVE_FLOOR`` to 1: what TALON's gate compares with μ) or ``"source"`` (model vs
            retrieval drafts).
        title: figure title; ``None`` for :func:`default_title`, ``""`` for none.
        max_depth: make room on the x axis for trees this deep (layers below the root, plus one
            column for the bonus token) instead of fitting this tree; pass the larger of two
            trees' depths to draw them side by side on the same ranges (:func:`shared_extent`).
        max_width: likewise for the y extent, in layout units (about one leaf each); a narrower tree
            is drawn in the middle of that extent, at the same scale.

    Returns:
        the figure; node traces have ``meta="node"`` (one point per tree node, root included) and
        one extra trace ``meta="bonus"`` holds the bonus point.
    """
    if color_mode not in COLOR_MODES:
        raise ValueError(f"color_mode must be one of {COLOR_MODES}, not {color_mode!r}")
    tree = step.tree
    n = len(tree)
    lay = tree_layout(tree, bonus_parent=step.accepted_path[-1])
    # columns 0..depth_span: the tree (with the bonus slot); with max_depth, that depth + the bonus
    depth_span = max(lay.depth, (max_depth + 1) if max_depth is not None else 0)
    rows = max(lay.width, max_width or 0.0)
    st = _style(depth_span + 1, rows, n)

    traces: list[dict] = []
    on_path = list(zip(step.accepted_path, step.accepted_path[1:]))
    path_set = set(on_path)
    other = [(tree.parent[i], i) for i in range(1, n) if (tree.parent[i], i) not in path_set]
    ex, ey = _edge_xy(other, lay)
    traces.append(
        _scatter(
            x=ex,
            y=ey,
            mode="lines",
            line={"color": EDGE_COLOR, "width": 1.2},
            hoverinfo="skip",
            showlegend=False,
            meta="edges",
        )
    )
    px_, py_ = _edge_xy(on_path, lay)
    traces.append(
        _scatter(
            x=px_ or [None],
            y=py_ or [None],
            mode="lines",
            name="accepted path",
            line={"color": PATH_COLOR, "width": 4.5},
            hoverinfo="skip",
            meta="accepted-path",
            showlegend=bool(on_path),
        )
    )

    root_marker = {
        "color": VERDICT_COLORS[ROOT],
        "symbol": "diamond",
        "size": st.marker + 5,
        "line": {"color": "#FFFFFF", "width": 1},
    }
    traces.append(_node_trace(step, [0], lay, st, "root", root_marker))
    traces.append(_bonus_edge(step, lay))
    traces += NODE_TRACES[color_mode](step, lay, st)
    traces.append(_bonus_point(step, lay, st))

    x_hi = depth_span + 0.9
    # A tree narrower than the shared extent sits in its middle (same scale), not as a strip at the top
    shift = (rows - lay.width) / 2
    y_hi = rows - 0.5 - shift
    label_room = 0.0 if st.alternate else 0.9  # room for labels right of the deepest column
    legend_top = LEGEND_TOP_PX if title != "" else TITLE_TOP_PX
    layout = dict(
        # Title and legend hang from the figure's top edge, the legend below the title: in a half-width
        # panel the legend wraps to two rows, which grow down (pushing the plot) instead of up into it.
        title={
            "text": default_title(step) if title is None else title,
            "x": 0.01,
            "xanchor": "left",
            "y": 1,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": TITLE_TOP_PX},
            "font": {"size": 14},
        },
        height=st.height,
        template=TEMPLATE,
        hovermode="closest",
        margin={"l": 10, "r": 10, "t": legend_top + 24, "b": 36},  # one legend row; more rows push it
        legend={
            "orientation": "h",
            "x": 0.0,
            "xanchor": "left",
            "yref": "container",
            "y": 1 - legend_top / st.height,
            "yanchor": "top",
            "font": {"size": 11},
            "itemsizing": "constant",
        },
        hoverlabel={"font": {"size": 12}, "align": "left"},
        dragmode="pan",
        uirevision="tree",
        xaxis={
            "range": [-0.6, x_hi + label_room],
            "title": {"text": "depth", "font": {"size": 11}},
            # ticks up to the bonus column only: past it is room for the labels, not a depth
            "tickmode": "array",
            "tickvals": list(range(0, depth_span + 1, 1 if depth_span <= 20 else 5)),
            "showgrid": True,
            "zeroline": False,
        },
        yaxis={"range": [y_hi + 0.15, -0.65 - shift], "visible": False, "zeroline": False},
    )
    # One construction, unvalidated: plotly's validation took ~5 ms of the ~6 ms a tree cost, on the
    # thread that serves a streaming run; the fast tier validates these figures instead.
    fig = go.Figure(data=traces, layout=layout, _validate=False)
    return fig


def shared_extent(steps: Sequence[StepRecord]) -> tuple[int, float]:
    """``(max_depth, max_width)`` over ``steps``: pass them to :func:`tree_figure` for each step to
    draw the trees on identical axis ranges (side-by-side comparison)."""
    depth, width = 0, 1.0
    for s in steps:
        depth = max(depth, s.tree.max_depth)
        width = max(width, tree_layout(s.tree, bonus_parent=s.accepted_path[-1]).width)
    return depth, width


NODE_TABLE_WIDTHS = ["4%", "7.5%", "6.5%", "11.5%", "7.5%", "10%", "10%", "10%", "10%", "11%", "12%"]
"""``node_table``'s column widths: its eleven columns fit a 1024-px page, headers broken at spaces only,
a verdict, a probability and a token of up to ten characters on one line (in Compare prompts' narrower
box too)."""
NODE_TABLE_HEIGHT = 900
"""The node tables' height in px before they scroll (Gradio's default, 500, showed about nine nodes)."""


NODE_TABLE_HELP = (
    "*draft prob*: the drafter's probability of the token after its parent; *path prob*: the product of "
    "those along the path from the root; *÷ layer's best*: the path prob over the best one at its depth "
    "(what TALON's gate compares with μ); *target prob*: the target's probability of the token after its "
    "parent, from the same verification forward for every node, those not reached included (at temperature "
    "0 the target accepts the token it ranks first, whatever its probability); *verdict*: *not reached* "
    "where the parent was refused, so the target never checked the node; *target chose*: at a refusal, the "
    "target's token instead."
)
"""What each column of ``node_table`` counts, in a line under the tables' headings on the page."""


def node_table(step: StepRecord) -> pd.DataFrame:
    """One row per tree node (root included, no bonus row), in node order.

    Columns: ``id``, ``parent`` (-1 for the root), ``depth``, ``token`` (visible whitespace),
    ``source``, ``draft prob`` (exp of the drafter's log-prob given the parent), ``path prob``
    (product along the path), ``÷ layer's best`` (path prob over the best at its depth), ``target prob``
    (the target's probability of the token given the parent's context), ``verdict``, ``target chose``
    (at a rejection: the target's token instead).
    """
    tree = step.tree
    ratios = relative_path_probs(step)
    rows = []
    for i in range(len(tree)):
        rows.append(
            {
                "id": i,
                "parent": tree.parent[i],
                "depth": tree.depth[i],
                "token": visible_text(step.node_text[i]),
                "source": tree.source[i],
                "draft prob": _sig(_prob(tree.draft_logprob[i])),
                "path prob": _sig(_prob(tree.path_logprob[i])),
                "÷ layer's best": _sig(ratios[i]),
                "target prob": _sig(float(step.target_prob[i])),
                "verdict": step.status[i],
                "target chose": visible_text(target_wanted(step, i)) if step.status[i] == REJECTED else "",
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
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
        ],
    )


def tree_html(
    step: StepRecord,
    color_mode: str = "confidence",
    max_depth: int | None = None,
    page_title: str | None = None,
    heading: str = "",
) -> str:
    """Standalone HTML page of :func:`tree_figure` (its first arguments) with plotly.js inlined, so the
    file opens offline.  ``page_title``: the page's ``<title>`` (the figure's title by default);
    ``heading``: HTML put above the figure (e.g. the prompt and the settings; the caller escapes it)."""
    fig = tree_figure(step, color_mode, max_depth=max_depth)
    page = fig.to_html(
        include_plotlyjs=True, full_html=True, include_mathjax=False, config={"displaylogo": False, "scrollZoom": True}
    )
    if page_title is None:  # the figure's title is Plotly HTML: its text, unescaped
        page_title = html.unescape(re.sub(r"<[^>]+>", "", default_title(step)))
    name = html.escape(page_title)
    page = page.replace("<head>", f"<head>\n    <title>{name}</title>", 1)
    if heading:
        box = f'<div style="font-family:Arial,sans-serif;margin:8px">{heading}</div>'
        page = page.replace("<body>", f"<body>{box}", 1)
    return page
