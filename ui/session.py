"""One user's state in the app: the runs they made, the run in flight, the step frozen in the tree lab.

A ``Session`` lives in that user's ``gr.State`` (created per browser session, never shared) and is
released when the tab closes (``tab_closed``) or Gradio drops the session (``close``: a run in flight
is stopped, the lab's caches go).
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import gradio as gr

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.base import Drafter
from talon.engine.decode import fill_texts, run
from talon.engine.frozen_step import FrozenStep
from talon.models.loaded import LoadedModel
from talon.trace import RunTrace, StepRecord

from .compute import COMPUTE, QUEUE_NOTE_SECONDS, STEP, ComputeQueue, Ticket

log = logging.getLogger(__name__)

_RUN_IDS = itertools.count(1)


class RunStopped(Exception):
    """Stop was pressed while a run was being prepared (its models loading, its cost curve measured)."""


class LiveRun:
    """A decode that the page polls (``wait``) and stops through the engine's stop hook (``stop``), so a
    stopped run ends cleanly with ``stop_reason`` "stopped" and keeps every step it made.

    Its own thread only drives it: each step (the first one with the prefill) is a job of the shared
    ``COMPUTE`` queue, so other users' decode steps take turns with it and Tree lab changes go first; the
    loop's clock leaves out the time between steps, so the trace's timings are the steps' own.  The
    time the run waited in the queue is kept (``waited``, ``waits``) for the page to show."""

    def __init__(
        self,
        trace: RunTrace,
        target: LoadedModel,
        drafter: Drafter | None,
        tree_cfg: TreeConfig,
        decode_cfg: DecodeConfig,
        queue: ComputeQueue = COMPUTE,
        stop: threading.Event | None = None,
    ) -> None:
        self.trace, self.target, self.queue = trace, target, queue
        self.id = next(_RUN_IDS)
        self.error: BaseException | None = None
        self.waited = 0.0
        """Seconds the run's steps waited in the queue behind other jobs, so far."""
        self.waits = 0
        """Steps that waited noticeably (``QUEUE_NOTE_SECONDS``)."""
        self.ticket: Ticket | None = None
        """The job of the step in flight (for the page: queued behind how many)."""
        self._stop = stop or threading.Event()  # Stop pressed while the run was prepared counts too
        self._done = threading.Event()
        self._news = threading.Event()
        self._steps = run(trace, target, drafter, tree_cfg, decode_cfg, stop=self._stop.is_set)
        self._thread = threading.Thread(target=self._work, daemon=True, name=f"talon-run-{self.id}")
        self._thread.start()

    def _work(self) -> None:
        def hold(ticket: Ticket) -> None:
            self.ticket = ticket

        try:
            for ticket in step_jobs(self._steps, self.queue, f"run {self.id}", on_submit=hold):
                self.waited += ticket.waited
                self.waits += ticket.waited >= QUEUE_NOTE_SECONDS
                if ticket.value is not None:
                    self._news.set()
        except BaseException as err:  # noqa: BLE001 - handed to the page, which shows it
            self.error = err
        finally:
            self.ticket = None
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


def run_stepwise(
    trace: RunTrace,
    target: LoadedModel,
    drafter: Drafter | None,
    tree_cfg: TreeConfig,
    decode_cfg: DecodeConfig,
    queue: ComputeQueue = COMPUTE,
    stop: Callable[[], bool] | None = None,
) -> tuple[RunTrace, float]:
    """Decode ``trace`` to its end (or until ``stop()``, checked between steps) one step per ``queue`` job
    (as ``LiveRun`` does, without the page), fill its text, and return it with the seconds it waited in
    the queue."""
    steps = run(trace, target, drafter, tree_cfg, decode_cfg, stop=stop)
    waited = sum(ticket.waited for ticket in step_jobs(steps, queue, "run"))
    fill_texts(trace, target.tokenizer)
    return trace, waited


def step_jobs(
    steps: Generator, queue: ComputeQueue, name: str, on_submit: Callable[[Ticket], None] | None = None
) -> Iterator[Ticket]:
    """Advance the decoding loop ``steps`` one step per ``STEP`` job of ``queue`` (labelled ``name``), and
    yield each job's ticket once it has run: its ``value`` is the step, or None for the last job (the loop
    ended; that job's wait counts too).  ``on_submit(ticket)`` hears of each job as it is queued (the page
    says how many jobs are ahead of it).  Where a step fails, the loop's own clean-up runs
    (``close_steps``) and the error is raised here."""
    try:
        while True:
            ticket = queue.submit(next, steps, None, priority=STEP, label=name)
            if on_submit is not None:
                on_submit(ticket)
            step = ticket.result()
            yield ticket
            if step is None:
                return
    except BaseException:
        close_steps(steps, queue, name)
        raise


