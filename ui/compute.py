"""Where the app's model work runs: one bounded queue for every user's model work (``COMPUTE``), served by
as many worker threads as the machine has room for jobs (``compute_slots``: one by default), and the
handlers' own bodies on short-lived threads (``model_work``).

**One queue.**  A decode does not run on a thread of its own from start to end: each of its steps is a
job of the queue (``ui.session.LiveRun`` resumes the decoding generator one step at a time), and so is
every Tree lab change, every step of a Compare or Sync vs async run and a cost-curve measurement.  Jobs
run by priority, first come first served within one: ``INTERACTIVE`` (a Tree lab change, the gate view of
a step) before ``STEP`` (a decode step, one point of a sweep).  So a lab change waits for at most the one
step that is running, never for a whole decode, and two users' decodes take turns step by step.  The
wait and the run time of every job are recorded, and a handler waiting for its job hears how many jobs
are ahead and about how long they take (``Ticket``, ``ComputeQueue.run``), so the page can say so.

**Why one job at a time on a CPU.**  Torch's intra-op thread pool already uses every core for one job
(its default thread count is the number of cores), so two jobs at once put twice as many torch threads
as cores on the machine.  Worse, the CPU build of torch runs its parallel regions on OpenMP (libgomp),
which keeps a team of worker threads per thread that has used it: once more threads are managed than
the machine has cores, every team stops spin-waiting between regions and sleeps instead, and each of the
decoder's many small operations pays a wake-up (on the 2-core machine a decode ran ~30 % slower once a
second team was alive).  The queue's worker threads are the only long-lived threads that run model
work, so only their teams exist.  ``TALON_COMPUTE_SLOTS`` raises the number of jobs at once (a GPU
machine, or torch limited to fewer threads than cores).

**Waiting passively.**  One team alone spins between regions by default, which is fast on a quiet machine
and collapses when another process wants the cores (a spinning thread holds the core its partner needs:
a decode took 4-5x as long next to a benchmark); ``ui/__init__.py`` therefore sets
``OMP_WAIT_POLICY=PASSIVE`` unless the environment chose (10-20 % slower when the machine is quiet).

**What stays outside.**  Loading a model (reading and converting files, up to half a minute the first
time) runs on the handler's short-lived thread, not in the queue, so one user's load never stalls
everyone's steps; a thread that ends frees its OpenMP team.
"""

from __future__ import annotations

import contextvars
import functools
import heapq
import inspect
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

try:  # Hugging Face Spaces (ZeroGPU): a GPU is attached per call of a decorated function.
    import spaces
except ImportError:  # pragma: no cover - depends on the host
    spaces = None

INTERACTIVE, STEP = 0, 1
"""Job priorities: a Tree lab change (short, someone is waiting for it) before a decode step."""
PRIORITY_NAMES = {INTERACTIVE: "lab change", STEP: "decode step"}
MAX_WAITING = 64
"""Jobs that may wait at once; one more is refused with a message (every user has at most a few)."""
SLOTS_ENV = "TALON_COMPUTE_SLOTS"
QUEUE_NOTE_SECONDS = 0.25
"""A job that waited at least this long says so on the page."""
RECENT_JOBS = 4096
"""Finished jobs the queue remembers for ``describe`` (what a stalled page was waiting behind): a few
minutes of decode steps, the span of one browser test."""


def compute_slots() -> int:
    """How many jobs run at once: ``$TALON_COMPUTE_SLOTS`` (a whole number >= 1), else 1 (one job's torch
    threads already use every core)."""
    try:
        return max(1, int(os.environ.get(SLOTS_ENV, "1")))
    except ValueError:
        return 1


class QueueFull(RuntimeError):
    """Too many jobs are waiting; the message says so in words a user can act on."""


