"""Launch the Gradio app in this process on a free local port, for the app-tier tests."""

from __future__ import annotations

import socket
import time

LAUNCHED: list = []
"""The app ``launch_app`` launched in this process (at most one): a failed browser test prints its queue."""
SESSION_CALLS: list[tuple[float, str]] = []
"""(``time.monotonic()``, what) of each batch press, claim, Stop, end and closing of a session of the
launched app (``record_session_calls``), oldest first: a failed browser test prints the last ones, which
say who stopped a batch that ended on its own."""
TABS_CLOSED: list[tuple[float, str]] = []
"""(``time.monotonic()``, session hash) of each tab the launched app was told had closed (``demo.unload``:
Gradio's heartbeat stream from that page ended), oldest first: a failed browser test prints them, since a
tab taken for closed has its runs stopped and its pending events dropped."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_app():
    """Import app.py, load the default model, launch on 127.0.0.1:<free port>; returns (demo, url)."""
    import app
    from ui.compute import call_on_fresh_thread
    from ui.session import OPEN_TABS
    from ui.shared import DEFAULT_TARGET, REGISTRY

    closed = OPEN_TABS.closed

    def record_closed(key: str | None) -> None:
        TABS_CLOSED.append((time.monotonic(), str(key)))
        closed(key)

    OPEN_TABS.closed = record_closed  # this process's app only: the tests launch one
    record_session_calls()
    call_on_fresh_thread(REGISTRY.get, DEFAULT_TARGET)  # as app.py does: model work off long-lived threads
    port = free_port()
    app.demo.launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        **app.STYLE,
    )
    LAUNCHED.append(app.demo)
    return app.demo, f"http://127.0.0.1:{port}/"


def record_session_calls() -> None:
    """Have ``Session``'s batch and closing methods note each call in ``SESSION_CALLS`` (which session, which
    tab), in this test process."""
    import functools

    from ui.session import Session

    def recorded(method):
        @functools.wraps(method)
        def call(session, *args):
            SESSION_CALLS.append((time.monotonic(), f"session {id(session) % 10_000:04d} {method.__name__}{args}"))
            return method(session, *args)

        return call

    for name in ("start_work", "claim_work", "stop_work", "finish_work", "press_failed", "close"):
        setattr(Session, name, recorded(getattr(Session, name)))


def describe_server(demo) -> str:
    """What the test server saw, for a failed browser test's record: what Gradio's own queue holds (the
    handlers being processed, how long each has run, in which concurrency group, and per group its limit,
    how many run and which events wait; a run pressed on the page passes this queue before any model work
    reaches ``ui.compute``'s), then the last tabs the app took for closed and the last session calls
    (``record_session_calls``)."""
    queue = getattr(demo, "_queue", None)
    if queue is None:
        return "Gradio's queue: not started"
    now = time.monotonic()
    slots = queue.active_jobs
    lines = [f"Gradio's queue: {sum(job is not None for job in slots)} of {len(slots)} processing slots in use"]
    for job in slots:
        for event in job or []:
            lines.append(
                f"  processing {event.fn.name} [{event.concurrency_id}] for {now - event.enqueue_time:.1f} s since "
                f"queued (session {event.session_hash[:8]}, alive {event.alive})"
            )
    for group, events in queue.event_queue_per_concurrency_id.items():
        if events.current_concurrency or events.queue:
            waiting = ", ".join(f"{e.fn.name} ({now - e.enqueue_time:.1f} s)" for e in events.queue) or "none"
            running = f"{events.current_concurrency} running of {events.concurrency_limit}"
            lines.append(f"  group {group}: {running}; waiting: {waiting}")
    lines += [f"  tab {key[:8]} taken for closed {now - at:.1f} s ago" for at, key in TABS_CLOSED[-8:]]
    lines += [f"  {now - at:.1f} s ago: {what}" for at, what in SESSION_CALLS[-16:]]
    return "\n".join(lines)
