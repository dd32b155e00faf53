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


def test_a_tokenizer_that_is_not_byte_level_keeps_its_decoded_text():
    tok = tiny_tokenizer()
    ids = list(range(5))
    assert token_labels(tok, ids) == tok.batch_decode([[t] for t in ids])


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
