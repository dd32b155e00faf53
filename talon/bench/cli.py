"""The benchmark CLI, ``python -m talon.bench``:

    python -m talon.bench --prompts assets/prompts.jsonl --methods ar,chain,static,eagle2,talon \\
        --drafter ngram --budget 16 --max-new-tokens 64 --temperature 0 --seed 0 --out results.json

    python -m talon.bench --suite quick --out-dir docs/bench/quick-cpu

The first form runs one method list and writes a JSON file.  The second runs a named suite
(``talon.bench.suites``: ``smoke``, ``quick``, ``paper``, ...), the transformers peers included, and
writes ``runs.csv``, ``summary.csv`` and ``meta.json`` into the directory; ``python -m viz.bench_plots
DIR`` draws its charts.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import torch

from ..config import (
    AUTO_CAP,
    METHODS,
    ConfigError,
    DecodeConfig,
    ModelSpec,
    device_default_tree,
)
from ..drafters.factory import DRAFTER_HELP, uses_prompt_lookup
from ..files import write_text_atomically
from ..models.device import QUIET_SHARE, gpu_available
from ..models.loaded import ModelLoadError
from ..models.registry import ModelRegistry
from . import results
from .cost import measure_cost
from .prompts import read_prompts
from .runner import TREE_FIELDS, check_suite_settings, environment, run_benchmark, run_suite, tree_config
from .suites import (
    ALL_METHODS,
    COST_SUITE,
    PEER_METHODS,
    SUITE_NAMES,
    auto_sized,
    get_suite,
    is_auto,
    method_problem,
    split_method,
    with_overrides,
)


def write_suite(out_dir: Path, result: dict, command: str) -> list[Path]:
    """Write a suite's results directory: runs.csv, summary.csv (computed here when ``result["summary"]``
    is None, after the runs are on disk), then meta.json, whose ``complete`` says whether the suite ran to
    its end.  Charts: ``python -m viz.bench_plots DIR``."""
    paths = results.write_tables(out_dir, result["runs"], result["summary"])
    meta = {**result["meta"], "command": command, "files": [p.name for p in paths] + [results.META]}
    return paths + [results.write_meta(out_dir, meta)]


# ---- CLI --------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m talon.bench",
        description=__doc__.replace("``", "`"),  # the usage lines and what each mode writes
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--prompts", help="JSONL file of {id, category, prompt} (method-list mode)")
    p.add_argument(
        "--suite",
        choices=list(SUITE_NAMES),
        help="run a named suite (talon.bench.suites; 'cost': the timings of one step's pieces, "
        "talon.bench.cost, which also replace this machine's cached cost curve for --target and --drafter, "
        "the one auto-sized trees here are sized by: run it on a quiet machine; the app waits passively and "
        "keeps its own, which OMP_WAIT_POLICY=PASSIVE before this command replaces) instead of --prompts",
    )
    p.add_argument("--out-dir", help="suite mode: directory for runs.csv, summary.csv, meta.json")
    p.add_argument(
        "--methods",
        default=None,
        help=f"comma list of {', '.join(ALL_METHODS)}; a tree method may add +auto (sized by the cost rule) "
        "and @DRAFTER (another drafter than --drafter's), e.g. talon@layers:2+auto (default: every tree "
        "method but hybrid, and ar); suite mode: keep only these (ar always runs)",
    )
    p.add_argument(
        "--experiments",
        default=None,
        help="suite mode: comma list of the suite's experiment names to run (default: all), "
        "e.g. --suite paper --experiments topk_sweep",
    )
    p.add_argument("--target", default="embedded", help="'embedded', a local directory or a Hub id")
    p.add_argument(
        "--drafter",
        default=None,
        help=DRAFTER_HELP + " (default: ngram; a suite's own in suite mode: head for the cost suite)",
    )
    p.add_argument(
        "--datastore",
        default=None,
        help="method-list mode: a corpus prompt lookup also retrieves from, after the run's own prompt and "
        'output (REST-style): a text file, a .jsonl file of {"text": ...} lines, or a directory of text '
        "files; used by the ngram drafter and the hybrid method (and lookup+SPEC drafters)",
    )
    p.add_argument(
        "--assistant",
        default=None,
        help="hf_assisted's draft model, 'layers:K' or a model directory / Hub id (default: the "
        "drafter if it is a model, else layers:6)",
    )
    p.add_argument(
        "--budget",
        type=_budget,
        default=None,
        help="N: draft nodes, root excluded (any whole number from 1, where the app's slider stops at 128; the "
        "tree must fit the model's context beside the prompt and the new tokens), or 'auto': each tree sized by "
        "this device's cost curve and the "
        "drafter's calibrated confidence (talon, hybrid, eagle2), capped at --max-nodes (default: the "
        "app's: auto, reported as METHOD+auto; other methods take the device's fixed N, 24; suite mode: the "
        "suite's, and 'auto' runs every sizable method as METHOD+auto except in budget sweeps, which "
        "compare fixed N)",
    )
    p.add_argument(
        "--max-nodes",
        type=_positive,
        default=None,
        help=f"the cap of auto-sized trees (--budget auto, METHOD+auto; default {AUTO_CAP})",
    )
    tree_help = {
        "topk": "K: root children (talon; 0 gates the root too), top-k (eagle2, >= 1)",
        "mu": "TALON confidence gate in (0, 1]",
        "depth": "draft layers (eagle2, static)",
        "gamma": "chain length (draft tokens)",
    }
    for name, text in tree_help.items():
        p.add_argument(
            f"--{name}",
            type=float if name == "mu" else int,
            default=None,
            help=f"{text} (default: the device's default tree, as in the app; suite mode: the suite's)",
        )
    p.add_argument("--max-new-tokens", type=_positive, default=None, help="default 64; in suite mode the suite's")
    p.add_argument("--temperature", type=float, default=None, help="method-list mode, default 0 (a suite sets its own)")
    p.add_argument(
        "--execution",
        choices=["sync", "async"],
        default=None,
        help="method-list mode: draft then verify (sync), or draft the next tree while the target "
        "verifies (async; needs a drafter that can draft ahead); default sync",
    )
    p.add_argument("--seed", type=int, default=None, help="default 0; in suite mode the suite's")
    p.add_argument(
        "--limit", type=_positive, default=None, help="use only the first N prompts (suite mode: of each prompt set)"
    )
    p.add_argument(
        "--out", default=None, help="method-list mode: where to write the results JSON (default results.json)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results already in --out-dir (or the --out file); without it a run refuses to "
        "write over another's",
    )
    p.add_argument(
        "--threads",
        type=_positive,
        default=None,
        help="torch CPU threads (default: torch's own); 1 steadies timings on a busy machine",
    )
    args = p.parse_args(argv)
    if bool(args.prompts) == bool(args.suite):
        p.error("give either --prompts (a method list) or --suite NAME")
    if args.suite and not args.out_dir:
        p.error("--suite needs --out-dir")
    ignored = [f"--{name.replace('_', '-')}" for name in _NOT_IN_MODE[_mode(args)] if getattr(args, name) is not None]
    if ignored:
        p.error(f"{', '.join(ignored)} {'does' if len(ignored) == 1 else 'do'} not apply to {_MODE_NAMES[_mode(args)]}")
    args.temperature = 0.0 if args.temperature is None else args.temperature
    args.execution = args.execution or "sync"
    if args.out is not None and not args.out.strip():  # "" wrote results.json into the working folder
        p.error("--out names the results file: a path such as results.json, not an empty string")
    if args.drafter is not None and not args.drafter.strip():  # "" drafted with n-gram, unasked
        p.error("--drafter names a drafter (e.g. head, ngram, layers:4, lookup+head), not an empty string")
    args.out = args.out or "results.json"
    return args


_RUN_FLAGS = ("methods", "experiments", "budget", "max_nodes", "topk", "mu", "depth", "gamma", "max_new_tokens")
_NOT_IN_MODE = {
    "methods": ("out_dir", "experiments"),
    "suite": ("temperature", "execution", "out", "datastore"),
    "cost": (*_RUN_FLAGS, "temperature", "execution", "seed", "limit", "out", "assistant", "datastore"),
}
"""Per mode, the options it has no use for (refused rather than silently ignored)."""
_MODE_NAMES = {
    "methods": "the method-list mode (--prompts; it writes --out FILE)",
    "suite": "suite mode (a suite sets its own temperatures and execution, and writes --out-dir)",
    "cost": "the cost suite (it times one step's pieces of --target with --drafter)",
}


def _mode(args: argparse.Namespace) -> str:
    return "methods" if args.prompts else "cost" if args.suite == COST_SUITE else "suite"


def write_json(path: Path, result: dict) -> None:
    """Write a method-list result atomically (a reader never sees half a file)."""
    write_text_atomically(path, json.dumps(result, indent=1, ensure_ascii=False))


def _budget(text: str) -> int | str:
    """``--budget``: a whole number of draft nodes or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--budget takes a whole number of draft nodes or 'auto', not {text!r}"
        ) from None


