"""Where the app's model work runs: each handler body that calls a model runs on a short-lived thread
of its own (and, on Hugging Face Spaces, with a GPU attached).

Why a fresh thread: the CPU build of torch runs its parallel regions on OpenMP (libgomp), which keeps a
team of worker threads per thread that has used it.  Once more threads are managed than the machine has
cores, every team stops spin-waiting between regions and sleeps instead, and each of the decoder's many
small operations pays a wake-up: on the 2-core machine a decode ran ~30% slower after one of Gradio's
pooled handler threads (which live for the whole process) had touched a model.  A thread that ends
frees its team, so handlers that compute on their own thread leave the decoder alone.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

try:  # Hugging Face Spaces (ZeroGPU): a GPU is attached per call of a decorated function.
    import spaces
except ImportError:  # pragma: no cover - depends on the host
    spaces = None


def call_on_fresh_thread(fn: Callable[..., Any], *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)`` on a new thread that ends with the call, in a copy of the caller's
    context (so Gradio's progress bar and request still work); its result is returned and its
    exception re-raised here."""
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["value"] = context.run(fn, *args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            outcome["error"] = err

    thread = threading.Thread(target=body, name=f"talon-{getattr(fn, '__name__', 'work')}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def on_fresh_threads(fn: Callable) -> Callable:
    """Run ``fn`` (a function, or a generator function: each of its steps) on short-lived threads."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args, **kwargs):
            steps = fn(*args, **kwargs)
            while True:
                try:
                    value = call_on_fresh_thread(next, steps)
                except StopIteration:
                    return
                yield value

        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return call_on_fresh_thread(fn, *args, **kwargs)

    return call


def model_work(duration: Callable[..., float] | None = None) -> Callable:
    """Decorator of a handler that calls a model: its body runs on short-lived threads, and on Hugging
    Face Spaces with a GPU attached for ``duration(*args)`` seconds (or Spaces' default)."""

    def wrap(fn: Callable) -> Callable:
        threaded = on_fresh_threads(fn)
        if spaces is None:
            return threaded
        return spaces.GPU(duration=duration)(threaded) if duration is not None else spaces.GPU(threaded)

    return wrap
