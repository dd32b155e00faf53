"""Handlers of the run tabs (Explore, Compare, Sync vs async, Export / load): widget values in,
``talon`` configs and runs, ``viz`` figures out.  Every run's state is returned to the caller's
``gr.State``; nothing is kept here."""
from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.decode import fill_texts, new_trace, run
from talon.metrics import trace_json
from talon.models.loaded import ModelLoadError
from talon.trace import RunTrace
from viz import charts, summary
from viz.tree_figure import node_table, shared_extent, tree_figure, tree_html

from .shared import DEFAULT_TARGET, METHOD_LABEL, ON_GPU, REGISTRY, gpu


def _number(value, name: str, kind=float):
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number (got {value!r}).") from None


def _configs(method, budget, topk, mu, depth, gamma, temperature, max_new, seed,
             execution="sync") -> tuple[TreeConfig, DecodeConfig]:
    tree = TreeConfig(method=method, budget=_number(budget, "Budget N", int), topk=_number(topk, "Root width K", int),
                      mu=_number(mu, "mu"), depth=_number(depth, "Depth", int), gamma=_number(gamma, "Chain length", int))
    return tree, DecodeConfig(temperature=_number(temperature, "Temperature"), seed=_number(seed, "Seed", int),
                              max_new_tokens=_number(max_new, "Max new tokens", int), execution=execution)


def _load(target_spec: str, progress: gr.Progress):
    spec = (target_spec or DEFAULT_TARGET).strip()
    if spec not in REGISTRY.loaded():
        progress(0.0, desc=f"Loading {spec} (the first start converts the embedded model, ~30 s)...")
    return REGISTRY.get(spec, progress=lambda msg: progress(0.0, desc=msg))


def _start(prompt, target_spec, drafter_spec, method, budget, topk, mu, depth, gamma, temperature, max_new, seed,
           execution, progress):
    """Validate and load; returns (target, drafter, tree_cfg, decode_cfg, trace) or raises gr.Error."""
    try:
        tree_cfg, dec_cfg = _configs(method, budget, topk, mu, depth, gamma, temperature, max_new, seed, execution)
        target = _load(target_spec, progress)
        drafter = drafter_for(method, drafter_spec, target, REGISTRY)
        trace = new_trace(target, drafter, tree_cfg, dec_cfg, prompt)
    except (ConfigError, ModelLoadError) as err:
        raise gr.Error(str(err), print_exception=False) from None
    return target, drafter, tree_cfg, dec_cfg, trace


# ---- handlers: trace -> outputs -------------------------------------------------------------------
def _step_view(trace: RunTrace | None, index, color_mode: str):
    """Figure, tinted text, node table and caption for one step of a trace."""
    if trace is None or not trace.steps:
        return None, "", None, "No run yet: type a prompt and press Run, or load a saved trace."
    index = max(0, min(int(index or 0), len(trace.steps) - 1))
    step = trace.steps[index]
    caption = (f"Step {index + 1} of {len(trace.steps)}: {len(step.tree) - 1} draft nodes, "
               f"{step.accepted_tokens} accepted, {len(step.committed_ids)} tokens committed")
    caption += summary.step_note(step)
    return (tree_figure(step, color_mode), charts.tinted_text_html(trace, highlight=index), node_table(step),
            caption)


def _slider(trace: RunTrace | None, value=None):
    last = max(len(trace.steps) - 1, 0) if trace else 0
    return gr.update(minimum=0, maximum=max(last, 1), value=last if value is None else value,
                     interactive=bool(trace and len(trace.steps) > 1))


def _charts(trace: RunTrace | None):
    if trace is None:
        return None, None, None, None, None
    figs = charts.run_charts(trace)
    return figs["committed"], figs["acceptance"], figs["shape"], figs["timing"], charts.timeline_chart({"run": trace})


def show_step(trace, index, color_mode):
    return _step_view(trace, index, color_mode)


@gpu
def run_explore(prompt, target_spec, drafter_spec, method, budget, topk, mu, depth, gamma, temperature, max_new,
                seed, execution, color_mode, progress=gr.Progress()):
    """Decode, yielding the view after every step (one update per target forward)."""
    target, drafter, tree_cfg, dec_cfg, trace = _start(prompt, target_spec, drafter_spec, method, budget, topk,
                                                       mu, depth, gamma, temperature, max_new, seed, execution,
                                                       progress)
    for step in run(trace, target, drafter, tree_cfg, dec_cfg):
        fill_texts(trace, target.tokenizer)
        fig, text, table, caption = _step_view(trace, step.index, color_mode)
        yield trace, _slider(trace), fig, text, table, caption, summary.summary_markdown(trace), *_charts(None)
    fill_texts(trace, target.tokenizer)
    fig, text, table, caption = _step_view(trace, len(trace.steps) - 1, color_mode)
    yield trace, _slider(trace), fig, text, table, caption, summary.summary_markdown(trace), *_charts(trace)