def _positive(text: str) -> int:
    """A whole number of at least 1 (``--max-nodes``, ``--max-new-tokens``, ``--limit``, ``--threads``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number of at least 1, not {text!r}")
    return value


def tree_overrides(args: argparse.Namespace) -> dict:
    """The tree fields the command line sets: K, mu, depth, gamma, a fixed ``--budget`` N, and ``cap``
    (``--max-nodes``: the cap of auto-sized runs; ``--budget auto`` itself renames methods, see
    ``talon.bench.suites.auto_sized``)."""
    out = {k: getattr(args, k) for k in ("topk", "mu", "depth", "gamma") if getattr(args, k) is not None}
    if isinstance(args.budget, int):
        out["budget"] = args.budget
    if args.max_nodes is not None:
        out["cap"] = args.max_nodes
    return out


def check_options_used(args: argparse.Namespace, methods: list[str], suite: str | None = None) -> None:
    """``ConfigError`` for an option that no run of ``methods`` reads (it would be silently ignored):
    ``--max-nodes`` without an auto-sized run, ``--gamma`` without a chain, ``--assistant`` without
    ``hf_assisted``, ``--datastore`` without prompt lookup (``_uses_lookup``), ``--execution async`` without
    a tree method (plain decoding and the peers run sync).  ``suite``: the suite whose runs ``methods``
    are (its ``--methods`` only narrows its own list, so the advice is another suite, not another method)."""

    def add(method: str) -> str:
        if suite is None:
            return f"add {method} to --methods."
        return f"suite {suite} runs no {method} (--methods only narrows a suite's list): choose a suite that does."

    if args.max_nodes is not None and not any(is_auto(m) for m in methods):
        trees = any(split_method(m)[0] in METHODS and split_method(m)[0] != "ar" for m in methods)
        raise ConfigError(
            "--max-nodes caps auto-sized trees, and no method here is auto-sized: "
            + (
                "add --budget auto or name METHOD+auto in --methods."
                if trees
                else "ar and the transformers peers draw no tree; add a tree method (talon, eagle2, ...) to --methods."
            )
        )
    bases = {split_method(m)[0] for m in methods}
    if args.gamma is not None and "chain" not in bases:
        raise ConfigError(f"--gamma is the chain's length, and no method here is chain: {add('chain')}")
    if args.assistant is not None and "hf_assisted" not in bases:
        raise ConfigError(
            "--assistant is transformers' assisted generation's draft model, and hf_assisted is not among the "
            f"methods: {add('hf_assisted')}"
        )
    if getattr(args, "datastore", None) is not None and not any(_uses_lookup(m, args.drafter) for m in methods):
        raise ConfigError(
            "--datastore adds a corpus to prompt lookup, and no method here looks up: add hybrid to --methods, "
            "or draft with --drafter ngram (or lookup+SPEC)."
        )
    if getattr(args, "execution", "sync") == "async" and not bases & (set(METHODS) - {"ar"}):
        raise ConfigError(
            "--execution async drafts a tree method's next tree while the target verifies, and no method here "
            "drafts trees (ar and the transformers peers run synchronously): add talon, eagle2, ..."
        )


def _uses_lookup(method: str, drafter: str | None) -> bool:
    """Whether a run of ``method`` (``METHOD[@DRAFTER][+auto]``) drafts with prompt lookup: the hybrid
    method, or a tree method whose drafter (its own, else ``drafter``, else ngram) is ngram or lookup+SPEC."""
    base, spec = split_method(method)
    if base not in METHODS or base == "ar":
        return False
    try:
        return uses_prompt_lookup(base, spec or drafter or "ngram")
    except ConfigError:
        return False  # the drafter's own error comes when it loads


def _comma_list(text: str | None) -> list[str] | None:
    return None if text is None else [m.strip() for m in text.split(",") if m.strip()]


def interrupted(runs: list[dict], where: Path) -> int:
    """What Ctrl-C leaves: a line on the runs already written to ``where`` (every method's runs of the
    prompts that ended; ``complete`` false there), and the shell's exit status for an interrupt."""
    prompts = len({r["prompt_id"] for r in runs})
    if runs:
        print(
            f"interrupted: {len(runs)} runs of {prompts} whole prompts are in {where} (complete: false; "
            "the prompt in progress was dropped)",
            file=sys.stderr,
        )
    else:
        print("interrupted before the first prompt ended: nothing was written", file=sys.stderr)
    return 130


