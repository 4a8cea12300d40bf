"""BERT WordPiece tokenisation (uncased), in pure Python.

Follows the reference ``BertTokenizer`` of Hugging Face ``transformers`` (itself the
original Google BERT ``tokenization.py``) with ``do_lower_case=True``,
``tokenize_chinese_chars=True`` and accents stripped:

1. *Basic tokenisation*: remove NUL, U+FFFD and control characters, map every
   whitespace character to a space; put spaces around CJK ideographs; NFC-normalise;
   split on whitespace; lower-case each word and strip its accents (NFD, then drop
   the combining marks, category ``Mn``); split it on punctuation (ASCII
   ``!"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~`` and every Unicode ``P*`` category), each
   punctuation character becoming a token.
2. *WordPiece*: each word is split greedily, longest match first, into vocabulary
   pieces, continuation pieces carrying the ``##`` prefix. A word longer than
   100 characters, or one that cannot be covered by pieces, becomes ``[UNK]``.

As in ``transformers``, the special-token strings ``[CLS]``, ``[SEP]``, ``[PAD]``,
``[UNK]`` and ``[MASK]`` written literally (case-sensitive) inside a text are kept as those
tokens. The output matches the Hugging Face ``tokenizers`` implementation of this model's
``tokenizer.json`` on the test strings (accents, punctuation, CJK, control characters,
unknown words, words over 100 characters).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

__all__ = ["WordPieceTokenizer", "basic_tokenize", "wordpiece", "SPECIAL_TOKENS"]

SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]")
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_whitespace(ch: str) -> bool:
    if ch in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    if ch in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _clean_and_space_cjk(text: str) -> str:
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            continue
        if _is_whitespace(ch):
            out.append(" ")
        elif _is_cjk(cp):
            out.extend((" ", ch, " "))
        else:
            out.append(ch)
    return "".join(out)


def _strip_accents(word: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFD", word) if unicodedata.category(ch) != "Mn")


def _split_on_punctuation(word: str) -> list[str]:
    pieces: list[str] = []
    current: list[str] = []
    for ch in word:
        if _is_punctuation(ch):
            if current:
                pieces.append("".join(current))
                current = []
            pieces.append(ch)
        else:
            current.append(ch)
    if current:
        pieces.append("".join(current))
    return pieces


def basic_tokenize(text: str) -> list[str]:
    """Step 1: clean, lower-case, strip accents, split on whitespace, punctuation and CJK."""
    text = unicodedata.normalize("NFC", _clean_and_space_cjk(text))
    words: list[str] = []
    for word in text.split():
        word = _strip_accents(word.lower())
        words.extend(_split_on_punctuation(word))
    # accent stripping can leave empty words (a lone combining mark): drop them, as the reference does
    return [w for w in " ".join(words).split()]


def wordpiece(
    word: str, vocab: dict[str, int], *, unk_token: str = "[UNK]", max_chars: int = 100
) -> list[str]:
    """Step 2: greedy longest-match-first split of one word into vocabulary pieces."""
    if len(word) > max_chars:
        return [unk_token]
    pieces: list[str] = []
    start = 0
    n = len(word)
    while start < n:
        end = n
        piece = None
        while start < end:
            candidate = word[start:end]
            if start > 0:
                candidate = "##" + candidate
            if candidate in vocab:
                piece = candidate
                break
            end -= 1
        if piece is None:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


class WordPieceTokenizer:
    """Uncased BERT tokenizer over a ``vocab.txt`` (one token per line, id = line number).

    Parameters
    ----------
    vocab : path or sequence of str
        The vocabulary file, or the tokens in id order.
    """

    unk_token = "[UNK]"
    cls_token = "[CLS]"
    sep_token = "[SEP]"
    pad_token = "[PAD]"

    def __init__(self, vocab: str | Path | Sequence[str]) -> None:
        if isinstance(vocab, (str, Path)):
            with open(vocab, encoding="utf-8") as fh:
                tokens = [line.rstrip("\n") for line in fh]
        else:
            tokens = list(vocab)
        self.inv_vocab: list[str] = tokens
        self.vocab: dict[str, int] = {}
        for i, tok in enumerate(tokens):
            self.vocab.setdefault(tok, i)
        for special in (self.unk_token, self.cls_token, self.sep_token, self.pad_token):
            if special not in self.vocab:
                raise ValueError(f"The vocabulary has no {special} token.")
        self.unk_id = self.vocab[self.unk_token]
        self.cls_id = self.vocab[self.cls_token]
        self.sep_id = self.vocab[self.sep_token]
        self.pad_id = self.vocab[self.pad_token]

    def __len__(self) -> int:
        return len(self.inv_vocab)

    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens of ``text`` (no ``[CLS]``/``[SEP]``)."""
        out: list[str] = []
        for i, part in enumerate(_SPECIAL_SPLIT.split(text)):
            if i % 2:  # a literal special token
                if part in self.vocab:
                    out.append(part)
                    continue
            for word in basic_tokenize(part):
                out.extend(wordpiece(word, self.vocab, unk_token=self.unk_token))
        return out

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        return [self.vocab.get(t, self.unk_id) for t in tokens]

    def encode(self, text: str, *, max_len: int | None = None) -> list[int]:
        """``[CLS] tokens [SEP]`` ids; with ``max_len`` the tokens are cut to ``max_len - 2``."""
        ids = self.convert_tokens_to_ids(self.tokenize(text))
        if max_len is not None:
            ids = ids[: max(max_len - 2, 0)]
        return [self.cls_id, *ids, self.sep_id]
