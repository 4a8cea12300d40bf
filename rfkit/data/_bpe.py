"""Byte-level BPE tokenisation (GPT-2 style) in pure Python, as SmolLM2 uses it.

Steps, as in Hugging Face ``tokenizers`` with SmolLM2's ``tokenizer.json`` and llama.cpp's
``smollm`` pre-tokenizer:

1. split off every numeric character (``\\p{N}``) as its own piece (``Digits(individual_digits=True)``);
2. split each piece with the GPT-2 pattern
   ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``
   (implemented here with :mod:`unicodedata` categories, since :mod:`re` has no ``\\p{..}``);
3. map each piece's UTF-8 bytes to printable characters (GPT-2's ``bytes_to_unicode``) and
   apply the merges in rank order (lowest rank first) until none applies;
4. look the resulting symbols up in the vocabulary.

Special-token strings in the text (``<|endoftext|>``, ...) are encoded as plain text.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence

__all__ = ["ByteLevelBPE", "pre_tokenize", "bytes_to_unicode"]

_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")  # after "'", in the pattern's order
_NOT_SPACE = frozenset("\x1c\x1d\x1e\x1f")  # str.isspace() says yes, Unicode White_Space says no


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (e.g. space -> "Ġ")."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def _cls(ch: str) -> str:
    """'L' letter, 'N' number, 'S' whitespace, 'O' anything else."""
    cat = unicodedata.category(ch)
    if cat[0] in "LN":
        return cat[0]
    if ch.isspace() and ch not in _NOT_SPACE:
        return "S"
    return "O"


def _split_gpt2(s: str) -> list[str]:
    out = []
    classes = [_cls(ch) for ch in s]
    n, i = len(s), 0
    while i < n:
        c = classes[i]
        if s[i] == "'":
            hit = next((t for t in _CONTRACTIONS if s.startswith(t, i + 1)), None)
            if hit is not None:
                out.append(s[i : i + 1 + len(hit)])
                i += 1 + len(hit)
                continue
        start = i
        if s[i] == " " and i + 1 < n and classes[i + 1] != "S":
            c = classes[i + 1]
            i += 1
        if c != "S":  # ` ?\p{L}+`, ` ?\p{N}+` or ` ?[^\s\p{L}\p{N}]+`: a run of one class
            j = i
            while j < n and classes[j] == c:
                j += 1
            out.append(s[start:j])
            i = j
            continue
        j = i  # whitespace: `\s+(?!\S)`, else `\s+`
        while j < n and classes[j] == "S":
            j += 1
        if j < n and j - i > 1:
            j -= 1  # leave the last space to prefix the next word
        out.append(s[i:j])
        i = j
    return out


def pre_tokenize(text: str) -> list[str]:
    """Pieces of ``text`` before BPE: numeric characters alone, then the GPT-2 pattern."""
    out: list[str] = []
    run_start = 0
    for i, ch in enumerate(text):
        if unicodedata.category(ch)[0] == "N":
            if run_start < i:
                out.extend(_split_gpt2(text[run_start:i]))
            out.append(ch)
            run_start = i + 1
    if run_start < len(text):
        out.extend(_split_gpt2(text[run_start:]))
    return out


class ByteLevelBPE:
    """Byte-level BPE with a vocabulary (id order) and ranked merges (``"a b"`` strings).

    Parameters
    ----------
    tokens : sequence of str
        The vocabulary; token ``i`` has id ``i``.
    merges : sequence of str
        Merge rules ``"left right"``, highest priority first.
    """

    def __init__(self, tokens: Sequence[str], merges: Sequence[str]) -> None:
        self.tokens = list(tokens)
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self.ranks: dict[tuple[str, str], int] = {}
        for r, m in enumerate(merges):
            a, _, b = m.partition(" ")
            self.ranks.setdefault((a, b), r)
        self.byte_map = bytes_to_unicode()
        self._bpe = functools.lru_cache(maxsize=2**16)(self._bpe_uncached)

    def __len__(self) -> int:
        return len(self.tokens)

    def _bpe_uncached(self, piece: str) -> tuple[str, ...]:
        word = [self.byte_map[b] for b in piece.encode("utf-8")]
        ranks = self.ranks
        while len(word) > 1:
            best, best_rank = -1, len(ranks)
            for i in range(len(word) - 1):
                r = ranks.get((word[i], word[i + 1]))
                if r is not None and r < best_rank:
                    best, best_rank = i, r
            if best < 0:
                break
            pair = (word[best], word[best + 1])
            merged, i = [], 0
            while i < len(word):  # merge every occurrence of the best pair, left to right
                if i < len(word) - 1 and (word[i], word[i + 1]) == pair:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return tuple(word)

    def tokenize(self, text: str) -> list[str]:
        """Vocabulary strings of ``text`` (byte-level: a leading space shows as "Ġ")."""
        return [sym for piece in pre_tokenize(text) for sym in self._bpe(piece)]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        return [self.vocab[sym] for sym in self.tokenize(text)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (invalid UTF-8 from a split character becomes U+FFFD)."""
        inverse = {c: b for b, c in self.byte_map.items()}
        data = bytes(inverse[ch] for i in ids for ch in self.tokens[i])
        return data.decode("utf-8", errors="replace")
