"""MKL's first-call race (PyTorch issue #188792) on this machine, in fresh processes: (1) plain PyTorch, the
first two-thread exp / sin / cos / sqrt of a [1, 40, 64] tensor of rotary angles against its second call,
without and with ``warm_vector_math`` first; (2) the embedded model's first 40-token prefill against its
second (the rotary embedding's cos), with the load's warm-up switched off and on.

    PYTHONPATH=. python docs/bench/xeon-spr-r62/vml_first_call.py PROCESSES
"""

import subprocess
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10

PLAIN = """
import sys, torch
torch.set_num_threads(2)
if sys.argv[2] == "warm":
    from talon.models.vector_math import warm_vector_math
    warm_vector_math()
x = torch.arange(40)[:, None].float() * (1.0 / (100000 ** (torch.arange(0, 64, 2).float() / 64)))[None]
x = torch.cat([x, x], -1)[None]
f = getattr(torch, sys.argv[1])
print("same" if torch.equal(f(x), f(x)) else "differs")
"""

MODEL = """
import sys, torch
from talon.models import loading
if sys.argv[1] == "off":
    loading.warm_vector_math = lambda: None
from talon.engine.cost_measure import context_ids
from talon.models.registry import ModelRegistry
torch.set_num_threads(2)
target = ModelRegistry().get("embedded")
ids = torch.tensor([context_ids(target)[:40]])
with torch.inference_mode():
    first, second = (target.model(ids).logits for _ in range(2))
print("same" if torch.equal(first, second) else "differs")
"""


def run(script: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "error: " + out.stderr[-200:]


for warm in ("cold", "warm"):
    for name in ("exp", "sin", "cos", "sqrt"):
        results = [run(PLAIN, name, warm) for _ in range(N)]
        print(f"plain PyTorch, {warm:4s}, first {name:4s}: differs from its second call in {results.count('differs')} of {N}", flush=True)
for switch in ("off", "on"):
    results = [run(MODEL, switch) for _ in range(N)]
    print(f"embedded model, load's warm-up {switch:3s}: first prefill differs from the second in {results.count('differs')} of {N}", flush=True)
