"""Fast tier: the app's one queue for model work (``ui.compute.ComputeQueue``) and a decode that goes
through it a step at a time (``ui.session.LiveRun``, ``run_stepwise``): priorities, first come first
served, the bound, errors and context handed back, a lab job that waits for one step and not for a whole
decode, and the same trace as a decode run straight through."""

from __future__ import annotations

import contextvars
import itertools
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import gradio as gr
import pytest

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.decode import new_trace, run, run_to_end
from tests.tiny import prompt_ids, tiny_target
from ui.compute import INTERACTIVE, STEP, ComputeQueue, QueueFull, compute_slots, waited_note
from ui.session import LiveRun, run_stepwise


def blocked(queue: ComputeQueue) -> threading.Event:
    """Occupy ``queue``'s only slot until the returned event is set."""
    release, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    queue.submit(hold, priority=STEP)
    assert started.wait(5)
    return release


def test_lab_jobs_run_before_waiting_steps_and_steps_in_arrival_order():
    queue = ComputeQueue(slots=1)
    release = blocked(queue)
    order: list[str] = []
    tickets = [
        queue.submit(order.append, "step 1", priority=STEP),
        queue.submit(order.append, "step 2", priority=STEP),
        queue.submit(order.append, "lab", priority=INTERACTIVE),
        queue.submit(order.append, "step 3", priority=STEP),
    ]
    assert queue.waiting_ahead(tickets[2]) == 1  # only the running job is ahead of the lab change
    assert queue.waiting_ahead(tickets[3]) == 4
    assert queue.load()["waiting"] == 4 and queue.load()["running"] == 1
    release.set()
    for t in tickets:
        t.result()
    assert order == ["lab", "step 1", "step 2", "step 3"]
    assert all(t.waited > 0 and t.ran >= 0 for t in tickets)


def test_the_queue_is_bounded_and_hands_back_errors_and_context():
    queue = ComputeQueue(slots=1, max_waiting=2)
    release = blocked(queue)
    waiting = [queue.submit(time.sleep, 0, priority=STEP) for _ in range(2)]
    with pytest.raises(QueueFull, match="The machine is busy: 2 jobs"):
        queue.submit(time.sleep, 0, priority=STEP)
    release.set()
    for ticket in waiting:
        ticket.result()
    with pytest.raises(ZeroDivisionError):
        queue.run(lambda: 1 / 0)
    var = contextvars.ContextVar("who", default="nobody")
    var.set("the caller")
    assert queue.run(var.get) == "the caller"  # Gradio's progress and request live in the context
    waits = []
    release = blocked(queue)
    threading.Timer(0.6, release.set).start()
    queue.run(lambda: None, on_wait=lambda ticket: waits.append((ticket.started_at, queue.waiting_ahead(ticket))))
    assert waits and waits[0] == (None, 1)  # told while it waited, behind the one running job


def test_describe_names_what_runs_what_waits_and_what_finished_newest_first():
    queue = ComputeQueue(slots=1)
    assert queue.describe() == "the queue has run nothing yet"
    queue.run(time.sleep, 0, label="run 1")
    queue.run(time.sleep, 0, priority=INTERACTIVE, label="lab explore")
    release = blocked(queue)
    waiting = queue.submit(time.sleep, 0, priority=STEP, label="run 2")
    lines = queue.describe().splitlines()
    release.set()
    waiting.result()
    assert lines[0].startswith("running (no label) [decode step] for ")
    assert lines[1].startswith("waiting run 2 [decode step] for ")
    assert "lab explore [lab change] waited" in lines[2] and "run 1 [decode step] waited" in lines[3]
    assert len(lines) == 4
    for _ in range(3):  # a run of one label's jobs (a decode's steps) is one line
        queue.run(time.sleep, 0, label="run 3")
    lines = queue.describe().splitlines()
    assert re.match(r"[\d.]+ to [\d.]+ s ago: 3 jobs of run 3 \[decode step\], each waited at most ", lines[0])
    assert "run 2 [decode step] waited" in lines[1] and len(lines) == 5


def test_one_worker_thread_runs_every_job():
    queue = ComputeQueue(slots=1)
    names = {queue.run(lambda: threading.current_thread().name) for _ in range(5)}
    assert names == {"talon-compute-1"}
    inline = ComputeQueue(inline=True)
    assert inline.run(lambda: threading.current_thread().name) == threading.current_thread().name


