"""Text for the metrics panel: the run summary, the comparison table and the glossary."""

from __future__ import annotations

import pandas as pd

from talon import metrics
from talon.trace import RunTrace

GLOSSARY = """
**MAT (τ)**: tokens committed per target forward, *including* the bonus token. Plain autoregressive
decoding has MAT = 1.

**δ (delta)**: drafter calls per target forward (one batched call per tree layer grown).

**Acceptance by depth**: of the steps whose tree reached depth d, the share that accepted a node at
depth d.

**Speedup**: wall time of plain autoregressive decoding of the same prompt with the same target /
wall time of the method, measured on this machine in the same session. Times from different runs
or machines are never compared.

**Tokens/s**: generated tokens per second of wall time (prompt processing included).

**Draft share**: share of the step time spent building draft trees (drafter calls included): the tree
construction overhead.

**Hybrid**: one TALON tree over the merged proposals of the model drafter and prompt lookup. Each
node is coloured by the source that gave it more probability ("colour by source"); the retrieval
weight follows each source's running acceptance in this generation.

**Async (asynchronous execution)**: while the target verifies a tree, the drafter guesses the outcome
(the node where verification most likely stops, and the drafter's next token there) and drafts the
next tree from it. A right guess (a *hit*) makes that tree the next step's, so its drafting time was
hidden; a wrong one is discarded. The output is identical either way: greedy, and also when sampling, for
the same seed (the target's random choice at each output position comes from noise keyed by the seed and
the position, not from the tree).

**N (budget)**: draft nodes in a tree, *not counting the root*. **K**: children of the root
(TALON's Top-K start; K=0 lets the gate pick them too; EAGLE-2: top-k per node, at least 1).
**μ (mu)**: TALON's gate: a candidate joins a layer when its path probability is at least μ times
the best candidate's in that layer. **Depth**: draft layers below the root (EAGLE-2, static).
**γ (gamma)**: chain length in draft tokens.
"""

HOW_TO_READ = """
* **Each picture is one decoding step**: one forward pass of the target model over a whole tree of
  guesses. The dark diamond on the left is the **root**: the last token already in the output.
* Every other node is a **draft token** proposed by the drafter, placed to the right of the token it
  follows. A path from the root to a node is one guessed continuation.
* **Colour by verdict**: the target checks the tree from the root; **green** nodes were accepted
  (they are in the output), **red** ones were tested and refused (hover to see what the target wanted
  instead), **grey** ones were never reached. The **gold star** is the bonus token: the target's own
  next token after the accepted path, so every step commits at least one token.
* **Colour by confidence**: the drafter's probability for each token (0 to 1, same scale every step).
* **Why TALON's shape changes**: TALON spends a fixed budget of N nodes. Where the drafter is sure,
  only one or two candidates pass the confidence gate per layer, so the tree grows **deep and narrow**;
  where it is unsure, many pass, the budget is used up in a few layers, and the tree is **shallow and
  wide**. Static and EAGLE-2 trees keep a fixed depth whatever the context.
* Every method here is lossless: at temperature 0 the output is exactly what plain greedy decoding
  of the target gives; above 0 it is a sample from the target's own distribution, and for a given seed
  it is the very sample plain autoregressive sampling draws (each output position's random choice is
  fixed by the seed and the position). Only the speed differs.
"""


def summary_markdown(trace: RunTrace, ar_seconds: float | None = None) -> str:
    """A one-table summary of a run (speedup only when an AR time for the same prompt is given)."""
    s = metrics.summarize(trace)
    rows = [
        ("Tokens generated", f"{s['new_tokens']}"),
        ("Target forwards (steps)", f"{s['target_forwards']}"),
        ("MAT τ (tokens / target forward)", f"{s['mat']:.2f}"),
        ("δ (drafter calls / target forward)", f"{s['delta']:.2f}"),
        ("Mean draft nodes per tree", f"{s['mean_tree_nodes']:.1f}"),
        ("Tokens / s", f"{s['tokens_per_second']:.1f}"),
        ("Draft share of step time", f"{s['draft_share']:.0%}"),
        ("Wall time", f"{s['seconds']:.2f} s"),
    ]
    if ar_seconds:
        rows.append(("Speedup over autoregressive", f"{metrics.speedup(ar_seconds, s['seconds']):.2f}×"))
    if trace.stop_reason:
        rows.append(
            (
                "Stopped by",
                {"eos": "end of sequence", "max_new_tokens": "max new tokens", "stopped": "the Stop button"}.get(
                    trace.stop_reason, trace.stop_reason
                ),
            )
        )
    head = f"**{trace.tree_config.get('method', '?')}** · target {trace.target}"
    if trace.drafter:
        head += f" · drafter {trace.drafter}"
    head += f" · {trace.device}"
    return head + "\n\n| metric | value |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def step_note(step) -> str:
    """Extra caption text for a step: a hybrid's source weights, an async guess's outcome."""
    note = ""
    info = step.drafter_info or {}
    if "retrieval_weight" in info:
        sources = step.tree.source[1:]
        note += (
            f" · retrieval weight {info['retrieval_weight']:.2f} (running acceptance: retrieval "
            f"{info['retrieval_acceptance']:.2f}, model {info['model_acceptance']:.2f}); "
            f"{sources.count('retrieval')} retrieval / {sources.count('model')} model nodes"
        )
    if step.speculate_hit is not None:
        note += " · next tree drafted ahead: " + (
            "guess right, kept" if step.speculate_hit else "guess wrong, discarded"
        )
    return note


