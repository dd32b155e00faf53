"""The generated text on the page, appended to instead of re-rendered.

The component is a ``gr.HTML`` whose value is a small update, not the text: ``{"run": id, "pieces":
[[step, html], ...], "highlight": step}``.  Its script keeps the pieces it was sent and appends the new
ones, so the page's update for one decoding step costs the same at step 5 as at step 500; a new run id
starts over.  The pieces are ``viz.charts.step_span``: each step's text tinted by step.
"""

from __future__ import annotations

from collections.abc import Sequence

from talon.trace import StepRecord
from viz.charts import TEXT_STYLE, step_span

# dir=auto: a right-to-left answer (Arabic, Hebrew) reads right to left, its full stop at its end
TEMPLATE = f'<div class="talon-tinted" dir="auto" style="{TEXT_STYLE}"></div>'
SCRIPT = """
const box = element.querySelector('.talon-tinted');
let run = null;
let pieces = [];
function paint() {
  const v = props.value || {};
  if (v.run !== run) { run = v.run; pieces = []; }
  for (const [step, html] of (v.pieces || [])) { pieces[step - 1] = html; }
  box.innerHTML = pieces.join('');
  for (const el of box.querySelectorAll('.talon-step')) {
    el.style.outline = (String(v.highlight) === el.dataset.step) ? '2px solid #D62728' : '';
  }
  element.dataset.steps = String(pieces.filter(Boolean).length);
}
paint();
watch('value', paint);
"""
EMPTY = {"run": 0, "pieces": [], "highlight": None}


def pieces(run: int, steps: Sequence[StepRecord], highlight: int | None = None) -> dict:
    """An update appending ``steps`` (step numbers from 1) to the text of run ``run``."""
    return {"run": run, "pieces": [[s.index + 1, step_span(s)] for s in steps], "highlight": highlight}


def highlight(run: int, step_number: int | None) -> dict:
    """An update that only moves the outline to step ``step_number``."""
    return {"run": run, "pieces": [], "highlight": step_number}
