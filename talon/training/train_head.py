"""Train an EAGLE-style draft head for a target by self-distillation.

    python -m talon.training.train_head --out runs/head-smollm2 --ship assets/heads/smollm2-135m-instruct

Stages, each resumable (a finished stage is skipped; training resumes from its last checkpoint):

1. **generate**: the target answers every prompt of ``talon.training.prompt_pool`` (batched) ->
   ``sequences.jsonl`` (prompt ids, response ids, category, train / held-out split).  A train prompt
   gets one answer per temperature of ``--answers`` (0 = greedy; sampled answers are seeded), a
   held-out prompt one greedy answer, as when decoding.
2. **features**: one teacher-forced target forward per sequence -> ``features.pt``: the target's hidden
   states at the head's ``feature_layers`` and its top-k next-token distribution at every position.
3. **train**: the head learns to match the target's next-token distribution (soft cross-entropy over
   the target's top-k) at depth 1 and, with EAGLE-3's training-time test, at depths 2..``ttt_steps``
   where it reads its own earlier outputs.  Checkpoints every ``--ckpt-every`` batches.
4. **evaluate + export**: depth-1 top-1 agreement and top-5 coverage on the held-out split, per
   category; the head is written with its target's checksum (``--ship`` copies it into assets/),
   with its draft vocabulary (``--draft-vocab N``: the N tokens the head may draft, counted from the
   training answers; ``draft_vocab.json``).

``--arch`` picks the network: ``talon`` (``DraftHead``, the shipped head's) or ``eagle3``
(``Eagle3Head``: EAGLE-3's layer, written in EAGLE-3's layout, ``config.json`` +
``model.safetensors``, so it loads with the drafter spec ``eagle3:DIR`` and in SGLang / vLLM).

Two more entry points reuse the stages: ``--vocab-only`` writes only the draft vocabulary (from the
sequences in ``--out``) into ``--ship``; ``--eval-only HEAD_DIR`` generates answers for the held-out
prompts only and evaluates that head on them (as loaded for decoding: on this machine's device and
dtype, with its draft vocabulary), writing ``eval_only.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path

import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm
from transformers import DynamicCache

from ..config import ConfigError
from ..drafters.eagle3_model import EAGLE3_CONFIG, Eagle3Head, load_eagle3, save_eagle3
from ..drafters.head import HeadNetwork
from ..drafters.head_fingerprint import write_fingerprint
from ..drafters.head_model import DRAFT_VOCAB, HEAD_WEIGHTS, DraftHead, HeadConfig, load_head
from ..engine.stopping import cut_at_eos
from ..files import file_in_the_way, write_atomically, write_text_atomically
from ..models.loaded import LoadedModel, ModelLoadError
from ..models.loading import load_model
from .prompt_pool import CATEGORY_SHARES, build_prompt_pool

TOP_K = 20  # target distribution kept per position (its probability mass is what the loss matches)
SEQUENCES = "sequences.jsonl"
FEATURES = "features.pt"
ARCHS = ("talon", "eagle3")


@dataclass
class TrainArgs:
    out: Path
    target: str = "embedded"
    prompts: int = 1200
    max_new_tokens: int = 128
    gen_batch: int = 16
    heldout: float = 0.1
    epochs: int = 2
    ttt_steps: int = 3
    lr: float = 2e-3
    batch_size: int = 8
    max_len: int = 384
    ckpt_every: int = 20
    seed: int = 0
    ship: Path | None = None
    init: Path | None = None
    draft_vocab: int = 16384
    vocab_only: bool = False
    eval_only: Path | None = None
    answers: tuple[float, ...] = (0.0,)  # one answer per temperature for each train prompt (0 = greedy)
    arch: str = "talon"  # one of ARCHS
    layout: str = "eagle"  # --arch eagle3: "eagle" (EAGLE / SGLang) or "speculators" (vLLM)


def new_head(arch: str, target: LoadedModel) -> HeadNetwork:
    """A fresh, untrained head of ``arch`` for ``target`` (float32, on the CPU)."""
    if arch == "eagle3":
        return Eagle3Head.for_target(target)
    return DraftHead(HeadConfig.for_target(target))


def load_any_head(directory: Path, target: LoadedModel) -> HeadNetwork:
    """A trained head of either architecture, as decoding loads it (EAGLE-3 layout when the directory
    has ``config.json``)."""
    return load_eagle3(directory, target) if (directory / EAGLE3_CONFIG).is_file() else load_head(directory, target)


# ---- what a run folder was made with ---------------------------------------------------------------------
RUN_SETTINGS = "settings.json"
DATA_SETTINGS = ("target", "prompts", "heldout", "seed", "max_new_tokens", "answers", "max_len")
"""What shapes ``sequences.jsonl`` and ``features.pt`` (``gen_batch`` only reseeds sampled answers)."""
TRAIN_SETTINGS = ("arch", "epochs", "ttt_steps", "lr", "batch_size", "init")
"""What shapes ``checkpoint.pt`` (a resumed run follows the schedule of its own epochs and batches)."""


def _setting(args: TrainArgs, name: str):
    value = getattr(args, name)
    return str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value


def claim_run_folder(args: TrainArgs, names: Iterable[str]) -> None:
    """Record in ``args.out`` the settings ``names`` its stages are made with, or ``ConfigError`` when the
    folder holds a run made with others: a resumed stage reuses what is there (answers, features, the
    checkpoint), so a changed ``--prompts`` would train on the old features and report it as the new run."""
    path = args.out / RUN_SETTINGS
    try:
        kept = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    changed = [
        f"--{n.replace('_', '-')} {kept[n]} (now {_setting(args, n)})"
        for n in names
        if n in kept and kept[n] != _setting(args, n)
    ]
    if changed:
        raise ConfigError(
            f"{args.out} holds a run made with {', '.join(changed)}; its stages would be reused as they are: "
            "use another --out, or the folder's settings to resume it."
        )
    write_text_atomically(path, json.dumps({**kept, **{n: _setting(args, n) for n in names}}, indent=1))


# ---- files a run may be stopped while writing --------------------------------------------------------
def read_sequences(path: Path, repair: bool = False) -> list[dict]:
    """The rows of a ``sequences.jsonl`` (none if it does not exist).  A last line without its newline
    (a run stopped mid-write) is not a row; ``repair=True`` also cuts it from the file, so that a
    resumed run appends after whole rows."""
    if not path.exists():
        return []
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    if repair and len(whole) < len(data):
        with path.open("r+b") as f:
            f.truncate(len(whole))
    return [json.loads(line) for line in whole.decode("utf-8").splitlines() if line.strip()]


def save_atomic(obj, path: Path) -> None:
    """``torch.save`` through a temporary file, so that a run stopped mid-save leaves the old file (or
    none), never a truncated one that a resumed run would fail to load."""
    write_atomically(path, lambda f: torch.save(obj, f))


# ---- 1. generation -----------------------------------------------------------------------------------
def answer_plan(split: str, answers: tuple[float, ...]) -> list[tuple[int, float]]:
    """``(answer index, temperature)`` pairs a prompt of ``split`` is answered with: one per temperature
    of ``answers`` for a train prompt, a single greedy answer for a held-out one."""
    return list(enumerate(answers)) if split == "train" else [(0, 0.0)]


def pool_split(args: TrainArgs) -> tuple[list[dict], dict[str, str]]:
    """The prompt pool of ``args`` and each prompt's split (``"train"`` or ``"heldout"``, drawn per prompt
    with probability ``args.heldout``), by prompt id."""
    pool = build_prompt_pool(seed=args.seed, size=args.prompts)
    rng = random.Random(args.seed)
    return pool, {item["id"]: ("heldout" if rng.random() < args.heldout else "train") for item in pool}


def generate_sequences(
    target: LoadedModel, args: TrainArgs, log=print, splits: tuple[str, ...] = ("train", "heldout")
) -> Path:
    """Target answers for the prompts of the pool in ``splits`` (see ``answer_plan``), appended batch by
    batch (resumable: a row is keyed by prompt id and answer index)."""
    path = args.out / SEQUENCES
    done = {(r["id"], r.get("answer", 0)) for r in read_sequences(path, repair=True)}

    pool, split = pool_split(args)
    # A batch holds one temperature (``generate`` takes one); similar lengths share a batch (little padding).
    todo = sorted(
        (
            (k, temp, item)
            for item in pool
            if split[item["id"]] in splits
            for k, temp in answer_plan(split[item["id"]], args.answers)
            if (item["id"], k) not in done
        ),
        key=lambda job: (job[1], job[0], len(job[2]["prompt"])),
    )
    if not todo:
        return path
    tok = target.tokenizer
    tok.padding_side = "left"
    eos = target.eos_token_ids
    log(
        f"generate: {len(todo)} answers to {len({j[2]['id'] for j in todo})} of {len(pool)} prompts "
        f"({args.max_new_tokens} new tokens max, temperatures {sorted({j[1] for j in todo})})"
    )
    with path.open("a", encoding="utf-8") as f, torch.inference_mode():
        for batch in tqdm(generation_batches(todo, args.gen_batch), desc="generate", unit="batch"):
            temp = batch[0][1]
            texts = [
                tok.apply_chat_template(
                    [{"role": "user", "content": b["prompt"]}], tokenize=False, add_generation_prompt=True
                )
                for _, _, b in batch
            ]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(target.device)
            sampling = dict(do_sample=True, temperature=temp, top_k=0, top_p=1.0) if temp > 0 else dict(do_sample=False)
            # Seeded by the batch's prompts, so a run from scratch samples the same answers again (a
            # resumed run cuts its remaining batches differently: other, equally valid samples).
            torch.manual_seed(zlib.crc32(f"{args.seed}/{temp}/{','.join(b['id'] for _, _, b in batch)}".encode()))
            out = target.model.generate(
                **enc, **sampling, max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id
            )
            for row, (k, _, item) in enumerate(batch):
                prompt_ids = enc["input_ids"][row][enc["attention_mask"][row].bool()].tolist()
                response = cut_at_eos(out[row, enc["input_ids"].shape[1] :].tolist(), eos)
                f.write(
                    json.dumps(
                        {
                            "id": item["id"],
                            "answer": k,
                            "temperature": temp,
                            "category": item["category"],
                            "split": split[item["id"]],
                            "prompt_ids": prompt_ids,
                            "response_ids": response,
                        }
                    )
                    + "\n"
                )
            f.flush()
    return path


def generation_batches(jobs: list[tuple], size: int) -> list[list[tuple]]:
    """``(answer index, temperature, prompt)`` jobs, sorted by temperature, in batches of at most
    ``size`` that each hold one temperature (``generate`` takes one per call)."""
    batches = []
    for _, same_temperature in groupby(jobs, key=itemgetter(1)):
        group = list(same_temperature)
        batches += [group[s : s + size] for s in range(0, len(group), size)]
    return batches


# ---- 2. features -------------------------------------------------------------------------------------
def extract_features(target: LoadedModel, feature_layers: Iterable[int], args: TrainArgs, log=print) -> list[dict]:
    """Teacher-forced target states at ``feature_layers`` and top-k distributions for every sequence
    (float16), one item per sequence; computed once and kept in ``features.pt`` (a later call loads
    that file, and refuses it when it holds other layers)."""
    path = args.out / FEATURES
    layers = list(feature_layers)
    if path.exists():
        items = torch.load(path)
        if items and items[0].get("layers", layers) != layers:
            raise SystemExit(
                f"{path} holds the target's layers {items[0]['layers']}, this head reads {layers}: "
                "use another --out for another --arch."
            )
        return items
    rows = read_sequences(args.out / SEQUENCES)
    items = []
    with torch.inference_mode():
        for r in tqdm(rows, desc="features", unit="seq"):
            ids = (r["prompt_ids"] + r["response_ids"])[: args.max_len]
            x = torch.tensor([ids], device=target.device)
            out = target.model(x, output_hidden_states=layers)
            hidden = torch.stack([out.hidden_states[i][0] for i in layers], dim=1)  # [T, L, H]
            logp, top = torch.log_softmax(out.logits[0].float(), dim=-1).topk(TOP_K, dim=-1)
            items.append(
                {
                    "id": r["id"],
                    "category": r["category"],
                    "split": r["split"],
                    "tokens": torch.tensor(ids, dtype=torch.int32),
                    "hidden": hidden.half().cpu(),
                    "top_ids": top.int().cpu(),
                    "top_logp": logp.half().cpu(),
                    "prompt_len": len(r["prompt_ids"]),
                    "layers": layers,
                }
            )
    save_atomic(items, path)
    tokens = sum(len(i["tokens"]) for i in items)
    log(f"features: {len(items)} sequences, {tokens} tokens -> {path}")
    return items


# ---- 3. training ------------------------------------------------------------------------------------
def ttt_mask(length: int, step: int) -> torch.Tensor:
    """Bool ``[length, step * length]`` mask for training-time-test step ``step`` (1-based).

    Query j (head position j + 1) at step s is a depth-(s-1) draft whose root sits at j - s + 1: it
    sees step-1 keys up to the root (committed context with target features) and, in block b >= 2,
    exactly the key at j - s + b (its drafted ancestors and itself)."""
    j = torch.arange(length)[:, None]
    q = torch.arange(length)[None, :]
    blocks = [q <= j - step + 1] + [q == j - step + b for b in range(2, step + 1)]
    return torch.cat(blocks, dim=1)


def _batch(items: list[dict], device) -> dict:
    """Right-padded tensors for a list of feature items (head positions j = 0 .. T-2)."""
    n = max(len(i["tokens"]) for i in items) - 1
    b = len(items)
    h = items[0]["hidden"].shape[-1]
    layers = items[0]["hidden"].shape[1]
    tokens = torch.zeros(b, n, dtype=torch.long)
    feats = torch.zeros(b, n, layers, h)
    top_ids = torch.zeros(b, n, TOP_K, dtype=torch.long)
    top_logp = torch.full((b, n, TOP_K), -math.inf)
    valid = torch.zeros(b, n, dtype=torch.bool)
    first_response = torch.zeros(b, 1, dtype=torch.long)
    for r, it in enumerate(items):
        first_response[r] = it["prompt_len"] - 1  # head position whose root is the first answer token
        t = len(it["tokens"]) - 1
        tokens[r, :t] = it["tokens"][1:].long()  # token at head position j + 1
        feats[r, :t] = it["hidden"][:-1].float()  # target state at position j
        top_ids[r, :t] = it["top_ids"][1:].long()  # target's distribution after token j + 1
        top_logp[r, :t] = it["top_logp"][1:].float()
        valid[r, :t] = True
    return {
        k: v.to(device)
        for k, v in dict(
            tokens=tokens, feats=feats, top_ids=top_ids, top_logp=top_logp, valid=valid, first_response=first_response
        ).items()
    }


def head_loss(head: HeadNetwork, target: LoadedModel, batch: dict, ttt_steps: int) -> tuple[torch.Tensor, list[dict]]:
    """Soft cross-entropy to the target's top-k distribution at depths 1..``ttt_steps``; returns the
    weighted loss and per-step statistics: counted positions ``n``, top-1 agreement ``top1`` and top-5
    coverage ``top5`` over all positions, and the same over answer positions only (``rn``, ``rtop1``,
    ``rtop5``: drafts whose root is a generated token, which is where the head drafts when decoding)."""
    lm_head = target.model.get_output_embeddings()
    tokens, valid = batch["tokens"], batch["valid"]
    b, n = tokens.shape
    embeds = head.embed(tokens, target).float()
    positions = torch.arange(1, n + 1, device=tokens.device).expand(b, n)
    target_p = batch["top_logp"].softmax(dim=-1)  # renormalised top-k
    target_p = torch.nan_to_num(target_p)
    features = head.fuse_features(batch["feats"])
    cache = DynamicCache(config=head.llama_config)
    total, stats = 0.0, []
    for step in range(1, ttt_steps + 1):
        mask = ttt_mask(n, step).to(tokens.device).expand(b, 1, n, step * n)
        states = head(features, embeds, positions, mask, cache)
        logq = torch.log_softmax(head.logits(states, lm_head).float(), dim=-1)  # [b, n, V]
        counted = valid & (torch.arange(n, device=tokens.device) >= step - 1)
        ce = -(target_p * logq.gather(-1, batch["top_ids"])).sum(-1)  # [b, n]
        step_loss = (ce * counted).sum() / counted.sum().clamp(min=1)
        total = total + (0.7 ** (step - 1)) * step_loss
        with torch.no_grad():
            want = batch["top_ids"][..., 0]
            top5 = logq.topk(5, dim=-1).indices
            hit1, hit5 = top5[..., 0] == want, (top5 == want[..., None]).any(-1)
            root = torch.arange(n, device=tokens.device) - (step - 1)
            answer = counted & (root[None, :] >= batch["first_response"])
            stats.append(
                {
                    "n": int(counted.sum()),
                    "top1": int((hit1 & counted).sum()),
                    "top5": int((hit5 & counted).sum()),
                    "rn": int(answer.sum()),
                    "rtop1": int((hit1 & answer).sum()),
                    "rtop5": int((hit5 & answer).sum()),
                    "loss": step_loss.item(),
                }
            )
        # The next depth reads this step's outputs at the previous position.
        features = torch.cat([torch.zeros_like(states[:, :1]), states[:, :-1]], dim=1)
    return total, stats


EVAL_DEPTHS = 3  # draft depths measured by ``evaluate`` whatever ``ttt_steps`` the head was trained with


def evaluate(head: HeadNetwork, target: LoadedModel, items: list[dict]) -> dict:
    """Held-out agreement with the target, overall and per category.

    ``top1`` / ``top5`` count answer positions only (the root is a generated token, as when decoding);
    ``depth2_top1`` / ``depth3_top1`` are the head's top-1 when it reads its own earlier drafts;
    ``all_positions_top1`` also counts prompt positions (teacher-forced over the whole sequence)."""
    head.eval()
    keys = ("n", "top1", "top5", "rn", "rtop1", "rtop5")
    by_cat: dict[str, list[dict]] = {}
    with torch.no_grad():
        for it in items:
            _, stats = head_loss(head, target, _batch([it], target.device), EVAL_DEPTHS)
            acc = by_cat.setdefault(it["category"], [dict.fromkeys(keys, 0) for _ in range(EVAL_DEPTHS)])
            for depth, s in enumerate(stats):
                for k in keys:
                    acc[depth][k] += s[k]
    head.train()

    def rates(acc: list[dict]) -> dict:
        d1 = acc[0]
        out = {"positions": d1["rn"], "top1": d1["rtop1"] / max(d1["rn"], 1), "top5": d1["rtop5"] / max(d1["rn"], 1)}
        for depth in range(2, EVAL_DEPTHS + 1):
            a = acc[depth - 1]
            out[f"depth{depth}_top1"] = a["rtop1"] / max(a["rn"], 1)
        out["all_positions_top1"] = d1["top1"] / max(d1["n"], 1)
        out["all_positions_top5"] = d1["top5"] / max(d1["n"], 1)
        return out

    overall = [{k: sum(v[depth][k] for v in by_cat.values()) for k in keys} for depth in range(EVAL_DEPTHS)]
    return {"overall": rates(overall), "by_category": {c: rates(v) for c, v in sorted(by_cat.items())}}


@contextmanager
def tf32_matmuls():
    """TF32 float32 matmuls on a GPU while training (the frozen 49k-row LM head is most of the work);
    no effect on a CPU.  The previous setting is restored."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def train(target: LoadedModel, head: HeadNetwork, items: list[dict], args: TrainArgs, log=print) -> HeadNetwork:
    """Train (or resume) the fresh ``head`` (``new_head``) on ``extract_features``' items; returns it."""
    torch.manual_seed(args.seed)
    train_items = [i for i in items if i["split"] == "train"]
    heldout = [i for i in items if i["split"] == "heldout"]
    head = head.to(target.device)
    for p in target.model.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(
        [p for p in head.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95)
    )
    batches_per_epoch = math.ceil(len(train_items) / args.batch_size)
    total_steps = batches_per_epoch * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps))
    )
    ckpt = args.out / "checkpoint.pt"
    step = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step = state["step"]
        log(f"train: resumed at batch {step} of {total_steps}")
    elif args.init is not None:  # a talon head's directory (``args_problem``)
        head.load_state_dict({k: v.float() for k, v in load_file(args.init / HEAD_WEIGHTS).items()}, strict=False)
        log(f"train: starting from the head in {args.init}")
    head.train()
    bar = tqdm(total=total_steps, initial=step, desc="train", unit="batch")
    with tf32_matmuls():
        while step < total_steps:
            epoch, index = divmod(step, batches_per_epoch)
            order = list(range(len(train_items)))
            random.Random(args.seed + epoch).shuffle(order)
            chunk = [train_items[k] for k in order[index * args.batch_size : (index + 1) * args.batch_size]]
            loss, stats = head_loss(head, target, _batch(chunk, target.device), args.ttt_steps)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", top1=f"{stats[0]['top1'] / max(stats[0]['n'], 1):.2f}")
            if step % args.ckpt_every == 0 or step == total_steps:
                save_atomic(
                    {"head": head.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step},
                    ckpt,
                )
    bar.close()
    report = evaluate(head, target, heldout)
    tokens = sum(len(i["tokens"]) for i in train_items)
    report["data"] = {
        "train_sequences": len(train_items),
        "train_tokens": tokens,
        "heldout_sequences": len(heldout),
        "heldout_tokens": sum(len(i["tokens"]) for i in heldout),
    }
    (args.out / "eval.json").write_text(json.dumps(report, indent=1))
    log(f"held-out depth-1 top-1 {report['overall']['top1']:.3f}, top-5 {report['overall']['top5']:.3f}")
    return head


