"""Charts of a benchmark results directory as files: ``python -m viz.bench_plots DIR [DIR ...]``.

``python -m talon.bench --suite NAME --out-dir DIR`` writes the data (runs.csv, summary.csv,
meta.json); this draws ``viz.bench_charts``' figures from it as standalone HTML (Plotly from its CDN)
and, where a static exporter (kaleido + a Chrome) works, PNG, and records them in meta.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import plotly.io as pio

from talon.bench import results

from . import bench_charts


def write_plots(out_dir: Path, png: bool = True) -> tuple[list[Path], str]:
    """Draw the charts of the results in ``out_dir`` into it; returns the files written and a sentence
    on PNG export.  Charts with no data are left out."""
    _, _, summary = results.read_results(out_dir)
    figures = bench_charts.figures(summary, include_empty=False, cost=results.read_cost(out_dir))
    written = []
    for name, fig in figures.items():
        path = out_dir / f"{name}.html"
        fig.write_html(path, include_plotlyjs="cdn", full_html=True)
        written.append(path)
    if not png:
        return written, "PNG skipped (--no-png)."
    try:
        paths = [out_dir / f"{name}.png" for name in figures]
        pio.write_images(list(figures.values()), paths, width=1000)
        return written + paths, "PNG written with kaleido."
    except Exception as err:  # noqa: BLE001 - any exporter failure only means no PNG
        return written, f"PNG skipped: no working static image exporter ({type(err).__name__}: {str(err)[:200]})."


def record_plots(out_dir: Path, png: bool = True, partial: bool = False) -> list[Path]:
    """``write_plots`` and list the charts in the directory's meta.json (``files``, ``png``); ``ValueError``
    for a path that is not a results directory (nothing is written there), or for a suite that stopped
    before its end unless ``partial`` (its meta.json keeps ``complete: false``)."""
    written_by = "name a folder written by python -m talon.bench --suite NAME --out-dir DIR."
    if not out_dir.exists():
        raise ValueError(f"{out_dir} does not exist: {written_by}")
    if not out_dir.is_dir() or not any((out_dir / name).is_file() for name in ("runs.csv", results.COST)):
        raise ValueError(f"{out_dir} is not a results directory (no runs.csv or {results.COST}): {written_by}")
    meta, _, _ = results.read_results(out_dir)
    if not meta.get("complete", True) and not partial:
        raise ValueError(
            f"{out_dir}: the suite has not finished (meta.json says complete: false); "
            "--partial charts the prompts it measured"
        )
    paths, note = write_plots(out_dir, png)
    names = [p.name for p in paths]
    meta["files"] = [f for f in meta.get("files", []) if f not in names] + names
    meta["png"] = note
    results.write_meta(out_dir, meta)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m viz.bench_plots", description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", help="results directories written by python -m talon.bench --suite")
    p.add_argument("--no-png", action="store_true", help="write HTML charts only")
    p.add_argument(
        "--partial", action="store_true", help="also chart a suite stopped before its end (the prompts it measured)"
    )
    args = p.parse_args(argv)
    for d in args.dirs:
        try:
            paths = record_plots(Path(d), png=not args.no_png, partial=args.partial)
        except (OSError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"{d}: wrote {', '.join(p.name for p in paths) or 'no charts (no data)'}")
        meta = results.read_meta(Path(d))
        if meta.get("complete") is False:
            print(f"{d}: partial results: the suite stopped before its end", file=sys.stderr)
        if paths and not any(p.suffix == ".png" for p in paths) and not args.no_png:
            print(f"{d}: {meta.get('png', 'PNG skipped.')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
