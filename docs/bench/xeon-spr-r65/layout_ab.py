"""Codes layouts / kernel revisions side by side in one process: each variant's build packs the model's
streamed weights into its own huge-page arena (forward order); per round the build and its arena swap in."""
import statistics, sys, tempfile
from pathlib import Path
import torch
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models import stream_gemm
from talon.models.registry import ModelRegistry
from talon.models.weight_arena import streamed_weights, huge_page_buffer
torch.set_num_threads(2)
ROUNDS = int(sys.argv[1]); specs = sys.argv[2:]   # name=path[:define]
builds = {}
for spec in specs:
    name, rest = spec.split("=", 1)
    path, _, define = rest.partition(":")
    f = Path(tempfile.mkdtemp()) / "stream_gemm.cpp"
    f.write_text((f"#define {define}\n" if define else "") + Path(path).read_text())
    builds[name] = stream_gemm.load_build(stream_gemm.instruction_set(), str(f.parent), f, suffix="_" + name)
target = ModelRegistry().get("embedded")
weights = [w for w in streamed_weights(target.model) if w.codes]
ext0 = stream_gemm.extension()
floats = []
with torch.inference_mode():
    for w in weights:
        eye = torch.eye(w.in_features)
        floats.append(ext0.linear(eye, w.data, w.out_features, None, None).T.contiguous())
arenas = {}
for name, b in builds.items():
    codes = [b.pack_codes(f) for f in floats]
    assert all(c is not None for c in codes)
    buf = huge_page_buffer(sum(-(-c.numel() // 64) * 64 for c in codes)); off = 0; views = []
    for c in codes:
        v = buf[off: off + c.numel()].view(c.shape); v.copy_(c); views.append(v); off += -(-c.numel() // 64) * 64
    arenas[name] = views
sizes = [1, 8, 16, 32]
pieces = _Pieces(target, NoDrafter(), context_ids(target), sizes, ())
ref = None
times = {(n, p): [] for n in builds for p in ["plain", *sizes]}
for r in range(ROUNDS + 1):
    for name in (list(builds) if r % 2 == 0 else list(builds)[::-1]):
        stream_gemm.extension = lambda b=builds[name]: b
        for w, v in zip(weights, arenas[name]): w.data = v
        for piece in ["plain", *sizes]:
            for _ in range(3):
                took = pieces.plain_step() if piece == "plain" else pieces.verify(piece)
                if r >= 1: times[(name, piece)].append(took)
for name in builds:
    med = {p: statistics.median(times[(name, p)]) * 1e3 for p in ["plain", *sizes]}
    print(f"{name:10s} plain {med['plain']:.2f} ms, " + ", ".join(f"verify({s}) {med[s]:.2f} = {med[s]/med['plain']:.3f}x" for s in sizes), flush=True)