def test_slots_and_notes(monkeypatch):
    monkeypatch.delenv("TALON_COMPUTE_SLOTS", raising=False)
    assert compute_slots() == 1
    monkeypatch.setenv("TALON_COMPUTE_SLOTS", "3")
    assert compute_slots() == 3
    monkeypatch.setenv("TALON_COMPUTE_SLOTS", "many")
    assert compute_slots() == 1
    assert waited_note(0.01) == ""
    assert waited_note(1.25, 2) == " · waited 1.2 s in the queue behind 2 other jobs (the machine is shared)"


@pytest.fixture(scope="module")
def target():
    return tiny_target()


CFG = TreeConfig(method="talon", budget=8, topk=3, mu=0.1)


def test_a_decode_through_the_queue_is_the_same_decode(target):
    direct = run_to_end(
        target, drafter_for("talon", "layers:1", target), CFG, DecodeConfig(max_new_tokens=20), prompt_ids=prompt_ids(3)
    )
    queue = ComputeQueue(slots=1)
    dec = DecodeConfig(max_new_tokens=20)
    drafter = drafter_for("talon", "layers:1", target)
    trace = new_trace(target, drafter, CFG, dec, "", prompt_ids(3))
    finished_before = queue.finished
    stepped, waited = run_stepwise(trace, target, drafter, CFG, dec, queue)
    assert stepped.output_ids == direct.output_ids
    assert [s.tree.token for s in stepped.steps] == [s.tree.token for s in direct.steps]
    assert queue.finished - finished_before == len(stepped.steps) + 1  # one job per step, and the end
    assert waited >= 0.0


def test_a_lab_change_waits_for_one_step_not_for_the_whole_decode(target):
    """While a long decode runs, a lab job starts long before the decode ends, and the decode goes on
    after it."""
    queue = ComputeQueue(slots=1)
    dec = DecodeConfig(max_new_tokens=120)
    drafter = drafter_for("talon", "layers:1", target)
    trace = new_trace(target, drafter, CFG, dec, "", prompt_ids(5))
    live = LiveRun(trace, target, drafter, CFG, dec, queue=queue)
    while len(trace.steps) < 3 and not live.done:
        live.wait(1.0)
    steps_then = len(trace.steps)
    lab = queue.submit(lambda: len(trace.steps), priority=INTERACTIVE)
    seen = lab.result()
    live.join(120)
    assert live.done and live.error is None
    assert seen <= steps_then + 1  # it ran after at most the step that was in flight
    assert len(trace.steps) > seen  # and the decode went on after it
    assert trace.stop_reason in ("eos", "max_new_tokens")


def test_a_run_the_full_queue_refuses_still_releases_what_it_holds(target, monkeypatch):
    """A step refused by a full queue ends the run with the queue's message, and the loop's clean-up (its
    ``finally``: runners, caches, threads) still runs, here when the queue refuses that job as well."""

    class RefusingQueue(ComputeQueue):
        def submit(self, fn, *args, **kwargs):
            if self.finished >= 2:  # the prefill and a step ran
                raise QueueFull("The machine is busy.")
            return super().submit(fn, *args, **kwargs)

    dec = DecodeConfig(max_new_tokens=40)
    drafter = drafter_for("talon", "layers:1", target)
    trace = new_trace(target, drafter, CFG, dec, "", prompt_ids(6))
    live = LiveRun(trace, target, drafter, CFG, dec, queue=RefusingQueue(slots=1))
    live.join(60)
    assert live.done and isinstance(live.error, QueueFull)
    assert live._steps.gi_frame is None  # the loop ran its clean-up and ended

    # the same without the page (Compare, the prompts tab): the error reaches the caller, after the clean-up
    import ui.session as session_module

    loops = []
    monkeypatch.setattr(session_module, "run", lambda *a, **k: loops.append(run(*a, **k)) or loops[-1])
    trace = new_trace(target, drafter, CFG, dec, "", prompt_ids(6))
    with pytest.raises(QueueFull):
        run_stepwise(trace, target, drafter, CFG, dec, RefusingQueue(slots=1))
    assert len(loops) == 1 and loops[0].gi_frame is None


