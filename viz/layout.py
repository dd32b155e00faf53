"""Tidy layered layout of a draft tree: x = depth (root 0, left to right), y = leaves spread out.

A Reingold-Tilford style layout on a parent array:

* every node sits at ``x = depth``;
* subtrees are laid out bottom-up and stacked top to bottom in child (index) order, each pushed
  down just far enough that, at every depth they share, its nodes are at least ``sep`` below the
  nodes already placed (so nodes at the same depth never come closer than ``sep``);
* each parent is centred on its children (midway between its first and its last child), so a
  chain of single children is a straight horizontal line;
* the result is shifted so that the smallest ``y`` is 0.

It is deterministic (a pure function of the parent array and the child order) and runs in
O(nodes x depth).  ``y`` grows downwards in the intended drawing (the figure reverses its y axis),
so the first child is drawn on top.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from talon.tree import DraftTree, children_lists


@dataclass(frozen=True)
class TreeLayout:
    """Coordinates per node index.

    Attributes:
        x: per node, its depth (root 0) as a float.
        y: per node, its position across the layers; min 0, nodes at the same depth at least
            ``sep`` apart.
    """

    x: list[float]
    y: list[float]

    def __len__(self) -> int:
        """Number of laid-out nodes."""
        return len(self.x)

    @property
    def depth(self) -> int:
        """Deepest layer drawn (0 for a root-only tree)."""
        return int(max(self.x)) if self.x else 0

    @property
    def width(self) -> float:
        """Extent of the layout across the layers, in units of ``sep``, counting each end node as
        one unit: 1 for a chain, the number of leaves for a tree whose leaves are all packed."""
        return (max(self.y) - min(self.y) + 1.0) if self.y else 0.0


def tidy_layout(parent: Sequence[int], sep: float = 1.0, room_below: Mapping[int, float] | None = None) -> TreeLayout:
    """Lay out the tree given by ``parent`` (``parent[0] == -1``; ``parent[i] < i`` otherwise).

    Args:
        parent: per node, the index of its parent; node 0 is the root.
        sep: minimum distance between two nodes at the same depth (in y units).
        room_below: per node, extra distance (y units) kept free below it at its own depth, for a mark
            drawn larger than the others.

    Returns:
        a :class:`TreeLayout` with one ``(x, y)`` per node index.
    """
    n = len(parent)
    if n == 0:
        return TreeLayout([], [])
    kids = children_lists(parent)
    room = room_below or {}
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parent[i]] + 1

    # Bottom-up: for each subtree, the contour per relative depth k (k = 0 is the subtree root):
    # top[k] / bot[k] = smallest / largest y relative to the subtree root.  ``rel[c]`` is a
    # child's y relative to its parent.
    top: list[list[float] | None] = [None] * n
    bot: list[list[float] | None] = [None] * n
    rel = [0.0] * n
    for v in range(n - 1, -1, -1):  # children have larger indices, so they are done first
        children = kids[v]
        if not children:
            top[v], bot[v] = [0.0], [room.get(v, 0.0)]
            continue
        acc_top: list[float] = []
        acc_bot: list[float] = []
        offsets: list[float] = []
        for c in children:
            c_top, c_bot = top[c], bot[c]
            assert c_top is not None and c_bot is not None
            shift = 0.0
            if offsets:
                shared = min(len(acc_bot), len(c_top))
                shift = max(acc_bot[k] - c_top[k] + sep for k in range(shared))
            offsets.append(shift)
            for k in range(len(c_top)):
                if k < len(acc_top):
                    acc_top[k] = min(acc_top[k], c_top[k] + shift)
                    acc_bot[k] = max(acc_bot[k], c_bot[k] + shift)
                else:
                    acc_top.append(c_top[k] + shift)
                    acc_bot.append(c_bot[k] + shift)
            top[c] = bot[c] = None  # free the child's contour
        centre = (offsets[0] + offsets[-1]) / 2.0
        for c, off in zip(children, offsets):
            rel[c] = off - centre
        top[v] = [0.0] + [t - centre for t in acc_top]
        bot[v] = [room.get(v, 0.0)] + [b - centre for b in acc_bot]

    y = [0.0] * n
    for i in range(1, n):  # parents first
        y[i] = y[parent[i]] + rel[i]
    low = min(y)
    return TreeLayout([float(d) for d in depth], [v - low for v in y])


BONUS_ROOM = 0.5
"""Extra room (in rows) kept below the bonus token: its star is drawn larger than a node, and an inner node
right below it had its label (above the node) under the star."""


def tree_layout(tree: DraftTree, bonus_parent: int | None = None, sep: float = 1.0) -> TreeLayout:
    """Layout of a :class:`~talon.tree.DraftTree`, optionally with one extra node.

    Args:
        tree: the draft tree (node 0 = root).
        bonus_parent: when given, an extra node (the bonus token) is laid out as the last child of
            this node, with ``BONUS_ROOM`` kept free below it, and its coordinates are appended at index
            ``len(tree)``; pass it in every colour mode so that nodes do not move when only the
            colouring changes.
        sep: minimum distance between two nodes at the same depth.

    Returns:
        ``len(tree)`` coordinates (``+ 1`` with ``bonus_parent``), in node-index order.
    """
    parent = list(tree.parent)
    if bonus_parent is not None:
        if not 0 <= bonus_parent < len(parent):
            raise ValueError(f"bonus parent {bonus_parent} is not a node of this tree")
        parent.append(bonus_parent)
        return tidy_layout(parent, sep=sep, room_below={len(tree): BONUS_ROOM * sep})
    return tidy_layout(parent, sep=sep)
