"""Tables and figures of benchmark-suite results (``runs.csv`` / ``summary.csv`` as written by
``python -m talon.bench --suite``), shared by the CLI and the app's Benchmark tab.

Pure pandas / Plotly: no torch.  Every function takes the DataFrames (schemas in
``talon.bench.results``) and returns a table or a figure; data a function needs but the results do not
hold (e.g. no N sweep in a ``quick`` run) gives an empty table or a figure with a note, never an error.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from talon.bench.results import ran_part
from talon.bench.suites import AUTO_SUFFIX, AUTO_VARIANTS, PEER_METHODS, TREE_METHODS, is_auto, split_method
from talon.config import BUDGET_METHODS, METHOD_NAMES

from .style import TEMPLATE, category_style, centre_note, chart_title, named_hline, new_figure

ALL = "all"
METHOD_LABELS = {
    **METHOD_NAMES,
    "hf_generate": "HF generate",
    "hf_prompt_lookup": "HF prompt lookup",
    "hf_assisted": "HF assisted",
}
METHOD_COLORS = {
    "ar": "#9E9E9E",
    "chain": "#72B7B2",
    "static": "#B279A2",
    "eagle2": "#4C78A8",
    "talon": "#F58518",
    "hybrid": "#54A24B",
    "hf_generate": "#BDBDBD",
    "hf_prompt_lookup": "#E45756",
    "hf_assisted": "#8C6D31",
    "talon@ngram": "#FF9DA6",
}
DRAFTER_LABELS = {"head": "head", "ngram": "prompt lookup"}
SWEEP_AXES = {
    "budget_sweep": ("budget", "budget N (draft nodes, root not counted; log scale)", True),
    "mu_sweep": ("mu", "confidence gate μ (log scale)", True),
    "topk_sweep": ("topk", "root width K (0 = the gate picks the root's children)", False),
}
SWEEP_TITLES = {"budget": "Budget N sweep", "mu": "Confidence gate μ sweep", "topk": "Root width K sweep"}
HEIGHT = 340


def label(method: str) -> str:
    """The display name of a method; ``METHOD@DRAFTER`` reads "TALON (prompt lookup)", ``METHOD+auto``
    "TALON, auto N"."""
    base, drafter = split_method(method)
    name = METHOD_LABELS.get(base, base)
    name = name if drafter is None else f"{name} ({DRAFTER_LABELS.get(drafter, drafter)})"
    return f"{name}, auto N" if is_auto(method) else name


def color(method: str) -> str | None:
    """The chart colour of a method (a variant without its own colour takes its method's)."""
    return METHOD_COLORS.get(method, METHOD_COLORS.get(split_method(method)[0]))


def _empty(title: str, note: str) -> go.Figure:
    """A chart with nothing to draw: its title and a note saying why.  It keeps a drawn chart's height: the
    Benchmark tab hides it, but Plotly draws it into the chart it replaces first, and a short frame with
    Plotly's default margins left a log-axis chart no room ("Something went wrong with axis scaling"),
    which stopped the whole page."""
    return go.Figure(
        layout={
            "title": chart_title(title),
            "template": TEMPLATE,
            "height": HEIGHT,
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "annotations": [centre_note(note)],
        }
    )


def _layout(fig: go.Figure, title: str, **extra) -> go.Figure:
    fig.layout.template = TEMPLATE  # replaces plotly's default template (update_layout would merge)
    legend = extra.get("showlegend", True)  # room at the foot for it
    fig.update_layout(
        title=chart_title(title),
        height=HEIGHT + (70 if legend else 40),
        margin={"l": 50, "r": 10, "t": 70, "b": 100 if legend else 70},
        # the legend at the figure's foot, under the x-axis title (placed on the plot, it sat on the title)
        legend={"orientation": "h", "x": 0.0, "xanchor": "left", "yref": "container", "y": 0.0, "yanchor": "bottom"},
        **extra,
    )
    return fig


def _rows(summary: pd.DataFrame, kinds: tuple[str, ...], category: str | None = ALL) -> pd.DataFrame:
    """Summary rows of the first kind in ``kinds`` that has any; ``category`` None keeps all categories."""
    if summary is None or summary.empty or "kind" not in summary:
        return pd.DataFrame(columns=[] if summary is None else summary.columns)
    for kind in kinds:
        rows = summary[summary["kind"] == kind]
        if category is not None:
            rows = rows[rows["category"] == category]
        if not rows.empty:
            return rows
    return summary.iloc[0:0]


def _num(value, digits: int = 2):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), digits)


def _t(temperature) -> str:
    return f"T={float(temperature):g}"


