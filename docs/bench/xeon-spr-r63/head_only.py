"""Head only (run 63, before its C++ normalisers): float32 (FullScores over the model's LM head) vs the screen, pick + token_probs, rows 1..32,
interleaved, medians of 40; the hidden rows are a real verify's (the cost suite's 32-node tree).

    PYTHONPATH=. python docs/bench/xeon-spr-r63/head_only.py
"""
import statistics, time, torch, dataclasses
from talon.models import lm_head
cap = {}
orig = lm_head.ScreenedHead.scores
from talon.models.registry import ModelRegistry
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.lm_head import FullScores
torch.set_num_threads(2)
target = ModelRegistry().get("embedded")
screen = target.screen or lm_head.ScreenedHead.for_model(target.model)
ids = context_ids(target)
p = _Pieces(target, NoDrafter(), ids, [16, 32], ())
tree = p.trees[32]
out = p.verifier.cached.forward_nodes(tree, range(len(tree)), p.verifier.root_position, logit_rows=None)
p.verifier.drop_tree()
hidden = out.hidden.float()
head = target.model.get_output_embeddings()
print("head module:", type(head).__name__)
def full(h, probs):
    s = FullScores(target.logits(h)) if hasattr(target, "logits") else FullScores(head(h))
    s.pick(0.0, None)
    if probs: s.token_probs(list(range(h.shape[0] - 1)), [5] * (h.shape[0] - 1), 0.0)
def scr(h, probs):
    s = screen.scores(h)
    s.pick(0.0, None)
    if probs: s.token_probs(list(range(h.shape[0] - 1)), [5] * (h.shape[0] - 1), 0.0)
with torch.inference_mode():
  for rows in (1, 2, 4, 8, 16, 20, 32):
    h = hidden[:rows].contiguous()
    t = {"f32": [], "screen": []}
    for r in range(44):
        for name, f in (("f32", full), ("screen", scr)) if r % 2 else (("screen", scr), ("f32", full)):
            t0 = time.perf_counter(); f(h, rows > 1); dt = time.perf_counter() - t0
            if r >= 4: t[name].append(dt)
    a, b = statistics.median(t["f32"]) * 1e3, statistics.median(t["screen"]) * 1e3
    print(f"{rows:2d} rows: f32 {a:.2f} ms, screen {b:.2f} ms ({b/a:.3f})", flush=True)
