"""A corpus for REST-style retrieval: text read from files with the target's tokenizer and indexed once
as n-grams, then read (never written) by every prompt-lookup drafter of a run (``NgramDrafter``'s
``datastore``), after each run's own prompt and output."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError
from .ngram import MAX_NGRAM, grams_before

MAX_DATASTORE_TOKENS = 500_000
"""The most tokens a datastore may hold: its index keeps a counter per distinct n-gram (n = 1..3) in
memory (up to about 1 GB at this size, where every n-gram is new; 200,000 random tokens took 0.4 GB and
3 s to index on the AVX2 EPYC)."""


@dataclass(frozen=True)
class Datastore:
    """An n-gram index over a corpus.

    Attributes:
        name: what it indexes, for drafter names and results (e.g. ``datastore docs (12 documents,
            48,213 tokens)``).
        documents: the documents read (a file, or a line of a ``.jsonl`` file).
        tokens: their tokens, in all.
        index: for every n-gram (n = 1..``MAX_NGRAM``) of every document, counts of the token that
            followed it.
    """

    name: str
    documents: int
    tokens: int
    index: dict[tuple[int, ...], Counter]


def build_datastore(sequences: Sequence[Sequence[int]], label: str = "datastore") -> Datastore:
    """Index token ``sequences`` (documents)."""
    index: dict[tuple[int, ...], Counter] = defaultdict(Counter)
    tokens = 0
    for seq in sequences:
        seq = [int(t) for t in seq]
        tokens += len(seq)
        for end in range(1, len(seq)):
            for gram in grams_before(seq, end, MAX_NGRAM):
                index[gram][seq[end]] += 1
    name = f"{label} ({len(sequences):,} document{'s' if len(sequences) != 1 else ''}, {tokens:,} tokens)"
    return Datastore(name, len(sequences), tokens, dict(index))


def documents_at(path: Path) -> Iterator[tuple[str, str]]:
    """``(where, text)`` for each document at ``path``: a ``.jsonl`` file's lines (each a JSON object with a
    string ``"text"``), another file's whole UTF-8 text, a directory's files below it in name order
    (hidden ones, and files that are not UTF-8 text, skipped).  ``ConfigError`` says what is wrong."""
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            if any(part.startswith(".") for part in file.relative_to(path).parts):
                continue
            text = _text_of(file)
            if text is not None:  # an image or a build output in the directory is not a document
                yield from _documents(file, text)
        return
    text = _text_of(path)
    if text is None:
        raise ConfigError(f"{path} is not UTF-8 text: give a text file, a .jsonl file or a directory of text files.")
    yield from _documents(path, text)


def _text_of(path: Path) -> str | None:
    """``path``'s UTF-8 text; None for a file that is not UTF-8 text."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None
    except OSError as err:
        raise ConfigError(f"{path} cannot be read ({err.strerror or err}).") from None


def _documents(path: Path, text: str) -> Iterator[tuple[str, str]]:
    """A file's documents: its whole text, or a ``.jsonl`` file's ``"text"`` of each line."""
    if path.suffix != ".jsonl":
        yield str(path), text
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise ConfigError(f"{path} line {n} is not JSON: each line of a .jsonl datastore is an object.") from None
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            raise ConfigError(f'{path} line {n} has no "text" string: each line is {{"text": "..."}}.')
        yield f"{path}:{n}", item["text"]


def read_datastore(
    path: str | Path, encode: Callable[[str], list[int]], progress: Callable[[str], None] = print
) -> Datastore:
    """The datastore of the documents at ``path`` (``documents_at``), each tokenized with ``encode`` (the
    target's tokenizer, without special tokens).  ``ConfigError`` for a path that does not exist, holds no
    text, or holds more than ``MAX_DATASTORE_TOKENS`` tokens."""
    where = Path(path).expanduser()
    if not where.exists():
        raise ConfigError(f"{where} does not exist: give a text file, a .jsonl file or a directory of text files.")
    progress(f"Reading the datastore {where} ...")
    sequences, tokens = [], 0
    for _, text in documents_at(where):
        ids = encode(text)
        tokens += len(ids)
        if tokens > MAX_DATASTORE_TOKENS:
            raise ConfigError(
                f"{where} holds more than {MAX_DATASTORE_TOKENS:,} tokens; give a smaller corpus (its n-gram index is "
                "kept in memory)."
            )
        if ids:
            sequences.append(ids)
    if not sequences:
        raise ConfigError(f"{where} holds no text to retrieve from.")
    progress(f"Indexing {tokens:,} tokens ...")
    datastore = build_datastore(sequences, f"datastore {where.name}")
    progress(f"Indexed {datastore.name}.")
    return datastore
