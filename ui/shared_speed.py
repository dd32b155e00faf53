"""How the app answers when several people use it at once: ``python -m ui.shared_speed --users 2 3``.

Launches ``python app.py`` (from ``--app-dir``, this checkout by default, so an older checkout can be
measured the same way) in a child process, then for each user count U drives it through gradio_client
with U users at once: U - 1 *decoders* each run ``--runs`` Explore runs of ``--max-new`` tokens back to back
(example prompts, the app's CPU defaults), and one *lab user* who made a short run, froze its step 2 and
then moves the Tree lab's μ slider again and again at a person's pace (one change, then half a second)
while the decoders run.  Before the decoders start, the lab user's changes are timed alone.

Reports the lab change's latency as the client sees it (request to answer: p50, p90, max) alone and
shared, and per decode run its tokens/s by the client's wall clock (submit to the last update, queueing
included: what a user waits) and by the run's own trace (``RunTrace.seconds``: the decoder's own time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path

from gradio_client import Client

from talon.metrics import percentile
from talon.trace import RunTrace

from .shared import EXAMPLES, ROOT
from .speed import _client, _launch

DEFAULTS = ("embedded", "head", "talon", 24, 6, 0.1, 5, 4, 0.0)
"""Target, drafter, method, N, K, μ, depth, γ, temperature: the app's CPU defaults."""
MU_VALUES = (0.05, 0.1, 0.2, 0.3)
APP_DEFAULT = "app-default"
"""``--wait-policy`` value that leaves ``OMP_WAIT_POLICY`` to each app."""
LAB_PAUSE = 0.5
"""Seconds between two lab changes (a person reads the tree before moving the slider again)."""


def explore(client: Client, prompt: str, max_new: int) -> tuple[float, RunTrace]:
    """One Explore run: client wall seconds (submit to the last update) and the run's exported trace."""
    t0 = time.perf_counter()
    client.predict("verdict", prompt, *DEFAULTS, max_new, 0, "sync", api_name="/run_explore")
    wall = time.perf_counter() - t0
    path = client.predict(api_name="/export_json")
    return wall, RunTrace.from_json(Path(path).read_text(encoding="utf-8"))


def lab_change(client: Client, mu: float) -> float:
    """One Tree lab change (μ released): seconds from request to answer."""
    t0 = time.perf_counter()
    client.predict("talon", 24, 6, mu, 5, 4, "relative", api_name="/redraw")
    return time.perf_counter() - t0


def decoder(url: str, runs: int, max_new: int, offset: int, out: list[dict]) -> None:
    client = Client(url, verbose=False)
    for k in range(runs):
        prompt = EXAMPLES[(offset + k) % len(EXAMPLES)]["prompt"]
        wall, trace = explore(client, prompt, max_new)
        tokens = len(trace.output_ids)
        out.append({"client_tps": tokens / wall, "trace_tps": tokens / trace.seconds, "wall": wall, "tokens": tokens})


def measure(url: str, users: int, runs: int, max_new: int, alone_changes: int = 6) -> dict:
    """Lab latencies (alone, then shared) and decode rates with ``users`` users at once."""
    lab = Client(url, verbose=False)
    explore(lab, EXAMPLES[0]["prompt"], 16)
    lab.predict(2, "embedded", "head", api_name="/freeze")
    alone = [lab_change(lab, MU_VALUES[k % len(MU_VALUES)]) for k in range(alone_changes)]
    rates: list[dict] = []
    threads = [
        threading.Thread(target=decoder, args=(url, runs, max_new, 3 * k, rates), daemon=True) for k in range(users - 1)
    ]
    load_before = os.getloadavg()[0]
    for t in threads:
        t.start()
    shared: list[float] = []
    k = 0
    while any(t.is_alive() for t in threads):
        shared.append(lab_change(lab, MU_VALUES[k % len(MU_VALUES)]))
        k += 1
        time.sleep(LAB_PAUSE)
    for t in threads:
        t.join()
    return {
        "users": users,
        "lab_alone": alone,
        "lab_shared": shared,
        "rates": rates,
        "load": (load_before, os.getloadavg()[0]),
    }


def report(result: dict) -> str:
    alone, shared, rates = result["lab_alone"], result["lab_shared"], result["rates"]

    def lat(values: list[float]) -> str:
        if not values:
            return "–"
        return f"p50 {percentile(values, 0.5):.2f} s, p90 {percentile(values, 0.9):.2f} s, max {max(values):.2f} s"

    lines = [
        f"{result['users']} users (1 lab user, {result['users'] - 1} decoding): load average "
        f"{result['load'][0]:.1f} -> {result['load'][1]:.1f}",
        f"  lab change alone ({len(alone)}): {lat(alone)}",
        f"  lab change shared ({len(shared)}): {lat(shared)}",
    ]
    if rates:
        lines.append(
            f"  decode runs ({len(rates)} of {rates[0]['tokens']}+ tokens): client tokens/s "
            f"median {statistics.median(r['client_tps'] for r in rates):.2f} "
            f"({min(r['client_tps'] for r in rates):.2f}–{max(r['client_tps'] for r in rates):.2f}); run's own "
            f"tokens/s median {statistics.median(r['trace_tps'] for r in rates):.2f}; wall s "
            + ", ".join(f"{r['wall']:.1f}" for r in rates)
        )
    return "\n".join(lines)


def launch(port: int, app_dir: str, wait_policy: str):
    """Start ``app_dir``'s app with ``OMP_WAIT_POLICY=wait_policy``, or, for ``"app-default"``, without the
    variable (so each app does what it does by default: this one sets PASSIVE when ``ui`` is imported, as
    this process did, so the variable is taken out of the child's environment)."""
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy != APP_DEFAULT:
        env["OMP_WAIT_POLICY"] = wait_policy
    return _launch(port, Path(app_dir), env)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[2, 3], help="users at once, per measurement")
    parser.add_argument("--runs", type=int, default=2, help="Explore runs per decoding user")
    parser.add_argument("--max-new", type=int, default=64)
    parser.add_argument("--port", type=int, default=7871)
    parser.add_argument(
        "--app-dir", nargs="+", default=[str(ROOT)], help="checkouts whose app.py is measured, interleaved"
    )
    parser.add_argument(
        "--wait-policy",
        nargs="+",
        default=[APP_DEFAULT],
        help=f"OMP_WAIT_POLICY values to launch each app with ({APP_DEFAULT}: whatever the app sets), interleaved",
    )
    parser.add_argument("--rounds", type=int, default=1, help="times the whole set of apps is measured")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs", flush=True)
    for round_ in range(args.rounds):
        for app_dir in args.app_dir:
            for policy in args.wait_policy:
                proc = launch(args.port, app_dir, policy)
                try:
                    _client(args.port)
                    url = f"http://127.0.0.1:{args.port}/"
                    print(f"round {round_ + 1}: app {app_dir}, OMP_WAIT_POLICY={policy}", flush=True)
                    for users in args.users:
                        print(report(measure(url, users, args.runs, args.max_new)), flush=True)
                finally:
                    proc.terminate()
                    proc.wait(30)


if __name__ == "__main__":
    main()