def _moved(meta: dict, directory: str) -> str:
    """A note where the command wrote to another directory than the one shown (results moved after)."""
    try:
        words = shlex.split(str(meta.get("command", "")))
    except ValueError:
        return ""
    written = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "--out-dir"), None)
    if not written or not directory or Path(written).name == Path(directory).name:
        return ""
    return f" (it wrote to `{written}`; the files were moved here after)"


LINEAR_KERNELS = {
    "onednn": "oneDNN's packed kernel",
    "mkl": "MKL's packed sgemm",
    "stream": "TALON's own few-row kernel",
}
"""What a results directory's ``packed_kernel`` names: the kernel its CPU target's linears ran on."""


def linears_part(meta: dict) -> str:
    """``", linears: ..."`` for a CPU run that recorded its packed kernel (and up to how many rows PyTorch's
    own linear took instead, and how many weights streamed as codes); empty otherwise (a GPU, or results
    from before it was recorded)."""
    kernel = meta.get("packed_kernel")
    if kernel not in LINEAR_KERNELS:
        return ""
    rows = meta.get("mkl_rows") or 0
    plain = f", PyTorch's linear up to {rows} row{'s' if rows > 1 else ''}" if rows else ""
    codes = meta.get("weight_codes") or 0
    coded = f", {codes} weights streamed as the 4- or 8-bit codes they were dequantized from" if codes else ""
    return f", linears: {LINEAR_KERNELS[kernel]}{plain}{coded}"


def meta_markdown(meta: dict, directory: str = "") -> str:
    """Where and how a results directory was measured, as Markdown: suite, date, machine, model,
    drafter, the exact command, notes (fallback prompt sets, skipped methods, PNG export)."""
    if not meta:
        return f"No meta.json in {directory or 'this directory'}."
    threads = f", {meta['torch_threads']} torch threads" if meta.get("torch_threads") else ""
    timings = meta.get("suite") == "cost"  # the cost suite times a step's pieces: no peers, no speedups
    load = meta.get("load_average_1min")
    ran = [e for e in meta.get("experiments") or [] if isinstance(e, dict) and e.get("name")]
    part = ran_part(meta)  # a suite run with --experiments: its description would name what did not run
    described = "; ".join(e.get("description") or e["name"] for e in ran) if part else meta.get("description", "")
    only = f", only {', '.join(f'`{name}`' for name in part)}" if part else ""
    methods = {m for e in ran for m in e.get("methods") or ()} - set(meta.get("skipped") or {})
    # Older results name no methods per experiment: then say what any suite with peers would.
    peers = [m for m in PEER_METHODS if m in methods] if methods else list(PEER_METHODS)
    lines = [
        f"**Suite `{meta.get('suite', '?')}`{only}**, {meta.get('date', '?')}: {described}",
        *(
            [
                "- **Partial results**: the run stopped before the suite's end; the tables hold the prompts "
                "measured so far."
            ]
            if meta.get("complete") is False
            else []
        ),
        f"- Machine: {meta.get('device', '?')} ({meta.get('cpu', '?')}, {meta.get('cpu_count', '?')} CPUs{threads}"
        + (f", load average {load} at the start" if load is not None else "")
        + ")"
        + f"; torch {meta.get('torch', '?')}, transformers {meta.get('transformers', '?')}",
        f"- Model: {meta.get('model', '?')} ({meta.get('dtype', '?')}"
        + (f", LM head: {meta['lm_head']}" if meta.get("lm_head") else "")
        + linears_part(meta)
        + (", norms and rotary embedding: TALON's C++, transformers' bits" if meta.get("row_ops") else "")
        + f"); drafter `{meta.get('drafter_spec', '?')}`"
        + (f"; HF assistant `{meta.get('assistant_spec', '?')}`" if "hf_assisted" in peers and not timings else ""),
        f"- Command: `{meta.get('command', '?')}` ({meta.get('seconds', '?')} s): the settings every number "
        "here was measured at" + _moved(meta, directory),
    ]
    if not timings:
        lines.append(
            "- Speedups: wall time of plain decoding by this app's engine (`ar`, the same prompts in the same run) "
            "÷ the method's"
            + (
                f"; {_peer_names(peers)} {'is a peer row' if len(peers) == 1 else 'are peer rows'}, timed the same way"
                if peers
                else ""
            )
        )
    if ran and not part:
        lines.append(
            "- Experiments run: "
            + "; ".join(f"`{e['name']}`" + (f" ({e['description']})" if e.get("description") else "") for e in ran)
        )
    lines += [f"- Note: {n}" for n in meta.get("notes", [])]
    lines += [f"- Skipped {m}: {why}" for m, why in (meta.get("skipped") or {}).items()]
    if directory:
        lines.append(f"- Files: `{directory}`")
    return "\n".join(lines)


