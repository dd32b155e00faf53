"""Text for the metrics panel: the run summary, the comparison table and the glossary."""

from __future__ import annotations

import pandas as pd

from talon import metrics
from talon.config import AUTO_CAP, BUDGET_METHODS, GATE_METHODS, METHOD_NAMES, ROOT_WIDTH_METHODS
from talon.trace import EOS, MAX_NEW_TOKENS, STOPPED, RunTrace
from talon.tree import STOP_CAP, STOP_COST, STOP_DEPTH, STOP_DRAFTER, STOP_END, STOP_PLAIN, STOP_REASONS

GLOSSARY = f"""
**MAT (τ)**: tokens committed per target forward, *including* the bonus token. Plain autoregressive
decoding has MAT = 1.

**δ (delta)**: drafter calls per target forward (one batched call per tree layer grown).

**Acceptance per depth, two rates**: *accepted at d ÷ trees drafted to d* (of the steps whose tree
had a node at depth d, the share that accepted one; the verifier may never have checked that depth, when
a node above it was refused), and *accepted at d ÷ trees whose node at d − 1 was
accepted* (and had children there: the target checked depth d): the drafter's acceptance at depth d given
everything above was right. Steps whose accepted path ended at a leaf ran out of tree: the tree, not the
drafter, ended them.

**Collapsed into a chain**: below its first layer the tree is a single path of 2 or more nodes, so
the budget went into one long guess instead of alternatives.

**Calibration**: whether the drafter's confidence means what it says. A reliability chart bins the
run's checked nodes by the drafter's probability and plots the share actually accepted; on the
diagonal, a probability of 0.6 is accepted 60 % of the time. ECE (expected calibration error) is the
count-weighted mean distance from the diagonal.

**Speedup**: wall time of plain autoregressive decoding of the same prompt by this app's engine, with
the same target and settings, ÷ wall time of the method, measured on this machine in the same session
(Compare: repeated and interleaved, median and spread). The Benchmark tab's speedups are over the same
plain decoding in the suite's own run, next to transformers' `generate()` as a peer; the README's are
pooled over many prompts. Times from different runs or machines are never compared.

**Tokens/s**: generated tokens ÷ wall time of the run (the prompt's prefill plus every step; time the
run waited in the queue between steps is not counted). The streaming line and the summary use this
one definition.

**Draft share**: share of the step time spent building draft trees (drafter calls included): the tree
construction overhead.

**Hybrid**: one TALON tree over the merged proposals of the model drafter and prompt lookup. Each
node is coloured by the source that gave it more probability ("colour by source"); the retrieval
weight follows each source's running acceptance in this generation.

**Async (asynchronous execution)**: while the target verifies a tree, the drafter guesses the outcome
(the node where verification most likely stops, and the drafter's next token there) and drafts the
next tree from it. A right guess (a *hit*) makes that tree the next step's, so its drafting time was
hidden; a wrong one is discarded. The output is identical either way: greedy, and also when sampling, for
the same seed (the target's random choice at each output position comes from noise keyed by the seed and
the position, not from the tree).

**Expected tokens (E), price, cost curve** (Budget N = auto): a step plans its tree by E = 1 + the sum,
over its draft nodes, of the calibrated probability that the path to the node is accepted (the committed
tokens it expects, bonus included), and by its price: what verifying that many nodes, the drafter calls
and the loop's own work cost on this machine, in plain decoding steps, read from the cost curve measured
on the first auto run of a model pair. The tree grows while E ÷ price rises; "E / realised" sets the plan
beside the tokens the steps committed.

**N (budget)**: draft nodes in a tree, *not counting the root* (0 = auto: then the most a tree may have
is {AUTO_CAP}). **K**: children of the root (TALON's Top-K start; K=0 lets the gate pick them too;
EAGLE-2: top-k per node, at least 1).
**μ (mu)**: TALON's gate: a candidate joins a layer when its path probability is at least μ times
the best candidate's in that layer. **Depth**: draft layers below the root (EAGLE-2, static).
**γ (gamma)**: chain length in draft tokens.
"""

