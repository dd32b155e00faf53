"""Fast tier: a corpus for REST-style retrieval (``talon.drafters.datastore``): reading files into
documents, the size limit, the drafters that retrieve from it, and decoding with it (lossless, and the
corpus's continuations accepted)."""

from __future__ import annotations

import pytest

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters import datastore as datastore_module
from talon.drafters.datastore import build_datastore, documents_at, read_datastore
from talon.drafters.factory import drafter_for, make_drafter
from talon.drafters.hybrid import HybridDrafter
from talon.drafters.ngram import NgramDrafter
from talon.engine.decode import run_to_end
from tests.tiny import greedy_generate, prompt_ids, tiny_target


def encode(text: str) -> list[int]:
    """A stand-in tokenizer: one id per character (the target's tokenizer in use)."""
    return [ord(c) % 97 for c in text]


def test_files_jsonl_lines_and_directories_are_documents(tmp_path):
    (tmp_path / "notes.txt").write_text("alpha beta", encoding="utf-8")
    (tmp_path / "lines.jsonl").write_text('{"text": "one"}\n\n{"text": "two"}\n', encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "code.py").write_text("def f(): pass", encoding="utf-8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")  # not text: skipped in a directory
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main", encoding="utf-8")  # hidden: skipped
    texts = [text for _, text in documents_at(tmp_path)]
    assert texts == ["one", "two", "alpha beta", "def f(): pass"]  # name order: lines.jsonl, notes.txt, sub/
    store = read_datastore(tmp_path, encode, progress=lambda s: None)
    assert store.documents == 4 and store.tokens == sum(len(t) for t in texts)
    assert store.name == f"datastore {tmp_path.name} (4 documents, {store.tokens} tokens)"
    # a directory under a hidden one (~/.cache/...) is read: only hidden parts below the path are skipped
    hidden = tmp_path / ".cache" / "corpus"
    hidden.mkdir(parents=True)
    (hidden / "a.txt").write_text("xyz", encoding="utf-8")
    assert [t for _, t in documents_at(hidden)] == ["xyz"]


def test_a_bad_datastore_says_what_is_wrong(tmp_path, monkeypatch):
    quiet = {"progress": lambda s: None}
    with pytest.raises(ConfigError, match="does not exist"):
        read_datastore(tmp_path / "missing.txt", encode, **quiet)
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"prompt": "no text"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match='line 2 has no "text"'):
        read_datastore(tmp_path / "bad.jsonl", encode, **quiet)
    (tmp_path / "broken.jsonl").write_text("{not json\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 1 is not JSON"):
        read_datastore(tmp_path / "broken.jsonl", encode, **quiet)
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        read_datastore(tmp_path / "blob.bin", encode, **quiet)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no text"):
        read_datastore(tmp_path / "empty", encode, **quiet)
    (tmp_path / "big.txt").write_text("x" * 50, encoding="utf-8")
    monkeypatch.setattr(datastore_module, "MAX_DATASTORE_TOKENS", 40)
    with pytest.raises(ConfigError, match="more than 40 tokens"):
        read_datastore(tmp_path / "big.txt", encode, **quiet)


def test_every_prompt_lookup_retrieves_from_the_datastore_and_says_so():
    target = tiny_target()
    store = build_datastore([[5, 6, 7, 8]], "datastore corpus")
    plain = make_drafter("ngram", target)
    assert isinstance(plain, NgramDrafter) and plain.datastore == {} and plain.name == "n-gram prompt lookup"
    ngram = drafter_for("talon", "ngram", target, datastore=store)
    assert ngram.datastore is store.index and ngram.name == f"n-gram prompt lookup + {store.name}"
    hybrids = (
        drafter_for("hybrid", "layers:1", target, datastore=store),
        make_drafter("lookup+layers:1", target, None, store),
    )
    for drafter in hybrids:
        assert isinstance(drafter, HybridDrafter) and drafter.retrieval.datastore is store.index
        assert store.name in drafter.name
    assert isinstance(drafter_for("talon", "layers:1", target, datastore=store), type(make_drafter("layers:1", target)))


@pytest.mark.parametrize("method", ["talon", "hybrid"])
def test_decoding_with_a_datastore_is_lossless_and_takes_its_continuations(method):
    """A corpus holding the target's own greedy continuation: drafts retrieved from it are accepted
    (more tokens per forward than prompt lookup alone), and the output is plain greedy decoding's."""
    target = tiny_target()
    ids = prompt_ids(4)
    new_tokens = 24
    greedy = greedy_generate(target, ids, new_tokens)
    store = build_datastore([ids[-3:] + greedy])
    cfg, dec = TreeConfig(method=method, budget=8, topk=3, mu=0.05), DecodeConfig(max_new_tokens=new_tokens)
    spec = "ngram" if method == "talon" else "layers:1"
    runs = {
        with_store: run_to_end(
            target, drafter_for(method, spec, target, datastore=store if with_store else None), cfg, dec, prompt_ids=ids
        )
        for with_store in (False, True)
    }
    assert runs[True].output_ids == runs[False].output_ids == greedy
    mat = {k: len(t.output_ids) / len(t.steps) for k, t in runs.items()}
    assert mat[True] > 2.0 and mat[True] > mat[False] + 0.5, mat
