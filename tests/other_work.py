"""A scripted ``talon.models.device.OtherWork`` for tests of what a load or a measurement keeps when
other processes share the machine."""

from __future__ import annotations

from talon.models import device


class _Scripted(device.OtherWork):
    """Reads no ``/proc``: ``share`` is what others took of the machine while the block ran (None: not
    known); ``quiet`` and everything else is ``OtherWork``'s own."""

    share: float | None = 0.0

    def __init__(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def others_took(share: float | None) -> type[device.OtherWork]:
    """An ``OtherWork`` class whose blocks report that others took ``share`` of the machine."""
    return type("ScriptedOthers", (_Scripted,), {"share": share})