HOW_TO_READ = """
* **Each picture is one decoding step**: one forward pass of the target model over a whole tree of
  guesses. The dark diamond on the left is the **root**: the last token already in the output.
* Every other node is a **draft token** proposed by the drafter, placed to the right of the token it
  follows. A path from the root to a node is one guessed continuation. Labels show whitespace (␣ space,
  ⏎ newline); a token that holds only part of a character (emoji, most Chinese or Japanese characters
  are split into byte pieces) shows its bytes, e.g. `\\xe6`; the output text shows the whole
  character.
* **Colour by verdict**: the target checks the tree from the root; **green** discs with a dark rim were
  accepted (they are in the output), **red crosses ✕** were tested and refused (hover to see what the
  target chose instead), **pale grey** discs were never reached. The **gold star** is the bonus token:
  the target's own next token after the accepted path, so every step commits at least one token.
* **Colour by confidence**: the drafter's probability for each token (0 to 1, same scale every step).
* **Colour by relative**: each node's path probability ÷ the best path probability in its layer, on a
  log scale from 0.001 to 1: what TALON's gate compares with μ, so the nodes that passed the gate are
  those at μ or above. **Colour by source** (hybrid runs): blue discs for the model's drafts,
  purple squares for prompt lookup's.
* **Acceptance per depth** (Charts, Compare methods, Compare prompts): each bar is the share of trees
  drafted to depth d whose node at d was accepted, labelled with its counts (23/28); a **hatched** bar
  stands on fewer than ten trees, so its share is rough (one tree gives 0 % or 100 %).
* **Why TALON's shape changes**: with a fixed Budget N, TALON spends exactly N nodes. Its **first
  layer** is the root's **Top-K**: K children (K=6 on a CPU, 10 on a GPU) with no gate, so it is K wide
  at every step. **Below it** the confidence gate decides: where the drafter is sure, only one or two
  candidates pass per layer, so the tree grows **deep and narrow**; where it is unsure, many pass, the
  budget is used up in a few layers, and the tree is **shallow and wide**. (K=0 gates the first layer
  too.) At a fixed N static trees keep their shape and EAGLE-2 drafts its `depth` layers whatever the
  context; at N = auto the cost rule sizes EAGLE-2's trees as well.
* **Why its size changes (Budget N = auto, the CPU's default)**: the gate still picks *which* nodes, and
  the cost rule picks *how many*: a layer is drafted, and a candidate kept, only while it raises the
  expected committed tokens per unit of this machine's measured cost, so a tree stops where one more node
  would not pay, and a step no tree pays for is a plain step. How much the size then follows confidence
  depends on the machine: where a few nodes verify for about the price of one token (the 2-core CPUs
  we measured), nearly every step buys a small tree and the sure contexts add depth on top.
* **Why a tree stopped growing**: each step's caption says it: the budget N was used up, the drafter
  had nothing more to offer, the method's depth or fixed shape was reached, or (Budget N = auto) the
  cost rule found that one more node or layer would not pay for itself on this machine, or the run was
  so near its end (max new tokens) that no deeper draft could be committed. The gate never
  ends a tree: the best candidate of a layer always passes it; it sets how wide each layer is.
* Every method here is lossless: at temperature 0 the output is exactly what plain greedy decoding
  of the target gives; above 0 it is a sample from the target's own distribution, and for a given seed
  it is the very sample plain autoregressive sampling draws (each output position's random choice is
  fixed by the seed and the position). Only the speed differs.
"""