PEER_NAMES = {
    "hf_generate": "transformers' `generate()`",
    "hf_prompt_lookup": "its prompt lookup",
    "hf_assisted": "its assisted generation",
}


def _peer_names(peers: list[str]) -> str:
    """The peers a suite ran (at least one), in words: "transformers' `generate()`, its prompt lookup and ..."."""
    names = [PEER_NAMES[m] for m in peers]
    names[0] = names[0].replace("its ", "transformers' ", 1)  # "its" needs generate() named before it
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# ---- tables -----------------------------------------------------------------------------------------
def fixed_size(method: str) -> bool:
    """Whether a Budget N fixes ``method``'s tree size (not a chain, plain decoding, a peer or an auto-sized
    variant)."""
    return split_method(method)[0] in BUDGET_METHODS and not is_auto(method)


def row_label(row) -> str:
    """``label`` of a summary row's method, with the fixed Budget N of a method a budget sizes ("TALON,
    N=24"; an auto-sized one says "auto N" already)."""
    name = label(row.method)
    budget = getattr(row, "budget", None)
    return f"{name}, N={int(budget)}" if fixed_size(row.method) and budget is not None and not pd.isna(budget) else name


METHODS_COLUMNS = {
    "method": "method",
    "temperature": "temp.",
    "prompts": "prompts",
    "MAT": "MAT τ",
    "delta": "δ (drafter calls / step)",
    "tokens/s": "tokens / s",
    "speedup": "speedup over AR",
    "draft share": "draft share of time",
    "same tokens as AR": "same tokens as AR",
    "mean depth": "mean depth",
    "mean nodes": "mean nodes",
}
"""The methods table's columns: key -> header (the app's names: MAT τ and δ)."""
METHODS_WIDTHS = ["14%", "7%", "9%", "6%", "10%", "8%", "10%", "9%", "9%", "9%", "9%"]
"""The methods table's column widths in the Benchmark tab (headers wrap between words, not inside them)."""


