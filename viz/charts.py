"""Whole-run figures from a :class:`~talon.trace.RunTrace`, and the step-tinted output text.

Every figure is a pure function of the trace; an empty trace (no steps yet) gives an empty figure
with a "no steps yet" note instead of raising.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import plotly.graph_objects as go

from talon.metrics import acceptance_per_depth, calibration_error, mat, mean_expected, shape_stats
from talon.trace import RunTrace, StepRecord

from .style import NOTE_HEIGHT, RUN_COLORS, TEMPLATE, centre_note, chart_title
from .summary import STOPPED_BY, plural
from .tree_figure import PATH_COLOR, VERDICT_COLORS, committed_tokens, visible_text

CHART_HEIGHT = 300
DRAFT_COLOR = "#F58518"
VERIFY_COLOR = "#4C78A8"
BONUS_COLOR = VERDICT_COLORS["bonus"]
EXPECTED_COLOR = "#6A1B9A"
"""The committed chart's per-step expected tokens: a colour no bar or verdict uses."""
# Pastel backgrounds cycled over steps (adjacent steps always differ).
PASTELS = ("#FFE0B2", "#C8E6C9", "#BBDEFB", "#F8BBD0", "#D1C4E9", "#FFF59D", "#B2EBF2", "#DCEDC8")


def _figure(
    traces: list,
    title: str,
    x_title: str,
    y_title: str,
    *,
    xaxis: dict | None = None,
    yaxis: dict | None = None,
    note: str | None = None,
    **layout,
) -> go.Figure:
    """Build the figure in one go (``update_layout`` on a figure with traces is slow).  With no
    traces, or with ``note``, a grey note is shown in the middle of the plot; with no traces the figure is
    only ``NOTE_HEIGHT`` tall (full-height frames around one line each would fill a plain run's Charts tab)."""
    if not traces:
        note = note or "no steps yet"
    xaxis = {"title": {"text": x_title, "font": {"size": 11}}, "zeroline": False, **(xaxis or {})}
    yaxis = {"title": {"text": y_title, "font": {"size": 11}}, "zeroline": False, **(yaxis or {})}
    if not traces:
        xaxis["visible"] = yaxis["visible"] = False
    base = {
        "title": chart_title(title),
        "height": CHART_HEIGHT,
        "template": TEMPLATE,
        "margin": {"l": 50, "r": 10, "t": 60, "b": 40},
        "legend": {
            "orientation": "h",
            "x": 1.0,
            "xanchor": "right",
            "y": 1.0,
            "yanchor": "bottom",
            "font": {"size": 11},
            "traceorder": "normal",
        },
        "hovermode": "x unified" if traces else "closest",
        "xaxis": xaxis,
        "yaxis": yaxis,
    }
    if note:
        base["annotations"] = [centre_note(note)]
    base.update(layout)
    if not traces:
        base["height"] = NOTE_HEIGHT
    return go.Figure(data=traces, layout=base)


def step_axis(steps: int) -> dict:
    """An x axis of step numbers for ``steps`` steps: a tick at every step of a short run (plotly put
    ticks at 0.6, 0.8, 1.2 ... under a run of one step), plotly's own spacing beyond."""
    return {"tick0": 1, "dtick": 1} if steps <= 15 else {}


def _accepted_committed(step: StepRecord) -> int:
    """Accepted drafts that made it into the output (the output may be cut at EOS / the limit)."""
    return min(step.accepted_tokens, len(step.committed_ids))


