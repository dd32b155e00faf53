"""TALON Tree Explorer: the Gradio app.

Only wiring: handlers turn widget values into ``talon`` configs, run ``talon.decode`` and hand the
resulting trace to ``viz``.  Models live in one read-only registry; everything a run produces lives
in that user's ``gr.State`` (a ``RunTrace``), so users never share run state.
"""
from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path

import gradio as gr

from talon.config import ConfigError, DecodeConfig, TreeConfig, device_default_tree
from talon.decode import new_trace, run
from talon.drafters import drafter_for
from talon.head import SHIPPED_HEAD
from talon.models import EMBEDDED, ModelLoadError, ModelRegistry, default_target_spec, pick_device
from talon.trace import RunTrace
from viz import charts, summary
from viz.tree_figure import COLOR_MODES, node_table, shared_extent, tree_figure, tree_html

try:  # Hugging Face Spaces ZeroGPU: request a GPU per run; elsewhere a no-op.
    import spaces

    gpu = spaces.GPU
except ImportError:  # pragma: no cover - depends on the host
    def gpu(fn):
        return fn

ROOT = Path(__file__).parent
REGISTRY = ModelRegistry()  # read-only models shared by all users; no per-run state
ON_GPU = pick_device()[0].type == "cuda"
DEFAULT_TARGET = default_target_spec()
DEFAULT_DRAFTER = "head" if SHIPPED_HEAD.is_dir() and DEFAULT_TARGET == EMBEDDED else "ngram"
DEFAULT_TREE, DEFAULT_NOTE = device_default_tree(ON_GPU)
EXAMPLES = [json.loads(line) for line in (ROOT / "assets" / "prompts.jsonl").read_text().splitlines() if line]
METHOD_CHOICES = [("Autoregressive (no drafts)", "ar"), ("Chain (classic speculative decoding)", "chain"),
                  ("Static tree (fixed shape)", "static"), ("EAGLE-2 dynamic tree", "eagle2"),
                  ("TALON adaptive tree", "talon"),
                  ("Hybrid: model + prompt-lookup drafts in one TALON tree", "hybrid")]
METHOD_LABEL = {v: k for k, v in METHOD_CHOICES}
DRAFTER_CHOICES = [("Trained draft head (EAGLE-style, 1 layer; embedded target only)", "head"),
                   ("n-gram prompt lookup (free, copies from the context)", "ngram"),
                   ("Target's first 6 layers (self-draft)", "layers:6"),
                   ("Target's first 12 layers (self-draft)", "layers:12")]
EXECUTION_CHOICES = [("Synchronous: draft, then verify", "sync"),
                     ("Asynchronous: draft the next tree while the target verifies", "async")]
MAX_NEW_TOKENS = 512


# ---- handlers: inputs -> configs ------------------------------------------------------------------
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
               f"{step.accepted_depth} accepted, {len(step.committed_ids)} tokens committed")
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
        fig, text, table, caption = _step_view(trace, step.index, color_mode)
        yield trace, _slider(trace), fig, text, table, caption, summary.summary_markdown(trace), *_charts(None)
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
                traces[label] = trace
                yield _compare_view(traces, ar_seconds, None, color_mode)
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
    path.write_text(trace.to_json(indent=1), encoding="utf-8")
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


# ---- Benchmark tab: published results of `python -m talon.bench --suite` (no model needed) ---------
import os  # noqa: E402  (kept with the section it serves)

from talon import bench_results  # noqa: E402
from viz import bench_charts  # noqa: E402

BENCH_DIR_ENV = "TALON_BENCH_DIR"
NO_BENCH = ("No benchmark results yet. Produce them with `python -m talon.bench --suite quick --out-dir "
            "docs/bench/quick` (a few minutes on a CPU) or `--suite paper`; this tab shows the newest directory "
            "under `docs/bench/` (or under `$TALON_BENCH_DIR`).")


def bench_root() -> Path:
    """Where results directories are looked for: ``$TALON_BENCH_DIR`` or ``docs/bench``."""
    return Path(os.environ.get(BENCH_DIR_ENV) or ROOT / "docs" / "bench")


