"""Token labels: a token holding part of a character shows its bytes, whole tokens their text."""

import pytest
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from talon.models.token_text import byte_alphabet, token_bytes, token_label, token_labels
from tests.tiny import tiny_tokenizer

PIECES = ["Ġwell", "ĠðŁĺ", "´", "æľ¬", "Ġæ", "ĠcafÃ©", "ï¿½"]


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (GPT-2's alphabet and decoder) whose vocabulary holds ``PIECES``."""
    vocab = {piece: i for i, piece in enumerate(PIECES)}
    for char in byte_alphabet():
        vocab.setdefault(char, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_the_alphabet_stands_for_every_byte_once():
    alphabet = byte_alphabet()
    assert sorted(alphabet.values()) == list(range(256))
    assert alphabet["A"] == ord("A") and alphabet["Ġ"] == ord(" ") and alphabet["Ċ"] == ord("\n")
    assert token_bytes("ĠðŁĺ") == b" \xf0\x9f\x98"
    assert token_bytes("▁hello") is None  # SentencePiece's word mark is not a byte-level character


def test_part_of_a_character_shows_its_bytes_and_whole_tokens_their_text():
    tok = byte_level_tokenizer()
    ids = [PIECES.index(p) for p in PIECES]
    assert tok.decode([ids[1]]) == " \ufffd"  # what a label read before
    assert token_labels(tok, ids) == [" well", " \\xf0\\x9f\\x98", "\\xb4", "本", " \\xe6", " café", "\ufffd"]
    assert token_label(tok, ids[2]) == "\\xb4"


def test_sentencepiece_byte_pieces_read_as_bytes_and_unknown_pieces_keep_their_text():
    # A byte-fallback piece <0xE6> decodes to "�" alone: it reads \xe6 like a byte-level piece.  A token whose
    # decoded text holds "�" and whose piece is neither kind keeps its text.
    pieces = Tokenizer(models.BPE(vocab={"<0xE6>": 0, "a": 1}, merges=[], byte_fallback=True))
    pieces.decoder = decoders.ByteFallback()
    fallback = PreTrainedTokenizerFast(tokenizer_object=pieces)
    assert fallback.decode([0]) == "\ufffd"
    assert token_labels(fallback, [0, 1]) == ["\\xe6", "a"]
    words = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x\ufffd": 0, "y": 1}, unk_token="y")))
    assert token_labels(words, [0, 1]) == ["x\ufffd", "y"]
    assert token_labels(tiny_tokenizer(), [0, 1]) == tiny_tokenizer().batch_decode([[0], [1]])


@pytest.mark.engine
def test_the_embedded_tokenizers_byte_pieces_show_their_bytes(target):
    """SmolLM2's byte-level BPE splits the emoji and the Japanese characters into pieces of a character."""
    tok = target.tokenizer
    ids = tok.encode("Sleep 😴 日本語 café", add_special_tokens=False)
    labels = token_labels(tok, ids)
    assert "\ufffd" in "".join(tok.batch_decode([[t] for t in ids]))  # the pieces a label used to show
    assert "\ufffd" not in "".join(labels)
    assert " café" in labels and "\\xf0\\x9f\\x98" in "".join(labels)
    # Unescaped, the labels' bytes are the text's bytes.
    raw = b"".join(
        label.encode("ascii").decode("unicode_escape").encode("latin-1") if "\\x" in label else label.encode()
        for label in labels
    )
    assert raw.decode() == "Sleep 😴 日本語 café"