@gpu
def run_compare(prompt, target_spec, drafter_spec, method_a, method_b, budget, topk, mu, depth, gamma, temperature,
                max_new, seed, execution, color_mode, progress=gr.Progress()):
    """Run autoregressive (for the speedup), then method A, then method B on the same prompt and budget."""
    traces: dict[str, RunTrace] = {}
    ar_seconds = None
    for label, method in (("ar", "ar"), ("A", method_a), ("B", method_b)):
        target, drafter, tree_cfg, dec_cfg, trace = _start(prompt, target_spec, drafter_spec, method, budget, topk,
                                                           mu, depth, gamma, temperature, max_new, seed, execution,
                                                           progress)
        for _ in run(trace, target, drafter, tree_cfg, dec_cfg):
            if label != "ar":
                fill_texts(trace, target.tokenizer)
                traces[label] = trace
                yield _compare_view(traces, ar_seconds, None, color_mode)
        fill_texts(trace, target.tokenizer)
        if label == "ar":
            ar_seconds = trace.seconds
    yield _compare_view(traces, ar_seconds, None, color_mode)


@gpu
def run_sync_async(prompt, target_spec, drafter_spec, method, budget, topk, mu, depth, gamma, temperature, max_new,
                   seed, progress=gr.Progress()):
    """Run the method synchronously, then asynchronously, and draw both timelines."""
    if method == "ar":
        raise gr.Error("Autoregressive decoding has no drafter to overlap: pick a tree method.",
                       print_exception=False)
    traces: dict[str, RunTrace] = {}
    for execution in ("sync", "async"):
        target, drafter, tree_cfg, dec_cfg, trace = _start(prompt, target_spec, drafter_spec, method, budget, topk,
                                                           mu, depth, gamma, temperature, max_new, seed, execution,
                                                           progress)
        traces[execution] = trace
        for _ in run(trace, target, drafter, tree_cfg, dec_cfg):
            pass
        fill_texts(trace, target.tokenizer)
        yield charts.timeline_chart(traces), summary.async_table(traces), summary.async_verdict(traces)


def _compare_view(traces: dict[str, RunTrace], ar_seconds, index, color_mode):
    """Both trees at the same step on the same axes, plus the side-by-side metrics."""
    a, b = traces.get("A"), traces.get("B")
    runs = [t for t in (a, b) if t is not None and t.steps]
    longest = max((len(t.steps) for t in runs), default=1)
    index = longest - 1 if index is None else max(0, min(int(index), longest - 1))
    steps = [t.steps[min(index, len(t.steps) - 1)] for t in runs]
    depth, width = shared_extent(steps) if steps else (None, None)
    figs = []
    for label, trace in (("A", a), ("B", b)):
        if trace is None or not trace.steps:
            figs.append(None)
            continue
        step = trace.steps[min(index, len(trace.steps) - 1)]
        title = f"{label}: {METHOD_LABEL.get(trace.tree_config['method'])} · step {step.index + 1}/{len(trace.steps)}"
        figs.append(tree_figure(step, color_mode, title=title, max_depth=depth, max_width=width))
    labelled = {f"{k}: {METHOD_LABEL.get(t.tree_config['method'])}": t for k, t in traces.items()}
    state = {"traces": traces, "ar_seconds": ar_seconds}
    slider = gr.update(minimum=0, maximum=max(longest - 1, 1), value=index, interactive=longest > 1)
    return state, slider, figs[0], figs[1], summary.comparison_table(labelled, ar_seconds)


def show_compare_step(state, index, color_mode):
    if not state:
        return None, gr.update(), None, None, None
    return _compare_view(state["traces"], state["ar_seconds"], index, color_mode)


def advance(trace, index):
    """Play: move the step slider on by one; stop the timer at the last step."""
    if trace is None or not trace.steps:
        return gr.update(), gr.Timer(active=False)
    nxt = int(index or 0) + 1
    if nxt >= len(trace.steps) - 1:
        return min(nxt, len(trace.steps) - 1), gr.Timer(active=False)
    return nxt, gr.update()


def export_json(trace):
    if trace is None:
        raise gr.Error("Nothing to export yet: run or load a trace first.", print_exception=False)
    path = Path(tempfile.mkdtemp(prefix="talon-")) / "talon_trace.json"
    path.write_text(trace_json(trace, indent=1), encoding="utf-8")
    return str(path)


def export_html(trace, index, color_mode):
    if trace is None or not trace.steps:
        raise gr.Error("Nothing to export yet: run or load a trace first.", print_exception=False)
    index = max(0, min(int(index or 0), len(trace.steps) - 1))
    path = Path(tempfile.mkdtemp(prefix="talon-")) / f"talon_tree_step{index + 1}.html"
    path.write_text(tree_html(trace.steps[index], color_mode), encoding="utf-8")
    return str(path)


def load_trace(file, color_mode):
    if file is None:
        raise gr.Error("Choose a trace JSON file first.", print_exception=False)
    try:
        trace = RunTrace.from_json(Path(file if isinstance(file, str) else file.name).read_text(encoding="utf-8"))
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise gr.Error(f"That file is not a TALON trace: {err}", print_exception=False) from None
    fig, text, table, caption = _step_view(trace, 0, color_mode)
    return (trace, _slider(trace, 0), fig, text, table, caption, summary.summary_markdown(trace), *_charts(trace))


def model_status():
    """The default model's state for the banner; the polling timer stops once it is settled."""
    if DEFAULT_TARGET in REGISTRY.loaded():
        return f"Model ready: {DEFAULT_TARGET} on {'GPU' if ON_GPU else 'CPU'}.", gr.Timer(active=False)
    error = REGISTRY.error(DEFAULT_TARGET)
    if error:
        return f"**Could not load the default model.** {error}", gr.Timer(active=False)
    return ("Loading the default model... (the first start converts the embedded GGUF, about 30 s)",
            gr.update())
