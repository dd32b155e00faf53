"""Pure functions from TALON traces to Plotly figures and HTML.

* ``viz.layout``: tidy layered layout of a draft tree (x = depth, leaves spread on y).
* ``viz.tree_figure``: one step's draft tree as a figure, its node table, standalone HTML.
* ``viz.style``: the shared light template.
* ``viz.charts``: whole-run charts (committed tokens per step, acceptance by depth, tree shape,
  draft vs verify time) and the step-tinted output text.

Nothing here imports torch, gradio or the model-running parts of ``talon``; only ``talon.tree``,
``talon.trace`` and ``talon.metrics``.  Import the submodules directly (this file stays light).
"""

__all__ = ["layout", "style", "tree_figure", "charts"]