def committed_tokens_chart(trace: RunTrace) -> go.Figure:
    """Tokens committed per step (one target forward each) as stacked bars: accepted drafts and
    the bonus token; a dashed line marks the run's MAT (mean tokens per step, bonus included), and where
    the steps recorded it, a tick over each bar the tokens the step expected by the drafter's calibrated
    confidence (the calibration, step by step)."""
    steps = trace.steps
    title = "Tokens committed per step (MAT per step)"
    if not steps:
        return _figure([], title, "step", "tokens")
    x = [s.index + 1 for s in steps]  # steps are numbered from 1 wherever a person reads them
    acc = [_accepted_committed(s) for s in steps]
    bonus = [len(s.committed_ids) - a for s, a in zip(steps, acc)]

    def shown(texts: list[str]) -> str:
        return html.escape(visible_text("".join(texts), 60), quote=False)

    tokens = [committed_tokens(s) for s in steps]  # the accepted drafts' texts, then the bonus token's
    tau = mat(steps)
    traces = [
        go.Bar(  # left out below for a run that drafted nothing: a legend entry of nothing
            x=x,
            y=acc,
            name="accepted drafts",
            marker_color=PATH_COLOR,
            customdata=[shown(t[:a]) for t, a in zip(tokens, acc)],
            hovertemplate="%{y} accepted: %{customdata}<extra></extra>",
        ),
        go.Bar(
            x=x,
            y=bonus,
            name="bonus token",
            marker_color=BONUS_COLOR,
            customdata=[shown(t[a:]) for t, a in zip(tokens, acc)],
            hovertemplate="%{y} bonus: %{customdata}<extra></extra>",
        ),
        go.Scatter(
            x=[x[0] - 0.5, x[-1] + 0.5],
            y=[tau, tau],
            mode="lines",
            name=f"MAT {tau:.2f}",
            line={"color": "#37474F", "dash": "dash", "width": 2},
            hovertemplate=f"MAT (run mean) {tau:.2f}<extra></extra>",
        ),
    ]
    if drafted(trace) and all(s.expected is not None for s in steps):  # the calibration, step by step
        traces.append(
            go.Scatter(
                x=x,
                y=[s.expected for s in steps],
                mode="markers",
                name=f"expected (calibrated; mean {mean_expected(steps):.2f})",
                marker={
                    "symbol": "line-ew-open",
                    "size": 16,
                    "color": EXPECTED_COLOR,
                    "line": {"color": EXPECTED_COLOR, "width": 3},
                },
                hovertemplate="step %{x}: expected %{y:.2f} tokens (bonus included)<extra></extra>",
            )
        )
    top = max([len(s.committed_ids) for s in steps] + [s.expected or 0 for s in steps])
    cut = [s for s in steps if len(s.committed_ids) < s.accepted_tokens + 1]
    if cut:
        traces.append(_cut_marker(cut, trace.stop_reason))
    return _figure(
        traces if drafted(trace) else traces[1:],
        title,
        "step",
        "tokens",
        barmode="stack",
        xaxis=step_axis(len(steps)),
        yaxis={"rangemode": "tozero", **({"dtick": 1} if top <= 12 else {})},
    )


def _cut_marker(steps: Sequence[StepRecord], stop_reason: str) -> go.Scatter:
    """A mark over the bar of each step the run ended inside (its last): the verifier accepted more than
    the output kept, so the Tree shape chart's accepted depth is past the bar and there is no bonus token.
    A legend entry says what ended the run (a note on the bar crossed the MAT line and its neighbours)."""
    return go.Scatter(
        x=[s.index + 1 for s in steps],
        y=[len(s.committed_ids) + 0.35 for s in steps],
        mode="markers",
        name=f"run ended inside this step ({STOPPED_BY.get(stop_reason, 'its end')})",
        marker={"symbol": "triangle-down", "size": 11, "color": "#37474F"},
        hovertext=[
            f"the run ended here: the verifier accepted {plural(s.accepted_tokens, 'draft')} and a bonus token, "
            f"the output kept {plural(len(s.committed_ids), 'token')}"
            for s in steps
        ],
        hovertemplate="%{hovertext}<extra></extra>",
    )


def acceptance_by_depth_chart(trace: RunTrace) -> go.Figure:
    """Acceptance per depth of one run, both rates (``acceptance_per_depth_chart``)."""
    return acceptance_per_depth_chart({"run": trace})


FEW_TREES = 10
"""Below this many trees reaching a depth, the acceptance chart hatches that depth's bar."""


LABEL_INSIDE = 0.25
"""The least rate whose bar holds its two-line label at full size (plotly shrinks a label to fit its bar:
a 13 % bar's came out about 5 px tall); a lower bar carries its label above it."""
LABEL_BAND = 0.3
"""How far above a low bar its label reaches (a share of the y axis: two 11 px lines of a 260 px plot)."""


