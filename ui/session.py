"""One user's state in the app: the runs they made, the run in flight, the step frozen in the tree lab.

A ``Session`` lives in that user's ``gr.State`` (created per browser session, never shared) and is
released when Gradio drops the session (``close``: a run in flight is stopped, the lab's caches go).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.base import Drafter
from talon.engine.decode import fill_texts, run
from talon.engine.frozen_step import FrozenStep
from talon.models.loaded import LoadedModel
from talon.trace import RunTrace, StepRecord

_RUN_IDS = itertools.count(1)


class LiveRun:
    """A decode running on its own thread at its own pace; the page polls it (``wait``) and stops it
    through the engine's stop hook (``stop``), so a stopped run ends cleanly with ``stop_reason``
    "stopped" and keeps every step it made."""

    def __init__(
        self,
        trace: RunTrace,
        target: LoadedModel,
        drafter: Drafter | None,
        tree_cfg: TreeConfig,
        decode_cfg: DecodeConfig,
    ) -> None:
        self.trace, self.target = trace, target
        self.id = next(_RUN_IDS)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._news = threading.Event()
        self._thread = threading.Thread(
            target=self._work, args=(drafter, tree_cfg, decode_cfg), daemon=True, name=f"talon-run-{self.id}"
        )
        self._thread.start()

    def _work(self, drafter, tree_cfg, decode_cfg) -> None:
        try:
            for _ in run(self.trace, self.target, drafter, tree_cfg, decode_cfg, stop=self._stop.is_set):
                self._news.set()
        except BaseException as err:  # noqa: BLE001 - handed to the page, which shows it
            self.error = err
        finally:
            self._done.set()
            self._news.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def stop(self) -> None:
        """Ask the run to stop before its next step."""
        self._stop.set()

    def wait(self, seconds: float) -> None:
        """Wait until a new step arrives or the run ends, at most ``seconds``."""
        self._news.wait(seconds)
        self._news.clear()

    def wait_end(self, seconds: float) -> None:
        """Wait until the run ends, at most ``seconds`` (a pause between updates that the end cuts short)."""
        self._done.wait(seconds)

    def join(self, seconds: float | None = None) -> None:
        self._thread.join(seconds)

    def fill_texts(self, upto: int | None = None) -> None:
        """Decode the text of the steps made so far (the page's thread; the run never touches text)."""
        fill_texts(self.trace, self.target.tokenizer, upto)


@dataclass
class LabState:
    """The step frozen in the tree lab: which run and step, and the prefilled caches."""

    trace: RunTrace
    index: int
    frozen: FrozenStep
    last: StepRecord | None = None  # the last tree drawn (for re-rolls)


@dataclass
class Session:
    """Everything one user's page holds between events."""

    trace: RunTrace | None = None
    live: LiveRun | None = None
    follow: bool = True
    compare: dict = field(default_factory=dict)
    lab: LabState | None = None

    def stop(self) -> bool:
        """Stop the run in flight, if any; whether there was one."""
        if self.live is not None and not self.live.done:
            self.live.stop()
            return True
        return False

    def close(self) -> None:
        """Release what the session holds: stop its run, drop the lab's caches."""
        self.stop()
        self.lab = None
        self.compare = {}


def new_session() -> Session:
    """``gr.State``'s initial value, called once per browser session."""
    return Session()


def close_session(session: Session | None) -> None:
    """``gr.State``'s delete callback."""
    if isinstance(session, Session):
        session.close()
