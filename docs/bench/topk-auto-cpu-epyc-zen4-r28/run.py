"""TALON auto's root width K on the headline prompts, interleaved per prompt with ar (side by side)."""

from pathlib import Path

from talon.bench.cli import write_suite
from talon.bench.runner import run_suite
from talon.bench.suites import HEADLINE_PROMPTS, Experiment, Suite

suite = Suite(
    "ksweep",
    "TALON auto's K on the headline prompts.",
    (
        Experiment(
            "topk_auto", "topk_sweep", HEADLINE_PROMPTS, ("ar", "talon+auto"), values=(3, 4, 6, 10), max_new_tokens=64
        ),
    ),
    drafter="head",
)
result = run_suite(suite)
write_suite(
    Path("docs/bench/topk-auto-cpu-epyc-zen4-r28"),
    result,
    "PYTHONPATH=. python docs/bench/topk-auto-cpu-epyc-zen4-r28/run.py",
)