# ---- 4. draft vocabulary and export ----------------------------------------------------------------
def draft_vocab(rows: list[dict], size: int, vocab_size: int, always: Iterable[int] = ()) -> list[int]:
    """The ``size`` token ids the head may draft, ascending: ``always`` (e.g. EOS), then the most
    frequent tokens of the train split's answers, then of its prompts (tokens copied from a prompt),
    then the lowest ids not yet taken (BPE merge order, roughly by frequency).  Ties go to the
    lower id.  ``rows``: ``sequences.jsonl`` rows."""
    size = min(size, vocab_size)
    chosen = dict.fromkeys(t for t in always if 0 <= t < vocab_size)
    for key in ("response_ids", "prompt_ids"):
        counts = Counter(t for r in rows if r["split"] == "train" for t in r[key])
        for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if len(chosen) >= size:
                break
            chosen.setdefault(t)
    t = 0
    while len(chosen) < size:
        chosen.setdefault(t)
        t += 1
    return sorted(chosen)


def write_draft_vocab(directory: Path, target: LoadedModel, args: TrainArgs, log=print) -> list[int] | None:
    """Write ``draft_vocab.json`` for the sequences in ``args.out``, with its held-out answer coverage,
    and return its ids (``None``, nothing written, when ``args.draft_vocab`` is 0 or covers the whole
    vocabulary)."""
    vocab_size = target.vocab_size
    if not args.draft_vocab or args.draft_vocab >= vocab_size:
        return None
    rows = read_sequences(args.out / SEQUENCES)
    ids = draft_vocab(rows, args.draft_vocab, vocab_size, target.eos_token_ids)
    kept = set(ids)
    held = [t for r in rows if r["split"] == "heldout" for t in r["response_ids"]]
    coverage = sum(t in kept for t in held) / len(held) if held else None
    train = [r for r in rows if r["split"] == "train"]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / DRAFT_VOCAB
    path.write_text(
        json.dumps(
            {
                "size": len(ids),
                "heldout_answer_coverage": coverage,
                "counted_from": f"{len(train)} train-split answers (then prompts) of the prompt pool in {args.out} "
                f"(seed {args.seed}, {args.prompts} prompts, {args.max_new_tokens} new tokens)",
                "ids": ids,
            }
        )
    )
    log(
        f"draft vocabulary: {len(ids)} tokens, held-out answer coverage "
        f"{'n/a' if coverage is None else f'{coverage:.3f}'} -> {path}"
    )
    return ids