def methods_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Every method of the method-comparison experiments (kind ``methods``) pooled over all prompts:
    MAT, δ, tokens/s, speedup over AR, draft share, share of runs identical to AR, tree shape.  Where the
    results hold several such experiments each method is named with its experiment ("headline: TALON,
    N=24"), so the table keeps one set of columns (``METHODS_WIDTHS``)."""
    rows = _rows(summary, ("methods",))
    several = rows["experiment"].nunique() > 1 if not rows.empty else False
    out = [
        {
            "method": (f"{r.experiment}: " if several else "") + row_label(r),
            "temperature": _num(r.temperature, 2),
            "prompts": int(r.prompts),
            "MAT": _num(r.MAT),
            "delta": _num(r.delta),
            "tokens/s": _num(r.tokens_per_s, 1),
            "speedup": _num(r.speedup),
            "draft share": _num(r.draft_share),
            "same tokens as AR": _share_of(r.matches_ar, r.prompts),
            "mean depth": _num(r.mean_depth),
            "mean nodes": _num(r.mean_tree_nodes, 1),
        }
        for r in rows.itertuples()
    ]
    return pd.DataFrame(out, columns=list(METHODS_COLUMNS)).rename(columns=METHODS_COLUMNS)


def _share_of(share, prompts) -> str | None:
    """A share of runs as a count, "28/30" (the lossless table counts too); None where not compared."""
    if share is None or prompts is None or pd.isna(share) or pd.isna(prompts):
        return None
    return f"{round(float(share) * int(prompts))}/{int(prompts)}"


def category_table(
    summary: pd.DataFrame,
    methods: tuple[str, ...] | None = ("eagle2", "talon", "talon+auto"),
    kinds: tuple[str, ...] = ("categories", "methods"),
) -> pd.DataFrame:
    """The paper's Table 1 / Table 3 at our scale: rows = categories (then ``all``), columns = MAT and
    speedup of each method in ``methods`` (None: every method but ``ar``, in run order; by default the
    paper's two at a fixed N and TALON auto-sized, the CPU's default, where the results hold it) at each
    temperature.  From the first of ``kinds`` with rows: by default the ``categories`` experiment, or
    a ``methods`` experiment's per-category rows when there is none."""
    rows = _rows(summary, kinds, category=None)
    if methods is None:
        methods = tuple(m for m in dict.fromkeys(rows.get("method", [])) if m != "ar")
    rows = rows[rows["method"].isin(methods)] if not rows.empty else rows
    if rows.empty:
        return pd.DataFrame(columns=["category"])
    temps = sorted(rows["temperature"].unique())
    cats = [c for c in dict.fromkeys(rows["category"]) if c != ALL] + [ALL]
    present = [m for m in methods if m in set(rows["method"])]
    names = {m: _column_name(rows[rows["method"] == m]) for m in present}
    out = []
    for cat in cats:
        line = {"category": cat}
        for t in temps:
            for m in present:
                hit = rows[(rows["category"] == cat) & (rows["temperature"] == t) & (rows["method"] == m)]
                r = hit.iloc[0] if not hit.empty else None
                line[f"{names[m]} MAT ({_t(t)})"] = None if r is None else _num(r["MAT"])
                line[f"{names[m]} speedup ({_t(t)})"] = None if r is None else _num(r["speedup"])
        out.append(line)
    return pd.DataFrame(out)


def _column_name(rows: pd.DataFrame) -> str:
    """A method's name over its rows: with its Budget N where they share one (``row_label``), else the
    method's alone (rows of several sizes in one column)."""
    sizes = rows["budget"].dropna().unique() if "budget" in rows.columns else ()
    first = next(rows.itertuples())
    return row_label(first) if len(sizes) <= 1 else label(first.method)


SHAPE_COLUMNS = [
    "category",
    "method",
    "mean depth",
    "mean nodes",
    "δ (calls / step)",
    "expected / realised",
    "nodes per layer",
]
SHAPE_WIDTHS = ["14%", "15%", "8%", "8%", "9%", "20%", "26%"]
"""The tree-shape table's column widths in the Benchmark tab (it ran to 1,688 px in a 958 px box; at
1024 px wide a 12 % category column broke "summarisation" inside the word)."""


def shape_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Tree shape by category and tree method, auto-sized ones included (greedy runs): mean depth
    reached, mean draft nodes, drafter forwards per step (δ), the calibration (expected against
    realised committed tokens per step, ``calibration``) and mean nodes per layer from depth 1 down."""
    rows = _rows(summary, ("categories", "methods"), category=None)
    if not rows.empty:
        tree = rows["method"].map(lambda m: split_method(m)[0] in TREE_METHODS)
        rows = rows[tree & (rows["temperature"] == rows["temperature"].min())]
        rows = pd.concat([rows[rows["category"] != ALL], rows[rows["category"] == ALL]])
    out = [
        {
            "category": r.category,
            "method": row_label(r),
            "mean depth": _num(r.mean_depth),
            "mean nodes": _num(r.mean_tree_nodes, 1),
            "δ (calls / step)": _num(r.delta),
            "expected / realised": calibration(r._asdict()),
            "nodes per layer": " · ".join(f"{w:.1f}" for w in (r.mean_layer_widths or [])),
        }
        for r in rows.itertuples()
    ]
    return pd.DataFrame(out, columns=SHAPE_COLUMNS)


def calibration(row: dict) -> str | None:
    """A summary row's mean expected and realised committed tokens per step and the miss, with twice its
    standard error (the band a calibrated drafter's miss falls in about 19 times in 20, taking the steps
    as independent), e.g. ``2.06 / 1.96 (+5% ± 4%)``; None without expectations."""
    if _num(row.get("mean_expected")) is None or not _num(row.get("mean_realised")):
        return None
    expected, realised = float(row["mean_expected"]), float(row["mean_realised"])
    text = f"{expected:.2f} / {realised:.2f} ({expected / realised - 1:+.0%}"
    se = _num(row.get("calibration_se"), 4)
    return text + (f" ± {2 * se:.0%})" if se is not None else ")")


def lossless_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Greedy (T=0) runs per experiment, method and Budget N (a sweep's sizes apart): how many emitted
    exactly the autoregressive tokens, and the prompts where they did not (reported, not hidden).  The
    experiment column only where the results hold several."""
    cols = ["experiment", "method", "greedy runs", "same tokens as AR", "differing prompts"]
    if runs is None or runs.empty:
        return pd.DataFrame(columns=cols)
    greedy = runs[(runs["temperature"] == 0) & (runs["method"] != "ar")]
    out = []
    # a Budget N apart only where it sizes the tree (a chain in a budget sweep records N but ignores it)
    budget = greedy["budget"] if "budget" in greedy.columns else pd.Series(float("nan"), greedy.index)
    size = budget.where(greedy["method"].map(fixed_size))
    experiments = list(dict.fromkeys(greedy["experiment"]))
    families = list(dict.fromkeys(m.removesuffix(AUTO_SUFFIX) for m in greedy["method"]))
    groups = greedy.groupby([greedy["experiment"], greedy["method"], size], sort=False, dropna=False)
    for (exp, method, n), g in groups:
        same = g["matches_ar"].astype(bool)
        diff = g.loc[~same, "prompt_id"].astype(str)
        # per experiment, a method's sizes in order and its auto-sized variant after them (a stable sort below)
        order = (experiments.index(exp), families.index(method.removesuffix(AUTO_SUFFIX)), is_auto(method))
        row = {
            "experiment": exp,
            "method": row_label(next(g.itertuples())),
            "greedy runs": len(g),
            "same tokens as AR": int(same.sum()),
            "differing prompts": ", ".join(dict.fromkeys(diff)),
        }
        out.append(((*order, 0 if pd.isna(n) else n), row))
    out = [row for _, row in sorted(out, key=lambda pair: pair[0])]
    table = pd.DataFrame(out, columns=cols)
    return table if table["experiment"].nunique() > 1 else table.drop(columns="experiment")


SWEEP_COLUMNS = (
    "swept",
    "method",
    "setting",
    "speedup over AR",
    "× best fixed N",
    "MAT τ",
    "draft share of time",
    "mean nodes",
    "mean depth",
)
"""The sweep table's columns."""


def sweep_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Every point of the sweeps (N, μ, K) pooled over all prompts, the numbers the sweep charts draw:
    per method, its settings in order, an auto-sized variant after its method's fixed sizes.  ``× best fixed
    N``: in a budget sweep, a row's speedup over its method's best fixed N (1.00 marks that N), which answers
    "which N on this machine"."""
    out = []
    for kind, (param, _, _) in SWEEP_AXES.items():
        rows = _rows(summary, (kind,))
        rows = rows[rows["method"] != "ar"] if not rows.empty else rows
        base = rows["method"].map(lambda m: m.removesuffix(AUTO_SUFFIX))
        for family in dict.fromkeys(base):
            mine = rows[base == family]
            fixed, auto = mine[~mine["method"].map(is_auto)], mine[mine["method"].map(is_auto)]
            best = fixed["speedup"].max() if param == "budget" and not fixed.empty else None
            for r in [*fixed.sort_values(param).itertuples(), *auto.itertuples()]:
                out.append(
                    {
                        "swept": SWEEP_TITLES[param].removesuffix(" sweep"),
                        "method": label(r.method),
                        "setting": _sweep_setting(param, r),
                        "speedup over AR": _num(r.speedup),
                        "× best fixed N": _num(r.speedup / best) if best else None,
                        "MAT τ": _num(r.MAT),
                        "draft share of time": _num(r.draft_share),
                        "mean nodes": _num(r.mean_tree_nodes, 1),
                        "mean depth": _num(r.mean_depth),
                    }
                )
    return pd.DataFrame(out, columns=list(SWEEP_COLUMNS))


def _sweep_setting(param: str, row) -> str:
    """The swept value of a sweep's summary ``row`` as the app writes it: ``N=8``, ``auto (cap 128)`` (an
    auto-sized variant in a budget sweep), ``μ=0.03``, ``K=0``."""
    value = getattr(row, param)
    if param == "budget":
        return f"auto (cap {int(value)})" if is_auto(row.method) else f"N={int(value)}"
    return f"μ={float(value):g}" if param == "mu" else f"K={int(value)}"


def sources_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Hybrid drafting vs its sources alone (the ``sources`` experiment): MAT and speedup by category
    of every drafter variant run there."""
    return category_table(summary, methods=None, kinds=("sources",))


