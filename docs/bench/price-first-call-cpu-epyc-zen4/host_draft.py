"""Host time of a TALON step's drafting on this machine: the drafting clock minus the head's model
forwards and LM head, per drafter call, and the step's bookkeeping, over three runs of one prompt
(TALON N=24, K=10, mu=0.03, the shipped head, 64 tokens).  With an argument, a fourth run under
cProfile (the talon functions, by ``tottime`` if that is the argument, else by cumulative time).  From
the repository root:

    PYTHONPATH=. python docs/bench/price-first-call-cpu-epyc-zen4/host_draft.py [tottime|cumtime]"""

import cProfile
import functools
import pstats
import statistics as st
import sys
import time

from talon.config import DecodeConfig, TreeConfig
from talon.drafters import head as headmod
from talon.drafters.factory import make_drafter
from talon.engine.decode import encode_prompt, run_to_end
from talon.models.registry import ModelRegistry

inside = [0.0]


def timed(f):
    @functools.wraps(f)
    def w(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            inside[0] += time.perf_counter() - t0

    return w


headmod.HeadCache._model_forward = timed(headmod.HeadCache._model_forward)
headmod.HeadCache.logits = timed(headmod.HeadCache.logits)
reg = ModelRegistry()
target = reg.get("embedded")
ids = encode_prompt(target, "Write a Python function that returns the n-th Fibonacci number.")
cfg = TreeConfig(method="talon", budget=24, topk=10, mu=0.03, depth=8, gamma=5)
for _ in range(3):
    inside[0] = 0.0
    drafter = make_drafter("head", target, reg)
    tr = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=64), prompt_ids=ids, texts=False)
    draft = sum(s.draft_seconds for s in tr.steps)
    calls = sum(len(s.call_widths) for s in tr.steps)
    book = st.mean(s.bookkeeping_seconds for s in tr.steps)
    print(
        f"steps {len(tr.steps)} calls {calls} draft {1e3 * draft / calls:.3f} ms/call, model+logits "
        f"{1e3 * inside[0] / calls:.3f}, host {1e3 * (draft - inside[0]) / calls:.3f} ms/call; "
        f"book {1e3 * book:.3f} ms/step"
    )
if len(sys.argv) > 1:
    drafter = make_drafter("head", target, reg)
    profile = cProfile.Profile()
    profile.enable()
    run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=64), prompt_ids=ids, texts=False)
    profile.disable()
    pstats.Stats(profile).sort_stats(sys.argv[1] if sys.argv[1] in ("tottime", "cumtime") else "cumtime").print_stats(
        "talon", 45
    )
