"""Progress lines in Gradio's bar: a line that counts rounds moves the bar, other lines keep it."""

from talon.engine.cost_measure import measure_curve
from tests.tiny import tiny_target
from ui.progress_bar import done_share, reporter


class FakeBar:
    """Records what a handler's ``gr.Progress`` was told."""

    def __init__(self):
        self.calls: list[tuple[float, str]] = []

    def __call__(self, share, desc=None):
        self.calls.append((share, desc))


def test_a_round_moves_the_bar_to_the_rounds_done_before_it():
    assert done_share("Measuring this machine's cost curve: round 1 of 9 (the first warms up)...") == 0.0
    assert done_share("round 4 of 9") == 3 / 9
    assert done_share("round 9 of 9") == 8 / 9
    assert done_share("Loading SmolLM2 on cpu (float32)...") is None
    assert done_share("round 2 of 0") is None


def test_lines_that_count_nothing_keep_the_bar_where_it_was():
    bar = FakeBar()
    report = reporter(bar)
    for line in ["Loading...", "round 3 of 4", "Saving the curve..."]:
        report(line)
    assert bar.calls == [(0.0, "Loading..."), (0.5, "round 3 of 4"), (0.5, "Saving the curve...")]
    assert reporter(None) is None


def test_the_cost_curve_measurement_counts_its_rounds():
    """The lines ``measure_curve`` reports are the ones the bar understands, from 0 to the last round."""
    lines: list[str] = []
    measure_curve(tiny_target(), None, reps=2, progress=lines.append, sizes=(1, 2), widths=(1,))
    shares = [done_share(line) for line in lines]
    assert shares == [None, 0.0, 1 / 3, 2 / 3]  # the preparation first, a line that counts no round