def test_two_decodes_take_turns_step_by_step(target):
    queue = ComputeQueue(slots=1)
    order: list[int] = []
    runs = []
    for k in (1, 2):
        dec = DecodeConfig(max_new_tokens=40)
        drafter = drafter_for("talon", "layers:1", target)
        trace = new_trace(target, drafter, CFG, dec, "", prompt_ids(10 + k))
        runs.append((k, trace, LiveRun(trace, target, drafter, CFG, dec, queue=queue)))
    deadline = time.time() + 120
    seen = {1: 0, 2: 0}
    while any(not live.done for _, _, live in runs) and time.time() < deadline:
        for k, trace, _ in runs:
            if len(trace.steps) > seen[k]:
                order.extend([k] * (len(trace.steps) - seen[k]))
                seen[k] = len(trace.steps)
        time.sleep(0.001)
    assert all(live.done and live.error is None for _, _, live in runs)
    both = min(len(t.steps) for _, t, _ in runs)
    first_part = order[: 2 * both - 2]
    # they alternate while both run: short streaks of one run (a thread slow to queue its next step on a
    # busy machine lets the other go twice) and many switches, where one run decoding to its end before
    # the other would show one switch and a streak of 20+
    streaks = [len(list(group)) for _, group in itertools.groupby(first_part)]
    assert len(first_part) >= 10 and max(streaks) <= 4 and len(streaks) >= len(first_part) // 3


def test_importing_ui_asks_openmp_for_passive_waits_unless_told_otherwise():
    """Set before torch loads (libgomp reads it then), and never over a value the user chose."""
    code = "import os, ui; print(os.environ['OMP_WAIT_POLICY'], 'torch' in __import__('sys').modules)"
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["PASSIVE", "False"]
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ACTIVE", "False"]


def test_stop_while_a_run_is_prepared_ends_it_before_its_first_step(target, monkeypatch):
    """Stop pressed while a run's cost curve is measured stops the measurement between its rounds (nothing
    cached) and the run before its first step; pressed before its ``LiveRun`` took over the signal, the run
    still stops before its first step."""
    from talon.engine.cost_measure import curve_key
    from talon.runtime.cost_curve import cached_curve
    from ui import settings as settings_module
    from ui.session import RunStopped, Session
    from ui.settings import RunSettings, prepare

    drafter = drafter_for("talon", "layers:1", target)
    monkeypatch.setattr(settings_module, "load_target", lambda spec, progress=None: target)
    monkeypatch.setattr(settings_module, "make_drafter", lambda method, spec, loaded: drafter)
    monkeypatch.setattr(settings_module, "encoded_prompt", lambda loaded, prompt: prompt_ids(3))
    session = Session()
    rounds: list[str] = []

    def progress(share, desc=""):
        rounds.append(desc)
        if len(rounds) == 3:  # Stop pressed during the measurement's first round (after its preparation)
            assert session.stop() == "preparing"

    panel = RunSettings(prompt="x", method="talon", budget=0, target_spec="tiny", drafter_spec="layers:1")
    with pytest.raises(RunStopped), session.preparing() as stop:
        prepare(panel, progress, stop=stop.is_set)
    assert len(rounds) == 3 and "round 2" in rounds[-1]  # stopped at the next round's start
    assert cached_curve(curve_key(target, drafter)) is None
    assert session.stop() is None  # nothing left to stop

    with pytest.raises(gr.Error), session.preparing():  # a refused run: nothing is being prepared after it
        raise gr.Error("The prompt is empty")
    assert session.starting is None and session.stop() is None

    with session.preparing() as stop:
        assert session.stop() == "preparing"
    dec = DecodeConfig(max_new_tokens=20)
    trace = new_trace(target, drafter, CFG, dec, "", prompt_ids(3))
    session.live, session.starting = LiveRun(trace, target, drafter, CFG, dec, queue=ComputeQueue(), stop=stop), None
    session.live.join(30)
    assert session.live.done and trace.steps == [] and trace.stop_reason == "stopped"
    assert session.stop() is None


