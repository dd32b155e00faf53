"""Shared look: a small light Plotly template (cheap to apply, unlike ``"plotly_white"``, whose
deep copy costs ~35 ms per figure) and the colours the figures share."""

from __future__ import annotations

GRID = "#EEF0F3"
AXIS_LINE = "#D5D9E0"
FONT_COLOR = "#2A3F5F"

TEMPLATE: dict = {
    "layout": {
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"color": FONT_COLOR, "family": "Arial, Helvetica, sans-serif"},
        "colorway": ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2"],
        "hoverlabel": {"align": "left"},
        "xaxis": {"gridcolor": GRID, "linecolor": AXIS_LINE, "zerolinecolor": GRID, "automargin": True, "ticks": ""},
        "yaxis": {"gridcolor": GRID, "linecolor": AXIS_LINE, "zerolinecolor": GRID, "automargin": True, "ticks": ""},
    }
}


NOTE_HEIGHT = 150
"""The height in px of a chart with nothing to draw: its title and a note saying why."""

CATEGORY_COLORS = (
    "#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#FF9DA6", "#9D755D", "#BAB0AC",
)  # fmt: skip
"""Ten distinct line colours, for charts with a line per prompt category (the headline suite has nine)."""
CATEGORY_SYMBOLS = (
    "circle", "square", "diamond", "triangle-up", "x", "triangle-down", "cross", "star", "pentagon", "hexagon",
)  # fmt: skip
CATEGORY_DASHES = ("solid", "dot", "dash")


def category_style(k: int) -> dict:
    """The ``line`` and ``marker`` of the ``k``-th category's line (from 0): a colour, a marker shape and a
    dash each, so that lines whose colours look alike to a colour-blind reader still differ."""
    return {
        "line": {"color": CATEGORY_COLORS[k % len(CATEGORY_COLORS)], "dash": CATEGORY_DASHES[k % len(CATEGORY_DASHES)]},
        "marker": {"symbol": CATEGORY_SYMBOLS[k % len(CATEGORY_SYMBOLS)], "size": 7},
    }


RUN_COLORS = ("#2E9E44", "#4C78A8", "#F58518", "#B279A2", "#E45756", "#72B7B2")
"""One colour per run, in that order, in every figure that draws several runs, so one run keeps its
colour from chart to chart (a single run is green, like accepted nodes)."""


def chart_title(text: str) -> dict:
    """A chart's title, as every figure has it: at the left, 14 px."""
    return {"text": text, "x": 0.01, "xanchor": "left", "font": {"size": 14}}


def centre_note(text: str, size: int | None = 13) -> dict:
    """A grey note in the middle of a chart with nothing (or little) to draw, as a layout annotation;
    ``size`` None takes the figure's font size."""
    font = {"color": "#6B7280"} | ({"size": size} if size else {})  # grey at 4.8:1 on white: readable
    return {"text": text, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "font": font}


def named_hline(fig, y: float, name: str, line: dict, **where) -> None:
    """A horizontal line at ``y`` named in the legend (an empty trace in its style), not labelled on the
    plot, where a label sits on the lines that run near it; ``where``: ``row`` / ``col`` of a subplot."""
    fig.add_hline(y=y, line=line, **where)
    fig.add_trace({"type": "scatter", "x": [None], "y": [None], "mode": "lines", "name": name, "line": line}, **where)


def new_figure():
    """An empty ``plotly.graph_objects.Figure`` on ``TEMPLATE`` alone.  ``go.Figure()`` followed by
    ``update_layout(template=...)`` merges into plotly's default template instead: ~15 ms more per figure
    and ~6 KB more JSON."""
    import plotly.graph_objects as go

    return go.Figure(layout={"template": TEMPLATE})
