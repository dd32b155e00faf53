"""Launch the Gradio app in this process on a free local port, for the app-tier tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_app():
    """Import app.py, load the default model, launch on 127.0.0.1:<free port>; returns (demo, url)."""
    import app
    from ui.compute import call_on_fresh_thread
    from ui.shared import DEFAULT_TARGET, REGISTRY

    call_on_fresh_thread(REGISTRY.get, DEFAULT_TARGET)  # as app.py does: model work off long-lived threads
    port = free_port()
    app.demo.launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        **app.STYLE,
    )
    return app.demo, f"http://127.0.0.1:{port}/"