def test_pause_stops_play_even_with_a_tick_on_its_way(target):
    """A timer tick that left before Pause was pressed steps no further and turns the timer off."""
    from ui.explore import PLAY_LABEL, PLAYING_LABEL, advance, pause, play
    from ui.session import Session

    session = Session(
        trace=run_to_end(
            target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=6), prompt_ids=prompt_ids(3)
        )
    )
    number, *_, label, timer = play(session, 1, "verdict")
    assert number == 1 and timer.active and session.playing and label["value"] == PLAYING_LABEL
    number, *_, label, timer = advance(session, number, "verdict")
    assert number == 2 and timer.active and label["value"] == PLAYING_LABEL
    label, timer = pause(session)
    assert not timer.active and label["value"] == PLAY_LABEL  # Play no longer says it is playing
    out = advance(session, number, "verdict")  # the tick already on its way
    assert not out[-1].active and all(isinstance(x, dict) for x in out[:-1])  # nothing moved
    assert out[-2]["value"] == PLAY_LABEL
    number, *_, timer = play(session, 6, "verdict")  # Play at the last step starts again from step 1
    assert number == 1 and timer.active
    number, *_, label, timer = advance(session, 5, "verdict")  # the last step: Play stops and says so
    assert number == 6 and not timer.active and label["value"] == PLAY_LABEL


def test_play_speed_sets_the_timer_and_keeps_it_while_playing(target):
    """Play's speed (seconds a step) is the timer's interval from Play on, every tick keeps it, a change
    applies at once without starting a paused Play, and a value the dropdown cannot send falls back to 1 s."""
    from ui.explore import advance, pause, play, play_speed
    from ui.session import Session

    session = Session(
        trace=run_to_end(
            target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=6), prompt_ids=prompt_ids(3)
        )
    )
    *_, timer = play(session, 1, "verdict", 0.25)
    assert timer.value == 0.25 and timer.active
    *_, timer = advance(session, 1, "verdict", 0.25)
    assert timer.value == 0.25 and timer.active
    timer = play_speed(session, 2.0)
    assert timer.value == 2.0 and timer.active
    pause(session)
    timer = play_speed(session, 0.5)
    assert timer.value == 0.5 and not timer.active
    assert play_speed(session, None).value == 1.0 and play_speed(session, "-3").value == 1.0


def test_play_waits_for_a_streaming_run_to_end(target, monkeypatch):
    """Play pressed while the run streamed stepped through steps whose texts were not filled yet (30
    IndexErrors in the tree's labels) and fought the stream over the step on show: it says to wait, and a
    tick already on its way stops."""
    from types import SimpleNamespace

    import ui.explore as explore
    from ui.session import Session

    trace = run_to_end(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=6), prompt_ids=prompt_ids(3))
    session = Session(trace=trace, live=SimpleNamespace(done=False, trace=trace))
    told = []
    monkeypatch.setattr(explore.gr, "Info", told.append)
    *_, timer = explore.play(session, 1, "verdict")
    assert told == [explore.PLAY_WHILE_RUNNING] and not timer.active and not session.playing
    session.playing = True
    *_, timer = explore.advance(session, 1, "verdict")
    assert not timer.active and not session.playing


def test_play_before_any_run_says_what_to_do(monkeypatch):
    import ui.explore as explore
    from ui.session import Session

    told = []
    monkeypatch.setattr(explore.gr, "Info", told.append)
    *_, caption, _, timer = explore.play(Session(), 1, "verdict")
    assert told == [explore.NOTHING_TO_PLAY] and caption == explore.NO_RUN and not timer.active


@pytest.fixture
def tiny_app(target, monkeypatch):
    """The Explore handlers on the tiny target: every run loads it, drafts with its first layer."""
    from ui import settings as settings_module

    monkeypatch.setattr(settings_module, "load_target", lambda spec, progress=None: target)
    monkeypatch.setattr(
        settings_module,
        "make_drafter",
        lambda method, spec, loaded: drafter_for(method, spec, loaded) if method != "ar" else None,
    )
    monkeypatch.setattr(settings_module, "encoded_prompt", lambda loaded, prompt: prompt_ids(3))
    monkeypatch.setattr(gr, "Info", lambda *a, **k: None)
    return settings_module


def _panel(settings_module, **changes) -> list:
    from ui.settings import RunSettings

    s = RunSettings(prompt="x", target_spec="tiny", drafter_spec="layers:1", method="talon", budget=8, topk=3)
    return [getattr(s.but(**changes), name) for name in settings_module.SETTING_NAMES]