def busy_warning(other_share: float | None) -> str:
    """A line for results measured while other processes took ``QUIET_SHARE`` of the CPU or more ("" else)."""
    if other_share is None or other_share < QUIET_SHARE:
        return ""
    return (
        f"warning: other processes took {other_share:.0%} of the CPU while this ran, so these timings are a busy "
        "machine's and its speedups can be far off (each method is slowed by a different amount): run it again "
        "on a quiet machine, or with --threads 1 beside the other work"
    )


def main_methods(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """The method-list mode (``--prompts``): one JSON file, a table on stdout."""
    methods = _comma_list(args.methods)
    if methods == []:  # "--methods ," named none: the default list would run unasked
        print("error: --methods names no method: a comma list such as ar,talon,hf_generate", file=sys.stderr)
        return 2
    methods = methods or [m for m in METHODS if m != "hybrid"]
    out, saved = Path(args.out), []  # saved: the last checkpoint, for the line an interrupted run ends with
    try:
        unknown = [p for p in map(method_problem, methods) if p]
        if unknown:
            raise ConfigError(f"Unknown methods {unknown}: choose from {', '.join(METHODS + PEER_METHODS)}.")
        methods = list(dict.fromkeys(methods))  # a method named twice would be timed twice as one
        default = device_default_tree(gpu_available())[0]
        tree_kwargs = {**{k: getattr(default, k) for k in TREE_FIELDS}, **tree_overrides(args)}
        if args.budget in ("auto", None):
            methods = list(auto_sized(methods))  # as the app's default: auto-sized trees
        check_options_used(args, methods)
        if args.datastore is not None and not Path(args.datastore).expanduser().exists():
            raise ConfigError(f"Datastore (--datastore): {args.datastore} does not exist.")
        for method in methods:  # every tree method's settings, before a model loads
            if split_method(method)[0] in METHODS:
                tree_config(method, tree_kwargs)
        decode_cfg = DecodeConfig(
            temperature=args.temperature,
            seed=args.seed or 0,
            max_new_tokens=args.max_new_tokens or 64,  # None: not given (0 is refused by the parser)
            execution=args.execution,
        )
        try:
            prompts = read_prompts(args.prompts)[: args.limit]
        except OSError as err:  # a missing or unreadable file: say which option named it
            raise ConfigError(f"Prompts (--prompts): cannot read {args.prompts} ({err.strerror or err}).") from err
        if not prompts:
            raise ConfigError(f"{args.prompts} holds no prompts: one JSON object a line with id, category, prompt.")
        out = results.claim_out_file(out, args.overwrite)

        command = "python -m talon.bench " + shlex.join(sys.argv[1:] if argv is None else argv)
        said = {"command": command, "date": datetime.now(UTC).isoformat(timespec="seconds")}

        def save(partial: dict) -> None:
            write_json(out, {**said, **partial})
            saved[:] = [partial]

        result = run_benchmark(
            prompts,
            methods,
            ModelSpec(args.target, args.drafter or "ngram", args.datastore),
            tree_kwargs,
            decode_cfg,
            log=lambda s: print(s, file=sys.stderr),
            assistant=args.assistant,
            checkpoint=save,
        )
    except (ConfigError, ModelLoadError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted(saved[0]["runs"] if saved else [], out)
    result = {**said, **result}
    write_json(out, result)
    table = pd.DataFrame(result["summary"]).set_index("method")
    print(f"device: {result['device']}  model: {result['model']}  drafter: {result['drafter'] or '-'}")
    # a value no run of that method has (ar's hit rate, a peer's depth) prints as "-", whatever its column's type
    table = table.apply(lambda column: column.fillna("-") if column.dtype == object else column)
    print(table.to_string(float_format=lambda x: f"{x:.3f}", na_rep="-"))
    if warning := busy_warning(result.get("other_share")):
        print(warning, file=sys.stderr)
    print(f"wrote {args.out}")
    return 0


def main_suite(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The suite mode (``--suite``): a results directory, the overall table on stdout."""
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    out_dir, written = Path(args.out_dir), []  # written: whether this run has written results yet
    existed = out_dir.exists()
    try:
        methods, experiments = _comma_list(args.methods), _comma_list(args.experiments)
        for option, named in (("--methods", methods), ("--experiments", experiments)):
            if named == []:  # "," named none: the suite's whole list would run unasked
                raise ConfigError(f"{option} names none: a comma list, or leave {option} out for the suite's own")
        suite = with_overrides(
            get_suite(args.suite),
            drafter=args.drafter,
            assistant=args.assistant,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
            tree=tree_overrides(args),
            methods=tuple(methods) if methods else None,
            experiments=tuple(experiments) if experiments else None,
            auto=args.budget == "auto",
        )
        check_options_used(args, [m for e in suite.experiments for m in e.methods], suite=suite.name)
        check_suite_settings(suite, device_default_tree(gpu_available())[0])
        command = "python -m talon.bench " + shlex.join(sys.argv[1:] if argv is None else argv)
        out_dir = results.claim_out_dir(out_dir, args.overwrite)

        def save(partial: dict) -> list[Path]:
            if not written:  # the earlier run's files go just before this run's first
                results.clear_earlier(out_dir)
                written.append(True)
            return write_suite(out_dir, partial, command)

        required = ["hf_assisted"] if args.assistant else []  # an assistant named but not loaded is an error
        result = run_suite(suite, args.target, args.limit, log, checkpoint=save, required=required)
    except (ConfigError, ModelLoadError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        results.drop_if_unused(out_dir, existed)
        return 2
    except KeyboardInterrupt:
        runs = results.read_results(out_dir)[1] if written else None
        if not written:
            results.drop_if_unused(out_dir, existed)
        return interrupted([] if runs is None else runs.to_dict("records"), out_dir)
    paths = save(result)
    table = pd.DataFrame([r for r in result["summary"] if r["category"] == results.ALL])
    if table.empty:
        print(f"No run was measured (skipped: {result['meta']['skipped'] or 'none'}); wrote {out_dir}", file=sys.stderr)
        return 1
    planned = {m for e in suite.experiments for m in e.methods} - {"ar"}
    if planned and set(table["method"]) <= {"ar"}:  # every method asked for was skipped: only the baseline ran
        print(
            f"Only plain decoding was measured: every other method was skipped ({result['meta']['skipped']}); "
            f"wrote {out_dir}",
            file=sys.stderr,
        )
        return 1
    cols = [
        "experiment",
        "setting",
        "temperature",
        "method",
        "prompts",
        "MAT",
        "delta",
        "tokens_per_s",
        "speedup",
        "draft_share",
        "matches_ar",
    ]
    print(f"device: {result['meta']['device']}  model: {result['meta']['model']}  drafter: {suite.drafter}")
    print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    for comparison in results.auto_against_fixed(result["runs"]):
        print(results.describe_auto_against_fixed(comparison))
    if warning := busy_warning(result["meta"].get("other_share")):
        print(warning, file=sys.stderr)
    print(f"wrote {len(paths)} files to {out_dir}; charts: python -m viz.bench_plots {shlex.quote(str(out_dir))}")
    return 0


def main_cost(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The cost suite: ``cost.csv`` and ``meta.json`` in ``--out-dir``, the table on stdout."""
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    out_dir = Path(args.out_dir)
    existed = out_dir.exists()
    try:
        out_dir = results.claim_out_dir(out_dir, args.overwrite)
        registry = ModelRegistry()
        started = time.perf_counter()
        target = registry.get(args.target, progress=log)
        t0 = time.perf_counter()
        measured = measure_cost(target, registry, args.drafter or "head", log=log)
    except (ConfigError, ModelLoadError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        results.drop_if_unused(out_dir, existed)
        return 2
    except KeyboardInterrupt:  # nothing is written before the measurement ends
        results.drop_if_unused(out_dir, existed)
        print("interrupted before the measurement ended: nothing was written", file=sys.stderr)
        return 130
    rows = measured.rows
    command = "python -m talon.bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    results.clear_earlier(out_dir)
    path = results.write_cost(out_dir, rows)
    meta = {
        "suite": COST_SUITE,
        "description": "Wall time of one step's pieces on this device, as ratios to one "
        "autoregressive step: verifying trees of 1 to 128 nodes, one draft-head call per frontier width.",
        "complete": True,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": target.name,
        "target_spec": args.target,
        "drafter_spec": args.drafter or "head",
        **environment(target),
        "seconds": round(time.perf_counter() - t0, 1),  # the measurement; the model's load apart
        "load_seconds": round(t0 - started, 1),
        "command": command,
        "other_share": measured.other_share,  # of the CPU, taken by other processes while it was measured
        "cached": measured.cached,  # whether auto-sized runs here now use this curve
        "files": [path.name, results.META],
    }
    results.write_meta(out_dir, meta)
    print(
        pd.DataFrame(rows)[["component", "size", "lm_head_rows", "seconds", "ratio"]].to_string(
            index=False, float_format=lambda x: f"{x:.4f}"
        )
    )
    print(f"wrote {path} and {results.META}; charts: python -m viz.bench_plots {shlex.quote(str(out_dir))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.suite == COST_SUITE:
        return main_cost(args, argv)
    return main_suite(args, argv) if args.suite else main_methods(args, argv)