def _label_height(rate: float | None, markers: Iterable[float | None]) -> float | None:
    """Where a low bar's label goes so that it covers no line marker at its depth: None where it keeps its
    own place (inside a bar tall enough, or just above a low bar no marker crowds), else the y of the
    highest marker in its way, the label sitting just above it (a marker it would then cover moves it on).
    ``markers``: every run's line at that depth (a neighbour's marker stands a bar's width away, less than
    a label is wide once the chart has many depths)."""
    if rate is None or rate >= LABEL_INSIDE:
        return None
    height, floor, top = None, rate - 0.05, rate + LABEL_BAND
    for marker in sorted(m for m in markers if m is not None):
        if floor <= marker <= top:
            height, top = marker, marker + LABEL_BAND
    return height


def _rate_label(row: dict) -> str:
    """A bar's label: the rate over the count it is a share of ("100%<br>1/1")."""
    return "" if row["rate"] is None else f"{row['rate']:.0%}<br>{row['accepted']}/{row['reached']}"


def _label_off_bar(row: dict, x: float, height: float | None, color: str = "#263238") -> dict:
    """A bar's label as an annotation at ``x`` in ``color``: just above ``height`` (the marker it would
    cover, ``_label_height``), or, with no height, on a white patch at the foot of a hatched bar."""
    place = {"y": 0, "yshift": 2} if height is None else {"y": height, "yshift": 7}
    return {
        "x": x,
        **place,
        "yanchor": "bottom",
        "text": _rate_label(row),
        "showarrow": False,
        **({"bgcolor": "rgba(255,255,255,0.85)"} if height is None else {}),
        "font": {"color": color, "size": 11},
    }


HATCH_NOTE = f"  ·  hatched bars: fewer than {FEW_TREES} trees drafted to d, a rough share"
"""Said under the acceptance chart's axis when a bar is hatched (the hatching had no legend)."""


