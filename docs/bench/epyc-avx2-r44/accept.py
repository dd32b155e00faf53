"""The shipped head's acceptance on the embedded target and on a plausible pre-image of its 4-bit weights
(make_original.py): TALON at a fixed N (the trees' acceptance, not the speed), greedy, the example prompts."""
import json, sys
from pathlib import Path
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.head import HeadDrafter
from talon.drafters.head_model import SHIPPED_HEAD, HEAD_CONFIG, load_head
from talon.drafters.factory import load_drafter_tables
from talon.engine.decode import run_to_end
from talon.models.loading import load_model
from talon import metrics

prompts = [json.loads(l) for l in Path("assets/prompts.jsonl").read_text().splitlines() if l.strip()]
digest = json.loads((SHIPPED_HEAD / HEAD_CONFIG).read_text())["target_sha256"]
cfg = TreeConfig(method="talon", budget=int(sys.argv[2]) if len(sys.argv) > 2 else 24, topk=6, mu=0.1)
for spec in ["embedded", sys.argv[1]]:
    target = load_model(spec)
    head = load_head(SHIPPED_HEAD, target, checksum=digest)  # the experiment: the head on other weights
    rows = []
    for p in prompts:
        d = HeadDrafter(head, target, "head")
        t = run_to_end(target, d, cfg, DecodeConfig(max_new_tokens=64), prompt=p["prompt"])
        rows.append((p["category"], metrics.mat(t.steps), len(t.output_ids)))
    mats = [m for _, m, _ in rows]
    by_cat = {}
    for c, m, _ in rows:
        by_cat.setdefault(c, []).append(m)
    print(spec, "MAT mean %.3f" % (sum(mats) / len(mats)), {c: round(sum(v) / len(v), 2) for c, v in by_cat.items()}, flush=True)
