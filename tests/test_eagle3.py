"""EAGLE-3 draft heads on a tiny random Llama target (fast tier, no download): checkpoints written here
in EAGLE's layout (``pytorch_model.bin``, float16, ``d2t`` / ``t2d``, the target's embedding) and
SpecForge's (``model.safetensors`` with its own ``embed_tokens``, a narrower head, layer ids in
``eagle_config``); the loaded head's logits equal a reference forward written here from the format
description; every tree method with such a head is greedy-lossless; a head trained and exported by
``train_head --arch eagle3`` loads back and drafts the same trees, and EAGLE's own reference loader
would give it the target's embedding (its rule, from its source, encoded here); mismatched pairs are
refused.  vLLM's speculators format: tests/test_speculators.py."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import PretrainedConfig

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.eagle3_model import (
    EAGLE3_ARCHITECTURE,
    Eagle3Head,
    feature_layers_from_config,
    load_eagle3,
    save_eagle3,
)
from talon.drafters.factory import make_drafter, parse_drafter_spec
from talon.drafters.head import HeadDrafter
from talon.drafters.head_model import use_device_linears
from talon.engine.builders import TalonBuilder
from talon.engine.decode import run_to_end
from talon.models.loaded import ModelLoadError
from talon.models.registry import ModelRegistry
from talon.training.train_head import _batch, head_loss
from talon.tree import DraftTree
from tests.tiers import fast_only
from tests.tiny import VOCAB, greedy_generate, prompt_ids, start_at, tiny_target

LAYERS = 8  # target layers: EAGLE's default features are the states entering layers 2, 4 and 5
WIDTH = 64  # the tiny target's width
DRAFT_IDS = sorted({0, *range(2, VOCAB, 2), 7, 9, 11})  # a reduced draft vocabulary (EOS included)
NEW_TOKENS = 20


@pytest.fixture(scope="module")
def target():
    return tiny_target(layers=LAYERS)


@pytest.fixture(scope="module")
def greedy(target):
    """transformers' greedy output per prompt seed."""
    return {seed: greedy_generate(target, prompt_ids(seed), NEW_TOKENS) for seed in (1, 2)}


def head_tensors(
    seed: int, hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, n_features: int = 3
) -> dict[str, torch.Tensor]:
    """Random EAGLE-3 weights with the key names of the public checkpoints (spread wide enough that the
    head's distributions are not flat)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, s=0.3: torch.randn(*shape, generator=g) * s
    d = len(DRAFT_IDS)
    return {
        "fc.weight": r(hidden, n_features * WIDTH, s=0.1),
        "midlayer.self_attn.q_proj.weight": r(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": r(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": r(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": r(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": r(inter, hidden),
        "midlayer.mlp.up_proj.weight": r(inter, hidden),
        "midlayer.mlp.down_proj.weight": r(hidden, inter),
        "midlayer.input_layernorm.weight": 1 + r(hidden, s=0.1),
        "midlayer.hidden_norm.weight": 1 + r(hidden, s=0.1),
        "midlayer.post_attention_layernorm.weight": 1 + r(hidden, s=0.1),
        "norm.weight": 1 + r(hidden, s=0.1),
        "lm_head.weight": r(d, hidden, s=1.0),
        "d2t": torch.tensor(DRAFT_IDS) - torch.arange(d),
        "t2d": torch.isin(torch.arange(VOCAB), torch.tensor(DRAFT_IDS)),
    }


def llama_json(hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, **extra) -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "vocab_size": VOCAB,
        "draft_vocab_size": len(DRAFT_IDS),
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        **extra,
    }


def write_eagle_layout(directory, seed=3) -> dict:
    """EAGLE's own release layout: ``pytorch_model.bin`` in float16, no embedding, default layers."""
    directory.mkdir(parents=True, exist_ok=True)
    state = head_tensors(seed, WIDTH, 4, 2, 16, 128)
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, directory / "pytorch_model.bin")
    meta = llama_json(WIDTH, 4, 2, 16, 128, torch_dtype="float16")
    (directory / "config.json").write_text(json.dumps(meta))
    return {k: v.half().float() if v.is_floating_point() else v for k, v in state.items()}


def write_specforge_layout(directory, seed=4) -> dict:
    """A SpecForge export: ``model.safetensors`` with its own ``embed_tokens`` and a head narrower than
    the target (48 < 64, so ``target_hidden_size``), layers named by their outputs in ``eagle_config``."""
    directory.mkdir(parents=True, exist_ok=True)
    state = head_tensors(seed, 48, 3, 1, 16, 96)
    state["embed_tokens.weight"] = torch.randn(VOCAB, 48, generator=torch.Generator().manual_seed(seed + 10))
    save_file(state, directory / "model.safetensors")
    meta = llama_json(
        48,
        3,
        1,
        16,
        96,
        target_hidden_size=WIDTH,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 3, 6], "use_aux_hidden_state": True},
    )
    (directory / "config.json").write_text(json.dumps(meta))
    return state


