"""Each token's text on its own, for labels: a token that holds only part of a multi-byte character
(an emoji, most CJK characters, split by a byte-level BPE) decodes to U+FFFD "�" by itself; its label
shows the bytes it holds instead (``\\xe6``), so a reader can tell those tokens apart and see that they
join up into one character."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache

REPLACEMENT = "\ufffd"
BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@cache
def byte_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's): the printable character standing for each of the 256 bytes
    in token strings (printable Latin-1 bytes stand for themselves, the rest for code points from 256)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in kept}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def token_bytes(token: str) -> bytes | None:
    """The bytes a byte-level BPE token string stands for (``"ĠðŁĺ"`` -> ``b" \\xf0\\x9f\\x98"``), or
    None when a character is outside the alphabet (the tokenizer is not byte-level)."""
    alphabet = byte_alphabet()
    try:
        return bytes(alphabet[c] for c in token)
    except KeyError:
        return None


def piece_bytes(piece) -> bytes | None:
    """The bytes a token's piece (``convert_ids_to_tokens``) stands for: a bytes piece itself, a
    SentencePiece byte-fallback piece ``<0xE6>`` its byte, a byte-level BPE piece its bytes
    (``token_bytes``); None when it is none of these."""
    if isinstance(piece, bytes):
        return piece
    if not isinstance(piece, str):
        return None
    fallback = BYTE_FALLBACK.fullmatch(piece)
    return bytes([int(fallback.group(1), 16)]) if fallback else token_bytes(piece)


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """The text of each token in ``ids`` on its own: its decoded text, or, where that holds "�" that the
    token's own bytes do not (part of a character), those bytes with the incomplete ones escaped
    (``" \\xf0\\x9f\\x98"`` for the first three bytes of an emoji; SentencePiece's ``<0xE6>`` reads
    ``\\xe6`` too).  A token whose bytes are unknown, or decode to "�" themselves, keeps its decoded
    text."""
    texts = tokenizer.batch_decode([[t] for t in ids])
    broken = [k for k, text in enumerate(texts) if REPLACEMENT in text]
    if not broken:
        return texts
    pieces = tokenizer.convert_ids_to_tokens([ids[k] for k in broken])
    for k, piece in zip(broken, pieces):
        raw = piece_bytes(piece)
        if raw is not None:
            label = raw.decode("utf-8", errors="backslashreplace")
            if REPLACEMENT not in label:
                texts[k] = label
    return texts


def token_label(tokenizer, token: int) -> str:
    """``token_labels`` of one token."""
    return token_labels(tokenizer, [token])[0]