def _saved(target, tmp_path, tokens: int) -> Path:
    from talon.metrics import trace_json

    trace = run_to_end(
        target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=tokens), prompt_ids=prompt_ids(7)
    )
    path = tmp_path / "trace.json"
    path.write_text(trace_json(trace))
    return path


def test_a_trace_loaded_while_a_run_streams_stays_on_show(target, tiny_app, tmp_path):
    """The run's handler stops writing to the page once a loaded trace replaced its run (it drew the
    stopped run's summary, slider and charts over the loaded trace, which everything else then used)."""
    import ui.explore as explore
    from ui.session import Session

    session = Session()
    run = explore.run_explore(session, "verdict", None, *_panel(tiny_app, max_new=300))
    for _ in range(3):
        next(run)
    explore.load_trace(session, str(_saved(target, tmp_path, 4)), "verdict")
    assert list(run) == [] and len(session.trace.steps) == 4  # nothing more from the replaced run


def test_a_loaded_traces_text_stays_when_its_steps_are_shown(target, tiny_app, tmp_path):
    """The text view keeps the text of the run id it was painted under: showing a step of a loaded trace
    under another id (0) made the page drop the whole text."""
    import ui.explore as explore
    from ui.session import Session

    session = Session()
    out = explore.load_trace(session, str(_saved(target, tmp_path, 8)), "verdict")
    painted = out[len(tiny_app.SETTING_NAMES) + 2]["run"]
    _fig, text, _table, _cap = explore.show_step(session, 3, "verdict")
    assert text["run"] == painted == session.text_run and text["highlight"] == 3


def test_run_pressed_again_while_the_first_is_prepared_leaves_no_stopped_note(target, tiny_app):
    """The first run, stopped by the second's start, must not write "stopped before its first step" under
    Stop after the second run cleared it."""
    import ui.explore as explore
    from ui.session import Session

    loads = []

    def slow_load(spec, progress=None):
        loads.append(spec)
        if len(loads) == 1:
            time.sleep(1.0)  # the first run's model is still loading when Run is pressed again
        return target

    tiny_app.load_target = slow_load
    session = Session()
    first = threading.Thread(target=lambda: list(explore.run_explore(session, "verdict", None, *_panel(tiny_app))))
    first.start()
    time.sleep(0.3)
    list(explore.run_explore(session, "verdict", None, *_panel(tiny_app, max_new=12)))
    first.join(30)
    assert session.trace.stop_reason != "stopped" and explore.note_after_run(session) == ""


def test_closing_a_tab_stops_its_run_at_once_and_holds_no_session():
    """Gradio calls the state's delete callback an hour after a tab closed; the unload event stops the
    tab's run now. Tabs are told apart by their session hash, and a dropped session is not kept alive."""
    import gc
    from types import SimpleNamespace

    from ui.session import OPEN_TABS, Session, tab_closed, tab_opened

    mine, other = Session(), Session()
    mine.starting, other.starting = threading.Event(), threading.Event()  # each preparing a run
    tab_opened(mine, SimpleNamespace(session_hash="tab-1"))
    tab_opened(other, SimpleNamespace(session_hash="tab-2"))
    tab_closed(SimpleNamespace(session_hash="tab-1"))
    assert mine.starting.is_set() and not other.starting.is_set()
    tab_closed(SimpleNamespace(session_hash="tab-1"))  # twice, or an unknown tab: nothing happens
    del other
    gc.collect()
    assert "tab-2" not in OPEN_TABS._sessions


def test_a_comparison_of_a_closed_tab_ends_quietly_after_the_run_in_flight(target, tiny_app):
    """Closing the tab lets its session go (its comparison state emptied): the comparison stops after the run
    it is on instead of failing on the emptied state at its next repetition."""
    from ui.compare import run_compare
    from ui.session import Session

    session = Session()
    quiet = lambda *a, **k: None  # noqa: E731
    runs = run_compare(session, "talon", "eagle2", None, None, "verdict", 3, quiet, *_panel(tiny_app, max_new=6))
    next(runs)  # the first repetition is on show
    session.close()
    assert list(runs) == [(gr.update(),) * 10] and session.compare == {}


