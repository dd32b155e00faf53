"""Whether the Hugging Face Hub can be reached, decided once per process, so that a Hub id typed on an
offline machine fails in about a second instead of after minutes of retries."""

from __future__ import annotations

import functools
import os
import socket
import threading
from urllib.parse import urlparse

HUB_TIMEOUT_S = 2.0
"""How long the one reachability check may take."""


def hub_offline_flag() -> bool:
    """Whether ``$HF_HUB_OFFLINE`` marks the Hub as off."""
    return os.environ.get("HF_HUB_OFFLINE", "0").strip() not in ("", "0", "false", "False")


@functools.cache
def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """False when ``$HF_HUB_OFFLINE`` is set; otherwise whether a TCP connection to the Hub's host
    (``$HF_ENDPOINT``'s, default huggingface.co) opens within ``timeout`` seconds.  The check runs in a
    thread, so a DNS lookup that hangs cannot hold the caller longer than ``timeout``."""
    if hub_offline_flag():
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    result: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(result and result[0])
