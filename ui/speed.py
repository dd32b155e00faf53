"""How much of the engine's speed a user of the app sees: ``python -m ui.speed``.

Launches ``python app.py`` in a child process, runs each example prompt through the Explore tab's
streaming endpoint with gradio_client (wall clock from submit to the last update, streaming, figures
and queue included), and, interleaved with it in this process, the same generation through the
benchmark's ``timed_generation`` (prefill to last token).  Prints tokens/s of both and their ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from gradio_client import Client

from talon.bench.runner import timed_generation
from talon.config import DecodeConfig, TreeConfig
from talon.engine.decode import encode_prompt

from .shared import DEFAULT_DRAFTER, DEFAULT_TREE, EMBEDDED, EXAMPLES, REGISTRY, ROOT, make_drafter


def _launch(port: int, app_dir=ROOT, env: dict | None = None) -> subprocess.Popen:
    """``python app.py`` of the checkout ``app_dir`` on ``port``, in a child process with ``env`` (this
    process's environment by default)."""
    env = {**(os.environ if env is None else env), "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1"}
    return subprocess.Popen(
        [sys.executable, "app.py"], cwd=app_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _client(port: int, timeout: float = 300.0) -> Client:
    deadline = time.time() + timeout
    while True:
        try:
            return Client(f"http://127.0.0.1:{port}/", verbose=False)
        except Exception:  # noqa: BLE001 - not up yet
            if time.time() > deadline:
                raise
            time.sleep(1.0)


def _app_run(client: Client, prompt: str, tree: TreeConfig, max_new: int) -> tuple[int, float]:
    """Tokens generated and client-side wall seconds of one Explore run."""
    t0 = time.perf_counter()
    job = client.submit(
        "verdict",
        prompt,
        EMBEDDED,
        DEFAULT_DRAFTER,
        tree.method,
        tree.budget,
        tree.topk,
        tree.mu,
        tree.depth,
        tree.gamma,
        0.0,
        max_new,
        0,
        "sync",
        api_name="/run_explore",
    )
    out = job.result()
    seconds = time.perf_counter() - t0
    tokens = int(re.search(r"Tokens generated \| (\d+)", out[5]).group(1))
    return tokens, seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=7871)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    tree = DEFAULT_TREE
    decode = DecodeConfig(max_new_tokens=args.max_new_tokens, temperature=0.0, seed=0)
    app = _launch(args.port)
    try:
        client = _client(args.port)
        target = REGISTRY.get(EMBEDDED)
        prompts = [e["prompt"] for e in EXAMPLES]
        _app_run(client, prompts[0], tree, 8)  # warm-up of both sides (drafter load, first compile)
        timed_generation(
            target, make_drafter(tree.method, DEFAULT_DRAFTER, target), tree, decode, encode_prompt(target, prompts[0])
        )
        app_tokens = app_seconds = bench_tokens = bench_seconds = 0.0
        for prompt in prompts:
            tokens, seconds = _app_run(client, prompt, tree, args.max_new_tokens)
            trace, bench = timed_generation(
                target, make_drafter(tree.method, DEFAULT_DRAFTER, target), tree, decode, encode_prompt(target, prompt)
            )
            app_tokens, app_seconds = app_tokens + tokens, app_seconds + seconds
            bench_tokens, bench_seconds = bench_tokens + len(trace.output_ids), bench_seconds + bench
            print(
                f"{tokens:4d} tokens: app {tokens / seconds:5.1f} tok/s, "
                f"bench {len(trace.output_ids) / bench:5.1f} tok/s"
                + ("" if tokens == len(trace.output_ids) else " (different lengths!)"),
                flush=True,
            )
        app_rate, bench_rate = app_tokens / app_seconds, bench_tokens / bench_seconds
        print(
            f"{len(prompts)} prompts, {tree.method} N={tree.budget} K={tree.topk} μ={tree.mu:g}, drafter "
            f"{DEFAULT_DRAFTER}: app {app_rate:.1f} tok/s, bench {bench_rate:.1f} tok/s, "
            f"ratio {app_rate / bench_rate:.2f}"
        )
    finally:
        app.terminate()
        app.wait(timeout=30)


if __name__ == "__main__":
    main()