def acceptance_per_depth_chart(traces: Mapping[str, RunTrace], max_depth: int | None = None) -> go.Figure:
    """Acceptance per depth, both rates (``talon.metrics.acceptance_per_depth``), per run: bars =
    accepted at d ÷ trees drafted to d, labelled with both counts and hatched where fewer than
    ``FEW_TREES`` trees were drafted to d; line = accepted at d ÷ trees whose node at d − 1 was accepted and had
    children (the drafter's acceptance given everything above was right).  The hover gives the counts,
    and the steps that ran out of tree at d (everything above accepted, nothing drafted at d).
    ``max_depth``: the x range to show (the deepest tree of all runs by default)."""
    title = "Acceptance per depth: of trees drafted to d (bars), given d−1 was accepted (line)"
    y_title = "share accepted at depth d"
    traces = {k: t for k, t in traces.items() if t is not None}
    per_run = {label: acceptance_per_depth(t.steps) for label, t in traces.items()}
    if not any(per_run.values()):
        any_steps = any(t.steps for t in traces.values())
        return _figure([], title, "depth", y_title, note="no draft trees in this run" if any_steps else None)
    deepest = max_depth or max(len(rows) for rows in per_run.values())
    figs, labels = [], []
    single = len(per_run) == 1
    drawn = [label for label, rows in per_run.items() if rows]  # a run of plain steps has no bars
    markers = defaultdict(list)  # depth -> every run's line there: a low bar's label steps over them all
    for rows in per_run.values():
        for r in rows:
            markers[r["depth"]].append(r["conditional"])
    for k, (label, rows) in enumerate(per_run.items()):
        if not rows:
            continue
        color = RUN_COLORS[k % len(RUN_COLORS)]  # by the run's place, as in the other charts
        # beside another run's, a label in its run's colour: a 0 % bar has no bar to tell whose it is
        ink = "#263238" if single else color
        prefix = "" if single else f"{label}: "
        few = f"; under {FEW_TREES}, hatched: a rough share"
        custom = [
            [
                r["accepted"],
                r["reached"],
                r["checked"],
                r["ran_out"],
                r["depth"],
                few if r["reached"] < FEW_TREES else "",
            ]
            for r in rows
        ]
        depths = [r["depth"] for r in rows]
        # A run's line stands over its own bar of each depth's group (plotly's grouped bars split the
        # group's 0.8 into equal widths), not on the seam between two runs' bars.
        shift = (drawn.index(label) - (len(drawn) - 1) / 2) * 0.8 / len(drawn)
        show_labels = deepest <= 15
        heights = [_label_height(r["rate"], markers[r["depth"]]) if show_labels else None for r in rows]
        # a hatched bar's label on a white patch at the bar's foot: drawn on the hatching it was unreadable
        patched = [show_labels and r["reached"] < FEW_TREES and (r["rate"] or 0) >= LABEL_INSIDE for r in rows]
        labels += [_label_off_bar(r, r["depth"] + shift, h, ink) for r, h in zip(rows, heights) if h is not None]
        labels += [_label_off_bar(r, r["depth"] + shift, None, ink) for r, p in zip(rows, patched) if p]
        moved = [h is not None or patch for h, patch in zip(heights, patched)]
        figs.append(
            go.Bar(
                x=depths,
                y=[r["rate"] for r in rows],
                name=f"{prefix}accepted at d ÷ drafted to d",
                # hatched where few trees reached the depth: a 100 % bar of one tree is not "always accepted"
                marker={
                    "color": color,
                    "opacity": 0.85 if single else 0.6,  # the bar's, not its label's
                    "pattern": {"shape": ["/" if r["reached"] < FEW_TREES else "" for r in rows], "solidity": 0.3},
                },
                customdata=custom,
                text=[("" if move else _rate_label(r)) for r, move in zip(rows, moved)] if show_labels else None,
                # at the bar's foot, inside it: above the bar the line's markers, at the rates given d−1, ran
                # through the labels; a bar too low to hold its label (0 % too) carries it above, or above
                # the line's marker where the marker would sit in it
                textposition=["inside" if (r["rate"] or 0) >= LABEL_INSIDE else "outside" for r in rows],
                insidetextanchor="start",
                textangle=0,
                textfont={"color": [ink if (r["rate"] or 0) < LABEL_INSIDE else "#263238" for r in rows], "size": 11},
                hovertemplate="depth %{x}: %{y:.0%} (%{customdata[0]} of %{customdata[1]} trees drafted to it"
                "%{customdata[5]})"
                f"<extra>{label}</extra>",
            )
        )
        figs.append(
            go.Scatter(
                x=[d + shift for d in depths],
                y=[r["conditional"] for r in rows],
                name=f"{prefix}accepted at d ÷ d−1 accepted",
                mode="lines+markers",
                line={"color": "#37474F" if single else color, "width": 2, "dash": "dot"},
                marker={"size": 8, "symbol": "diamond"},
                customdata=custom,
                hovertemplate="depth %{customdata[4]}: %{y:.0%} (%{customdata[0]} of %{customdata[2]} steps whose "
                "node at d−1 was accepted and had children; %{customdata[3]} more ran out of tree there)"
                f"<extra>{label}</extra>",
            )
        )
    hatched = any(r["reached"] < FEW_TREES for rows in per_run.values() for r in rows)
    return _figure(
        figs,
        title,
        f"depth{HATCH_NOTE if hatched else ''}",
        y_title,
        hovermode="closest",
        barmode="group",
        annotations=labels,
        yaxis={"range": [0, 1.15], "tickformat": ".0%"},
        xaxis={
            "tickmode": "linear",
            "tick0": 1,
            "dtick": 1 if deepest <= 20 else 5,
            "range": [0.4, deepest + 0.6],
        },
    )


SHAPE_PLOT_PX = 800
"""The tree-shape chart's plotting width to size its markers by (the chart is about 900 px wide at 1024 px,
colour bar and margins taken off; wider windows only widen the steps)."""


def accepted_marker_size(steps: int) -> int:
    """The width in px of a step's accepted-depth mark: 16 px, or one step's column where a long run's
    steps are narrower (a fixed 16 px mark spanned eight steps of a 250-step run and merged into a line)."""
    return max(3, min(16, int(SHAPE_PLOT_PX / max(steps, 1))))