def close_steps(steps: Generator, queue: ComputeQueue, name: str) -> None:
    """Run an unfinished decoding loop's own clean-up (``steps.close()``: its ``finally`` gives back
    runners, caches and threads) as model work on ``queue``; where the queue refuses that job too (full),
    here, rather than hold them for the rest of the session.  Errors are logged: the caller has the
    first one to show."""
    try:
        queue.run(steps.close, priority=STEP, label=f"{name}: clean-up")
    except BaseException:  # noqa: BLE001
        try:
            steps.close()
        except BaseException:  # noqa: BLE001
            log.exception("%s: its clean-up failed", name)


@dataclass
class LabState:
    """The step frozen in the tree lab: which run and step, and the prefilled caches."""

    trace: RunTrace
    index: int
    frozen: FrozenStep
    last: StepRecord | None = None  # the last tree drawn (for re-rolls)
    rerolls: int = 0  # re-roll presses at this step: each press draws afresh


@dataclass
class Session:
    """Everything one user's page holds between events."""

    trace: RunTrace | None = None
    live: LiveRun | None = None
    follow: bool = True
    compare: dict = field(default_factory=dict)
    """Compare methods: the runs by label (``ar``, ``A``, ``B``: the first repetition's) and ``repeats``."""
    prompts: dict = field(default_factory=dict)
    """Compare prompts: the two runs by label (``A``, ``B``), and the class's guess."""
    lab: LabState | None = None
    lab_results: bool = False
    """Whether a sweep, price chart or re-rolls are on show in the lab (drawn for its step and settings then)."""
    lab_version: int = 0
    """Counts the lab's setting changes and freezes: a sweep, price chart or re-roll that ends after one
    was drawn for what the lab no longer shows, and is dropped."""
    lab_settings_from: RunTrace | None = None
    """The run whose settings the lab's sliders were set to by its first Freeze (another step of that run
    keeps what the sliders hold since)."""
    viewed_step: int | None = None
    """The step (from 1) last drawn by a move of the slider or by Play since the run on show began: where a run
    not followed ends, the view stays there (None: not moved, the run opens on a typical step)."""
    gate_step: int | None = None
    """The step (from 1) Explore's "Why this shape?" explains, while its gate is on show."""
    specs: tuple[str, str] | None = None
    """The Target and Drafter fields the run on show was made with (what the lab freezes its steps with,
    whatever is typed there since); None for a loaded trace, which names models, not paths."""
    playing: bool = False
    """Whether Play is stepping through the run (Pause clears it; a timer tick still on its way then stops)."""
    stop_note: str = ""
    """What the note under Stop says once the last run has ended (``explore.note_after_run``)."""
    starting: threading.Event | None = None
    """The stop signal of the run being prepared (``preparing``), until its ``LiveRun`` takes it over."""
    starting_pressed: bool = False
    """Whether ``starting`` was made by a Run press and its run's handler has not taken it yet."""
    runs_started: int = 0
    """Explore runs started in this session: a run's handler checks it is still the newest before it
    writes anything a newer run owns."""
    text_run: int = 0
    """The id under which the page's text view holds the text on show (a live run's id, a loaded trace's
    own): highlighting a step under another id makes the page drop that text."""
    work_stops: dict[str, threading.Event] = field(default_factory=dict)
    """The stop signal of the latest batch of runs on each tab that runs several (``"compare"``,
    ``"prompts"``, ``"async"``), set by that tab's Stop, by its next Run and when the tab closes: the batch
    ends after the step it is on.  Made per batch (``start_work``): the session is deep-copied as the
    state's first value, and a lock cannot be."""
    work_unclaimed: set[str] = field(default_factory=set)
    """The tabs whose Run was pressed and whose batch has not started yet (its models loading, or waiting
    in the queue): a Stop pressed then stops it before its first step."""

    def run_pressed(self) -> None:
        """Explore's Run was pressed (its settings passed): the run in flight, if any, ends after the step it
        is on, and the next run's stop signal is made now, so that a Stop pressed while its models load or
        it waits its turn counts (``preparing`` takes the signal over)."""
        self.stop()
        self.starting = threading.Event()
        self.starting_pressed = True

    def press_failed(self, tab: str | None = None) -> None:
        """A Run press whose models could not load: no run is coming, so Stop has nothing to stop (``tab``:
        the batch tab pressed; None for Explore)."""
        if tab is None:
            if self.starting_pressed:
                self.starting, self.starting_pressed = None, False
        elif tab in self.work_unclaimed:
            self.work_unclaimed.discard(tab)
            self.work_stops.pop(tab, None)

    @contextmanager
    def preparing(self) -> Iterator[threading.Event]:
        """Stop the run in flight, if any, and give the stop signal of the next one while it is prepared:
        Stop sets it from now on (from the Run press, ``run_pressed``), while that run's models load and its
        cost curve is measured (``RunStopped``) and then while it decodes (hand it to its ``LiveRun``).
        Where the preparation fails or is stopped, nothing is being prepared any more (a later Stop says
        nothing runs)."""
        if self.starting is not None and self.starting_pressed:  # made at the press: the run before is stopped
            stop = self.starting
        else:  # an API call, or a second handler of one press
            self.stop()
            stop = self.starting = threading.Event()
        self.starting_pressed = False
        try:
            yield stop
        except BaseException:
            if self.starting is stop:
                self.starting = None
            raise

    def stop(self) -> str | None:
        """Stop the run in flight or being prepared, if any: "decoding" or "preparing", else None."""
        what = None
        if self.starting is not None and not self.starting.is_set():
            self.starting.set()
            what = "preparing"
        if self.live is not None and not self.live.done:
            self.live.stop()
            what = what or "decoding"
        return what

    def start_work(self, tab: str) -> None:
        """``tab``'s Run was pressed: the batch on its way there, if any, ends after the step it is on (it is
        replaced: ``replaced``), and the stop signal of the next one is made, for its handler to claim.  The
        new signal is in place before the old one is set: the old batch's handler, which may see its signal
        the moment it is set, must then find itself replaced (and leave the page quietly), not stopped."""
        old = self.work_stops.get(tab)
        self.work_stops[tab] = threading.Event()
        self.work_unclaimed.add(tab)
        if old is not None:
            old.set()

    def claim_work(self, tab: str) -> threading.Event:
        """The stop signal of the batch of runs starting on ``tab``: the one its Run press made (set if Stop
        was pressed since), or a new one where no press made it (an API call)."""
        if tab not in self.work_unclaimed:
            self.start_work(tab)
        self.work_unclaimed.discard(tab)
        return self.work_stops[tab]

    def replaced(self, tab: str, stop: threading.Event) -> bool:
        """Whether the batch of ``stop`` was stopped by a newer Run on ``tab`` (it then leaves the page to
        the new batch and says nothing), not by Stop or the tab closing."""
        return self.work_stops.get(tab) is not stop

    def finish_work(self, tab: str, stop: threading.Event) -> None:
        """The batch of ``stop`` has ended: a Stop from now on has nothing to stop on ``tab``."""
        if self.work_stops.get(tab) is stop:
            del self.work_stops[tab]

    def working(self, tab: str) -> bool:
        """Whether a batch of runs is in flight or on its way on ``tab`` (and not stopped)."""
        stop = self.work_stops.get(tab)
        return stop is not None and not stop.is_set()

    def stop_work(self, tab: str) -> bool:
        """``tab``'s Stop: its batch in flight or on its way, if any, ends after the step it is on; False
        where nothing runs there."""
        if not self.working(tab):
            return False
        self.work_stops[tab].set()
        return True

    def close(self) -> None:
        """Release what the session holds: stop its runs, drop the lab's caches."""
        self.stop()
        for stop in self.work_stops.values():
            stop.set()
        self.lab = None
        self.compare = {}
        self.prompts = {}