def async_table(traces: dict[str, RunTrace]) -> pd.DataFrame:
    """Sync vs async runs of one method: wall time, MAT, hit rate of the async guesses, the waiting
    left, and (for the sync run) the time projected for overlap on separate hardware."""
    rows = []
    sync = traces.get("sync")
    async_run = traces.get("async")
    hit = metrics.speculation_hit_rate(async_run) if async_run is not None else None
    for label, trace in traces.items():
        s = metrics.summarize(trace)
        row = {
            "run": label,
            "wall s": round(s["seconds"], 3),
            "MAT": round(s["mat"], 2),
            "draft s": round(sum(st.draft_seconds for st in trace.steps), 3),
            "verify s": round(sum(st.verify_seconds for st in trace.steps), 3),
            "target waited s": round(sum(st.wait_seconds for st in trace.steps), 3),
            "guess hit rate": None if s["speculation_hit_rate"] is None else round(s["speculation_hit_rate"], 2),
        }
        rows.append(row)
    if sync is not None and hit is not None:
        rows.append(
            {
                "run": "async, projected (separate hardware)",
                "wall s": round(metrics.projected_async_seconds(sync, hit), 3),
                "MAT": round(metrics.mat(sync.steps), 2),
                "guess hit rate": round(hit, 2),
            }
        )
    return pd.DataFrame(rows)


def async_verdict(traces: dict[str, RunTrace]) -> str:
    """A plain sentence on whether overlapping drafting with verification helps on this machine."""
    sync, async_run = traces.get("sync"), traces.get("async")
    if sync is None or async_run is None or not async_run.steps:
        return "Running..."
    same = (
        "identical"
        if sync.output_ids == async_run.output_ids
        else "**different, which should never happen (same seed, same device): please report it**"
    )
    hit = metrics.speculation_hit_rate(async_run) or 0.0
    draft = metrics.draft_share(sync)
    projected = metrics.projected_async_seconds(sync, hit)
    saving = 1 - projected / sync.seconds if sync.seconds else 0.0
    measured = sync.seconds / async_run.seconds if async_run.seconds else 0.0
    lines = [
        f"Outputs are {same}. Measured: async took {async_run.seconds:.2f} s vs sync {sync.seconds:.2f} s "
        f"({measured:.2f}× speed); {hit:.0%} of the guesses were right."
    ]
    if "cuda" not in sync.device:
        lines.append(
            "**On this machine async cannot help much:** drafter and target share the same CPU cores, so "
            "running them at once slows both down."
        )
    if draft < 0.05:
        lines.append(f"Drafting takes only {draft:.0%} of the step time here, so there is little to hide.")
    lines.append(
        f"With the drafter on its own hardware, the overlap would save about {saving:.0%} of the sync "
        f"time (projected from this run's phase times and hit rate; an upper bound)."
    )
    return " ".join(lines)


def comparison_table(traces: dict[str, RunTrace], ar_seconds: float | None) -> pd.DataFrame:
    """One row per labelled run: MAT, delta, mean tree size, depth, tokens/s, speedup over AR."""
    rows = []
    for label, trace in traces.items():
        s = metrics.summarize(trace)
        rows.append(
            {
                "run": label,
                "MAT": round(s["mat"], 2),
                "delta": round(s["delta"], 2),
                "mean nodes": round(s["mean_tree_nodes"], 1),
                "mean depth": round(sum(st.tree.max_depth for st in trace.steps) / max(len(trace.steps), 1), 2),
                "tokens/s": round(s["tokens_per_second"], 1),
                "speedup": round(metrics.speedup(ar_seconds, s["seconds"]), 2) if ar_seconds else None,
            }
        )
    return pd.DataFrame(rows)