def tree_shape_heatmap(
    trace: RunTrace, max_depth: int | None = None, max_width: int | None = None, title: str | None = None
) -> go.Figure:
    """Tree shape per step: nodes per layer (x = step, y = depth from 1, colour = width; blank
    beyond a tree's depth), with each step's accepted depth marked.  ``max_depth`` / ``max_width`` fix the
    depth axis and the colour scale (pass the larger of two runs' to compare them on one scale)."""
    steps = trace.steps
    title = title or "Tree shape: nodes per layer"
    deepest = max((s.tree.max_depth for s in steps), default=0)
    if deepest == 0:
        return _figure([], title, "step", "depth", note="no draft trees in this run" if steps else None)
    x = [s.index + 1 for s in steps]  # steps are numbered from 1 wherever a person reads them
    depths = list(range(1, deepest + 1))
    z = [[(s.layer_widths[d] if d <= s.tree.max_depth else None) for s in steps] for d in depths]
    traces = [
        go.Heatmap(
            x=x,
            y=depths,
            z=z,
            colorscale=[[0, "#C6DBEF"], [1, "#08306B"]],
            zmin=1,
            zmax=max_width or max((s.tree.widest_layer for s in steps), default=1),
            xgap=1,
            ygap=1,
            colorbar={"title": {"text": "nodes", "side": "top"}, "thickness": 12},
            hovertemplate="step %{x}, depth %{y}: %{z} nodes<extra></extra>",
            name="layer width",
        ),
        go.Scatter(
            x=x,
            y=[s.accepted_tokens if s.accepted_tokens else None for s in steps],
            mode="markers",
            name="accepted depth",
            marker={
                "symbol": "line-ew-open",
                "size": accepted_marker_size(len(steps)),
                "color": "#D62728",
                "line": {"width": 3 if len(steps) <= 100 else 2, "color": "#D62728"},
            },
            hovertemplate="step %{x}: accepted to depth %{y}<extra></extra>",
        ),
    ]
    return _figure(
        traces,
        title,
        "step",
        "depth",
        hovermode="closest",
        showlegend=True,
        xaxis=step_axis(len(steps)),
        yaxis={
            "range": [(max_depth or deepest) + 0.5, 0.5],
            "tickmode": "linear",
            "tick0": 1,
            "dtick": 1 if (max_depth or deepest) <= 12 else 5,
        },
    )


def _axis_suffix(panel: int) -> str:
    """Plotly's suffix for panel ``panel``'s axes (from 1): "" for the first ("x", "y"), else its number."""
    return "" if panel == 1 else str(panel)


def _panels(count: int, gap: float = 0.06) -> list[list[float]]:
    """x-axis domains of ``count`` side-by-side panels."""
    width = (1.0 - gap * (count - 1)) / count
    return [[k * (width + gap), k * (width + gap) + width] for k in range(count)]


def shape_distribution_chart(traces: Mapping[str, RunTrace]) -> go.Figure:
    """Per run, the share of its steps at each tree depth (left) and each number of draft nodes (right):
    how much the shape varies between the steps of one prompt, next to the difference between prompts."""
    title = "Per-step tree depth and size: share of each run's steps"
    stats = {label: shape_stats(t.steps) for label, t in traces.items() if t is not None and t.steps}
    if not stats:
        return _figure([], title, "", "")
    domains = _panels(2, 0.1)
    figs = []
    for k, (label, st) in enumerate(stats.items()):
        color = RUN_COLORS[k % len(RUN_COLORS)]
        for panel, key in ((1, "depths"), (2, "nodes")):
            values = st[key]
            xs = sorted(set(values))
            share = [values.count(x) / len(values) for x in xs]
            axis = _axis_suffix(panel)
            figs.append(
                go.Bar(
                    x=xs,
                    y=share,
                    name=label,
                    legendgroup=label,
                    showlegend=panel == 1,
                    marker_color=color,
                    opacity=0.75,
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                    customdata=[values.count(x) for x in xs],
                    hovertemplate=f"{'depth' if key == 'depths' else 'draft nodes'} %{{x}}: %{{y:.0%}} of the steps "
                    f"(%{{customdata}})<extra>{label}</extra>",
                )
            )
    return _figure(
        figs,
        title,
        "tree depth (draft layers)",
        "share of steps",
        barmode="group",
        hovermode="closest",
        xaxis={"domain": domains[0], "tickmode": "linear", "tick0": 0, "dtick": 1},
        yaxis={"tickformat": ".0%", "rangemode": "tozero"},
        xaxis2={"domain": domains[1], "title": {"text": "draft nodes per step", "font": {"size": 11}}, "anchor": "y2"},
        yaxis2={"tickformat": ".0%", "rangemode": "tozero", "anchor": "x2", "matches": "y"},
    )


