"""A plausible pre-image of the embedded 4-bit model: each Q4_1 block of 32 weights gets uniform noise within
its quantization bin (+-d/2, d = (max - min) / 15), the Q8_0 embeddings within theirs (+-d/2, d = max|x| /
127), so quantizing it again as llama.cpp does gives back the embedded weights. Saved as a local directory."""
import sys
import torch
from talon.models.loading import load_model

out = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
lm = load_model("embedded", stock=True)
g = torch.Generator().manual_seed(seed)
checked = 0
with torch.no_grad():
    for name, p in lm.model.named_parameters():
        if p.dim() != 2:
            continue
        blocks = p.reshape(-1, 32)
        if "embed_tokens" in name:
            d = blocks.abs().amax(1, keepdim=True) / 127
        else:
            lo, hi = blocks.amin(1, keepdim=True), blocks.amax(1, keepdim=True)
            d = (hi - lo) / 15
            q = (blocks - lo) / d.clamp_min(1e-30)
            off = (q - q.round()).abs().max().item()
            assert off < 1e-2, (name, off)  # values sit on the 16-level grid: Q4_1 blocks along the row
            checked += 1
        u = (torch.rand(blocks.shape, generator=g) - 0.5) * d
        blocks.add_(u)
print("Q4_1 tensors checked", checked)
lm.model.save_pretrained(out)
lm.tokenizer.save_pretrained(out)
print("saved", out)