def test_stop_ends_a_comparison_after_the_run_in_flight_keeping_whole_repetitions(target, tiny_app):
    """Compare methods' Stop: the run on its way ends before its next step, the repetition it belonged to
    is dropped, and the table and verdict stay over the repetitions that ran to their end."""
    from ui import compare
    from ui.session import Session

    told = []
    tiny_app.gr.Info = told.append  # the module's gr is gradio itself (patched back by the fixture)
    session = Session()
    quiet = lambda *a, **k: None  # noqa: E731
    runs = compare.run_compare(
        session, "talon", "eagle2", None, None, "verdict", 3, quiet, *_panel(tiny_app, max_new=6)
    )
    next(runs)  # the first repetition is on show
    compare.stop_compare(session)
    [(*_, verdict, _)] = list(runs)  # the first repetition's view, its verdict under the note
    assert verdict.startswith(f"**{compare.stopped_note(1)}**")
    assert {k: len(v) for k, v in session.compare["repeats"].items()} == {"ar": 1, "A": 1, "B": 1}
    assert told == [compare.stopped_note(1)] and "1 whole repetition" in told[0]
    shown = compare.compare_view(session, 1, "verdict")
    assert len(shown) == compare.VIEW_SIZE

    # stopped before its first repetition ended: the comparison on show stays (yielding nothing emptied it)
    def stop_at_once(*a, **k):
        compare.stop_compare(session)

    runs = compare.run_compare(
        session, "talon", "eagle2", None, None, "verdict", 3, stop_at_once, *_panel(tiny_app, max_new=6)
    )
    assert list(runs) == [(gr.update(),) * compare.VIEW_SIZE]
    assert told[-1] == compare.stopped_note(0) and session.compare["repeats"]["A"]

    # stopped during method B of the second repetition: its autoregressive and A runs are not counted,
    # not even while that repetition ran (the page reads the session's comparison at every slider move)
    seen = []

    def stop_at_second_b(done, desc=""):
        seen.append({k: len(v) for k, v in session.compare.get("repeats", {}).items()})
        if desc.startswith("Repetition 2 of 3: method B"):
            compare.stop_compare(session)

    runs = compare.run_compare(
        session, "talon", "eagle2", None, None, "verdict", 3, stop_at_second_b, *_panel(tiny_app, max_new=6)
    )
    *_, (*_, verdict, _) = list(runs)
    assert verdict.startswith(f"**{compare.stopped_note(1)}**")
    assert {k: len(v) for k, v in session.compare["repeats"].items()} == {"ar": 1, "A": 1, "B": 1}
    assert {"ar": 1, "A": 1, "B": 1} in seen and all(len(set(counts.values())) == 1 for counts in seen)


def test_stop_ends_a_pair_of_prompts_with_nothing_half_shown(target, tiny_app):
    """Compare prompts' Stop (pressed while prompt B is prepared): B ends before its first step, and the tab
    says so instead of showing one prompt of a pair."""
    from ui import prompts
    from ui.session import Session

    session = Session()

    def progress(done, desc=""):
        if desc.startswith("Prompt B"):
            prompts.stop_prompts(session)

    view = prompts.run_prompts(session, "a", "b", False, "verdict", progress, *_panel(tiny_app, max_new=6))
    assert session.prompts == {} and view[3] == prompts.STOPPED
    session.work_stops.clear()  # a Stop with nothing running does nothing
    prompts.stop_prompts(session)


def test_stop_ends_sync_vs_async_keeping_the_runs_that_ended(target, tiny_app):
    """Sync vs async's Stop: the run on its way ends before its next step; the view on show is the last
    one drawn (over the runs that ended), and a note says what it covers. Closing the tab stops it too."""
    from ui import async_tab
    from ui.session import Session

    session = Session()
    quiet = lambda *a, **k: None  # noqa: E731
    runs = async_tab.run_sync_async(session, 3, quiet, *_panel(tiny_app, max_new=6))
    next(runs)  # the first sync run is on show
    async_tab.stop_async(session)
    [(plot, table, note)] = list(runs)
    assert plot == table == gr.update()  # what is on show stays
    assert note == async_tab.stopped_note(1, 0) and "sync run alone" in note
    assert "2 sync runs and 1 async run" in async_tab.stopped_note(2, 1)

    runs = async_tab.run_sync_async(session, 3, quiet, *_panel(tiny_app, max_new=6))
    next(runs), next(runs)  # a whole repetition
    session.close()
    [(*_, note)] = list(runs)
    assert note.startswith(async_tab.stopped_note(1, 1)) and "async" in note.split("\n\n")[1]