@dataclass(eq=False)
class Ticket:
    """One job of the queue: what to run, when it was queued, started and finished, and its outcome."""

    fn: Callable[[], Any]
    priority: int
    label: str
    context: contextvars.Context
    queued_at: float = field(default_factory=time.perf_counter)
    started_at: float | None = None
    finished_at: float | None = None
    value: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    ahead: int = 0
    """Jobs that were waiting or running ahead of this one when it was queued."""

    @property
    def waited(self) -> float:
        """Seconds between queueing and starting (so far, while it waits)."""
        end = self.started_at if self.started_at is not None else time.perf_counter()
        return max(0.0, end - self.queued_at)

    @property
    def ran(self) -> float:
        """Seconds it ran (0 until it has finished)."""
        if self.started_at is None or self.finished_at is None:
            return 0.0
        return self.finished_at - self.started_at

    def result(self) -> Any:
        """Wait for the job; its value, or its exception raised here."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


class ComputeQueue:
    """A priority queue of jobs served by ``slots`` long-lived worker threads (started on first use).

    Args:
        slots: jobs that run at once.
        max_waiting: jobs that may wait at once (``submit`` raises ``QueueFull`` past it).
        inline: run every job at once on the submitting thread, queueing nothing (on Spaces' ZeroGPU the GPU
            is attached to the calling thread's call, so a worker thread would have none).
    """

    def __init__(self, slots: int = 1, max_waiting: int = MAX_WAITING, inline: bool = False) -> None:
        self.slots, self.max_waiting, self.inline = slots, max_waiting, inline
        self._heap: list[tuple[int, int, Ticket]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._running: list[Ticket] = []
        self._workers: list[threading.Thread] = []
        self._mean: dict[int, float] = {}  # moving mean run time per priority, for wait estimates
        self.finished = 0
        self.recent: deque[tuple[str, int, float, float, float]] = deque(maxlen=RECENT_JOBS)
        """The last finished jobs: (label, priority, seconds waited, seconds run, perf_counter at the end)."""

    # ---- submitting ----------------------------------------------------------------------------------
    def submit(self, fn: Callable, *args, priority: int = STEP, label: str = "", **kwargs) -> Ticket:
        """Queue ``fn(*args, **kwargs)`` (run in a copy of the caller's context, so Gradio's progress still
        works); returns its ``Ticket`` at once."""
        ticket = Ticket(functools.partial(fn, *args, **kwargs), priority, label, contextvars.copy_context())
        if self.inline:  # run here and now (Spaces: the GPU is attached to the calling thread's call)
            self._execute(ticket)
            return ticket
        with self._cond:
            if len(self._heap) >= self.max_waiting:
                raise QueueFull(
                    f"The machine is busy: {len(self._heap)} jobs from all users are waiting. Try again in a minute."
                )
            ticket.ahead = len(self._running) + sum(1 for p, _, _ in self._heap if p <= priority)
            heapq.heappush(self._heap, (priority, next(self._order), ticket))
            self._start_workers()
            self._cond.notify()
        return ticket

    def run(
        self,
        fn: Callable,
        *args,
        priority: int = STEP,
        label: str = "",
        on_wait: Callable[[Ticket], None] | None = None,
        **kwargs,
    ) -> Any:
        """``submit`` and ``wait`` for the result (its exception re-raised here)."""
        return self.wait(self.submit(fn, *args, priority=priority, label=label, **kwargs), on_wait)

    @staticmethod
    def wait(ticket: Ticket, on_wait: Callable[[Ticket], None] | None = None) -> Any:
        """The result of ``ticket``'s job once it has run (its exception re-raised here).  While the job
        waits to start, ``on_wait(ticket)`` is called about twice a second (e.g. to tell the page)."""
        while not ticket.done.wait(0.5 if on_wait is not None else None):
            if on_wait is not None and ticket.started_at is None:
                on_wait(ticket)
        return ticket.result()

    # ---- what the page shows ------------------------------------------------------------------------------
    def waiting_ahead(self, ticket: Ticket) -> int:
        """Jobs that run before ``ticket`` (running ones included); 0 once it has started."""
        with self._cond:
            if ticket.started_at is not None:
                return 0
            mine = next((k for p, k, t in self._heap if t is ticket), None)
            if mine is None:
                return 0
            ahead = sum(1 for p, k, _ in self._heap if (p, k) < (ticket.priority, mine))
            return ahead + len(self._running)

    def estimate(self, ticket: Ticket) -> float:
        """Rough seconds until ``ticket`` starts: the jobs ahead, at the recent mean run time of their
        kind, shared over the slots."""
        with self._cond:
            if ticket.started_at is not None:
                return 0.0
            mine = next(((p, k) for p, k, t in self._heap if t is ticket), None)
            ahead = [t for p, k, t in self._heap if mine is not None and (p, k) < mine] + self._running
            total = sum(self._mean.get(t.priority, 0.2) for t in ahead)
        return total / self.slots

    def load(self) -> dict:
        """``running`` and ``waiting`` jobs right now, ``waiting_by_kind`` and ``finished`` so far."""
        with self._cond:
            kinds: dict[str, int] = {}
            for p, _, _ in self._heap:
                kinds[PRIORITY_NAMES.get(p, str(p))] = kinds.get(PRIORITY_NAMES.get(p, str(p)), 0) + 1
            return {
                "running": len(self._running),
                "waiting": len(self._heap),
                "waiting_by_kind": kinds,
                "finished": self.finished,
            }

    def describe(self, now: float | None = None) -> str:
        """What the queue is doing, one line a job: the running and waiting ones, then the last finished
        ones, newest first, each with its wait and run time, one line for a run of jobs of one label (a
        decode's steps), for a log where a page waited too long."""
        now = time.perf_counter() if now is None else now

        def name(label: str, priority: int) -> str:
            return f"{label or '(no label)'} [{PRIORITY_NAMES.get(priority, priority)}]"

        with self._cond:
            running = [f"running {name(t.label, t.priority)} for {now - t.started_at:.1f} s" for t in self._running]
            waiting = [f"waiting {name(t.label, t.priority)} for {t.waited:.1f} s" for _, _, t in sorted(self._heap)]
            recent = list(reversed(self.recent))
        done = []  # a run of finished jobs of one label and kind, one line
        for key, group in itertools.groupby(recent, key=lambda job: job[:2]):
            jobs = list(group)
            waited, ran, ends = [j[2] for j in jobs], [j[3] for j in jobs], [j[4] for j in jobs]
            if len(jobs) == 1:
                done.append(f"{now - ends[0]:.1f} s ago: {name(*key)} waited {waited[0]:.2f} s, ran {ran[0]:.2f} s")
            else:
                done.append(
                    f"{now - ends[0]:.1f} to {now - ends[-1]:.1f} s ago: {len(jobs)} jobs of {name(*key)}, each "
                    f"waited at most {max(waited):.2f} s and ran {min(ran):.2f}-{max(ran):.2f} s"
                )
        return "\n".join(running + waiting + done) or "the queue has run nothing yet"

    # ---- the workers ----------------------------------------------------------------------------------------
    def _start_workers(self) -> None:
        while len(self._workers) < self.slots:
            worker = threading.Thread(target=self._serve, name=f"talon-compute-{len(self._workers) + 1}", daemon=True)
            self._workers.append(worker)
            worker.start()

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                _, _, ticket = heapq.heappop(self._heap)
            self._execute(ticket)

    def _execute(self, ticket: Ticket) -> None:
        with self._cond:
            ticket.started_at = time.perf_counter()
            self._running.append(ticket)
        try:
            ticket.value = ticket.context.run(ticket.fn)
        except BaseException as err:  # noqa: BLE001 - handed to the job's owner
            ticket.error = err
        finally:
            ticket.finished_at = time.perf_counter()
            with self._cond:
                self._running.remove(ticket)
                self.finished += 1
                self.recent.append((ticket.label, ticket.priority, ticket.waited, ticket.ran, ticket.finished_at))
                old = self._mean.get(ticket.priority)
                self._mean[ticket.priority] = ticket.ran if old is None else 0.8 * old + 0.2 * ticket.ran
            ticket.done.set()


COMPUTE = ComputeQueue(compute_slots(), inline=spaces is not None)
"""The one queue all users' model work goes through (one per process, like the model registry)."""


def waiting_line(ticket: Ticket, queue: ComputeQueue = COMPUTE) -> str:
    """``Queued behind 2 jobs of other users (about 1 s)...`` for a job that has not started."""
    ahead = queue.waiting_ahead(ticket)
    seconds = queue.estimate(ticket)
    jobs = f"{ahead} job{'s' if ahead != 1 else ''}"
    return f"Queued behind {jobs} (about {max(seconds, 0.1):.0f} s; waited {ticket.waited:.1f} s so far)..."


def waited_note(seconds: float, jobs: int = 0) -> str:
    """`` · waited 1.2 s in the queue (the machine is shared)`` when a job waited noticeably, else ``""``."""
    if seconds < QUEUE_NOTE_SECONDS:
        return ""
    behind = f" behind {jobs} other job{'s' if jobs != 1 else ''}" if jobs else ""
    return f" · waited {seconds:.1f} s in the queue{behind} (the machine is shared)"


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
    """Decorator of a handler that calls a model: its body runs on short-lived threads (its model loads
    happen there; its computing goes through ``COMPUTE``), and on Hugging Face Spaces with a GPU
    attached for ``duration(*args)`` seconds (or Spaces' default)."""

    def wrap(fn: Callable) -> Callable:
        threaded = on_fresh_threads(fn)
        if spaces is None:
            return threaded
        return spaces.GPU(duration=duration)(threaded) if duration is not None else spaces.GPU(threaded)

    return wrap
