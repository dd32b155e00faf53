"""Whether TALON's float32 kernel sharing a process slows an unmodified model's generate(): the stock
embedded model's 64-token greedy generate() after a 600 MB sweep of the caches, six times before the
kernel is built or loaded, then six times after the packed target (on the kernel) ran a forward before
each.  From the repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r35/generate_alongside.py"""
import time, torch, statistics
from talon.models.registry import ModelRegistry
from talon.engine.decode import encode_prompt
reg = ModelRegistry()
stock = reg.get_stock("embedded")
ids = encode_prompt(stock, "Write a short story about a robot who learns to paint.")
x = torch.tensor([ids])
def gen():
    t = time.perf_counter()
    with torch.inference_mode():
        stock.model.generate(x, max_new_tokens=64, do_sample=False, min_new_tokens=64)
    return time.perf_counter() - t
import talon.models.stream_gemm as sg
print("loaded before?", sg.extension.cache_info())
junk = torch.randn(150_000_000)
def sweep():
    junk.mul_(1.0)  # 600 MB through the caches
def cold():
    sweep(); return gen()
before = [cold() for _ in range(6)]
target = reg.get("embedded")  # builds/loads the kernel, packs on it
from talon.models.cpu_linear import packed_kernel
print("target kernel", packed_kernel(target.model))
after = []
for _ in range(6):
    with torch.inference_mode():
        target.model(x)  # our kernel runs
    after.append(cold())
print("generate before", [round(t,3) for t in before], "median", round(statistics.median(before),3))
print("generate after ", [round(t,3) for t in after], "median", round(statistics.median(after),3))