def test_sync_vs_async_says_when_its_runs_waited_behind_other_work(target, tiny_app, monkeypatch):
    """Sync vs async while another tab's job shared the queue: the timeline (wall clock since each run's
    start) showed gaps the table's times leave out; the note says how long the runs waited, and nothing
    when they did not."""
    from ui import async_tab
    from ui.session import Session
    from ui.settings import Prepared

    assert async_tab.shared_note([0.0, 0.1]) == ""
    note = async_tab.shared_note([2.0, 0.0, 0.5])
    assert note.startswith("**Shared machine:** 2 runs waited 2.5 s") and "timeline" in note
    real = Prepared.run_to_end

    def behind_other_work(self, stop=None):
        trace = real(self, stop)
        self.waited = 1.5
        return trace

    monkeypatch.setattr(Prepared, "run_to_end", behind_other_work)
    quiet = lambda *a, **k: None  # noqa: E731
    *_, (plot, table, verdict) = list(async_tab.run_sync_async(Session(), 1, quiet, *_panel(tiny_app, max_new=6)))
    assert "**Shared machine:** 2 runs waited 3.0 s" in verdict


def test_a_stop_pressed_before_a_batch_starts_stops_it_and_a_new_run_stops_the_last():
    """A tab's Run press makes its batch's stop signal: Stop while the models load (or the batch waits in
    the queue) stops the batch before its first step; a second press stops the batch on its way; a batch
    started without a press (an API call) gets a fresh signal; Stop with nothing running does nothing."""
    from ui.session import Session

    session = Session()
    assert not session.stop_work("compare")  # nothing running
    api = session.claim_work("compare")
    assert not api.is_set()  # an API call: a fresh signal
    session.finish_work("compare", api)
    assert not session.stop_work("compare")  # ended: nothing to stop
    session.start_work("compare")
    assert session.stop_work("compare")  # pressed while the models load
    assert session.claim_work("compare").is_set()
    session.start_work("async")
    first = session.claim_work("async")
    session.start_work("async")  # Run pressed again
    assert first.is_set() and session.replaced("async", first)
    second = session.claim_work("async")
    assert not second.is_set() and not session.replaced("async", second)
    assert not session.work_unclaimed


def test_a_replaced_batch_finds_itself_replaced_the_moment_its_stop_is_set():
    """The old batch's handler (another thread) may check its signal the instant it is set: a second Run
    press set the old signal before the new one was in place, and a batch that looked then read as
    stopped by Stop, and wrote "Stopped: ..." over the page the new batch was about to fill."""
    import threading

    from ui.session import Session

    seen = []

    class Watched(threading.Event):
        def set(self):
            seen.append(session.replaced("async", self))  # what the old handler would find right now
            super().set()

    session = Session()
    session.start_work("async")
    session.work_stops["async"] = old = Watched()
    assert session.claim_work("async") is old
    session.start_work("async")  # Run pressed again
    assert seen == [True] and old.is_set()


def test_explores_stop_counts_from_the_run_press(target, tiny_app):
    """Stop pressed right after Run (before its handler began: the models loading, the run waiting its
    turn) said "Nothing is running" and the run then decoded to its end; the press makes the run's stop
    signal now, the handler takes it over, and a press whose models failed to load leaves nothing to stop."""
    import ui.explore as explore
    from ui.session import Session

    told = []
    tiny_app.gr.Info = told.append
    session = Session()
    session.run_pressed()
    assert explore.stop_run(session).startswith("Stopping: the run ends before its first step")
    out = list(explore.run_explore(session, "verdict", None, *_panel(tiny_app, max_new=6)))
    assert out == [(gr.skip(),) * len(out[0])] and session.trace is None  # stopped before its first step
    assert told and session.stop_note == explore.STOPPED_NOTE
    session.run_pressed()
    session.press_failed()
    assert explore.stop_run(session) == "Nothing is running."
    session.run_pressed()  # not stopped: the handler takes the press's signal and runs
    run = explore.run_explore(session, "verdict", None, *_panel(tiny_app, max_new=6))
    for _ in run:
        pass
    assert session.trace is not None and session.trace.stop_reason == "max_new_tokens"