def evaluate_head(args: TrainArgs, log=print) -> dict:
    """``--eval-only``: the head in ``args.eval_only`` on the pool's held-out prompts, as decoding loads
    it (this machine's device and dtype, its draft vocabulary); writes ``eval_only.json``."""
    args.out.mkdir(parents=True, exist_ok=True)
    claim_run_folder(args, DATA_SETTINGS)
    target = load_model(args.target, progress=log)
    head = load_any_head(args.eval_only, target)
    generate_sequences(target, args, log, splits=("heldout",))
    if not (args.out / SEQUENCES).exists():
        raise SystemExit(f"No held-out prompts among {args.prompts}: raise --prompts or --heldout.")
    items = [i for i in extract_features(target, head.config.feature_layers, args, log) if i["split"] == "heldout"]
    if not items:
        raise SystemExit(f"No held-out prompts among {args.prompts}: raise --prompts or --heldout.")
    report = evaluate(head, target, items)
    report["head"] = str(args.eval_only)
    report["device"], report["dtype"] = str(target.device), str(target.dtype).removeprefix("torch.")
    report["draft_vocab"] = None if head.draft_ids is None else int(head.draft_ids.numel())
    report["data"] = {"heldout_sequences": len(items), "heldout_tokens": sum(len(i["tokens"]) for i in items)}
    (args.out / "eval_only.json").write_text(json.dumps(report, indent=1))
    o = report["overall"]
    log(
        f"held-out answer positions {o['positions']}: top-1 {o['top1']:.3f}, top-5 {o['top5']:.3f}, "
        f"depth-2 top-1 {o['depth2_top1']:.3f}, depth-3 top-1 {o['depth3_top1']:.3f}"
    )
    for cat, r in report["by_category"].items():
        log(f"  {cat:>14}: top-1 {r['top1']:.3f}, top-5 {r['top5']:.3f} ({r['positions']} positions)")
    return report