def tables(runs: pd.DataFrame, summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Every table by name: ``methods``, ``categories``, ``shape``, ``sweeps``, ``lossless``, ``sources``."""
    return {
        "methods": methods_table(summary),
        "categories": category_table(summary),
        "shape": shape_table(summary),
        "sweeps": sweep_table(summary),
        "lossless": lossless_table(runs),
        "sources": sources_table(summary),
    }


# ---- figures ----------------------------------------------------------------------------------------
def peers_figure(summary: pd.DataFrame) -> go.Figure:
    """Speedup over autoregressive decoding of every method of the last method-comparison experiment,
    the transformers peers included (bars, labelled with the speedup and MAT), greedy."""
    title = "Speedup vs autoregressive, our methods and transformers' peers"
    rows = _rows(summary, ("methods",))
    if rows.empty:
        return _empty(title, "no method comparison in these results")
    last = rows["experiment"].iloc[-1]
    rows = rows[(rows["experiment"] == last) & (rows["temperature"] == rows["temperature"].min())]
    x = [row_label(r) for r in rows.itertuples()]
    speedups = [_num(s) for s in rows["speedup"]]
    top = max([1.0] + [v for v in speedups if v is not None])
    lift = LABEL_LIFT * top  # the text's foot clear of the 1x line
    bars = go.Bar(
        x=x,
        y=rows["speedup"],
        marker_color=[color(m) or "#4C78A8" for m in rows["method"]],
        customdata=list(zip(rows["MAT"], rows["delta"], rows["tokens_per_s"])),
        hovertemplate="%{x}: speedup %{y:.2f}×<br>MAT %{customdata[0]:.2f}, δ %{customdata[1]:.2f}, "
        "%{customdata[2]:.1f} tokens/s<extra></extra>",
    )
    labels = go.Scatter(  # above the bar, or above the 1× line where the bar ends just under it
        x=x,
        y=[0.0 if v is None else 1.0 + lift if 1.0 - NEAR_ONE * top < v < 1.0 + lift else v for v in speedups],
        mode="text",
        text=[
            ("" if v is None else f"{v:.2f}× · ") + f"MAT {m:.2f}"  # no ar in the run: no speedup
            for v, m in zip(speedups, rows["MAT"])
        ],
        textposition="top center",
        cliponaxis=False,
        hoverinfo="skip",
    )
    fig = new_figure().add_trace(bars).add_trace(labels)
    fig.add_hline(y=1.0, line={"dash": "dash", "color": "#555"}, layer="below")
    return _layout(fig, title, showlegend=False, yaxis={"title": {"text": "speedup (×)"}, "range": [0, top * 1.2]})


NEAR_ONE = 0.15
"""A bar ending this close under 1× (or at it), as a share of the tallest bar (a label's height scales with the
axis), has its label drawn above the 1× line, which would cross it."""
LABEL_LIFT = 0.03
"""How far above the 1× line such a label stands, as a share of the tallest bar."""


def sweep_figure(summary: pd.DataFrame, kind: str = "budget_sweep") -> go.Figure:
    """Speedup, MAT and draft share (tree-construction share of step time) against the swept parameter
    (``budget_sweep``: N; ``mu_sweep``: μ; ``topk_sweep``: K), one line per method.  In a budget sweep
    an auto-sized method (``METHOD+auto``, its cap not swept) is a dashed level line named with its
    speedup over the best fixed N of its method."""
    param, x_title, log_x = SWEEP_AXES[kind]
    title = SWEEP_TITLES[param]
    rows = _rows(summary, (kind,))
    rows = rows[rows["method"] != "ar"] if not rows.empty else rows
    if rows.empty:
        return _empty(title, f"no {param} sweep in these results (run the 'paper' suite)")
    fig = make_subplots(rows=1, cols=3, subplot_titles=("speedup vs AR", "MAT", "draft share"), horizontal_spacing=0.08)
    auto = rows[[param == "budget" and is_auto(m) for m in rows["method"]]]
    rows = rows.drop(auto.index)
    for method in dict.fromkeys(rows["method"]):
        m = rows[rows["method"] == method].sort_values(param)
        for col, y in enumerate(("speedup", "MAT", "draft_share"), 1):
            fig.add_trace(
                go.Scatter(
                    x=m[param],
                    y=m[y],
                    mode="lines+markers",
                    name=label(method),
                    legendgroup=method,
                    showlegend=col == 1,
                    line={"color": color(method)},
                    hovertemplate=f"{label(method)} {param}=%{{x}}: {y} %{{y:.3f}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    if not rows.empty:
        span = [rows[param].min(), rows[param].max()]
    else:  # auto-sized runs alone: their level lines span 1 to the cap (0 has no place on a log axis)
        span = [1, max(auto[param].max(), 2)]
    for _, a in auto.iterrows():
        fixed = rows[rows["method"] == a["method"].removesuffix(AUTO_SUFFIX)]
        name = label(a["method"])
        if not fixed.empty:  # the same prompts, interleaved: the ratio of speedups is the ratio of seconds
            best = fixed.loc[fixed["speedup"].idxmax()]
            name += f": {a['speedup'] / best['speedup']:.2f}× the best fixed N ({best[param]:g})"
        for col, y in enumerate(("speedup", "MAT", "draft_share"), 1):
            fig.add_trace(
                go.Scatter(
                    x=span,
                    y=[a[y], a[y]],
                    mode="lines",
                    name=name,
                    legendgroup=a["method"],
                    showlegend=col == 1,
                    line={"color": color(a["method"]), "dash": "dash"},
                    hovertemplate=f"{name}<br>{y} %{{y:.3f}} (the cap is not swept)<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(type="log" if log_x else "linear")
    if log_x:  # ticks at the swept values: a log axis's own labels ("5, 0.01, 2") read as values, and N=24 is found
        values = sorted({float(v) for v in rows[param] if pd.notna(v)})
        if values:
            fig.update_xaxes(tickmode="array", tickvals=values, ticktext=[f"{v:g}" for v in values])
    fig.update_xaxes(title_text=x_title, row=1, col=2)
    fig.update_yaxes(rangemode="tozero", nticks=8, row=1, col=1)  # plotly's own read 0, 0.5, 1 under a 1.36
    fig.update_yaxes(rangemode="tozero", row=1, col=2)  # zoomed to the points, 1.90 to 1.925 read as a climb
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", row=1, col=3)
    # named in the legend: a label sat on the lines of a sweep that hovers at 1×, and an auto line at 1.00×
    # runs along it, so the legend says which is which
    named_hline(fig, 1.0, PLAIN_LINE, {"dash": "dot", "color": "#999"}, row=1, col=1)
    return _layout(fig, title)


PLAIN_LINE = "1× = plain decoding"
"""The legend's name for a sweep's dotted line at 1× (plain decoding's speed)."""


def _same_size(rows: pd.DataFrame, method: str) -> pd.Series:
    """Which of ``rows`` ran at the Budget N of ``method``'s first row (every row where none is recorded)."""
    if "budget" not in rows.columns:
        return pd.Series(True, rows.index)
    first = rows.loc[rows["method"] == method, "budget"].iloc[0]
    return rows["budget"].isna() if pd.isna(first) else rows["budget"] == first


def tree_shape_figure(summary: pd.DataFrame) -> go.Figure:
    """Mean draft nodes per layer (x = depth) by category, one panel per tree method (EAGLE-2, TALON and
    TALON auto-sized when present): deep-and-narrow lines vs shallow-and-wide ones."""
    title = "Tree shape by category: mean nodes per layer"
    rows = _rows(summary, ("categories", "methods"), category=None)
    if not rows.empty:
        rows = rows[
            rows["method"].isin(TREE_METHODS + AUTO_VARIANTS)
            & (rows["category"] != ALL)
            & (rows["temperature"] == rows["temperature"].min())
        ]
        rows = rows[rows["mean_layer_widths"].map(lambda w: isinstance(w, list) and len(w) > 0)]
    if rows.empty:
        return _empty(title, "no tree runs by category in these results")
    # the auto-sized panel shows what the cost rule makes of the same policy on the machine measured
    shown = ("eagle2", "talon", "talon" + AUTO_SUFFIX)
    methods = [m for m in shown if m in set(rows["method"])] or list(dict.fromkeys(rows["method"]))
    # each panel the first size its method ran at, named with it ("TALON, N=24"), as the tables name rows
    rows = pd.concat([rows[(rows["method"] == m) & _same_size(rows, m)] for m in methods])
    titles = [row_label(next(rows[rows["method"] == m].itertuples())) for m in methods]
    fig = make_subplots(rows=1, cols=len(methods), subplot_titles=titles, shared_yaxes=True)
    cats = list(dict.fromkeys(rows["category"]))
    for col, method in enumerate(methods, 1):
        for k, cat in enumerate(cats):
            hit = rows[(rows["method"] == method) & (rows["category"] == cat)]
            if hit.empty:
                continue
            widths = hit.iloc[0]["mean_layer_widths"]
            fig.add_trace(
                go.Scatter(
                    x=list(range(1, len(widths) + 1)),
                    y=widths,
                    mode="lines+markers",
                    name=cat,
                    legendgroup=cat,
                    showlegend=col == 1,
                    **category_style(k),
                    hovertemplate=f"{cat}: depth %{{x}}, %{{y:.2f}} nodes<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="depth (draft layer)", dtick=1)
    fig.update_yaxes(title_text="mean nodes", row=1, col=1)
    _layout(fig, title)
    # the legend to the right: below the panels it would sit on their axis titles
    return fig.update_layout(
        legend={
            "orientation": "v",
            "x": 1.01,
            "xanchor": "left",
            "yref": "paper",
            "y": 1.0,
            "yanchor": "top",
            "font": {"size": 11},
            "tracegroupgap": 0,
        },
        margin={"r": 110, "b": 50},
        height=max(HEIGHT + 40, 24 * len(cats) + 140),  # every category's legend entry in view
    )


def cost_table(cost: pd.DataFrame) -> pd.DataFrame:
    """The cost suite's rows: what each piece of a step costs, in autoregressive steps."""
    if cost is None or cost.empty:
        return pd.DataFrame(columns=["piece", "size", "LM-head rows", "ms", "× AR step"])
    names = {
        "ar": "one autoregressive step",
        "target": "verify a tree (nodes incl. root: Budget N + 1)",
        "head": "a step's second drafter call (frontier nodes)",
        "head_later": "a later drafter call of the step, its weights still cached (frontier nodes)",
        "first_call": "a step's first drafter call (size: tokens the last step committed)",
        "bookkeeping": "a drafted step's bookkeeping",
        "builder": "the tree builder's own work, a call",
    }
    methods = {"eagle2": "EAGLE-2", "talon": "TALON"}

    def named(component: str) -> str:  # another method's builder: "builder_eagle2"
        method = component.removeprefix("builder_")
        if method != component:
            return f"the {methods.get(method, method)} tree builder's own work, a call"
        return names.get(component, component)

    return pd.DataFrame(
        [
            {
                "piece": named(r.component),
                "size": int(r.size),
                "LM-head rows": int(r.lm_head_rows),
                "ms": _num(r.seconds * 1e3, 1),
                "× AR step": _num(r.ratio, 2),
            }
            for r in cost.itertuples()
        ]
    )


def cost_figure(cost: pd.DataFrame, where: str = "where this suite ran") -> go.Figure:
    """The cost model: verifying a tree of n nodes and drafter calls over a frontier of w nodes,
    as multiples of one autoregressive step (log-scaled size axis).  A tree pays off when its tokens
    per step (MAT) exceed its verify + draft cost.  ``where``: the machine, for the title."""
    title = f"Cost of a step's pieces {where}, in autoregressive steps"
    if cost is None or cost.empty:
        return _empty(title, "no cost results (python -m talon.bench --suite cost)")
    fig = new_figure()
    # the two call curves lie within a few hundredths of a plain step of each other: the later one is
    # drawn thin and dotted over the second's wide line, so both show
    for component, name, line in (
        ("target", "verify a tree of n nodes", {"color": "#4C78A8"}),
        ("head", "a step's second drafter call over n nodes", {"color": "#F58518", "width": 5}),
        (
            "head_later",
            "a later drafter call of the step over n nodes",
            {"color": "#B2182B", "width": 2, "dash": "dot"},
        ),
    ):
        rows = cost[cost["component"] == component].sort_values("size")
        if rows.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=rows["size"],
                y=rows["ratio"],
                mode="lines+markers",
                name=name,
                line=line,
                customdata=list(zip(rows["seconds"] * 1e3, rows["lm_head_rows"])),
                hovertemplate=f"{name}: n=%{{x}}, %{{y:.2f}}× AR "
                "(%{customdata[0]:.1f} ms, LM head on %{customdata[1]} rows)"
                "<extra></extra>",
            )
        )
    fig.add_hline(
        y=1.0, line={"dash": "dash", "color": "#555"}, annotation_text="one AR step", annotation_position="bottom right"
    )
    return _layout(
        fig,
        title,
        xaxis={
            "type": "log",
            "title": {"text": "n: tree nodes incl. root (Budget N + 1), or frontier width"},
            "tickvals": sorted(set(cost["size"])),
        },
        yaxis={"title": {"text": "× one autoregressive step"}, "rangemode": "tozero"},
    )


def has_data(summary: pd.DataFrame, cost: pd.DataFrame | None = None) -> dict[str, bool]:
    """Per figure of ``figures``, whether the results hold data for it (else it only says there is none)."""
    return {
        "peers": not _rows(summary, ("methods",)).empty,
        **{kind: not _rows(summary, (kind,)).empty for kind in SWEEP_AXES},
        "tree_shape": not shape_table(summary).empty,
        "cost": cost is not None and not cost.empty,
    }


def figures(
    summary: pd.DataFrame, include_empty: bool = True, cost: pd.DataFrame | None = None
) -> dict[str, go.Figure]:
    """Every figure by name: ``peers``, one per sweep kind (``budget_sweep``, ``mu_sweep``,
    ``topk_sweep``), ``tree_shape``, ``cost``; with ``include_empty=False`` only those the results hold
    data for (``has_data``; what ``viz.bench_plots`` saves)."""
    has = None if include_empty else has_data(summary, cost)
    makers = {
        "peers": lambda: peers_figure(summary),
        **{kind: (lambda kind=kind: sweep_figure(summary, kind)) for kind in SWEEP_AXES},
        "tree_shape": lambda: tree_shape_figure(summary),
        "cost": lambda: cost_figure(cost),
    }
    return {name: make() for name, make in makers.items() if has is None or has[name]}
