"""How the app shows its tables: each number column to a fixed number of decimals, the cells' numbers kept."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from pandas.io.formats.style import Styler

from talon.trace import StepRecord
from viz.tree_figure import node_table

MISSING = "–"
"""What a cell without a value shows (a phase a synchronous run does not have, a method that did not run)."""


def with_decimals(table: pd.DataFrame, decimals: Mapping[str, int]) -> Styler:
    """``table`` for a ``gr.Dataframe``, each column named in ``decimals`` shown to that many decimals (1.30
    beside 1.29, not 1.3; 1.00 for plain decoding, not 1), every other number column in its shortest form
    (a count stays 3, not 3.000000, where a missing cell made its column float) and missing values as
    ``MISSING``.  Only the shown text changes: the cells keep their numbers, which a client reads and the
    table sorts by."""
    shown = {
        column: f"{{:.{decimals[column]}f}}" if column in decimals else "{:g}"
        for column in table.columns
        if column in decimals or pd.api.types.is_numeric_dtype(table[column])
    }
    return table.style.format(shown, na_rep=MISSING)


def node_rows(step: StepRecord) -> Styler:
    """``step``'s node table (``viz.tree_figure.node_table``) as the page shows it: every number in its
    shortest form, so a probability below 1e-4 reads 6.878e-06 (JavaScript wrote 0.000006878, which broke
    across two lines in its column at 1024 px).  The cells keep their numbers."""
    return with_decimals(node_table(step), {})