def plural(n: int, word: str) -> str:
    """``"1 step"``, ``"3 steps"``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


STOPPED_BY = {EOS: "end of sequence", MAX_NEW_TOKENS: "max new tokens", STOPPED: "the Stop button"}
"""What ended a run, as a summary says it (keys: ``RunTrace.stop_reason``)."""


def budget_text(tree_config: dict) -> str:
    """Budget N as a run used it: ``N=24``, or ``N=auto (cap 128)`` where the cost rule sized the trees."""
    budget = tree_config.get("budget")
    return f"N=auto (cap {budget})" if tree_config.get("auto") else f"N={budget}"


def tree_parts(cfg: dict) -> list[str]:
    """A tree configuration (``TreeConfig`` as a dict) in the words the app uses: the method, then only the
    settings it reads: N (or auto and its cap), K, μ, depth or γ."""
    method = cfg.get("method", "?")
    parts = [METHOD_NAMES.get(method, method)]
    if method in BUDGET_METHODS:
        parts.append(budget_text(cfg))
    if method in ROOT_WIDTH_METHODS:
        parts.append(f"K={cfg.get('topk')}")
    if method in GATE_METHODS:
        parts.append(f"μ={cfg.get('mu'):g}" if isinstance(cfg.get("mu"), (int, float)) else "μ=?")
    if method in ("eagle2", "static"):
        parts.append(f"depth {cfg.get('depth')}")
    if method == "chain":
        parts.append(f"γ={cfg.get('gamma')}")
    return parts


def settings_line(trace: RunTrace) -> str:
    """The settings a run was made with, in one line: method, N (or auto and its cap), K, μ, depth or γ
    where they apply, temperature, max new tokens, execution, drafter, target and device."""
    cfg, dec = trace.tree_config, trace.decode_config
    parts = tree_parts(cfg)
    temperature = dec.get("temperature") or 0
    parts.append("greedy" if not temperature else f"T={temperature:g}, seed {dec.get('seed')}")
    parts.append(f"max {plural(dec.get('max_new_tokens'), 'new token')}")
    if trace.execution == "async":
        parts.append("async")
    who = f"target {trace.target}" + (f", drafter {trace.drafter}" if trace.drafter else "")
    return " · ".join(parts) + f" · {who} · {trace.device}" + (f" ({trace.dtype})" if trace.dtype else "")


def shape_rows(trace: RunTrace) -> list[tuple[str, str]]:
    """The tree-shape rows of a run's summary: draft nodes per step, mean depth, widest layer, plain steps
    (when there are any, or the size varies) and trees that collapsed into a chain."""
    st = metrics.shape_stats(trace.steps)
    cfg = trace.tree_config
    method = cfg.get("method")
    budget = "auto" if cfg.get("auto") else cfg.get("gamma") if method == "chain" else cfg.get("budget")
    limit = {"chain": "γ", "ar": None}.get(method, "N")
    rows = [
        (
            "Draft nodes per step (mean" + (f"; {limit} = {budget}" if limit else "") + ")",
            f"{st['mean_nodes']:.1f}",
        ),
        ("Mean depth (draft layers below the root)", f"{st['mean_depth']:.2f}"),
        ("Widest layer (mean per step · largest)", f"{st['mean_widest']:.1f} · {st['max_widest']}"),
    ]
    plain = round(st["plain_share"] * st["steps"])
    if plain or cfg.get("auto"):
        rows.append(("Plain steps (no drafts)", f"{plain} of {st['steps']} ({st['plain_share']:.0%})"))
    collapsed = metrics.collapsed_steps(trace)
    if collapsed:
        rows.append(("Trees collapsed into a chain", f"{len(collapsed)} of {st['steps']} steps"))
    return rows


def acceptance_markdown(trace: RunTrace, max_rows: int = 8) -> str:
    """Acceptance per depth, both rates, as a small table (the first ``max_rows`` depths)."""
    rows = metrics.acceptance_per_depth(trace.steps)
    if not rows:
        return ""
    lines = [
        "| depth d | trees drafted to d | accepted at d ÷ drafted to d | accepted at d ÷ d−1 accepted (tree went on) |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows[:max_rows]:
        lines.append(
            f"| {r['depth']} | {r['reached']} | {_share(r['accepted'], r['reached'])} | "
            f"{_share(r['accepted'], r['checked'])} |"
        )
    more = f"\n\n*{plural(len(rows) - max_rows, 'deeper layer')} on the Charts tab.*" if len(rows) > max_rows else ""
    return "**Acceptance per depth**\n\n" + "\n".join(lines) + more


def expected_rows(trace: RunTrace) -> list[tuple[str, str]]:
    """The calibration row of a run whose steps recorded their expected tokens (a run with a
    calibration): the mean expected committed tokens a step, bonus included, beside the mean realised
    (accepted drafts + 1, tokens cut at the end of the output counted as in the benchmark's E / realised);
    none for a run without."""
    expected, realised = metrics.mean_expected(trace.steps), metrics.mean_realised(trace.steps)
    if expected is None or realised is None or expected <= 0:
        return []
    return [
        (
            "Tokens a step: expected by calibrated confidence · realised (bonus included)",
            f"{expected:.2f} · {realised:.2f} (realised ÷ expected {realised / expected:.2f})",
        )
    ]


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%} ({part}/{whole})" if whole else "–"


def summary_markdown(trace: RunTrace) -> str:
    """A one-table summary of a run, with its tree shape and acceptance per depth."""
    s = metrics.summarize(trace)
    rows = [
        ("Tokens generated", f"{s['new_tokens']}"),
        ("Target forwards (steps)", f"{s['target_forwards']}"),
        ("MAT τ (tokens / target forward)", f"{s['mat']:.2f}"),
        *expected_rows(trace),
        ("δ (drafter calls / target forward)", f"{s['delta']:.2f}"),
        *shape_rows(trace),
        ("Tokens / s (generated ÷ the time below)", f"{s['tokens_per_second']:.1f}"),
        ("Time: prefill + steps (the page's own work not counted)", f"{s['seconds']:.2f} s"),
        ("Draft share of step time", f"{s['draft_share']:.0%}"),
    ]
    if trace.stop_reason:
        rows.append(("Stopped by", STOPPED_BY.get(trace.stop_reason, trace.stop_reason)))
    head = f"**{settings_line(trace)}**"
    table = "| metric | value |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    acceptance = acceptance_markdown(trace)
    return head + "\n\n" + table + "\n\n" + ONE_RUN_SPEED + ("\n\n" + acceptance if acceptance else "")


ONE_RUN_SPEED = (
    "*One run's tokens/s is one measurement: identical runs on a shared machine can differ by a third. "
    "**Compare methods** repeats and interleaves runs to measure a speedup.*"
)
"""Said under every run's summary, beside its tokens/s."""


# ---- why each tree looks the way it does ------------------------------------------------------------------


def _widths(widths: list[int]) -> str:
    return ", ".join(str(w) for w in widths)


def step_shape(step) -> str:
    """A step's tree in a phrase, for the captions of Explore and the Tree lab: ``"7 draft nodes in 2 layers
    (widest 4), 2 accepted + bonus"``, or for a root-only tree (nothing drafted, so no bonus) ``"a plain
    decoding step, no draft tree: the target's own next token"``."""
    tree = step.tree
    if not tree.num_drafts:
        return "a plain decoding step, no draft tree: the target's own next token"
    return (
        f"{plural(tree.num_drafts, 'draft node')} in {plural(tree.max_depth, 'layer')} (widest "
        f"{tree.widest_layer}), {step.accepted_tokens} accepted + bonus"
    )


def _root_cut(width: int, k: int, tree_config: dict) -> str:
    """What held a Top-K root to fewer than K children: ``"; the cost rule kept 3"`` (N = auto: the others
    would not have paid for their price), ``"; the budget N=2 held it"``, or ``""`` (all K, or the drafter
    offered fewer)."""
    cap = tree_config.get("budget")
    if width >= k:
        return ""
    if tree_config.get("auto"):
        return f"; the cost rule kept {width}"
    if isinstance(cap, int) and width == cap:
        return f"; the budget N={cap} held it"
    return ""


def growth_sentence(step, tree_config: dict) -> str:
    """How the step's tree was grown, layer by layer (for the step's caption)."""
    method = tree_config.get("method")
    widths = step.layer_widths[1:]
    if method == "ar" or not widths:
        return "no drafts (a plain decoding step)" if method != "ar" else "plain decoding: no tree"
    if method in GATE_METHODS:
        k = tree_config.get("topk")
        first = (
            f"gated root: {widths[0]} {'child' if widths[0] == 1 else 'children'} passed the gate (K=0)"
            if not k
            else f"Top-K root: {widths[0]} of K={k} children (no gate{_root_cut(widths[0], k, tree_config)})"
        )
        if len(widths) == 1:
            return first + "; no gated layer below it"
        mu = tree_config.get("mu")
        mu_text = f" (μ={mu:g})" if isinstance(mu, (int, float)) else ""
        if len(widths) == 2:
            return first + f"; gated layer 2{mu_text}: {plural(widths[1], 'node')}"
        return first + f"; gated layers 2–{len(widths)}{mu_text}: {_widths(widths[1:])} nodes"
    if method == "eagle2":
        return (
            f"top-{tree_config.get('topk')} per expanded node over "
            f"{plural(step.drafter_forwards, 'drafter call')}, re-ranked to the best {step.tree.num_drafts}: "
            f"layers of {_widths(widths)} nodes"
        )
    if method == "static":
        return f"fixed shape: layers of {_widths(widths)} nodes"
    return f"a chain of {plural(step.tree.num_drafts, 'draft')}"


def stop_sentence(step, tree_config: dict) -> str:
    """Why the step's tree stopped growing (``step.stop``, a key of ``talon.tree.STOP_REASONS``), with the
    numbers that make it true."""
    method, stop = tree_config.get("method"), step.stop
    cap = tree_config.get("budget")
    if stop == STOP_PLAIN:
        return "plain decoding: no drafts asked for"
    if stop == STOP_CAP:
        what = f"the cap of {cap} nodes (N = auto)" if tree_config.get("auto") else f"the budget N={cap}"
        return f"{what} was used up in layer {step.tree.max_depth}"
    if stop == STOP_COST:
        if step.tree.num_drafts == 0:
            text = "the cost rule made this a plain step: no tree was expected to beat one plain decoding step"
        else:
            text = (
                f"the cost rule: one more node or layer would not have paid for its price on this machine "
                f"({step.tree.num_drafts} of at most {cap} nodes)"
            )
        if step.expected is not None and step.price is not None:
            text += f"; expected {step.expected:.2f} tokens for {step.price:.2f} plain steps"
            if step.tree.num_drafts == 0 and step.price > 1.0:
                text += " (one plain step and the drafter's call that proposed the candidates it declined)"
            elif step.tree.num_drafts and step.expected < step.price:
                text += (
                    " (under one token per plain step, yet the root alone would give fewer: its price also "
                    "holds the drafter's first call, already made)"
                )
        return text
    if stop == STOP_DEPTH:
        if method == "eagle2":
            depth = tree_config.get("depth")
            kept = step.tree.num_drafts
            if cap is None:
                note = ""
            elif kept >= cap:
                best = "the best candidate was" if cap == 1 else f"the best {cap} candidates were"
                note = f" (then {best} kept)"
            else:
                note = f" (all {plural(kept, 'candidate')} kept: fewer than N={cap})"
            return f"its depth of {plural(depth, 'layer') if depth is not None else '?'} was drafted{note}"
        if method == "chain":
            return f"its length γ={tree_config.get('gamma')} was reached"
        if method == "static":
            return f"its fixed shape (N={cap}, at most {tree_config.get('depth')} layers) was complete"
        return STOP_REASONS[STOP_DEPTH]
    if stop == STOP_DRAFTER:
        return "the drafter proposed nothing more (no candidate with a probability above 0)"
    if stop == STOP_END:
        left = step.tree.max_depth + 1
        if left == 1:
            return "the run's end: one new token left before the max new tokens, so a plain step"
        return f"the run's end: {left} new tokens left before the max new tokens, so no draft below layer {left - 1}"
    return "not recorded (a trace from before stop reasons were kept)"


def step_explanation(step, tree_config: dict) -> str:
    """``Grown: ... · Stopped: ...`` for a step's caption, saying so when the tree collapsed into a chain; a
    tree that stopped for another reason than the cost rule (which states its own) adds what it was expected
    to commit and its price, where the run carries a cost curve (a fixed N priced on the cached one)."""
    grown = growth_sentence(step, tree_config)
    if tree_config.get("method") in metrics.CHAIN_METHODS and metrics.chain_collapsed(step):
        grown += ", **collapsed into a chain** below layer 1"
    text = f"Grown: {grown} · **Stopped: {stop_sentence(step, tree_config)}.**"
    if step.stop not in (STOP_COST, STOP_PLAIN) and step.expected is not None and step.price is not None:
        text += f" Expected {step.expected:.2f} tokens for {step.price:.2f} plain steps."
    return text


def step_note(step) -> str:
    """Extra caption text for a step: a hybrid's source weights, an async guess's outcome."""
    note = ""
    info = step.drafter_info or {}
    if "retrieval_weight" in info:
        sources = step.tree.source[1:]
        note += (
            f" · retrieval weight {info['retrieval_weight']:.2f} (running acceptance: retrieval "
            f"{info['retrieval_acceptance']:.2f}, model {info['model_acceptance']:.2f}); "
            f"{sources.count('retrieval')} retrieval / {sources.count('model')} model nodes"
        )
    if step.speculate_hit is not None:
        note += " · next tree drafted ahead: " + (
            "guess right, kept" if step.speculate_hit else "guess wrong, discarded"
        )
    return note


def _median_phase(runs: list[RunTrace], seconds) -> float | None:
    """The median over ``runs`` of the summed ``seconds(step)`` of each run, or None (a blank cell) for sync
    runs where the phase is async's own (``seconds`` None for them: they draft nothing ahead and wait for
    nothing)."""
    if seconds is None:
        return None
    return round(metrics.spread([sum(seconds(st) for st in run.steps) for run in runs])["median"], 3)


ASYNC_DECIMALS = {
    "wall s (median)": 2,
    "MAT": 2,
    "draft s, target idle (median)": 3,
    "verify s (median)": 3,
    "drafted ahead s, while verifying (median)": 3,
    "target waited for the guessed tree s (median)": 3,
    "guess hit rate (mean)": 2,
}
"""Decimals each number column of ``async_table`` is shown to (``ui.table_view``)."""


def async_table(traces: dict[str, RunTrace], repeats: dict[str, list[RunTrace]] | None = None) -> pd.DataFrame:
    """Sync vs async runs of one method, over the repetitions: wall time (median and spread), MAT, the
    drafting the target waits for (sync: all of it; async: the first tree and the redrafts after a wrong
    guess), the drafting done ahead while the target verifies (async), hit rate of the async guesses, the
    waiting left, and the sync median less the share overlap on separate hardware would save
    (``metrics.projected_async_seconds`` over the sync run's phase times)."""
    repeats = repeats or {label: [t] for label, t in traces.items()}
    rows = []
    sync = traces.get("sync")
    async_runs = repeats.get("async") or []
    hits = [h for h in (metrics.speculation_hit_rate(t) for t in async_runs) if h is not None]
    hit = sum(hits) / len(hits) if hits else None
    medians = {}
    for label, trace in traces.items():
        runs = repeats.get(label) or [trace]
        times = metrics.spread([t.seconds for t in runs])
        medians[label] = times["median"]
        ahead = trace.execution == "async"
        rates = [h for h in (metrics.speculation_hit_rate(t) for t in runs) if h is not None]
        rows.append(
            {  # every time a median over the repetitions, as the wall time (the first run alone misled)
                "run": label,
                "wall s (median)": round(times["median"], 2),
                "spread s": f"{times['low']:.2f}–{times['high']:.2f}" if times["n"] > 1 else "one run",
                "MAT": round(metrics.summarize(trace)["mat"], 2),
                "draft s, target idle (median)": _median_phase(runs, lambda st: st.draft_seconds),
                "verify s (median)": _median_phase(runs, lambda st: st.verify_seconds),
                "drafted ahead s, while verifying (median)": _median_phase(
                    runs, (lambda st: st.speculate_seconds) if ahead else None
                ),
                "target waited for the guessed tree s (median)": _median_phase(
                    runs, (lambda st: st.wait_seconds) if ahead else None
                ),
                "guess hit rate (mean)": round(sum(rates) / len(rates), 2) if rates else None,
                "repetitions": times["n"],
            }
        )
    if sync is not None and hit is not None:
        # The saving is projected from the first sync run's phase times and applied to the sync median,
        # so the row compares with the rows above (a slow first repetition would otherwise show here).
        share = metrics.projected_async_seconds(sync, hit) / sync.seconds if sync.seconds else 1.0
        rows.append(
            {
                "run": "async, projected",
                "wall s (median)": round(medians["sync"] * share, 2),
                "MAT": round(metrics.mat(sync.steps), 2),
                "guess hit rate (mean)": round(hit, 2),
            }
        )
    return pd.DataFrame(rows)


NOISE = 0.05
"""A measured saving larger than what overlap could possibly save by more than this share of the sync time
is put down to the machine's noise, not to async."""


def async_verdict(traces: dict[str, RunTrace], repeats: dict[str, list[RunTrace]] | None = None) -> str:
    """A plain verdict on whether overlapping drafting with verification helps on this machine, from the
    repetitions (interleaved sync / async pairs) and the guesses' hit rate; it never contradicts itself: a
    measured difference larger than the most overlap could explain (every right guess hiding its whole
    drafting) is put down to the machine, not to async, and one the repetitions disagree on is a tie."""
    repeats = repeats or {label: [t] for label, t in traces.items() if t is not None}
    sync_runs, async_runs = repeats.get("sync") or [], repeats.get("async") or []
    if not sync_runs or not async_runs or not async_runs[0].steps:
        return "Running..."
    sync = sync_runs[0]
    same = all(a.output_ids == sync.output_ids for a in async_runs + sync_runs)
    same_text = (
        "identical" if same else "**different, which should never happen (same seed, same device): please report it**"
    )
    hits = [h for h in (metrics.speculation_hit_rate(t) for t in async_runs) if h is not None]
    hit = sum(hits) / len(hits) if hits else 0.0
    pairs = list(zip(sync_runs, async_runs))
    ratios = [s.seconds / a.seconds for s, a in pairs if a.seconds > 0]  # > 1: async faster
    speed = metrics.spread(ratios)
    projected = metrics.projected_async_seconds(sync, hit)
    # the most overlap could save; below 0 where waiting for wrong guesses' drafts costs more than the right
    # ones hide (the projected row of the table is then slower than sync)
    saving = 1 - projected / sync.seconds if sync.seconds else 0.0
    possible = max(0.0, saving)
    measured_saving = 1 - 1 / speed["median"] if speed["median"] else 0.0
    n = len(pairs)
    reps = f"{n} interleaved repetitions" if n > 1 else "one run each"
    # each repetition's async run against the sync run beside it (the median of those pairs, which can
    # differ from the ratio of the table's median times when a busy spell hit one pair)
    if same and round(metrics.mat(sync.steps), 2) != round(metrics.mat(async_runs[0].steps), 2):
        same_text += (
            " (their trees are not: async drafts each tree before the last verdict, from a guess at it, so "
            "the tokens a verification commits, MAT, can differ)"
        )
    lines = [
        f"Outputs are {same_text}. Measured over {reps}: "
        + (
            f"async ran at {speed['median']:.2f}× the speed of the sync run beside it (median of the {n} pairs, "
            f"spread {speed['low']:.2f}–{speed['high']:.2f}×; the table's times are each side's median)"
            if n > 1
            else f"async ran at {speed['median']:.2f}× sync's speed"
        )
        + f"; {hit:.0%} of the guesses were right, so overlap could have hidden at most {possible:.0%} of the sync "
        "time here."
    ]
    call = metrics.paired_verdict([1 / r for r in ratios if r > 0])  # A = sync, B = async
    if measured_saving > possible + NOISE:
        lines.append(
            "**The measured difference is not async's doing:** it is larger than the most that hiding the right "
            "guesses' drafting could save, so it comes from the machine (other load, how its threads are "
            "scheduled), not from overlap."
        )
    elif n > 1 and call == "B":
        lines.append(f"**Async was faster in all {n} repetitions.**")
    elif n > 1 and call == "A":
        lines.append(f"**Sync was faster in all {n} repetitions**: async's extra work cost more than it hid.")
    elif n > 1 and call in ("A narrowly", "B narrowly"):
        faster = "Sync" if call == "A narrowly" else "Async"
        lines.append(
            f"**{faster} was faster in all {n} repetitions, in some by less than {metrics.SAME_SPEED:.0%}**: "
            "within the noise of one run."
        )
    elif n > 1:
        lines.append("**No clear difference**: the repetitions disagree or lie within a few percent.")
    if "cuda" not in sync.device:
        lines.append(
            "On a CPU async cannot help much: drafter and target share the same CPU cores, so running them at "
            "once slows both down."
        )
    draft = metrics.draft_share(sync)
    if draft < 0.05:
        lines.append(f"Drafting takes only {draft:.0%} of the step time here, so there is little to hide.")
    if saving < 0:
        lines.append(
            f"With the drafter on its own hardware, async would take about {-saving:.0%} longer than sync: waiting "
            "for drafts of wrong guesses costs more than the right ones hide (projected from this run's phase "
            "times and hit rate: the table's “async, projected” row)."
        )
    else:
        lines.append(
            f"With the drafter on its own hardware, the overlap would save about {possible:.0%} of the sync "
            "time (projected from this run's phase times and hit rate, the table's “async, projected” row; an upper "
            "bound)."
        )
    return " ".join(lines)


SPEEDUP_COLUMN = "speedup over plain decoding (median ratio)"
"""``comparison_table``'s answer: the median over the repetitions of plain decoding's time ÷ the run's, each
repetition's pair measured together (so not the ratio of the median tokens/s beside it)."""
COMPARISON_DECIMALS = {
    SPEEDUP_COLUMN: 2,
    "tokens/s (median)": 1,
    "MAT τ": 2,
    "δ (drafter calls / step)": 2,
    "draft nodes / step": 1,
    "mean depth": 2,
    "widest layer (mean)": 1,
}
"""Decimals each number column of ``comparison_table`` is shown to (``ui.table_view``)."""
COMPARISON_WIDTHS = ["15%", "11%", "10%", "9%", "7%", "9%", "9%", "8%", "9%", "13%"]
"""``comparison_table``'s column widths: the run's name widest, every header whole at 1024 px."""


def comparison_table(traces: dict[str, RunTrace], repeats: dict[str, list[float]] | None = None) -> pd.DataFrame:
    """One row per labelled run (the first labelled ``ar`` is plain decoding, the speedups' reference):
    MAT τ, δ, draft nodes per step, mean depth, mean widest layer, and over the repetitions'
    wall times (``repeats[label]``, the run's own when none): tokens/s and the speedup over plain decoding
    in this app (median, and the spread low–high)."""
    repeats = repeats or {}
    ar_label = next((k for k in traces if k.startswith("ar")), None)
    ar_times = repeats.get(ar_label) or ([traces[ar_label].seconds] if ar_label else [])
    rows = []
    for label, trace in traces.items():
        s = metrics.summarize(trace)
        shape = metrics.shape_stats(trace.steps)
        times = repeats.get(label) or [trace.seconds]
        rate = metrics.spread([s["new_tokens"] / t for t in times if t > 0])
        speed = metrics.spread([a / t for a, t in zip(ar_times, times) if t > 0])
        rows.append(
            {  # the answer first: a table wider than the page scrolls, and its first columns stay in view
                "run": label,
                SPEEDUP_COLUMN: round(speed["median"], 2) if ar_times else None,
                "spread (low–high)": f"{speed['low']:.2f}–{speed['high']:.2f}" if speed["n"] > 1 else "one run",
                "tokens/s (median)": round(rate["median"], 1),
                "MAT τ": round(s["mat"], 2),
                "δ (drafter calls / step)": round(s["delta"], 2),
                "draft nodes / step": round(shape["mean_nodes"], 1),
                "mean depth": round(shape["mean_depth"], 2),
                "widest layer (mean)": round(shape["mean_widest"], 1),
                "repetitions": len(times),
            }
        )
    return pd.DataFrame(rows)
