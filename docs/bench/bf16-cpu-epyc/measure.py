"""Does bfloat16 make trees pay on this CPU?  One forward of 1 and of 16 new rows after a 200-token KV
cache, on the stock transformers model of the embedded target (no packed kernels), float32 against
bfloat16, 15 rounds interleaved across dtypes and row counts, 2 threads; prints median [min-max] ms.

Run from the repository root: ``PYTHONPATH=. python docs/bench/bf16-cpu-epyc/measure.py``."""

import statistics
import time

import torch
from transformers import AutoModelForCausalLM

from talon.models.embedded import embedded_model_dir

ROUNDS, CONTEXT, ROWS = 15, 200, (1, 16)


def forward_seconds(model, prompt: torch.Tensor, rows: int) -> float:
    """Wall time of one forward of ``rows`` new tokens after ``prompt`` (prefill not timed)."""
    with torch.no_grad():
        cache = model(prompt, use_cache=True).past_key_values
        ids = torch.randint(100, 5000, (1, rows))
        positions = torch.arange(CONTEXT, CONTEXT + rows)[None]
        start = time.perf_counter()
        model(ids, past_key_values=cache, position_ids=positions, use_cache=True)
        return time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(2)
    path = str(embedded_model_dir(lambda *_: None))
    models = {dt: AutoModelForCausalLM.from_pretrained(path, dtype=dt).eval() for dt in (torch.float32, torch.bfloat16)}
    prompt = torch.randint(100, 5000, (1, CONTEXT))
    times: dict[tuple, list[float]] = {(dt, r): [] for dt in models for r in ROWS}
    for _ in range(ROUNDS):
        for dt, model in models.items():
            for rows in ROWS:
                times[dt, rows].append(forward_seconds(model, prompt, rows))
    for (dt, rows), v in times.items():
        ms = [t * 1000 for t in v]
        print(f"{dt!s:15} rows={rows:2d} median {statistics.median(ms):6.1f} ms [{min(ms):.0f}-{max(ms):.0f}]")


if __name__ == "__main__":
    main()