def run(args: TrainArgs, log=print) -> Path:
    """All stages; returns the exported head directory."""
    args.out.mkdir(parents=True, exist_ok=True)
    claim_run_folder(args, DATA_SETTINGS + TRAIN_SETTINGS)
    target = load_model(args.target, progress=log)
    head = new_head(args.arch, target)
    t0 = time.time()
    generate_sequences(target, args, log)
    head = train(target, head, extract_features(target, head.config.feature_layers, args, log), args, log)
    export = args.out / "head"
    report = json.loads((args.out / "eval.json").read_text())
    extra = {
        "training": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "heldout_eval": report["overall"],
        "data": report["data"],
    }
    ids = write_draft_vocab(export, target, args, log)
    if isinstance(head, Eagle3Head):
        if ids is not None:
            head.restrict_vocab(ids)
        save_eagle3(head, export, target, extra, layout=args.layout)
    else:
        head.save(export, extra=extra)
        write_fingerprint(target, export)  # the head also serves the weights its target was quantized from
    if args.ship:
        for name in (p.name for p in export.iterdir()):  # each file whole: a crash never leaves half of one
            write_atomically(args.ship / name, lambda f, name=name: f.write((export / name).read_bytes()))
    log(f"done in {time.time() - t0:.0f} s -> {export}")
    return export


