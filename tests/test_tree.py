"""DraftTree: derived arrays against an independent ancestor-walk reference, validation, subset, dicts."""

from __future__ import annotations

import json
import random

import pytest

from talon.tree import SOURCE_MODEL, SOURCE_RETRIEVAL, DraftTree


def random_tree(rng: random.Random, n: int, vocab: int = 50) -> DraftTree:
    """A random tree of ``n`` nodes (root included), grown through ``DraftTree.add``."""
    tree = DraftTree.with_root(rng.randrange(vocab))
    for i in range(1, n):
        # Bias towards recent parents so deep trees occur as well as bushy ones.
        parent = rng.randrange(i) if rng.random() < 0.5 else max(0, i - 1 - rng.randrange(3))
        tree.add(
            parent, rng.randrange(vocab), -rng.random() * 5, SOURCE_RETRIEVAL if rng.random() < 0.2 else SOURCE_MODEL
        )
    return tree


def ancestors(parent: list[int], i: int) -> list[int]:
    """Reference: node i and its ancestors, from i up to the root, by walking ``parent``."""
    out = [i]
    while parent[out[-1]] != -1:
        out.append(parent[out[-1]])
    return out


RANDOM_TREES = [
    random_tree(random.Random(seed), n) for seed, n in [(s, n) for s in range(6) for n in (1, 2, 3, 7, 20, 61)]
]


@pytest.mark.parametrize("tree", RANDOM_TREES)
def test_path_to_walks_up_the_parents(tree: DraftTree) -> None:
    for node in range(len(tree)):
        assert tree.path_to(node) == ancestors(tree.parent, node)[::-1]


def test_root_only_tree() -> None:
    tree = DraftTree.with_root(7)
    tree.validate()
    assert len(tree) == 1 and tree.num_drafts == 0 and tree.max_depth == 0
    assert tree.layer_widths() == [1] and tree.widest_layer == 0


def test_hand_built_tree_derived_values() -> None:
    """A small tree written out by hand, every derived value spelled out."""
    tree = DraftTree.with_root(100)
    a = tree.add(0, 1, -0.5)  # 1
    b = tree.add(0, 2, -1.0)  # 2
    c = tree.add(a, 3, -0.25)  # 3
    d = tree.add(c, 4, -2.0)  # 4
    e = tree.add(a, 5, -3.0)  # 5
    assert (a, b, c, d, e) == (1, 2, 3, 4, 5)
    assert tree.depth == [0, 1, 1, 2, 3, 2]
    assert tree.path_logprob == pytest.approx([0.0, -0.5, -1.0, -0.75, -2.75, -3.5])
    assert tree.children(0) == [1, 2] and tree.children(1) == [3, 5] and tree.children(4) == []
    assert tree.layer_widths() == [1, 2, 2, 1] and tree.widest_layer == 2
    assert tree.num_drafts == 5 and tree.max_depth == 3
    assert [tree.path_to(leaf) for leaf in (2, 4, 5)] == [[0, 2], [0, 1, 3, 4], [0, 1, 5]]


def test_add_rejects_unknown_parent() -> None:
    tree = DraftTree.with_root(0)
    with pytest.raises(ValueError):
        tree.add(1, 3, -0.1)
    with pytest.raises(ValueError):
        tree.add(-1, 3, -0.1)


# ---- validate ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("tree", RANDOM_TREES)
def test_validate_accepts_built_trees(tree: DraftTree) -> None:
    tree.validate()


def _base() -> DraftTree:
    return DraftTree(
        [9, 1, 2, 3], [-1, 0, 0, 1], [0, 1, 1, 2], [0.0, -1.0, -2.0, -0.5], [0.0, -1.0, -2.0, -1.5], ["model"] * 4
    )


@pytest.mark.parametrize(
    "breakage",
    [
        "short_source",
        "short_depth",
        "root_parent",
        "root_depth",
        "parent_after_child",
        "self_parent",
        "depth_off_by_one",
        "parent_out_of_range",
    ],
)
def test_validate_rejects_broken_trees(breakage: str) -> None:
    tree = _base()
    tree.validate()  # the unbroken base is fine
    if breakage == "short_source":
        tree.source.pop()
    elif breakage == "short_depth":
        tree.depth.pop()
    elif breakage == "root_parent":
        tree.parent[0] = 0
    elif breakage == "root_depth":
        tree.depth[0] = 1
    elif breakage == "parent_after_child":
        tree.parent[1] = 3
    elif breakage == "self_parent":
        tree.parent[2] = 2
    elif breakage == "depth_off_by_one":
        tree.depth[3] = 1
    elif breakage == "parent_out_of_range":
        tree.parent[3] = -1
    with pytest.raises(ValueError):
        tree.validate()


# ---- subset ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(10))
def test_subset_keeps_paths_and_renumbers(seed: int) -> None:
    """A random parent-closed subset keeps each node's token path and scores, renumbered in keep order."""
    rng = random.Random(seed)
    tree = random_tree(rng, 40)
    chosen = {0}
    for i in rng.sample(range(1, len(tree)), 12):
        chosen.update(ancestors(tree.parent, i))
    keep = sorted(chosen)
    sub = tree.subset(keep)
    sub.validate()
    assert len(sub) == len(keep)
    for new, old in enumerate(keep):
        assert [tree.token[i] for i in ancestors(tree.parent, old)] == [
            sub.token[i] for i in ancestors(sub.parent, new)
        ]
        assert sub.depth[new] == tree.depth[old]
        assert sub.draft_logprob[new] == tree.draft_logprob[old]
        assert sub.path_logprob[new] == tree.path_logprob[old]
        assert sub.source[new] == tree.source[old]
        if new:
            assert sub.parent[new] == keep.index(tree.parent[old])
    # The original is untouched.
    tree.validate()
    assert len(tree) == 40


def test_subset_errors() -> None:
    tree = _base()  # 0 -> {1, 2}, 1 -> 3
    assert tree.subset([0, 2]).token == [9, 2]
    assert tree.subset([0, 2, 1, 3]).parent == [-1, 0, 0, 2]  # any parents-first order is allowed
    with pytest.raises(ValueError):
        tree.subset([0, 3])  # 3 without its parent 1
    with pytest.raises(ValueError):
        tree.subset([1, 0])  # root not first
    with pytest.raises(ValueError):
        tree.subset([0, 3, 1])  # child before parent


# ---- dict / JSON round trip --------------------------------------------------------------------------
@pytest.mark.parametrize("tree", RANDOM_TREES[::5])
def test_dict_round_trip(tree: DraftTree) -> None:
    d = tree.to_dict()
    assert set(d) == {"token", "parent", "depth", "draft_logprob", "path_logprob", "source", "match"}
    back = DraftTree.from_dict(json.loads(json.dumps(d)))
    assert back == tree
    back.validate()
    # from_dict copies: mutating the result leaves the dict alone.
    back.token.append(1)
    assert len(d["token"]) == len(tree)


def test_subset_rejects_repeated_nodes() -> None:
    """``keep`` must list each kept node once; a repeat yields a tree with a duplicated node (and duplicate
    sibling tokens) that even passes validate()."""
    tree = _base()
    with pytest.raises(ValueError):
        tree.subset([0, 1, 1])


def test_subset_rejects_empty_keep() -> None:
    with pytest.raises(ValueError):
        _base().subset([])