RELIABILITY_PANELS = ("depth 1", "depth 2", "depth 3", "depth 4+")


def reliability_chart(series: Mapping[str, Sequence[dict]], title: str, x_title: str, y_title: str) -> go.Figure:
    """A reliability chart per depth (panels for depths 1, 2, 3 and 4+): for each series (label ->
    ``talon.metrics.reliability_table`` rows) the mean claimed confidence of each bin against the share
    observed, marker area by count, and the diagonal where a confidence means exactly what it says.  The
    legend gives each series' expected calibration error (``talon.metrics.calibration_error``)."""
    if not any(series.values()):
        return _figure([], title, x_title, y_title, note="no checked draft nodes in this run")
    domains = _panels(len(RELIABILITY_PANELS))
    figs: list = []
    layout: dict = {}
    for panel, name in enumerate(RELIABILITY_PANELS, start=1):
        axis = _axis_suffix(panel)
        figs.append(
            go.Scatter(
                x=[0, 1],
                y=[0, 1],
                mode="lines",
                line={"color": "#B0B7C3", "dash": "dash", "width": 1},
                hoverinfo="skip",
                showlegend=panel == 1,
                name="perfectly calibrated",
                legendgroup="diagonal",
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
            )
        )
        layout[f"xaxis{axis}"] = {
            "domain": domains[panel - 1],
            "range": [-0.04, 1.04],  # markers at 0 and 1 drawn whole
            "tickformat": ".1f",
            "anchor": f"y{axis}",
            "title": {"text": name, "font": {"size": 11}},
        }
        layout[f"yaxis{axis}"] = {"range": [-0.04, 1.06], "anchor": f"x{axis}", "showticklabels": panel == 1}
    for k, (label, rows) in enumerate(series.items()):
        color = RUN_COLORS[(k + 1) % len(RUN_COLORS)]
        ece = calibration_error(rows)
        for panel in range(1, len(RELIABILITY_PANELS) + 1):
            picked = [r for r in rows if r["depth"] == panel]
            if not picked:
                continue
            axis = _axis_suffix(panel)
            figs.append(
                go.Scatter(
                    x=[r["confidence"] for r in picked],
                    y=[r["observed"] for r in picked],
                    mode="lines+markers",
                    name=f"{label} (ECE {ece:.3f})",
                    legendgroup=label,
                    showlegend=panel == min(r["depth"] for r in rows),
                    line={"color": color, "width": 1.5},
                    marker={
                        "color": color,
                        "size": [6 + 2.5 * math.sqrt(r["count"]) for r in picked],
                        "sizemode": "diameter",
                    },
                    customdata=[[r["low"], r["high"], r["count"], r["hits"]] for r in picked],
                    hovertemplate="claimed %{customdata[0]:.2f}–%{customdata[1]:.2f} (mean %{x:.2f}): "
                    "%{customdata[3]} of %{customdata[2]} = %{y:.0%}" + f"<extra>{label}</extra>",
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                )
            )
    layout["yaxis"]["title"] = {"text": y_title, "font": {"size": 11}}
    # The x axes' meaning is the title's second line, and the legend sits at the figure's foot: under the
    # first panel alone the meaning ran off the figure's left edge, and the legend's wrapped rows ran into
    # the title on a page zoomed to 150 % (683 px wide).
    layout["title"] = {**chart_title(title), "subtitle": {"text": f"x: {x_title}", "font": {"size": 11}}}
    layout["margin"] = {"l": 50, "r": 10, "t": 70, "b": 40}
    layout["legend"] = {"orientation": "h", "x": 0.0, "y": 0.0, "yref": "container", "yanchor": "bottom"}
    fig = _figure(figs, title, "", y_title, hovermode="closest", height=CHART_HEIGHT + 80)
    fig.layout.update(layout)
    reached = {r["depth"] for rows in series.values() for r in rows}
    for panel in range(1, len(RELIABILITY_PANELS) + 1):
        if panel not in reached:  # an empty panel says why, rather than look like a drawing that failed
            axis = _axis_suffix(panel)
            fig.add_annotation(
                x=0.5,
                y=0.5,
                xref=f"x{axis}",
                yref=f"y{axis}",
                text="no checked<br>node this deep",
                showarrow=False,
                font={"size": 11, "color": "#6B7280"},
            )
    return fig


