"""Re-write an EAGLE-3 head for another engine: ``python -m talon.drafters.export_eagle3 HEAD OUT --target T``.

``HEAD`` is any head ``eagle3:`` reads (a ``train_head --arch eagle3`` export, an EAGLE release, a
SpecForge export, a speculators-format head; a directory or a Hub id).  It is loaded for the target
``T`` (so a mismatched pair is refused, and the new files record the target's checksum) and written
to ``OUT`` with ``save_eagle3``: ``--layout eagle`` (EAGLE's layout: EAGLE's own code, SGLang, vLLM)
or ``--layout speculators`` (vLLM's speculators format; ``--verifier`` is the target's Hub id vLLM
serves when given only the head).  The provenance in the head's ``talon`` block is carried over.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ..config import ConfigError
from ..files import file_in_the_way
from ..models.loaded import ModelLoadError
from ..models.loading import load_model
from .eagle3_model import EAGLE3_FILES, LAYOUTS, load_eagle3, read_head_files, save_eagle3
from .head_model import resolve_head_dir

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
REWRITTEN = ("feature_layers", "feature_layers_convention", "target_name", "target_sha256")
"""Keys of a ``talon`` block that ``save_eagle3`` writes afresh for the target it is given."""


def export_head(
    head: str,
    out: str | Path,
    target: str,
    layout: str = "speculators",
    verifier: str | None = None,
    speculative_tokens: int = 3,
    dtype: torch.dtype = torch.bfloat16,
) -> Path:
    """Load the head ``head`` for the target ``target`` (a model spec: ``embedded``, a directory or a
    Hub id) in float32 on the CPU and write it to ``out`` in ``layout`` and ``dtype``; ``verifier``
    defaults to ``target`` unless that is ``embedded``.  Returns ``out``."""
    loaded = load_model(target, device=torch.device("cpu"), dtype=torch.float32)
    directory = resolve_head_dir(head, EAGLE3_FILES, "EAGLE-3 head")
    network = load_eagle3(directory, loaded, dtype=torch.float32)
    meta, _ = read_head_files(directory)
    extra = {k: v for k, v in (meta.get("talon") or {}).items() if k not in REWRITTEN}
    extra["exported_from"] = head
    return save_eagle3(
        network,
        out,
        loaded,
        extra,
        dtype,
        layout=layout,
        verifier=verifier or (None if target == "embedded" else target),
        speculative_tokens=speculative_tokens,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m talon.drafters.export_eagle3",
        description="Re-write an EAGLE-3 head in EAGLE's layout or vLLM's speculators format.",
    )
    p.add_argument("head", help="the head: a directory or Hub id in any layout 'eagle3:' reads")
    p.add_argument("out", type=Path, help="the directory to write")
    p.add_argument(
        "--target", required=True, help="the target the head drafts for: 'embedded', a directory or a Hub id"
    )
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="speculators",
        help="'speculators' (vLLM's format) or 'eagle' (EAGLE's layout: EAGLE, SGLang, vLLM)",
    )
    p.add_argument("--verifier", default=None, help="speculators: the target's Hub id vLLM serves (default --target)")
    p.add_argument("--speculative-tokens", type=int, default=3, help="speculators: vLLM's default draft length")
    p.add_argument("--dtype", choices=list(DTYPES), default="bfloat16", help="dtype of the written weights")
    args = p.parse_args(argv)
    if args.speculative_tokens < 1:
        p.error(f"--speculative-tokens (tokens vLLM drafts a step) must be at least 1, not {args.speculative_tokens}")
    blocking = file_in_the_way(args.out)
    if blocking is not None:
        p.error(f"{blocking} is a file: OUT names the folder the head is written to")
    try:
        out = export_head(
            args.head, args.out, args.target, args.layout, args.verifier, args.speculative_tokens, DTYPES[args.dtype]
        )
    except (ModelLoadError, ConfigError, OSError, ValueError) as err:  # each says what to do; no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.layout} layout -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
