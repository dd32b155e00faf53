"""The EAGLE-style draft head: files and checksums, tree drafting == path-by-path drafting, the
training-time-test masks, and a tiny end-to-end training run whose loss goes down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from talon.drafters.head import HeadDrafter
from talon.drafters.head_model import (
    DRAFT_VOCAB,
    HEAD_CONFIG,
    HEAD_WEIGHTS,
    SHIPPED_HEAD,
    DraftHead,
    HeadConfig,
    load_head,
)
from talon.engine.builders import TalonBuilder
from talon.engine.decode import encode_prompt
from talon.engine.verify import Verifier
from talon.models.cpu_linear import draft_half_rows, drafter_on_stream
from talon.models.loaded import ModelLoadError
from talon.models.weight_arena import coded_weights
from talon.training.train_head import (
    TOP_K,
    TrainArgs,
    _batch,
    answer_plan,
    draft_vocab,
    generate_sequences,
    generation_batches,
    head_loss,
    main,
    parse_args,
    read_sequences,
    save_atomic,
    ttt_mask,
)
from talon.tree import DraftTree


# ---- fast ------------------------------------------------------------------------------------------
def test_ttt_mask_step1_is_causal():
    assert torch.equal(ttt_mask(5, 1), torch.tril(torch.ones(5, 5, dtype=torch.bool)))


def test_ttt_mask_step3_sees_root_prefix_and_own_ancestors():
    m = ttt_mask(6, 3)  # [6, 18]: blocks for steps 1, 2, 3
    j = 5  # a depth-2 draft whose root is at j - 2 = 3
    assert m[j, :6].tolist() == [True, True, True, True, False, False]  # committed up to the root
    assert m[j, 6:12].tolist() == [False, False, False, False, True, False]  # depth-1 ancestor at j-1
    assert m[j, 12:].tolist() == [False] * 5 + [True]  # itself


def test_draft_vocab_takes_answers_then_prompts_then_low_ids():
    rows = [
        {"split": "train", "response_ids": [9, 9, 9, 7, 7, 5], "prompt_ids": [8, 8, 6]},
        {"split": "heldout", "response_ids": [4, 4, 4, 4], "prompt_ids": [3]},
    ]  # held-out rows never count
    assert draft_vocab(rows, 2, 20) == [7, 9]  # the two most frequent answer tokens
    assert draft_vocab(rows, 3, 20, always=[2]) == [2, 7, 9]  # EOS first
    assert draft_vocab(rows, 5, 20) == [5, 6, 7, 8, 9]  # answers, then prompt tokens by count
    assert draft_vocab(rows, 7, 20) == [0, 1, 5, 6, 7, 8, 9]  # then the lowest ids
    assert draft_vocab(rows, 50, 20) == list(range(20))  # never more than the vocabulary


def test_answer_plan_gives_train_prompts_one_answer_per_temperature_and_held_out_one_greedy():
    assert answer_plan("train", (0.0, 0.8, 1.0)) == [(0, 0.0), (1, 0.8), (2, 1.0)]
    assert answer_plan("heldout", (0.8, 1.0)) == [(0, 0.0)]  # held-out answers are what decoding sees
    assert parse_args(["--out", "x"]).answers == (0.0,)
    assert parse_args(["--out", "x", "--answers", "0, 0.7"]).answers == (0.0, 0.7)
    for bad in ("-1", "hot", ","):
        with pytest.raises(SystemExit):
            parse_args(["--out", "x", "--answers", bad])


def test_generation_batches_never_mix_temperatures():
    # A held-out prompt's greedy answer and a train prompt's sampled one share answer index 0.
    jobs = [(0, 0.0, "held"), (0, 0.8, "a"), (0, 0.8, "b"), (1, 0.8, "a"), (1, 1.0, "b")]
    names = lambda batches: [[j[2] for j in b] for b in batches]
    assert names(generation_batches(jobs, 8)) == [["held"], ["a", "b", "a"], ["b"]]
    assert names(generation_batches(jobs, 2)) == [["held"], ["a", "b"], ["a"], ["b"]]


def test_a_row_cut_short_by_a_stopped_run_is_dropped_and_repaired(tmp_path):
    path = tmp_path / "sequences.jsonl"
    assert read_sequences(path) == []
    path.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "resp')
    assert [r["id"] for r in read_sequences(path)] == ["a", "b"]
    assert path.read_text().endswith('"resp')  # reading alone leaves the file
    assert [r["id"] for r in read_sequences(path, repair=True)] == ["a", "b"]
    assert path.read_text() == '{"id": "a"}\n{"id": "b"}\n'  # a resumed run appends after whole rows


def test_atomic_save_leaves_no_partial_file(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_atomic({"step": 1}, path)
    save_atomic({"step": 2}, path)
    assert torch.load(path)["step"] == 2 and [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


# ---- engine: the real target -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def head_config(target):
    return HeadConfig.for_target(target)


@pytest.fixture(scope="module")
def random_head(target, head_config):
    torch.manual_seed(0)
    head = DraftHead(head_config).eval().requires_grad_(False)
    with torch.no_grad():  # larger weights than the init, so that distributions are not flat
        for p in head.parameters():
            p.mul_(3.0)
    return head


def _prompt_state(target, drafter, prompt):
    """Start ``drafter`` at ``prompt``; returns the prompt's ids and the target's features there."""
    ids = encode_prompt(target, prompt)
    verifier = Verifier(target, drafter.feature_layers)
    verifier.prefill(ids)
    drafter.start(ids, verifier.features)
    return ids, verifier.features


@pytest.mark.engine
def test_tree_drafting_matches_path_by_path(target, random_head):
    drafter = HeadDrafter(random_head, target)
    ids, features = _prompt_state(target, drafter, "Name three rivers in Europe.")
    tree = TalonBuilder(budget=12, topk=3, mu=0.2).build(drafter, ids, features).tree
    assert tree.max_depth >= 2
    # Re-run the same tree layer by layer, recording each node's batched distribution.
    batched = {}
    drafter2 = HeadDrafter(random_head, target)
    _prompt_state(target, drafter2, "Name three rivers in Europe.")
    batched[0] = drafter2.begin_step(ids, features).logprobs[0]
    for d in range(1, tree.max_depth + 1):
        layer = [i for i in range(len(tree)) if tree.depth[i] == d]
        for k, lp in enumerate(drafter2.propose(tree, layer).logprobs):
            batched[layer[k]] = lp
    leaves = [n for n, kids in enumerate(tree.children_lists()) if not kids]
    for leaf_path in (tree.path_to(leaf) for leaf in leaves):
        chain_drafter = HeadDrafter(random_head, target)
        _prompt_state(target, chain_drafter, "Name three rivers in Europe.")
        chain = DraftTree.with_root(ids[-1])
        expected = chain_drafter.begin_step(ids, features).logprobs[0]
        assert torch.allclose(expected, batched[0], atol=1e-4)
        for node in leaf_path[1:]:
            new = chain.add(len(chain) - 1, tree.token[node], 0.0)
            expected = chain_drafter.propose(chain, [new]).logprobs[0]
            assert torch.allclose(expected, batched[node], atol=1e-4), f"node {node}"


@pytest.mark.engine
def test_head_files_round_trip_and_refuse_other_targets(target, random_head, tmp_path):
    random_head.save(tmp_path)
    loaded = load_head(tmp_path, target)
    for (name, a), b in zip(random_head.state_dict().items(), loaded.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=0.02 * a.abs().max().item() + 1e-6), name
    meta = json.loads((tmp_path / HEAD_CONFIG).read_text())
    meta["target_sha256"] = "0" * 64
    (tmp_path / HEAD_CONFIG).write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match="trained for"):
        load_head(tmp_path, target)
    # a path that is not there is named as a missing directory (it read "not in this machine's Hugging
    # Face cache, and the Hub cannot be reached", as if it were a Hub id)
    with pytest.raises(ModelLoadError, match=r"There is no directory '/tmp/.*/nope' on this machine for the draft"):
        load_head(str(tmp_path / "nope"), target)


@pytest.mark.engine
def test_tiny_training_run_lowers_the_loss(target, head_config):
    torch.manual_seed(0)
    layers = list(head_config.feature_layers)
    items = []
    with torch.inference_mode():
        # Both texts count as answers after a 2-token "prompt" (the eval's answer-only positions).
        for text in ["The cat sat on the mat. The cat sat on the mat.", "def add(a, b):\n    return a + b\n"]:
            ids = target.tokenizer(text)["input_ids"]
            out = target.model(torch.tensor([ids]), output_hidden_states=layers)
            logp, top = torch.log_softmax(out.logits[0].float(), -1).topk(TOP_K, -1)
            items.append(
                {
                    "tokens": torch.tensor(ids, dtype=torch.int32),
                    "category": "t",
                    "split": "train",
                    "hidden": torch.stack([out.hidden_states[i][0] for i in layers], 1).half(),
                    "top_ids": top.int(),
                    "top_logp": logp.half(),
                    "prompt_len": 2,
                }
            )
    head = DraftHead(head_config)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    batch = _batch(items, target.device)
    losses = []
    for _ in range(12):
        loss, stats = head_loss(head, target, batch, ttt_steps=2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        assert len(stats) == 2 and stats[1]["n"] < stats[0]["n"]
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.engine
def test_shipped_head_loads_for_the_embedded_target(target):
    assert (SHIPPED_HEAD / HEAD_WEIGHTS).stat().st_size < 12_000_000
    meta = json.loads((SHIPPED_HEAD / HEAD_CONFIG).read_text())
    # Measured at training time on held-out answer tokens (0.71 for the shipped head h7, 0.49 for the
    # head before it; a random head is ~0).
    assert meta["heldout_eval"]["top1"] >= 0.6
    head = load_head(SHIPPED_HEAD, target)
    assert head.config.target_sha256 == meta["target_sha256"]


@pytest.mark.engine
def test_the_shipped_head_loads_for_the_weights_the_embedded_model_was_quantized_from():
    """Without the embedded package (a Space) the target is the Hub's original SmolLM2-135M-Instruct, whose
    4-bit quantization the embedded model is: simulated here by moving every matrix weight of the embedded
    model by up to half a 4-bit level (an original lies within that), the head loads; three levels off, it
    is refused."""
    from talon.drafters.head_fingerprint import BLOCK, LEVELS
    from talon.drafters.head_model import target_checksum
    from talon.models.loading import load_model

    lm = load_model("embedded", stock=True)
    stored = {n: p.detach().clone() for n, p in lm.model.named_parameters() if p.dim() == 2}
    g = torch.Generator().manual_seed(0)

    def moved(levels: float) -> None:
        with torch.no_grad():
            for name, p in lm.model.named_parameters():
                if name in stored:
                    blocks = stored[name].reshape(-1, BLOCK)
                    step = (blocks.amax(1, keepdim=True) - blocks.amin(1, keepdim=True)) / (LEVELS - 1)
                    p.copy_((blocks + (torch.rand(blocks.shape, generator=g) - 0.5) * 2 * levels * step).view(p.shape))

    moved(0.49)
    assert target_checksum(lm) != json.loads((SHIPPED_HEAD / HEAD_CONFIG).read_text())["target_sha256"]
    assert load_head(SHIPPED_HEAD, lm).fits_by_fingerprint
    moved(3.0)
    with pytest.raises(ModelLoadError, match="trained for"):
        load_head(SHIPPED_HEAD, lm)


@pytest.mark.engine
def test_the_shipped_head_named_by_its_path_is_the_shipped_head(target, random_head, tmp_path):
    """One drafter, one name: the name keys its cached cost curve, so naming the shipped head by its path
    must not measure the machine again; another head keeps its own name."""
    from talon.drafters.factory import make_drafter

    assert make_drafter(f"head:{SHIPPED_HEAD}", target).name == make_drafter("head", target).name
    random_head.save(tmp_path)
    assert make_drafter(f"head:{tmp_path}", target).name == f"EAGLE-style head {tmp_path}"


@pytest.mark.engine
def test_draft_vocab_restricts_the_heads_logits_to_its_tokens(target, random_head, tmp_path):
    random_head.save(tmp_path)
    ids = [2, 5, 17, 300, 4000]
    (tmp_path / DRAFT_VOCAB).write_text(json.dumps({"ids": ids}))
    restricted, full = load_head(tmp_path, target), load_head(tmp_path, target, full_vocab=True)
    assert restricted.draft_ids.tolist() == ids and full.draft_ids is None
    states = torch.randn(2, 3, restricted.config.hidden_size)
    lm_head = target.model.get_output_embeddings()
    a, b = restricted.logits(states, lm_head), full.logits(states, lm_head)
    assert a.shape == b.shape == (2, 3, restricted.config.vocab_size)
    # The restricted rows run in the head's dtype (bfloat16 on the CPU), the full vocabulary through the
    # target's float32 LM head.
    tol = 1e-4 if restricted.draft_lm_head.weight.dtype == torch.float32 else 0.1
    assert torch.allclose(a[..., ids], b[..., ids], atol=tol, rtol=tol / 10)
    outside = torch.ones(a.shape[-1], dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(a[..., outside]).all()
    # log-probabilities: normalised over the draft vocabulary's columns, the softmax of the scattered logits
    for head, logits in ((restricted, a), (full, b)):
        logp = head.log_probs(states, lm_head)
        assert logp.dtype == torch.float32 and torch.equal(torch.isneginf(logp), torch.isneginf(logits))
        assert torch.allclose(logp.exp(), torch.softmax(logits.float(), -1), atol=1e-6)
    (tmp_path / DRAFT_VOCAB).write_text(json.dumps({"ids": [0, 10**6]}))
    with pytest.raises(ModelLoadError, match="outside"):
        load_head(tmp_path, target)


@pytest.mark.engine
def test_shipped_head_drafts_from_its_vocabulary(target):
    meta = json.loads((SHIPPED_HEAD / DRAFT_VOCAB).read_text())
    head = load_head(SHIPPED_HEAD, target)
    assert head.draft_ids.numel() == meta["size"] == 16384 and meta["heldout_answer_coverage"] > 0.95
    assert set(target.eos_token_ids) <= set(head.draft_ids.tolist())
    if drafter_on_stream() and coded_weights(target.model):
        # in float32 on TALON's kernel its draft LM head streams the rows of the target's 8-bit codes, and
        # its other layers' calls of a few rows read bfloat16 copies
        assert head.norm.weight.dtype == torch.float32
        assert head.draft_lm_head.packed.codes and head.draft_lm_head.half is None
        assert head.layer.mlp.fused_gate_up.half_rows == head.layer.self_attn.o_proj.half_rows == draft_half_rows() > 0


@pytest.mark.engine
def test_eval_only_scores_a_head_on_held_out_prompts(target, random_head, tmp_path):
    """``--eval-only`` answers only held-out prompts and reports agreement of the head as loaded."""
    random_head.save(tmp_path / "head")
    (tmp_path / "head" / DRAFT_VOCAB).write_text(json.dumps({"ids": list(range(1000))}))
    torch.manual_seed(0)
    assert (
        main(
            [
                "--out",
                str(tmp_path / "eval"),
                "--prompts",
                "20",
                "--heldout",
                "0.3",
                "--max-new-tokens",
                "6",
                "--eval-only",
                str(tmp_path / "head"),
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "eval" / "sequences.jsonl").read_text().splitlines()]
    assert rows and all(r["split"] == "heldout" for r in rows)
    report = json.loads((tmp_path / "eval" / "eval_only.json").read_text())
    assert report["draft_vocab"] == 1000 and report["device"] == "cpu" and report["dtype"] == "float32"
    assert report["overall"]["positions"] > 0 and 0.0 <= report["overall"]["top1"] <= 1.0
    assert set(report["by_category"]) == {r["category"] for r in rows}
    assert TrainArgs.draft_vocab == 16384


@pytest.mark.engine
def test_sampled_training_answers_are_seeded_and_resumable(target, tmp_path):
    """``--answers 1,0``: train prompts get a sampled and a greedy answer, held-out prompts one greedy
    (their answer index 0 is a train prompt's sampled one: batches must not mix the two); the same seed
    samples the same answers, and a second call (a resumed run) adds nothing."""

    def rows(out):
        args = TrainArgs(out=out, prompts=12, heldout=0.3, max_new_tokens=5, gen_batch=4, answers=(1.0, 0.0))
        out.mkdir()
        generate_sequences(target, args, log=lambda *_: None)
        generate_sequences(target, args, log=lambda *_: None)
        return sorted(read_sequences(out / "sequences.jsonl"), key=lambda r: (r["id"], r["answer"]))

    first, again = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert first == again
    train_ids = {r["id"] for r in first if r["split"] == "train"}
    held = [r for r in first if r["split"] == "heldout"]
    assert train_ids and held and len(first) == 2 * len(train_ids) + len(held)
    assert all(r["answer"] == 0 and r["temperature"] == 0.0 for r in held)
    assert all(r["temperature"] == (1.0, 0.0)[r["answer"]] for r in first if r["split"] == "train")
    greedy = {r["id"]: r["response_ids"] for r in first if r["temperature"] == 0.0}
    sampled = {r["id"]: r["response_ids"] for r in first if r["temperature"] == 1.0}
    assert any(sampled[i] != greedy[i] for i in sampled)  # temperature 1 departs from greedy somewhere


@pytest.mark.engine
def test_shipped_head_agrees_with_the_target_on_an_example(target):
    """The default drafter is real: on an example prompt, greedy TALON with the head accepts drafts
    (this prompt gives MAT 1.52 with the shipped head h7, 1.33 with the head before it; an untrained head
    stays at ~1.0)."""
    from talon.config import DecodeConfig, TreeConfig
    from talon.drafters.factory import make_drafter
    from talon.engine.decode import run_to_end

    trace = run_to_end(
        target,
        make_drafter("head", target),
        TreeConfig(method="talon", budget=16, topk=6),
        DecodeConfig(max_new_tokens=32),
        "Explain in two sentences why the sky is blue.",
    )
    assert len(trace.output_ids) / len(trace.steps) > 1.4


@pytest.mark.engine
def test_train_head_arch_eagle3_writes_an_eagle3_head_that_decodes_losslessly(target, tmp_path):
    """``--arch eagle3`` end to end on the embedded target (a few prompts, one epoch): the head lands in
    EAGLE-3's layout with its draft vocabulary, loads as ``eagle3:DIR`` and greedy TALON with it equals
    plain greedy decoding."""
    from talon.config import DecodeConfig, TreeConfig
    from talon.drafters.factory import make_drafter
    from talon.engine.decode import run_to_end

    torch.manual_seed(0)
    assert (
        main(
            [
                "--out",
                str(tmp_path),
                "--prompts",
                "12",
                "--heldout",
                "0.3",  # one of the 12 held out (at 0.2 none was, and the held-out figures were zeros)
                "--max-new-tokens",
                "8",
                "--epochs",
                "1",
                "--batch-size",
                "4",
                "--gen-batch",
                "4",  # batches of like lengths: the pool's longest prompt pads 4 rows, not 12
                "--draft-vocab",
                "2000",
                "--arch",
                "eagle3",
            ]
        )
        == 0
    )
    meta = json.loads((tmp_path / "head" / "config.json").read_text())
    assert meta["draft_vocab_size"] == 2000 and meta["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert meta["talon"]["training"]["arch"] == "eagle3" and "top1" in meta["talon"]["heldout_eval"]
    drafter = make_drafter(f"eagle3:{tmp_path / 'head'}", target)
    cfg = DecodeConfig(max_new_tokens=24)
    spec = run_to_end(target, drafter, TreeConfig(method="talon", budget=16, topk=4), cfg, "Name two colours.")
    plain = run_to_end(target, None, TreeConfig(method="ar"), cfg, "Name two colours.")
    assert spec.output_ids == plain.output_ids


@pytest.mark.engine
def test_shipped_head_carries_a_calibration_that_beats_its_raw_confidence(target):
    from talon.drafters.calibration import CALIBRATION_FILE, LOOKUP_CALIBRATION_FILE
    from talon.drafters.factory import drafter_for, make_drafter
    from talon.training.calibrate import CALIBRATION_PROMPTS
    from talon.tree import SOURCE_MODEL, SOURCE_RETRIEVAL

    drafter = make_drafter("head", target)
    assert drafter.calibration_prior and all(0.0 <= v <= 1.0 for v in drafter.calibration_prior.values())
    own = json.loads((SHIPPED_HEAD / CALIBRATION_FILE).read_text())
    score = own["score"]
    assert score["observations"] > 5000 and score["ece_calibrated"] < score["ece_raw"]
    # prompt lookup's drafts merged with the head have a fit of their own, which the hybrid method reads
    lookup = json.loads((SHIPPED_HEAD / LOOKUP_CALIBRATION_FILE).read_text())
    for table in (own, lookup):  # fitted on prompts no benchmark suite runs (test_bench checks that file)
        assert [Path(p).name for p in table["extra"]] == [CALIBRATION_PROMPTS.name]
    assert lookup["source"] == SOURCE_RETRIEVAL and lookup["score"]["observations"] > 2000
    assert lookup["score"]["ece_calibrated"] < lookup["score"]["ece_untabled"]
    prior = drafter_for("hybrid", "head", target).calibration_prior
    assert {key[0] for key in prior} == {SOURCE_MODEL, SOURCE_RETRIEVAL}


def test_head_training_refuses_what_cannot_run_before_anything_loads(tmp_path, capsys, monkeypatch):
    """Bad sizes, a held-out share outside (0, 1), a pool too small to hold both splits, a warm start that
    is not a head, a layout without EAGLE-3: refused at once (they failed with tracebacks, some after the
    answers were generated); a target that does not load ends with its message, not a traceback."""
    from talon.training import train_head

    out = ["--out", str(tmp_path / "w")]
    afile = tmp_path / "afile"
    afile.write_text("")
    for flags, said in (
        (["--prompts", "2"], "--prompts must be at least 9"),
        (["--heldout", "0"], "between 0 and 1"),
        (["--heldout", "1.5"], "between 0 and 1"),
        (["--prompts", "9", "--heldout", "0.05"], "each side needs one"),
        (["--init", str(tmp_path / "nothing")], "no head.safetensors there"),
        (["--layout", "speculators"], "add --arch eagle3"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--ship", str(afile)], f"--ship {afile} is a file"),  # it failed only after training
        (["--out", str(afile)], f"--out {afile} is a file"),
    ):
        with pytest.raises(SystemExit):
            train_head.main([*out, *flags])
        assert said in capsys.readouterr().err

    def no_target(args, log=print):
        raise ModelLoadError("'someorg/some-model' is not a local directory nor in this machine's cache")

    monkeypatch.setattr(train_head, "run", no_target)
    assert train_head.main([*out, "--target", "someorg/some-model"]) == 2
    assert capsys.readouterr().err.startswith("error: 'someorg/some-model' is not a local directory")


def test_a_run_folder_refuses_a_rerun_with_other_settings(tmp_path, capsys, monkeypatch):
    """A rerun into the same ``--out`` resumes its stages as they are: with another ``--prompts`` it
    generated two answers, reused the old features and checkpoint and said "done"; it is refused now,
    naming what changed.  The same settings resume; a folder without a record (older runs) is claimed."""
    from talon.training import train_head

    ran = []
    monkeypatch.setattr(train_head, "load_model", lambda spec, progress=None: ran.append(spec) or 1 / 0)
    out = tmp_path / "run"
    base = ["--out", str(out), "--prompts", "10", "--heldout", "0.3", "--max-new-tokens", "8"]
    with pytest.raises(ZeroDivisionError):  # claimed, then the (stubbed) target load
        train_head.main(base)
    recorded = json.loads((out / train_head.RUN_SETTINGS).read_text())
    assert (recorded["prompts"], recorded["max_new_tokens"], recorded["answers"]) == (10, 8, [0.0])
    with pytest.raises(ZeroDivisionError):  # the same settings: resumed
        train_head.main(base)
    assert len(ran) == 2
    changed = [*base, "--prompts", "12", "--epochs", "3"]
    assert train_head.main(changed) == 2 and len(ran) == 2  # refused before any model loads
    err = capsys.readouterr().err
    assert f"error: {out} holds a run made with --prompts 10 (now 12), --epochs 2 (now 3)" in err
    assert "use another --out" in err
    with pytest.raises(ZeroDivisionError):  # --vocab-only reads the answers: their settings only
        train_head.main([*base, "--epochs", "3", "--vocab-only", "--ship", str(tmp_path / "ship")])
    assert train_head.main([*base, "--max-new-tokens", "16", "--vocab-only"]) == 2
    assert "--max-new-tokens 8 (now 16)" in capsys.readouterr().err
