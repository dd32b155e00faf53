"""EAGLE-3 heads in vLLM's ``speculators`` format on the tiny random Llama (fast tier, no download).

The checkpoints are written here from the format as ``speculators`` 0.9.0 defines it
(``src/speculators/models/eagle3/config.py``, ``Eagle3SpeculatorConfig``; the converter
``src/speculators/convert/eagle/eagle3_converter.py``), as twins of the EAGLE-layout heads of
tests/test_eagle3.py: the same weights with ``midlayer.`` named ``layers.0.``, the layer's Llama
config nested as a diff against ``LlamaConfig``'s defaults, the head's own keys at the top level.
A twin computes exactly what the EAGLE-layout head computes and drafts the same trees; every tree
method with one is greedy-lossless; the exporter's speculators output reads, by vLLM's rules, as the
head it is; directories in other formats are refused with a message that says what is read here.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.eagle3_model import Eagle3Head, load_eagle3, save_eagle3
from talon.drafters.export_eagle3 import main as export_main
from talon.drafters.factory import make_drafter
from talon.drafters.head import HeadDrafter
from talon.drafters.speculators_format import from_speculators
from talon.engine.builders import TalonBuilder
from talon.engine.decode import run_to_end
from talon.models.loaded import ModelLoadError
from talon.models.presets import PRESETS
from talon.models.registry import ModelRegistry
from talon.tree import DraftTree
from tests.test_eagle3 import (
    DRAFT_IDS,
    LAYERS,
    NEW_TOKENS,
    TALON,
    VOCAB,
    WIDTH,
    eagle_reference_embedding,
    write_eagle_layout,
    write_specforge_layout,
)
from tests.tiers import fast_only
from tests.tiny import greedy_generate, prompt_ids, start_at, tiny_target

WRITERS = {"eagle": write_eagle_layout, "specforge": write_specforge_layout}


@pytest.fixture(scope="module")
def target():
    return tiny_target(layers=LAYERS)


@pytest.fixture(scope="module")
def greedy(target):
    """transformers' greedy output per prompt seed."""
    return {seed: greedy_generate(target, prompt_ids(seed), NEW_TOKENS) for seed in (1, 2)}


def eagle_weights(directory) -> dict[str, torch.Tensor]:
    """The weights of an EAGLE-layout head directory, whichever file holds them."""
    if (directory / "model.safetensors").is_file():
        return load_file(directory / "model.safetensors")
    return torch.load(directory / "pytorch_model.bin", weights_only=True)


def speculators_config(eagle_meta: dict, layer_ids: list[int] | None, **top) -> dict:
    """The speculators ``config.json`` of the head whose EAGLE-layout config is ``eagle_meta``, as
    speculators' converter writes it: the layer's Llama config as a diff against ``LlamaConfig``'s
    defaults (``to_diff_dict``), the head's keys (draft vocabulary, target width, layer ids in vLLM's
    convention, variant flags) at the top level, and the ``speculators_config`` vLLM requires."""
    own = ("architectures", "draft_vocab_size", "target_hidden_size", "eagle_config", "torch_dtype")
    defaults = LlamaConfig().to_dict()
    layer = {k: v for k, v in eagle_meta.items() if k not in own and (k == "model_type" or defaults.get(k) != v)}
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "transformer_layer_config": layer,
        "draft_vocab_size": eagle_meta["draft_vocab_size"],
        "target_hidden_size": eagle_meta.get("target_hidden_size"),
        "eagle_aux_hidden_state_layer_ids": layer_ids,
        "norm_before_residual": False,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "embed_requires_grad": False,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1, "accept_tolerance": 0.0}
            ],
            "verifier": {"name_or_path": "tiny-llama", "architectures": ["LlamaForCausalLM"]},
        },
        **top,
    }