NOTHING_RUNS = "Nothing is running on this tab."


def stop_tab(session: Session, tab: str) -> None:
    """A batch tab's Stop (``Session.stop_work``), saying so where nothing runs there."""
    if not session.stop_work(tab):
        gr.Info(NOTHING_RUNS)


def new_session() -> Session:
    """``gr.State``'s initial value, called once per browser session."""
    return Session()


def close_session(session: Session | None) -> None:
    """``gr.State``'s delete callback (Gradio drops a closed tab's state an hour after it closed)."""
    if isinstance(session, Session):
        session.close()


class OpenTabs:
    """The sessions of the browser tabs open now, by Gradio's session hash, so that closing a tab stops its
    run at once: Gradio calls the state's delete callback only an hour after a tab closed, and until
    then the run kept taking turns in the shared queue.  Held weakly (a session Gradio dropped is gone
    from here too); each entry is one tab's own, found only by that tab's hash."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()

    def opened(self, session: Session, key: str | None) -> None:
        if key and isinstance(session, Session):
            with self._lock:
                self._sessions[key] = session

    def closed(self, key: str | None) -> None:
        with self._lock:
            session = self._sessions.pop(key, None) if key else None
        if session is not None:
            session.close()


OPEN_TABS = OpenTabs()


def tab_opened(session: Session, request: gr.Request) -> Session:
    """``demo.load``: remember the tab's session under its session hash, and give it back to be stored as
    the tab's state (a state no event has written yet is made afresh for each event that reads it)."""
    OPEN_TABS.opened(session, getattr(request, "session_hash", None))
    return session


def tab_closed(request: gr.Request) -> None:
    """``demo.unload`` (the tab closed or reloaded): stop its run and drop its caches now."""
    OPEN_TABS.closed(getattr(request, "session_hash", None))
