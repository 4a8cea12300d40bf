"""BERT WordPiece tokenisation of all-MiniLM-L6-v2 (rfkit.data._wordpiece).

The expected token lists over the real vocabulary were derived by hand from the rules
(lower-case, strip accents, split punctuation and CJK, greedy longest-match WordPiece)
and agree with the Hugging Face ``tokenizers`` library run on the model's own
``tokenizer.json`` (checked once offline, also on 3000 random strings). The weights
package must be installed: these tests fail, never skip, without it.
"""

from __future__ import annotations

import pytest

from rfkit.data._minilm import model_dir
from rfkit.data._wordpiece import WordPieceTokenizer, basic_tokenize, wordpiece


@pytest.fixture(scope="module")
def tok() -> WordPieceTokenizer:
    return WordPieceTokenizer(model_dir() / "vocab.txt")  # ModelNotInstalledError if missing


# --------------------------------------------------------------------------- toy vocabulary


TOY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","]


def test_wordpiece_greedy_longest_match_on_toy_vocab() -> None:
    vocab = {t: i for i, t in enumerate(TOY)}
    assert wordpiece("unwanted", vocab) == ["un", "##want", "##ed"]
    assert wordpiece("running", vocab) == ["runn", "##ing"]
    assert wordpiece("unwantedx", vocab) == ["[UNK]"]  # one uncovered piece: the whole word is unknown
    assert wordpiece("", vocab) == []
    tk = WordPieceTokenizer(TOY)
    assert tk.tokenize("UNwant\u00e9d,running") == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tk.encode("unwanted running") == [2, 8, 5, 6, 9, 10, 3]
    assert tk.encode("unwanted running", max_len=4) == [2, 8, 5, 3]


def test_toy_vocab_without_special_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\[CLS\]"):
        WordPieceTokenizer(["[PAD]", "[UNK]", "[SEP]", "a"])


def test_basic_tokenize_rules() -> None:
    assert basic_tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
    assert basic_tokenize("H\u00e9llo") == ["hello"]  # precomposed é
    assert basic_tokenize("He\u0301llo") == ["hello"]  # e + combining acute
    assert basic_tokenize("ah\u535a\u63a8zz") == ["ah", "\u535a", "\u63a8", "zz"]  # CJK split out
    assert basic_tokenize("a\x00b\x07c\ufffdd") == ["abcd"]  # NUL, control, U+FFFD removed
    assert basic_tokenize("x\u00a0y\u3000z") == ["x", "y", "z"]  # Zs whitespace
    assert basic_tokenize("\u0301") == []  # a lone combining mark vanishes
    assert basic_tokenize("\u2014\u00ab\u00bb\u00bf") == [
        "\u2014",
        "\u00ab",
        "\u00bb",
        "\u00bf",
    ]  # Unicode P*
    assert basic_tokenize("$+<=>^`|~") == list("$+<=>^`|~")  # ASCII symbols count as punctuation


def test_word_over_100_characters_is_unknown() -> None:
    vocab = {"a": 0, "##a": 1, "[UNK]": 2}
    assert wordpiece("a" * 100, vocab) == ["a"] + ["##a"] * 99
    assert wordpiece("a" * 101, vocab) == ["[UNK]"]


# --------------------------------------------------------------------------- real vocabulary

CASES = [
    ("This is an example sentence", ["this", "is", "an", "example", "sentence"]),
    # accents stripped after lower-casing; unknown words split into known pieces
    (
        "Héllo, wörld! Crème brûlée at the café.",
        ["hello", ",", "world", "!", "cr", "##eme", "br", "##ule", "##e", "at", "the", "cafe", "."],
    ),
    (
        "naïve résumé — coöperate; Ångström?",
        ["naive", "resume", "—", "cooperate", ";", "ang", "##strom", "?"],
    ),
    # CJK ideographs are single tokens; those missing from the vocabulary are [UNK]
    ("我爱北京天安门 and 東京", ["我", "[UNK]", "北", "京", "天", "安", "[UNK]", "and", "東", "京"]),
    # unknown (made-up) words
    (
        "xyzzyqxj flibbertigibbet qwzxv",
        ["x", "##y", "##zzy", "##q", "##x", "##j", "fl", "##ib", "##bert", "##ig", "##ib", "##bet"]
        + ["q", "##w", "##z", "##x", "##v"],
    ),
    ("a" * 101, ["[UNK]"]),
    # ASCII punctuation and symbols each become a token
    (
        "don't stop-believing: e.g. U.S.A. (1999) $5.00 #1 @home 50% a&b ~x~",
        ["don", "'", "t", "stop", "-", "believing", ":", "e", ".", "g", ".", "u", ".", "s", ".", "a", "."]
        + [
            "(",
            "1999",
            ")",
            "$",
            "5",
            ".",
            "00",
            "#",
            "1",
            "@",
            "home",
            "50",
            "%",
            "a",
            "&",
            "b",
            "~",
            "x",
            "~",
        ],
    ),
    # \u200b is a format character (Cf): removed, so "nbsp" and "zwsp" join
    (
        "Tabs\tand\nnewlines\r\nand  spaces\u00a0nbsp\u200bzwsp",
        ["tab", "##s", "and", "new", "##lines", "and", "spaces", "n", "##bs", "##p", "##z", "##ws", "##p"],
    ),
    ("emoji 😀 test ✓ ©®", ["em", "##oj", "##i", "[UNK]", "test", "[UNK]", "©", "##®"]),
    ("UNAFFABLE unaffable Un-affable", ["una", "##ffa", "##ble"] * 2 + ["un", "-", "af", "##fa", "##ble"]),
    ("控制\x00char\x07s here\ufffd", ["[UNK]", "[UNK]", "char", "##s", "here"]),
    ("[MASK] the [CLS]", ["[MASK]", "the", "[CLS]"]),  # literal special tokens are kept
    ("[mask]", ["[", "mask", "]"]),  # ... but only in their exact spelling
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_real_vocab_tokenisation(tok: WordPieceTokenizer, text: str, expected: list[str]) -> None:
    assert tok.tokenize(text) == expected


def test_real_vocab_ids_and_specials(tok: WordPieceTokenizer) -> None:
    assert len(tok) == 30522
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id) == (0, 100, 101, 102)
    # ids of "this is an example sentence" in bert-base-uncased's vocabulary
    assert tok.encode("This is an example sentence") == [101, 2023, 2003, 2019, 2742, 6251, 102]
    assert tok.encode("This is an example sentence", max_len=4) == [101, 2023, 2003, 102]