def write_speculators_twin(eagle_dir, directory, **top) -> None:
    """The head in ``eagle_dir`` (EAGLE layout) written to ``directory`` in the speculators format: the
    same tensors, ``midlayer.*`` as ``layers.0.*``; SGLang's layer ids (outputs, nested) become vLLM's
    top-level ids (inputs, id + 1); no ids stay no ids (both default to 2, L//2, L-3).  ``top``
    overrides top-level config keys."""
    directory.mkdir(parents=True, exist_ok=True)
    meta = json.loads((eagle_dir / "config.json").read_text())
    weights = {
        ("layers.0." + k.removeprefix("midlayer.") if k.startswith("midlayer.") else k): v.contiguous()
        for k, v in eagle_weights(eagle_dir).items()
    }
    nested = (meta.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    config = speculators_config(meta, [i + 1 for i in nested] if nested else None, **top)
    save_file(weights, directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps(config))


def root_and_child(head, target, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's log-probabilities ``[V]`` at the root after ``ids`` and one layer down (below the
    root's top token)."""
    drafter = HeadDrafter(head, target)
    features = start_at(drafter, target, ids)
    tree = DraftTree.with_root(ids[-1])
    root = drafter.begin_step(ids, features).logprobs[0]
    token = int(root.argmax())
    child = tree.add(0, token, float(root[token]))
    return root, drafter.propose(tree, [child]).logprobs[0]


def talon_trees(head, target, seeds=(1, 2, 3)) -> list[tuple]:
    """The TALON tree (tokens, parents) the head drafts at the first step of each prompt seed."""
    trees = []
    for seed in seeds:
        drafter = HeadDrafter(head, target)
        ids = prompt_ids(seed)
        features = start_at(drafter, target, ids)
        tree = TalonBuilder(budget=12, topk=3, mu=0.1).build(drafter, ids, features).tree
        trees.append((tree.token, tree.parent))
    return trees


@pytest.mark.parametrize("layout", ["eagle", "specforge"])
def test_a_speculators_head_computes_what_its_eagle_layout_twin_computes(target, tmp_path, layout):
    """The EAGLE release layout's twin (target embedding, default layers) and the SpecForge twin (own
    embedding, a 48-wide head on the 64-wide target, explicit layers): same feature layers, the same
    root and depth-2 log-probabilities bit for bit, the same TALON trees."""
    WRITERS[layout](tmp_path / "eagle")
    write_speculators_twin(tmp_path / "eagle", tmp_path / "spec")
    twin = load_eagle3(tmp_path / "eagle", target, dtype=torch.float32)
    head = load_eagle3(tmp_path / "spec", target, dtype=torch.float32)
    assert head.config.feature_layers == twin.config.feature_layers == ((2, 4, 5) if layout == "eagle" else (1, 4, 7))
    assert (head.embed_tokens is None) == (twin.embed_tokens is None) == (layout == "eagle")
    ids = prompt_ids(5, length=10)
    for got, want in zip(root_and_child(head, target, ids), root_and_child(twin, target, ids), strict=True):
        assert torch.equal(got, want)
    assert talon_trees(head, target) == talon_trees(twin, target)


@pytest.mark.parametrize(
    ("method", "layout"),
    fast_only(
        ("talon-eagle", "talon-specforge"),
        [
            (TALON, "eagle"),
            (TALON, "specforge"),
            (TreeConfig(method="eagle2", budget=10, topk=3, depth=4), "specforge"),
            (TreeConfig(method="static", budget=10, depth=4), "eagle"),
            (TreeConfig(method="chain", gamma=4), "specforge"),
        ],
        ["talon-eagle", "talon-specforge", "eagle2-specforge", "static-eagle", "chain-specforge"],
    ),
)
def test_every_tree_method_with_a_speculators_head_is_greedy_lossless(target, greedy, tmp_path, method, layout):
    """Through the factory's ``eagle3:DIR`` spec, sync on one prompt and async on another."""
    WRITERS[layout](tmp_path / "eagle")
    write_speculators_twin(tmp_path / "eagle", tmp_path / "spec")
    registry = ModelRegistry()
    for seed, execution in ((1, "sync"), (2, "async")):
        drafter = make_drafter(f"eagle3:{tmp_path / 'spec'}", target, registry)
        trace = run_to_end(
            target,
            drafter,
            method,
            DecodeConfig(max_new_tokens=NEW_TOKENS, execution=execution),
            prompt_ids=prompt_ids(seed),
        )
        assert trace.output_ids == greedy[seed], f"{seed} {execution}"


def vllm_view(config: dict) -> dict:
    """The draft model's config vLLM builds from a speculators ``config.json``
    (``vllm/transformers_utils/configs/speculators/base.py``, ``extract_transformers_pre_trained_config``,
    and ``algos.py``, ``update_eagle3``): the nested layer config, plus ``draft_vocab_size``,
    ``target_hidden_size`` when not null, ``norm_before_residual`` (true when absent!) and the other
    variant flags (false when absent), and the layer ids when given.  It first requires
    ``speculators_config.proposal_methods[0].speculative_tokens`` and ``verifier.name_or_path``
    (``validate_speculators_config``)."""
    spec = config["speculators_config"]
    assert spec["proposal_methods"][0]["speculative_tokens"] >= 1 and spec["verifier"]["name_or_path"]
    assert config["speculators_model_type"] == "eagle3" and isinstance(config["transformer_layer_config"], dict)
    view = dict(config["transformer_layer_config"])
    view["draft_vocab_size"] = config.get("draft_vocab_size")
    if config.get("target_hidden_size") is not None:
        view["target_hidden_size"] = config["target_hidden_size"]
    view["norm_before_residual"] = config.get("norm_before_residual", True)
    view.update({flag: config.get(flag, False) for flag in ("norm_before_fc", "fc_norm", "norm_output")})
    if config.get("eagle_aux_hidden_state_layer_ids"):
        view["eagle_aux_hidden_state_layer_ids"] = config["eagle_aux_hidden_state_layer_ids"]
    return view


def test_the_speculators_export_reads_in_vllm_as_the_head_and_drafts_the_same_trees(target, tmp_path):
    """``save_eagle3(layout="speculators")``: vLLM's reading of the config (``vllm_view``) gives the
    head's network (no variant flag set, ``fc`` over three target states of the target's width, layer
    ids in vLLM's convention, a reduced vocabulary with its maps); the weights are named as vLLM's
    Eagle-3 Llama loads them (``layers.0.*``) and carry no ``embed_tokens``, so vLLM shares the
    target's embedding (``has_own_embed_tokens`` stays false).  Read back here, the export drafts
    what its EAGLE-layout export drafts."""
    torch.manual_seed(0)
    head = Eagle3Head.for_target(target)
    head.restrict_vocab(DRAFT_IDS)
    head.eval().requires_grad_(False)
    save_eagle3(head, tmp_path / "eagle", target, dtype=torch.float32)
    save_eagle3(
        head,
        tmp_path / "spec",
        target,
        dtype=torch.float32,
        layout="speculators",
        verifier="someone/tiny-llama",
        speculative_tokens=5,
    )
    config = json.loads((tmp_path / "spec" / "config.json").read_text())
    weights = load_file(tmp_path / "spec" / "model.safetensors")
    view = vllm_view(config)
    assert not any(view[f] for f in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"))
    assert config["speculators_config"]["verifier"] == {
        "name_or_path": "someone/tiny-llama",
        "architectures": ["LlamaForCausalLM"],
    }
    assert view["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert weights["fc.weight"].shape == (view["hidden_size"], 3 * view.get("target_hidden_size", view["hidden_size"]))
    assert view["vocab_size"] == VOCAB and view["num_hidden_layers"] == 1 and view["hidden_size"] == WIDTH
    assert weights["lm_head.weight"].shape[0] == view["draft_vocab_size"] == len(DRAFT_IDS)
    assert weights["d2t"].shape == (len(DRAFT_IDS),) and int(weights["t2d"].sum()) == len(DRAFT_IDS)
    assert "embed_tokens.weight" not in weights and not any(k.startswith("midlayer.") for k in weights)
    eagle_layer = [k for k in load_file(tmp_path / "eagle" / "model.safetensors") if k.startswith("midlayer.")]
    assert {k for k in weights if k.startswith("layers.")} == {
        "layers.0." + k.removeprefix("midlayer.") for k in eagle_layer
    }
    spec = load_eagle3(tmp_path / "spec", target, dtype=torch.float32)
    twin = load_eagle3(tmp_path / "eagle", target, dtype=torch.float32)
    ids = prompt_ids(4)
    for got, want in zip(root_and_child(spec, target, ids), root_and_child(twin, target, ids), strict=True):
        assert torch.equal(got, want)
    assert talon_trees(spec, target) == talon_trees(twin, target)
    with pytest.raises(ModelLoadError, match="exported for"):  # the checksum travels in the talon block
        load_eagle3(tmp_path / "spec", tiny_target(seed=1, layers=LAYERS))


def test_a_head_is_rewritten_for_the_other_engine_from_the_command_line(target, tmp_path):
    """``python -m talon.drafters.export_eagle3``, with the target saved as a directory: an EAGLE
    release-layout head rewritten in the speculators format, and that rewritten back in EAGLE's layout,
    both compute exactly what the original computes; the EAGLE-layout result gives EAGLE's reference
    loader the target's embedding (tests/test_eagle3.py, ``eagle_reference_embedding``)."""
    target.model.save_pretrained(tmp_path / "target")
    target.tokenizer.save_pretrained(tmp_path / "target")
    write_eagle_layout(tmp_path / "release")
    common = ["--target", str(tmp_path / "target"), "--dtype", "float32"]
    export_main([str(tmp_path / "release"), str(tmp_path / "spec"), "--verifier", "someone/tiny-llama", *common])
    export_main([str(tmp_path / "spec"), str(tmp_path / "back"), "--layout", "eagle", *common])
    config = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["speculators_config"]["verifier"]["name_or_path"] == "someone/tiny-llama"
    assert config["talon"]["exported_from"] == str(tmp_path / "release")
    assert eagle_reference_embedding(tmp_path / "back", target)[0] == "target"
    ids = prompt_ids(6)
    want = root_and_child(load_eagle3(tmp_path / "release", target, dtype=torch.float32), target, ids)
    for name in ("spec", "back"):
        got = root_and_child(load_eagle3(tmp_path / name, target, dtype=torch.float32), target, ids)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)), name


def test_the_export_command_refuses_bad_input_with_a_message(tmp_path, capsys):
    """A head or target that does not load, OUT through a file, a draft length under one: a message and
    exit status 2 (they ended in tracebacks, or wrote ``speculative_tokens: -2`` into the config)."""
    (tmp_path / "afile").write_text("")
    missing = str(tmp_path / "no-target")
    assert export_main([str(tmp_path / "no-head"), str(tmp_path / "out"), "--target", missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and missing in err and "Traceback" not in err
    for argv, said in (
        ([str(tmp_path / "afile" / "out")], "afile is a file: OUT names the folder"),
        ([str(tmp_path / "out"), "--speculative-tokens", "-2"], "must be at least 1, not -2"),
    ):
        with pytest.raises(SystemExit):
            export_main([str(tmp_path / "head"), *argv, "--target", missing])
        assert said in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_layer_config_written_as_a_diff_takes_llamas_defaults():
    """speculators writes ``transformer_layer_config`` with ``to_diff_dict``: a Llama-3.1-8B head omits
    ``hidden_size`` 4096 and ``num_attention_heads`` 32 (LlamaConfig's defaults), which the reader
    fills in as speculators and vLLM do; an absent ``draft_vocab_size`` is the rows of ``lm_head``."""
    layer = {
        "model_type": "llama",
        "num_hidden_layers": 1,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
    }
    config = {"speculators_model_type": "eagle3", "transformer_layer_config": layer, "target_hidden_size": None}
    view, weights = from_speculators(
        config,
        {
            "lm_head.weight": torch.zeros(32000, 1),
            "layers.0.x": torch.zeros(1),
            "verifier_lm_head.weight": torch.zeros(1),
        },
        "here",
    )
    assert (view["hidden_size"], view["num_attention_heads"], view["rms_norm_eps"]) == (4096, 32, 1e-6)
    assert view["vocab_size"] == 128256 and view["draft_vocab_size"] == 32000 and "target_hidden_size" not in view
    assert view["rope_parameters"]["rope_theta"] == 500000.0
    assert sorted(weights) == ["lm_head.weight", "midlayer.x"]  # the training-only copy is dropped


def refused(directory, match: str, target) -> str:
    """The message ``load_eagle3`` refuses ``directory`` with (it must match ``match``)."""
    with pytest.raises(ModelLoadError, match=match) as err:
        load_eagle3(directory, target)
    return str(err.value)


def test_speculators_heads_of_another_network_are_refused(target, tmp_path):
    """Other speculators algorithms, Qwen3 layers (q/k norms), several layers and the variant flags
    are named, not drafted with the wrong network."""
    write_eagle_layout(tmp_path / "eagle")
    cases = {
        "dflash": ({"speculators_model_type": "dflash"}, "speculators 'dflash' model"),
        "residual": ({"norm_before_residual": True}, "norm_before_residual: true"),
        "fc": ({"norm_before_fc": True}, "norm_before_fc: true"),
    }
    for name, (top, match) in cases.items():
        write_speculators_twin(tmp_path / "eagle", tmp_path / name, **top)
        refused(tmp_path / name, match, target)
    write_speculators_twin(tmp_path / "eagle", tmp_path / "qwen3")
    config = json.loads((tmp_path / "qwen3" / "config.json").read_text())
    config["transformer_layer_config"]["model_type"] = "qwen3"
    (tmp_path / "qwen3" / "config.json").write_text(json.dumps(config))
    refused(tmp_path / "qwen3", "'qwen3' layer", target)
    config["transformer_layer_config"].update(model_type="llama", num_hidden_layers=2)
    (tmp_path / "qwen3" / "config.json").write_text(json.dumps(config))
    refused(tmp_path / "qwen3", "2 decoder layers", target)


def test_a_directory_in_no_format_read_here_says_which_formats_are_read_and_what_it_holds(target, tmp_path):
    """A plain Llama model, a sharded checkpoint and a directory without a config each get one message:
    the formats read here (EAGLE layout, speculators, this package's heads) and what the directory
    holds (its files, what its config says it is, its first weight names)."""
    target.model.save_pretrained(tmp_path / "llama")
    message = refused(tmp_path / "llama", "no fc.weight", target)
    for said in (
        "Read here:",
        "speculators_model_type 'eagle3'",
        "head:DIR_OR_HUB_ID",
        "architectures ['LlamaForCausalLM']",
        "model_type 'llama'",
        "lm_head.weight",
    ):
        assert said in message, said
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text((tmp_path / "llama" / "config.json").read_text())
    for name in (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ):
        (sharded / name).write_text("{}")
    message = refused(sharded, "neither model.safetensors nor pytorch_model.bin", target)
    assert "model.safetensors.index.json" in message and "Read here:" in message
    (tmp_path / "empty").mkdir()
    message = refused(tmp_path / "empty", "no readable config.json", target)
    assert "holds no files" in message


def test_presets_offer_the_public_speculators_heads_of_listed_targets():
    """RedHatAI publishes speculators-format EAGLE-3 heads for two of the listed targets (vLLM's own
    integration test pairs them so); their presets name that format."""
    speculators = {p.target: p.head for p in PRESETS if p.head_format == "speculators"}
    assert speculators == {
        "Qwen/Qwen3-8B": "RedHatAI/Qwen3-8B-speculator.eagle3",
        "meta-llama/Llama-3.1-8B-Instruct": "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
    }
    assert {p.target for p in PRESETS} >= set(speculators)


def test_a_draft_vocabulary_of_the_first_tokens_keeps_its_maps_in_the_speculators_export(target, tmp_path):
    """A reduced draft vocabulary that is the first Vd tokens has an all-zero d2t: the export dropped both
    maps (as for a full vocabulary), and its own loader then refused the head."""
    torch.manual_seed(0)
    head = Eagle3Head.for_target(target)
    head.restrict_vocab(list(range(32)))
    save_eagle3(head, tmp_path / "spec", target, dtype=torch.float32, layout="speculators")
    assert {"d2t", "t2d"} <= set(load_file(tmp_path / "spec" / "model.safetensors"))
    back = load_eagle3(tmp_path / "spec", target, dtype=torch.float32)
    assert back.config.draft_vocab_size == 32


@pytest.mark.parametrize(
    "edit",
    [
        lambda c: c.pop("vocab_size"),
        lambda c: c.update(hidden_size=None),
        lambda c: (c.pop("eagle_aux_hidden_state_layer_ids", None), c.update(eagle_config=[1])),
        lambda c: c.update(eagle_aux_hidden_state_layer_ids=["a"]),
    ],
    ids=["no vocab_size", "hidden_size null", "eagle_config a list", "layer ids text"],
)
def test_a_head_config_with_a_key_missing_or_mistyped_is_refused_with_a_message(target, tmp_path, edit):
    """A config.json another tool or a hand wrote wrong raised KeyError, AttributeError or ValueError, which
    the app and the benchmark CLI do not catch: a ModelLoadError that names the directory now."""
    save_eagle3(Eagle3Head.for_target(target), tmp_path / "h", target, dtype=torch.float32, layout="eagle")
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    edit(config)
    (tmp_path / "h" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="config.json"):
        load_eagle3(tmp_path / "h", target, dtype=torch.float32)