def test_a_press_queued_behind_the_run_it_stops_leaves_no_stopped_note_meanwhile(target, tiny_app, monkeypatch):
    """Run pressed twice quickly in the page: the second press stops the first while it is prepared (its
    cost curve measured) and its handler starts only when the first's has ended, so the first, seeing no
    newer run started, said "Stopped before the run's first step" (a toast, and the note under Stop while
    the second decoded); a press that is queued is a newer run too."""
    import ui.explore as explore
    from ui.session import RunStopped, Session

    told = []
    tiny_app.gr.Info = told.append
    session = Session()
    session.run_pressed()

    def pressed_again(settings, progress, stop):
        session.run_pressed()  # the second press, while the first is prepared
        assert stop()
        raise RunStopped()

    monkeypatch.setattr(explore, "prepare", pressed_again)
    out = list(explore.run_explore(session, "verdict", None, *_panel(tiny_app, max_new=6)))
    assert out == [(gr.skip(),) * len(out[0])]
    assert not told and explore.note_after_run(session) == ""
    assert session.starting is not None and not session.starting.is_set()  # the second run's signal, unused


def test_a_batch_stopped_by_a_new_run_leaves_the_page_to_it_quietly(target, tiny_app):
    """Run pressed again on a batch tab stops the batch on its way; that batch then changes nothing and
    says nothing (it said "Stopped" as if Stop had been pressed, and Compare prompts' export then failed
    with "Run both prompts first"), and Stop with nothing running says so."""
    from ui import async_tab, compare, prompts
    from ui.session import NOTHING_RUNS, Session

    told = []
    tiny_app.gr.Info = told.append
    session = Session()
    quiet = lambda *a, **k: None  # noqa: E731
    runs = async_tab.run_sync_async(session, 3, quiet, *_panel(tiny_app, max_new=6))
    next(runs)
    session.start_work("async")  # Run pressed again
    assert list(runs) == [(gr.skip(),) * 3]
    runs = compare.run_compare(
        session, "talon", "eagle2", None, None, "verdict", 2, quiet, *_panel(tiny_app, max_new=6)
    )
    next(runs)
    session.start_work("compare")
    assert list(runs) == [(gr.skip(),) * compare.VIEW_SIZE]

    def press_again(done, desc=""):
        if desc.startswith("Prompt B"):
            session.start_work("prompts")

    view = prompts.run_prompts(session, "a", "b", False, "verdict", press_again, *_panel(tiny_app, max_new=6))
    assert all(v == gr.skip() for v in view) and prompts.export_prompts(session) is None
    assert told == []  # no note of a Stop nobody pressed
    for stop in (compare.stop_compare, prompts.stop_prompts, async_tab.stop_async):
        session.work_stops.clear()
        stop(session)
    assert told == [NOTHING_RUNS] * 3


def test_a_comparison_stopped_mid_way_says_so_under_its_verdict(target, tiny_app):
    """Stop in a comparison's second repetition: the table stays over the first, and the verdict says it was
    stopped and how many repetitions it covers (the toast went, "One repetition: raise the repetitions"
    stayed)."""
    from ui import compare
    from ui.session import Session

    session = Session()
    calls = []

    def stop_in_second(done, desc=""):
        calls.append(desc)
        if desc.startswith("Repetition 2"):
            compare.stop_compare(session)

    runs = list(
        compare.run_compare(
            session, "talon", "eagle2", None, None, "verdict", 3, stop_in_second, *_panel(tiny_app, max_new=6)
        )
    )
    verdict = runs[-1][8]
    assert len(runs) == 2 and verdict.startswith(f"**{compare.stopped_note(1)}** (of 3 asked for)")


def test_a_session_can_be_deep_copied_as_gradio_does_with_a_states_first_value():
    """Gradio deep-copies a state's first value: a lock or an event in a fresh session broke every event of
    the app ("cannot pickle '_thread.lock' object")."""
    import copy

    from ui.session import Session

    copy.deepcopy(Session())