# ---- the reference forward, from the format description alone ------------------------------------------
def rms(x, w, eps=1e-5):
    return w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope(x, positions, theta=10000.0):
    """Rotate ``x`` ``[heads, T, d]`` by ``positions`` ``[T]`` (Llama's half-split rotary embedding)."""
    d = x.shape[-1]
    angles = positions.double()[:, None] / theta ** (torch.arange(0, d, 2).double() / d)[None, :]
    cos, sin = torch.cat([angles, angles], -1).cos().float(), torch.cat([angles, angles], -1).sin().float()
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + half * sin


def reference_forward(w: dict, states, embeds, positions, heads, kv_heads, head_dim):
    """EAGLE-3's layer over a causal sequence: ``states`` / ``embeds`` ``[T, H]`` (fused features or fed
    back head states), EAGLE positions ``[T]``.  Returns (output states ``[T, H]``, draft logits
    ``[T, Vd]``)."""
    x = torch.cat(
        [rms(embeds, w["midlayer.input_layernorm.weight"]), rms(states, w["midlayer.hidden_norm.weight"])], -1
    )
    t = x.shape[0]
    q = (x @ w["midlayer.self_attn.q_proj.weight"].T).view(t, heads, head_dim).transpose(0, 1)
    k = (x @ w["midlayer.self_attn.k_proj.weight"].T).view(t, kv_heads, head_dim).transpose(0, 1)
    v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(t, kv_heads, head_dim).transpose(0, 1)
    q, k = rope(q, positions), rope(k, positions)
    k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
    scores = q @ k.transpose(1, 2) / math.sqrt(head_dim)
    scores = scores.masked_fill(~torch.tril(torch.ones(t, t, dtype=torch.bool)), float("-inf"))
    attn = (scores.softmax(-1) @ v).transpose(0, 1).reshape(t, heads * head_dim)
    h = states + attn @ w["midlayer.self_attn.o_proj.weight"].T
    m = rms(h, w["midlayer.post_attention_layernorm.weight"])
    gate, up = m @ w["midlayer.mlp.gate_proj.weight"].T, m @ w["midlayer.mlp.up_proj.weight"].T
    out = h + (torch.nn.functional.silu(gate) * up) @ w["midlayer.mlp.down_proj.weight"].T
    return out, rms(out, w["norm.weight"]) @ w["lm_head.weight"].T


def to_vocab(draft_logits: torch.Tensor) -> torch.Tensor:
    """Draft-vocabulary logits -> log-probabilities over the target vocabulary (draft id i is token i + d2t[i])."""
    full = torch.full((*draft_logits.shape[:-1], VOCAB), float("-inf"))
    full[..., DRAFT_IDS] = draft_logits
    return torch.log_softmax(full, -1)


@pytest.mark.parametrize("layout", ["eagle", "specforge"])
def test_loaded_head_equals_the_reference_forward_at_the_root_and_one_layer_down(target, tmp_path, layout, monkeypatch):
    # the loader's arithmetic in float32: no bfloat16 copies for a few rows (``halve_small_rows``)
    monkeypatch.setattr("talon.models.cpu_linear.draft_half_rows", lambda: 0)
    if layout == "eagle":
        w, shape, layers = write_eagle_layout(tmp_path), (4, 2, 16), (2, 4, 5)  # 2, L//2, L-3
    else:
        w, shape, layers = write_specforge_layout(tmp_path), (3, 1, 16), (1, 4, 7)  # output ids + 1
    head = load_eagle3(tmp_path, target, dtype=torch.float32)
    assert head.config.feature_layers == layers
    drafter = HeadDrafter(head, target)
    ids = prompt_ids(5, length=10)
    target_states = start_at(drafter, target, ids)  # [9, 3, 64]: positions 0..8
    tree = DraftTree.with_root(ids[-1])
    got_root = drafter.begin_step(ids, target_states).logprobs[0]
    # Reference: head position p (token p, EAGLE position p - 1) reads the target's state at p - 1.
    fused = target_states.flatten(-2) @ w["fc.weight"].T  # [9, H]
    embeds = (w["embed_tokens.weight"] if "embed_tokens.weight" in w else target.model.get_input_embeddings().weight)[
        ids[1:]
    ]
    states, logits = reference_forward(w, fused, embeds, torch.arange(9), *shape)
    assert torch.allclose(got_root, to_vocab(logits[-1]), atol=2e-4)
    assert torch.isneginf(got_root[[t for t in range(VOCAB) if t not in DRAFT_IDS]]).all()
    # One layer down: the child reads the root's output state (no fc) and its own token's embedding.
    child_token = int(got_root.argmax())
    child = tree.add(0, child_token, float(got_root[child_token]))
    got_child = drafter.propose(tree, [child]).logprobs[0]
    table = w["embed_tokens.weight"] if "embed_tokens.weight" in w else target.model.get_input_embeddings().weight
    _, logits2 = reference_forward(
        w, torch.cat([fused, states[-1:]]), torch.cat([embeds, table[[child_token]]]), torch.arange(10), *shape
    )
    assert torch.allclose(got_child, to_vocab(logits2[-1]), atol=2e-4)