def _temperatures(text: str) -> tuple[float, ...]:
    """``--answers``: comma-separated temperatures, each >= 0."""
    try:
        temps = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not temps or any(t < 0 for t in temps):
        raise argparse.ArgumentTypeError(f"give one or more temperatures >= 0, e.g. 0,0.8: {text!r}")
    return temps


def parse_args(argv: list[str] | None = None) -> TrainArgs:
    p = argparse.ArgumentParser(prog="python -m talon.training.train_head", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="working directory (data, checkpoints, head)")
    p.add_argument("--target", default="embedded")
    p.add_argument("--prompts", type=int, default=TrainArgs.prompts, help="prompts from the pool")
    p.add_argument("--max-new-tokens", type=int, default=TrainArgs.max_new_tokens)
    p.add_argument("--gen-batch", type=int, default=TrainArgs.gen_batch)
    p.add_argument("--heldout", type=float, default=TrainArgs.heldout, help="held-out share of prompts")
    p.add_argument("--epochs", type=int, default=TrainArgs.epochs)
    p.add_argument("--ttt-steps", type=int, default=TrainArgs.ttt_steps, help="1 = no training-time test")
    p.add_argument("--lr", type=float, default=TrainArgs.lr)
    p.add_argument("--batch-size", type=int, default=TrainArgs.batch_size, help="sequences per batch")
    p.add_argument("--max-len", type=int, default=TrainArgs.max_len, help="tokens per sequence at most")
    p.add_argument("--ckpt-every", type=int, default=TrainArgs.ckpt_every)
    p.add_argument("--seed", type=int, default=TrainArgs.seed)
    p.add_argument("--ship", type=Path, default=None, help="also copy the head into this directory")
    p.add_argument("--init", type=Path, default=None, help="start from this head directory's weights (warm start)")
    p.add_argument(
        "--draft-vocab",
        type=int,
        default=TrainArgs.draft_vocab,
        help="tokens the head may draft (0 = the whole vocabulary)",
    )
    p.add_argument(
        "--vocab-only",
        action="store_true",
        help="only write the draft vocabulary of --out's sequences into --ship (or --out/head)",
    )
    p.add_argument(
        "--eval-only",
        type=Path,
        default=None,
        metavar="HEAD_DIR",
        help="only evaluate this head on the held-out prompts (generated into --out)",
    )
    p.add_argument(
        "--arch",
        choices=ARCHS,
        default=TrainArgs.arch,
        help="talon: the shipped head's network; eagle3: EAGLE-3's, written in its layout (loads as "
        "'eagle3:DIR' here and in SGLang / vLLM)",
    )
    p.add_argument(
        "--layout",
        choices=("eagle", "speculators"),
        default=TrainArgs.layout,
        help="--arch eagle3: the export's layout, EAGLE's (SGLang, EAGLE's own loader) or vLLM's speculators",
    )
    p.add_argument(
        "--answers",
        type=_temperatures,
        default=TrainArgs.answers,
        metavar="T[,T...]",
        help="answers per train prompt, one per temperature (0 = greedy), e.g. 0,0.8,1; "
        "held-out prompts always get one greedy answer",
    )
    args = TrainArgs(**{k.replace("-", "_"): v for k, v in vars(p.parse_args(argv)).items()})
    problem = args_problem(args)
    if problem:
        p.error(problem)
    return args


