"""The two builds of a layer's glue that glue_ab.py and glue_e2e.py compare on one loaded target: the
row_ops extension built from an earlier revision (``/tmp/row_ops_before.cpp``; PyTorch's silu then
multiply) and this one (the MLPs' one-call ``silu(gate) * up``).  ``use("before" | "after")`` switches.
The whole extension is swapped: a "before" built from a revision older than e44cbcf lacks ``row_logsumexp``
and ``row_reaching``, which the LM head calls since run 63, so run the scripts with such a build at 9f78b32."""

import torch
from torch.utils import cpp_extension

from talon.models import row_ops
from talon.models.registry import ModelRegistry

torch.set_num_threads(2)
before = cpp_extension.load(
    "talon_row_ops_before", ["/tmp/row_ops_before.cpp"], extra_cflags=row_ops.FLAGS, extra_ldflags=["-fopenmp"]
)
after = row_ops.extension()
registry = ModelRegistry()
target = registry.get("embedded")
mlps = [m for m in target.model.modules() if "act_times_up" in vars(m)]


def use(which: str) -> None:
    row_ops.extension = (lambda: before) if which == "before" else (lambda: after)
    for m in mlps:
        if which == "before":
            vars(m).pop("act_times_up", None)
        else:
            m.act_times_up = row_ops.silu_times_up