def drafted(trace: RunTrace) -> bool:
    """Whether any step of ``trace`` called a drafter or drew a tree (a plain decoding run did neither)."""
    return any(s.drafter_forwards or s.tree.max_depth for s in trace.steps)


def timing_chart(trace: RunTrace) -> go.Figure:
    """Wall time per step in seconds, stacked: drafting (tree building, drafter forwards
    included) and verification (target forward + commit).  A run that never drafted shows its verify
    time alone (its microseconds of building a root-only tree are not a "draft" to show)."""
    steps = trace.steps
    if not steps:
        return _figure([], "Draft vs verify time per step", "step", "seconds")
    x = [s.index + 1 for s in steps]  # steps are numbered from 1 wherever a person reads them

    def phase(name: str, seconds: list[float], color: str) -> go.Bar:
        hover = f"{name} %{{y:.4f}} s<extra></extra>"
        return go.Bar(x=x, y=seconds, name=name, marker_color=color, hovertemplate=hover)

    verify = phase("verify", [s.verify_seconds for s in steps], VERIFY_COLOR)
    axis = step_axis(len(steps))
    if not drafted(trace):
        return _figure([verify], "Time per step (one target forward; nothing drafted)", "step", "seconds", xaxis=axis)
    draft = phase("draft", [s.draft_seconds for s in steps], DRAFT_COLOR)
    return _figure([draft, verify], "Draft vs verify time per step", "step", "seconds", barmode="stack", xaxis=axis)


SPECULATE_KEPT_COLOR = "#54A24B"
SPECULATE_DISCARDED_COLOR = "#BAB0AC"
WAIT_COLOR = "#E45756"
PREFILL_COLOR = "#BFC5CC"


LANE_PATTERNS = {"kept": "/", "discarded": "."}
"""Speculative drafts are hatched (kept) or dotted (discarded) as well as coloured: kept green beside the
orange of a plain draft, on the same lane, looks alike to a red-blind reader."""


def _lane_bars(
    name: str, lane: str, spans: list[tuple[float, float, int]], color: str, show_legend: bool, pattern: str = ""
) -> go.Bar:
    """Horizontal bars on ``lane``, one per ``(start, seconds, step number from 1)`` (0: the prefill,
    before step 1), filled with ``color`` under ``pattern`` (a Plotly pattern shape; "" for none)."""
    return go.Bar(
        y=[lane] * len(spans),
        x=[d for _, d, _ in spans],
        base=[s for s, _, _ in spans],
        orientation="h",
        name=name,
        legendgroup=name,
        showlegend=show_legend,
        marker={
            "color": color,
            "line": {"width": 0},
            "pattern": {"shape": pattern, "fillmode": "overlay", "fgcolor": "#1B1B1B", "fgopacity": 0.5, "size": 6},
        },
        customdata=[[f"step {k}" if k else "before step 1", s, d * 1000] for s, d, k in spans],
        hovertemplate=f"{name}<br>%{{customdata[0]}}<br>start %{{customdata[1]:.3f}} s · "
        "%{customdata[2]:.1f} ms<extra></extra>",
    )


WAIT_SHOWN_SECONDS = 0.001
"""The shortest wait of the target for the drafter the timeline draws: below it the wait is the hand-over
between the two threads (~10 µs a step here), invisible at any zoom but for a hairline that made Sync vs
async's "target waited" of 0.000 s look wrong."""

TIMELINE_TITLE = "Timeline: drafter and target lanes"
FIRST_TIMELINE_TITLE = "Timeline of the first repetition: drafter and target lanes"