def args_problem(args: TrainArgs) -> str | None:
    """What in ``args`` cannot run, said before any model loads or any data is generated (None when they
    can): sizes below their least, a held-out share outside (0, 1), a warm start that is not a head of
    the chosen network, an export layout the network does not have."""
    least = {"prompts": len(CATEGORY_SHARES), "max_new_tokens": 1, "gen_batch": 1, "epochs": 1, "ttt_steps": 1}
    least |= {"batch_size": 1, "max_len": 2, "ckpt_every": 1, "draft_vocab": 0}
    for name, low in least.items():
        if getattr(args, name) < low:
            return f"--{name.replace('_', '-')} must be at least {low} (got {getattr(args, name)})"
    if not 0 < args.heldout < 1:
        return f"--heldout is the share of prompts held out for evaluation: between 0 and 1, not {args.heldout}"
    sides = Counter(pool_split(args)[1].values())  # drawn per prompt: a small pool can miss one side
    if not sides["train"] or not sides["heldout"]:
        return (
            f"--prompts {args.prompts} with --heldout {args.heldout} split into {sides['train']} prompts to train "
            f"on and {sides['heldout']} held out: each side needs one; raise --prompts"
        )
    if not args.lr > 0:
        return f"--lr must be above 0 (got {args.lr})"
    if args.layout != TrainArgs.layout and args.arch != "eagle3":
        return "--layout picks an EAGLE-3 head's export layout: add --arch eagle3"
    if args.init is not None:
        if args.arch != "talon":
            return "--init warm-starts a head of --arch talon only"
        if not (args.init / HEAD_WEIGHTS).is_file():
            return f"--init {args.init}: no {HEAD_WEIGHTS} there (name a head directory, e.g. one --out/head)"
    for option, folder in (("--out", args.out), ("--ship", args.ship)):
        blocking = None if folder is None else file_in_the_way(folder)
        if blocking is not None:
            return f"{option} {blocking} is a file: name a folder (it is created if missing)"
    if args.eval_only is not None and not args.eval_only.is_dir():
        return f"--eval-only {args.eval_only}: no such directory (name a head directory)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.eval_only:
            evaluate_head(args)
        elif args.vocab_only:
            args.out.mkdir(parents=True, exist_ok=True)
            claim_run_folder(args, DATA_SETTINGS)
            target = load_model(args.target)
            generate_sequences(target, args)
            write_draft_vocab(args.ship or args.out / "head", target, args)
        else:
            run(args)
    except (ModelLoadError, ConfigError, OSError) as err:  # a model that does not load: its message says what to do
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
