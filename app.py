"""TALON Tree Explorer: the Gradio app.

Only layout and wiring: the handlers live in ``ui`` (``ui.runs`` for the run tabs, ``ui.bench_tab``
for published benchmark results), which turn widget values into ``talon`` configs and hand traces to
``viz``.  Models live in one read-only registry (``ui.shared``); everything a run produces lives in
that user's ``gr.State`` (a ``RunTrace``), so users never share run state.
"""
from __future__ import annotations

import gradio as gr

from ui.bench_tab import NO_BENCH, bench_load, bench_show
from ui.runs import (advance, export_html, export_json, load_trace, model_status, run_compare, run_explore,
                     run_sync_async, show_compare_step, show_step)
from ui.shared import (DEFAULT_DRAFTER, DEFAULT_NOTE, DEFAULT_TARGET, DEFAULT_TREE, DRAFTER_CHOICES, EXAMPLES,
                       EXECUTION_CHOICES, MAX_NEW_TOKENS, METHOD_CHOICES, preload_default_model)
from viz import summary
from viz.tree_figure import COLOR_MODES

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
                                      "the output is the same (greedy, and sampled with the same seed), only timing changes.")
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


if __name__ == "__main__":
    preload_default_model()
    demo.launch()  # host and port from GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (default 127.0.0.1:7860)