def timeline_chart(traces: dict[str, RunTrace], title: str = TIMELINE_TITLE) -> go.Figure:
    """Gantt-style lanes, a drafter lane and a target lane per run, of the prefill and every draft and
    verify phase (seconds since the run started).  Async runs also show the drafter's
    speculative drafting during verification, kept (its tree was used) or discarded (a wrong guess),
    and the target's waits for it, so the mutual waiting of sync runs and the overlap are visible."""
    kinds = {
        "prefill": ("prefill (the prompt, target and drafter)", PREFILL_COLOR),
        "draft": ("draft", DRAFT_COLOR),
        "verify": ("verify", VERIFY_COLOR),
        "kept": ("speculative draft, kept", SPECULATE_KEPT_COLOR),
        "discarded": ("speculative draft, discarded", SPECULATE_DISCARDED_COLOR),
        "wait": ("target waits for drafter", WAIT_COLOR),
    }
    spans: dict[tuple[str, str], list] = {}
    lanes = []
    for label, trace in traces.items():
        drafter_lane, target_lane = f"{label} · drafter", f"{label} · target"
        lanes += [drafter_lane, target_lane]
        if trace.prefill_seconds > 0 and trace.steps:  # on the clock too: the lanes began 0.4 s in, unsaid
            spans.setdefault(("prefill", target_lane), []).append((0.0, trace.prefill_seconds, 0))
        for st in trace.steps:
            if st.drafter_forwards and not _from_speculation(trace, st):
                spans.setdefault(("draft", drafter_lane), []).append((st.draft_start, st.draft_seconds, st.index + 1))
            spans.setdefault(("verify", target_lane), []).append((st.verify_start, st.verify_seconds, st.index + 1))
            if st.speculate_start is not None:
                kind = "kept" if st.speculate_hit else "discarded"
                spans.setdefault((kind, drafter_lane), []).append(
                    (st.speculate_start, st.speculate_seconds, st.index + 1)
                )
            if st.wait_seconds >= WAIT_SHOWN_SECONDS:
                spans.setdefault(("wait", target_lane), []).append(
                    (st.verify_start + st.verify_seconds, st.wait_seconds, st.index + 1)
                )
    bars, shown = [], set()
    for (kind, lane), items in spans.items():
        name, color = kinds[kind]
        bars.append(_lane_bars(name, lane, items, color, kind not in shown, LANE_PATTERNS.get(kind, "")))
        shown.add(kind)
    height = max(CHART_HEIGHT, 90 + 34 * len(lanes))
    return _figure(
        bars,
        title,
        "seconds since the run started",
        "",
        yaxis={"categoryorder": "array", "categoryarray": lanes[::-1], "type": "category"},
        barmode="overlay",
        hovermode="closest",
        height=height,
        note=None if bars else "no steps yet",
    )


def _from_speculation(trace: RunTrace, step: StepRecord) -> bool:
    """Whether ``step``'s tree was drafted ahead during the previous step's verification."""
    prev = trace.steps[step.index - 1] if 0 < step.index <= len(trace.steps) else None
    return bool(prev is not None and prev.speculate_hit)


def run_charts(trace: RunTrace) -> dict[str, go.Figure]:
    """All whole-run figures by name: ``committed``, ``acceptance``, ``shape``, ``timing``."""
    return {
        "committed": committed_tokens_chart(trace),
        "acceptance": acceptance_by_depth_chart(trace),
        "shape": tree_shape_heatmap(trace),
        "timing": timing_chart(trace),
    }


TEXT_STYLE = (
    "white-space:pre-wrap;line-height:1.7;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:14px"
)


def step_span(step: StepRecord) -> str:
    """One step's ``committed_text`` as a ``<span class="talon-step">`` tinted by step (pastel colours
    cycled), ``title`` = the step number (from 1) and its tokens; HTML-escaped.  ``""`` for a step that
    committed no text (e.g. only EOS)."""
    if not step.committed_text:
        return ""
    tokens = " | ".join(visible_text(t, 20) for t in committed_tokens(step))
    n = len(step.committed_ids)
    title = f"step {step.index + 1}: {n} token{'s' if n != 1 else ''}: {tokens}"
    style = f"background:{PASTELS[step.index % len(PASTELS)]};color:#1B1B1B;border-radius:3px"
    return (
        f'<span class="talon-step" data-step="{step.index + 1}" title="{html.escape(title, quote=True)}" '
        f'style="{style}">{html.escape(step.committed_text, quote=False)}</span>'
    )
