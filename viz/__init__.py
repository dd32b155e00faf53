"""Pure functions from TALON traces and benchmark results to Plotly figures and HTML.

* ``viz.layout``: tidy layered layout of a draft tree (x = depth, leaves spread on y).
* ``viz.tree_figure``: one step's draft tree as a figure, its node table, standalone HTML.
* ``viz.style``: the shared light template.
* ``viz.charts``: whole-run charts (committed tokens per step, acceptance by depth, tree shape,
  draft vs verify time, timeline) and the step-tinted output text.
* ``viz.summary``: the metrics panel's text and tables, the glossary.
* ``viz.bench_charts``: tables and charts of a benchmark results directory; ``viz.bench_plots`` writes
  them to files (``python -m viz.bench_plots DIR``).

Nothing here imports torch, gradio or the model-running parts of ``talon``: only its data and
definitions (``talon.config``, ``tree``, ``trace``, ``metrics``) and its torch-free benchmark
descriptions (``talon.bench.prompts`` / ``suites`` / ``results``); ``tests/test_imports.py`` checks it.
Import the submodules directly (this file stays light).
"""