def test_feature_layer_conventions():
    assert feature_layers_from_config({}, 32) == (2, 16, 29)  # EAGLE's default
    assert feature_layers_from_config({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}, 32) == (
        2,
        16,
        29,
    )  # SGLang: outputs
    assert feature_layers_from_config(
        {
            "eagle_aux_hidden_state_layer_ids": [2, 16, 29],  # vLLM: read first
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 0, 0]},
        },
        32,
    ) == (2, 16, 29)


TALON = TreeConfig(method="talon", budget=10, topk=3, mu=0.05)


@pytest.mark.parametrize(
    ("method", "layout"),
    fast_only(
        ("talon-eagle", "talon-specforge"),
        [
            (TALON, "eagle"),
            (TALON, "specforge"),
            (TreeConfig(method="eagle2", budget=10, topk=3, depth=4), "eagle"),
            (TreeConfig(method="static", budget=10, depth=4), "specforge"),
            (TreeConfig(method="chain", gamma=4), "eagle"),
        ],
        ["talon-eagle", "talon-specforge", "eagle2-eagle", "static-specforge", "chain-eagle"],
    ),
)
def test_every_tree_method_with_an_eagle3_head_is_greedy_lossless(target, greedy, tmp_path, method, layout):
    """Sync on one prompt, async (the drafter drafts ahead from a guessed outcome) on another; every
    method over one of the two layouts (both compute the reference forward: test above), TALON over
    both."""
    (write_eagle_layout if layout == "eagle" else write_specforge_layout)(tmp_path / "h")
    registry = ModelRegistry()
    for seed, execution in ((1, "sync"), (2, "async")):
        drafter = make_drafter(f"eagle3:{tmp_path / 'h'}", target, registry)
        trace = run_to_end(
            target,
            drafter,
            method,
            DecodeConfig(max_new_tokens=NEW_TOKENS, execution=execution),
            prompt_ids=prompt_ids(seed),
        )
        assert trace.output_ids == greedy[seed], f"{seed} {execution}"


def test_hybrid_spec_merges_an_eagle3_head_with_prompt_lookup(target, greedy, tmp_path):
    write_eagle_layout(tmp_path / "h")
    assert parse_drafter_spec(f"hybrid:eagle3:{tmp_path / 'h'}").inner.kind == "eagle3"
    trace = run_to_end(
        target,
        make_drafter(f"hybrid:eagle3:{tmp_path / 'h'}", target),
        TALON,
        DecodeConfig(max_new_tokens=NEW_TOKENS),
        prompt_ids=prompt_ids(1),
    )
    assert trace.output_ids == greedy[1]
    with pytest.raises(ConfigError, match="directory or Hugging Face id"):
        parse_drafter_spec("eagle3:")


