"""The Sync vs async tab: one method drafted-then-verified, and with drafting overlapped with
verification, as two timelines, with the guesses' hit rate and a plain verdict on this machine."""
from __future__ import annotations

import gradio as gr

from talon.engine.decode import fill_texts, run
from talon.trace import RunTrace
from viz import charts, summary

from .settings import prepare
from .compute import model_work
from .shared import gpu_seconds

ASYNC_ARGS = ("prompt", "target_spec", "drafter_spec", "method", "budget", "topk", "mu", "depth", "gamma",
              "temperature", "max_new")


def _async_seconds(*args) -> int:
    values = dict(zip(ASYNC_ARGS, args))
    return gpu_seconds(values.get("max_new", 64), values.get("method", "talon"), runs=2)


@model_work(duration=_async_seconds)
def run_sync_async(prompt, target_spec, drafter_spec, method, budget, topk, mu, depth, gamma, temperature, max_new,
                   seed, progress=gr.Progress()):
    """Run the method synchronously, then asynchronously, and draw both timelines."""
    if method == "ar":
        raise gr.Error("Autoregressive decoding has no drafter to overlap: pick a tree method.",
                       print_exception=False)
    traces: dict[str, RunTrace] = {}
    for execution in ("sync", "async"):
        prepared = prepare(prompt, target_spec, drafter_spec, method, budget, topk, mu, depth, gamma, temperature,
                           max_new, seed, execution, progress)
        traces[execution] = prepared.trace
        for _ in run(prepared.trace, prepared.target, prepared.drafter, prepared.tree_cfg, prepared.decode_cfg):
            pass
        fill_texts(prepared.trace, prepared.target.tokenizer)
        yield charts.timeline_chart(traces), summary.async_table(traces), summary.async_verdict(traces)