def bench_show(directory):
    """Meta, tables and charts of one results directory (one of ``bench_root()``'s)."""
    dirs = {str(d) for d in bench_results.result_dirs(bench_root())}
    if not directory or str(directory) not in dirs:
        return NO_BENCH, None, None, None, None, None, None, None, None, None
    meta, runs, summary = bench_results.read_results(directory)
    tables, figs = bench_charts.tables(runs, summary), bench_charts.figures(summary)
    return (bench_charts.meta_markdown(meta, str(directory)), tables["methods"], tables["categories"],
            tables["shape"], tables["lossless"], figs["peers"], figs["budget_sweep"], figs["mu_sweep"],
            figs["tree_shape"], tables["sources"])


def bench_load():
    """Page load: the results directories (newest first, selected) and the newest one's view."""
    dirs = bench_results.result_dirs(bench_root())
    choices = [(bench_results.describe(d), str(d)) for d in dirs]
    value = choices[0][1] if choices else None
    return gr.update(choices=choices, value=value), *bench_show(value)


# ---- layout ---------------------------------------------------------------------------------------
with gr.Blocks(title="TALON Tree Explorer") as demo:
    trace_state = gr.State(None)
    compare_state = gr.State(None)
    gr.Markdown("# TALON Tree Explorer\nWatch tree speculative decoding on a real model: each step a drafter "
                "proposes a tree of guesses, the target model checks the whole tree in one forward pass, and "
                "keeps the longest path it agrees with.")
    status = gr.Markdown("Checking the model...", elem_id="model-status")
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            prompt = gr.Textbox(label="Prompt", lines=4, value=EXAMPLES[0]["prompt"], elem_id="prompt")
            gr.Examples([[e["prompt"]] for e in EXAMPLES], inputs=[prompt],
                        example_labels=[f"{e['category']}: {e['prompt'][:40]}..." for e in EXAMPLES],
                        label="Examples by category")
            method = gr.Dropdown(METHOD_CHOICES, value=DEFAULT_TREE.method, label="Method")
            drafter = gr.Dropdown(DRAFTER_CHOICES, value=DEFAULT_DRAFTER, allow_custom_value=True, label="Drafter",
                                  info="Or type a local model directory / Hugging Face id that shares the target's "
                                       "tokenizer, or head:DIR for another trained head.")
            target = gr.Dropdown([("SmolLM2-135M-Instruct", DEFAULT_TARGET)], value=DEFAULT_TARGET,
                                 allow_custom_value=True, label="Target model",
                                 info="'embedded', a local directory, or a Hugging Face id.")
            gr.Markdown(f"*Defaults for this machine: {DEFAULT_NOTE}*")
            budget = gr.Slider(1, 120, value=DEFAULT_TREE.budget, step=1, label="Budget N (draft nodes, root not counted)",
                               info="TALON, EAGLE-2 and static trees use at most N draft nodes per step.")
            topk = gr.Slider(1, 20, value=DEFAULT_TREE.topk, step=1, label="Root width K (children of the root)",
                             info="TALON: Top-K at the root. EAGLE-2: top-k per expanded node and frontier width.")
            mu = gr.Slider(0.001, 1.0, value=DEFAULT_TREE.mu, step=0.001, label="Confidence gate μ (0 < μ ≤ 1)",
                           info="TALON admits a candidate when its path probability ≥ μ × the layer's best.")
            depth = gr.Slider(1, 12, value=DEFAULT_TREE.depth, step=1, label="Depth (draft layers below the root)",
                              info="EAGLE-2 and static trees only.")
            gamma = gr.Slider(1, 16, value=DEFAULT_TREE.gamma, step=1, label="Chain length γ (draft tokens)",
                              info="Chain method only.")
            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
            max_new = gr.Slider(1, MAX_NEW_TOKENS, value=64, step=1, label="Max new tokens (generated, prompt not counted)")
            seed = gr.Number(0, precision=0, label="Seed (sampling only)")
            execution = gr.Radio(EXECUTION_CHOICES, value="sync", label="Execution",
                                 info="Async drafts the next tree from a guessed outcome while the target verifies; "
                                      "the output is the same, only timing changes.")
        with gr.Column(scale=2):
            with gr.Tabs():
                with gr.Tab("Explore", id="explore"):
                    with gr.Row():
                        run_btn = gr.Button("Run", variant="primary", elem_id="run")
                        stop_btn = gr.Button("Stop", elem_id="stop")
                    color_mode = gr.Radio(list(COLOR_MODES), value="verdict", label="Colour nodes by")
                    caption = gr.Markdown("No run yet: type a prompt and press Run, or load a saved trace.",
                                          elem_id="step-caption")
                    tree_plot = gr.Plot(label="Draft tree of this step", elem_id="tree-plot")
                    with gr.Row():
                        step_slider = gr.Slider(0, 1, value=0, step=1, label="Step (one target forward each)",
                                                interactive=False, elem_id="step-slider")
                        play_btn = gr.Button("▶ Play", scale=0)
                        pause_btn = gr.Button("⏸ Pause", scale=0)
                    text_html = gr.HTML(label="Generated text (tinted by the step that committed it)")
                    metrics_md = gr.Markdown()
                    with gr.Accordion("Nodes of this step (hover the tree for the same details)", open=False):
                        nodes_df = gr.Dataframe(interactive=False, wrap=True)
                with gr.Tab("Compare", id="compare"):
                    gr.Markdown("Same prompt, same budget, two methods. An autoregressive run comes first to "
                                "measure the speedup on this machine.")
                    with gr.Row():
                        method_a = gr.Dropdown(METHOD_CHOICES, value="static", label="Method A")
                        method_b = gr.Dropdown(METHOD_CHOICES, value="talon", label="Method B")
                    compare_btn = gr.Button("Run comparison", variant="primary", elem_id="compare-run")
                    compare_table = gr.Dataframe(interactive=False, label="Side by side")
                    compare_slider = gr.Slider(0, 1, value=0, step=1, label="Step", interactive=False)
                    with gr.Row():
                        plot_a = gr.Plot(label="Method A")
                        plot_b = gr.Plot(label="Method B")
                with gr.Tab("Charts", id="charts"):
                    chart_committed = gr.Plot(label="Tokens committed per step")
                    chart_acceptance = gr.Plot(label="Acceptance by depth")
                    chart_shape = gr.Plot(label="Tree shape")
                    chart_timing = gr.Plot(label="Draft vs verify time")
                    chart_timeline = gr.Plot(label="Timeline of drafter and target")
                with gr.Tab("Sync vs async", id="async"):
                    gr.Markdown("Runs the chosen method twice on the prompt: drafting then verifying (sync), and "
                                "drafting the next tree while the target verifies (async). The lanes show when "
                                "each side works and when it waits.")
                    async_btn = gr.Button("Run sync, then async", variant="primary", elem_id="async-run")
                    async_verdict = gr.Markdown()
                    async_table = gr.Dataframe(interactive=False, label="Sync vs async")
                    async_plot = gr.Plot(label="Timeline")
                with gr.Tab("Export / load", id="export"):
                    with gr.Row():
                        json_btn = gr.Button("Export trace (JSON)")
                        html_btn = gr.Button("Export this tree (HTML)")
                    export_file = gr.File(label="Download", interactive=False)
                    upload = gr.File(label="Load a saved trace (JSON)", file_types=[".json"], type="filepath")
                with gr.Tab("Benchmark", id="benchmark"):
                    gr.Markdown("Measured results of the benchmark suites (`python -m talon.bench --suite ...`): "
                                "every method and transformers' own generate / prompt lookup / assisted "
                                "generation on the same prompts, speedups against autoregressive decoding in "
                                "the same run. Nothing is run here.")
                    bench_dir = gr.Dropdown([], value=None, label="Results directory (newest first)",
                                            elem_id="bench-dir")
                    bench_meta = gr.Markdown(NO_BENCH)
                    bench_methods = gr.Dataframe(interactive=False, label="Methods, pooled over all prompts")
                    bench_peers = gr.Plot(label="Speedup vs autoregressive")
                    bench_categories = gr.Dataframe(interactive=False,
                                                    label="Per category: MAT and speedup (the paper's Table 1 layout)")
                    bench_shape = gr.Dataframe(interactive=False, label="Tree shape by category")
                    bench_tree_shape = gr.Plot(label="Nodes per layer by category")
                    bench_budget = gr.Plot(label="Budget N sweep")
                    bench_mu = gr.Plot(label="μ sweep")
                    bench_sources = gr.Dataframe(
                        interactive=False, label="Hybrid drafting vs its sources alone: TALON over the head, over "
                                                 "prompt lookup, and over both merged (MAT and speedup by category)")
                    bench_lossless = gr.Dataframe(interactive=False, label="Greedy runs identical to autoregressive")
                    bench_views = [bench_meta, bench_methods, bench_categories, bench_shape, bench_lossless,
                                   bench_peers, bench_budget, bench_mu, bench_tree_shape, bench_sources]
                    bench_dir.input(bench_show, bench_dir, bench_views, show_progress="hidden")
                    demo.load(bench_load, None, [bench_dir, *bench_views], api_name="bench_load",
                              show_progress="hidden")
                with gr.Tab("How to read this", id="help"):
                    gr.Markdown(summary.HOW_TO_READ)
                    gr.Markdown("## Glossary\n" + summary.GLOSSARY)

    run_inputs = [prompt, target, drafter, method, budget, topk, mu, depth, gamma, temperature, max_new, seed,
                  execution, color_mode]
    view_outputs = [trace_state, step_slider, tree_plot, text_html, nodes_df, caption, metrics_md,
                    chart_committed, chart_acceptance, chart_shape, chart_timing, chart_timeline]
    run_event = run_btn.click(run_explore, run_inputs, view_outputs, concurrency_limit=2, concurrency_id="decode")
    stop_btn.click(None, cancels=[run_event])
    step_view_outputs = [tree_plot, text_html, nodes_df, caption]
    step_slider.change(show_step, [trace_state, step_slider, color_mode], step_view_outputs, queue=False,
                       show_progress="hidden")
    color_mode.change(show_step, [trace_state, step_slider, color_mode], step_view_outputs, queue=False)
    timer = gr.Timer(1.0, active=False)
    play_btn.click(lambda: gr.Timer(active=True), None, timer)
    pause_btn.click(lambda: gr.Timer(active=False), None, timer)
    timer.tick(advance, [trace_state, step_slider], [step_slider, timer], show_progress="hidden")

    compare_outputs = [compare_state, compare_slider, plot_a, plot_b, compare_table]
    compare_inputs = [prompt, target, drafter, method_a, method_b, budget, topk, mu, depth, gamma, temperature,
                      max_new, seed, execution, color_mode]
    compare_btn.click(run_compare, compare_inputs, compare_outputs, concurrency_limit=2, concurrency_id="decode")
    async_inputs = [prompt, target, drafter, method, budget, topk, mu, depth, gamma, temperature, max_new, seed]
    async_btn.click(run_sync_async, async_inputs, [async_plot, async_table, async_verdict], concurrency_limit=2,
                    concurrency_id="decode")
    compare_slider.release(show_compare_step, [compare_state, compare_slider, color_mode], compare_outputs,
                           queue=False)

    json_btn.click(export_json, trace_state, export_file)
    html_btn.click(export_html, [trace_state, step_slider, color_mode], export_file)
    upload.upload(load_trace, [upload, color_mode], view_outputs)

    status_timer = gr.Timer(2.0)
    status_timer.tick(model_status, None, [status, status_timer], show_progress="hidden")
    demo.load(model_status, None, [status, status_timer], show_progress="hidden")

demo.queue(max_size=16, default_concurrency_limit=2)


def preload_default_model() -> threading.Thread:
    """Start loading the default model in the background so the first Run does not wait for it
    (a failure is kept by the registry and shown in the status banner)."""
    def load():
        try:
            REGISTRY.get(DEFAULT_TARGET)
        except ModelLoadError:
            pass

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    preload_default_model()
    demo.launch()  # host and port from GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (default 127.0.0.1:7860)