def test_mismatched_pairs_are_refused(target, tmp_path):
    write_eagle_layout(tmp_path / "h")
    meta = json.loads((tmp_path / "h" / "config.json").read_text())

    def refused(change: dict, match: str, on=target):
        (tmp_path / "h" / "config.json").write_text(json.dumps({**meta, **change}))
        with pytest.raises(ModelLoadError, match=match):
            load_eagle3(tmp_path / "h", on)

    refused({"vocab_size": 128256}, "vocabulary of 128256")
    refused({"target_hidden_size": 4096}, "width 4096")
    refused({"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}, "has 8 layers")
    refused({}, "has 2 layers", on=tiny_target(layers=2))  # EAGLE's default needs L >= 3
    refused({"norm_before_residual": True}, "variant")  # another layer: not guessed
    (tmp_path / "h" / "config.json").write_text(json.dumps(meta))
    assert load_eagle3(tmp_path / "h", target).config.feature_layers == (2, 4, 5)
    with pytest.raises(ModelLoadError, match="There is no directory .*missing.* for the EAGLE-3"):
        load_eagle3(tmp_path / "missing", target)  # a path: not "nor in the Hugging Face cache"
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "head_config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="load it with 'head:DIR'"):
        load_eagle3(tmp_path / "ours", target)


def test_a_head_trained_and_exported_as_eagle3_loads_back_and_drafts_the_same_trees(target, tmp_path):
    """``train_head --arch eagle3``'s network, trained a few steps on the tiny target, restricted to a
    draft vocabulary and written by ``save_eagle3``: the EAGLE-3 loader gives the same trees; another
    target (other weights) is refused."""
    torch.manual_seed(0)
    head = Eagle3Head.for_target(target)
    assert head.config.feature_layers == (2, 4, 5)
    layers = list(head.config.feature_layers)
    items = []
    with torch.inference_mode():
        for seed in range(4):
            ids = prompt_ids(seed, length=12) + greedy_generate(target, prompt_ids(seed, length=12), 16)
            out = target.model(torch.tensor([ids]), output_hidden_states=layers)
            logp, top = torch.log_softmax(out.logits[0].float(), -1).topk(20, -1)
            items.append(
                {
                    "tokens": torch.tensor(ids, dtype=torch.int32),
                    "category": "t",
                    "split": "train",
                    "hidden": torch.stack([out.hidden_states[i][0] for i in layers], 1).half(),
                    "top_ids": top.int(),
                    "top_logp": logp.half(),
                    "prompt_len": 12,
                }
            )
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for _ in range(15):
        loss, _ = head_loss(head, target, _batch(items, target.device), ttt_steps=2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    head.restrict_vocab(DRAFT_IDS)
    head.eval().requires_grad_(False)
    save_eagle3(head, tmp_path / "export", target, dtype=torch.float32)
    meta = json.loads((tmp_path / "export" / "config.json").read_text())
    assert meta["architectures"] == [EAGLE3_ARCHITECTURE] and meta["tie_word_embeddings"] is False
    assert meta["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert meta["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert meta["draft_vocab_size"] == len(DRAFT_IDS) and meta["num_hidden_layers"] == 1
    loaded = load_eagle3(tmp_path / "export", target, dtype=torch.float32)
    use_device_linears(head)  # the same CPU kernels as the loaded head
    for seed in (1, 2, 3):
        trees = []
        for h in (head, loaded):
            drafter = HeadDrafter(h, target)
            ids = prompt_ids(seed)
            features = start_at(drafter, target, ids)
            tree = TalonBuilder(budget=12, topk=3, mu=0.1).build(drafter, ids, features).tree
            trees.append((tree.token, tree.parent))
        assert trees[0] == trees[1]
    with pytest.raises(ModelLoadError, match="exported for"):
        load_eagle3(tmp_path / "export", tiny_target(seed=1, layers=LAYERS))


def test_a_hub_id_loads_from_the_local_hugging_face_cache_offline(target, tmp_path, monkeypatch):
    """``eagle3:ORG/NAME`` as a Space user types it: found in the Hub cache without the network; an id
    that is not cached says the Hub cannot be reached (tests run with HF_HUB_OFFLINE=1)."""
    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "cache" / "models--someone--tiny-eagle3"
    write_specforge_layout(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    drafter = make_drafter("eagle3:someone/tiny-eagle3", target, ModelRegistry())
    assert drafter.name == "EAGLE-3 head someone/tiny-eagle3" and drafter.feature_layers == (1, 4, 7)
    with pytest.raises(ModelLoadError, match="Hub cannot be reached"):
        make_drafter("eagle3:someone/not-cached", target, ModelRegistry())


@pytest.mark.slow  # seconds each: CI's second stage
def test_sampling_with_an_eagle3_head_gives_the_autoregressive_sample(target, tmp_path):
    """At temperature > 0 (position-keyed noise) every tree method with an EAGLE-3 head, sync or async,
    emits exactly the autoregressive sample of the seed; another seed samples something else."""
    write_specforge_layout(tmp_path / "h")
    config = DecodeConfig(temperature=0.9, seed=5, max_new_tokens=NEW_TOKENS)
    ar = run_to_end(target, None, TreeConfig(method="ar"), config, prompt_ids=prompt_ids(2)).output_ids
    assert (
        ar
        != run_to_end(
            target,
            None,
            TreeConfig(method="ar"),
            DecodeConfig(temperature=0.9, seed=6, max_new_tokens=NEW_TOKENS),
            prompt_ids=prompt_ids(2),
        ).output_ids
    )
    registry = ModelRegistry()
    for method in (TALON, TreeConfig(method="chain", gamma=4)):
        for execution in ("sync", "async"):
            drafter = make_drafter(f"eagle3:{tmp_path / 'h'}", target, registry)
            trace = run_to_end(
                target,
                drafter,
                method,
                DecodeConfig(temperature=0.9, seed=5, max_new_tokens=NEW_TOKENS, execution=execution),
                prompt_ids=prompt_ids(2),
            )
            assert trace.output_ids == ar, f"{method.method}/{execution}"


def test_a_release_style_config_with_llama3_rope_scaling_loads_and_decodes(target, greedy, tmp_path):
    """EAGLE's Llama-3.1 release config carries llama3 rope scaling, rope_theta 500000, a 2048-token
    max_position_embeddings and bookkeeping keys; the head takes its rope from there."""
    write_eagle_layout(tmp_path / "h")
    meta = json.loads((tmp_path / "h" / "config.json").read_text())
    meta.update(
        rope_theta=500000.0,
        max_position_embeddings=2048,
        bos_token_id=128000,
        eos_token_id=128001,
        pad_token_id=0,
        transformers_version="4.28.1",
        use_cache=True,
        initializer_range=0.02,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )
    (tmp_path / "h" / "config.json").write_text(json.dumps(meta))
    head = load_eagle3(tmp_path / "h", target)
    assert head.llama_config.rope_parameters["rope_type"] == "llama3"
    assert head.llama_config.rope_parameters["rope_theta"] == 500000.0
    trace = run_to_end(
        target, HeadDrafter(head, target), TALON, DecodeConfig(max_new_tokens=NEW_TOKENS), prompt_ids=prompt_ids(1)
    )
    assert trace.output_ids == greedy[1]


def eagle_reference_embedding(directory, target) -> tuple[str, torch.Tensor]:
    """The token embedding SafeAILab/EAGLE's reference code drafts with for the EAGLE-3 head saved in
    ``directory``, by its rule (``eagle/model/ea_model.py``, ``EaModel.__init__``, and
    ``eagle/model/cnets.py``, ``Model.__init__``):

    1. ``config.json`` is read as a transformers ``PretrainedConfig`` (``EConfig.from_pretrained``), so
       each of its keys becomes an attribute, whatever its value;
    2. ``Model`` creates a randomly initialised ``nn.Embedding(vocab_size, hidden_size)`` and copies the
       target's ``model.embed_tokens.weight`` into it only ``if load_emb and not hasattr(config,
       "target_hidden_size")`` (``EaModel`` always passes ``load_emb=True``);
    3. ``EaModel`` then loads the head's weights with ``load_state_dict(..., strict=False)``: an
       ``embed_tokens.weight`` among them replaces the table, and a missing one goes unreported.

    Returns where the table comes from ("checkpoint", "target" or "random") and the table."""
    config = PretrainedConfig.from_dict(json.loads((directory / "config.json").read_text()))
    weights = load_file(directory / "model.safetensors")
    if "embed_tokens.weight" in weights:
        return "checkpoint", weights["embed_tokens.weight"].float()
    if not hasattr(config, "target_hidden_size"):
        return "target", target.model.get_input_embeddings().weight.detach()
    return "random", torch.nn.Embedding(config.vocab_size, config.hidden_size).weight.detach()


def test_an_exported_head_drafts_with_the_target_embedding_in_eagles_reference_loader(target, tmp_path):
    """The export of a head that uses the target's embedding gets that embedding in EAGLE's loader (the
    rule above), so there it drafts what it drafts here: the root distribution of the head with the
    table EAGLE's loader would give it equals our loader's.  A config that names ``target_hidden_size``
    (even equal to ``hidden_size``) without an ``embed_tokens.weight`` would leave EAGLE a random table."""
    torch.manual_seed(0)
    head = Eagle3Head.for_target(target)
    head.restrict_vocab(DRAFT_IDS)
    head.eval().requires_grad_(False)
    save_eagle3(head, tmp_path / "export", target, dtype=torch.float32)
    source, table = eagle_reference_embedding(tmp_path / "export", target)
    assert source == "target"
    ours = load_eagle3(tmp_path / "export", target, dtype=torch.float32)
    as_eagle = load_eagle3(tmp_path / "export", target, dtype=torch.float32)
    as_eagle.embed_tokens = torch.nn.Embedding.from_pretrained(table.clone())
    ids = prompt_ids(3)
    roots = []
    for h in (ours, as_eagle):
        drafter = HeadDrafter(h, target)
        features = start_at(drafter, target, ids)
        roots.append(drafter.begin_step(ids, features).logprobs[0])
    assert torch.equal(roots[0], roots[1])
