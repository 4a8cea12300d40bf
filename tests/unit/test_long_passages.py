"""Long texts joined from the built-in passages (rk.data.long_passages) and the study source's `texts` key.

The token counts need the model weights (``make install``): without them these tests fail, as the
other real-model tests do.
"""

from __future__ import annotations

import numpy as np
import pytest

import rfkit.data as rd
from rfkit.data import _smollm
from rfkit.exceptions import InvalidParameterError
from rfkit.study._records import data_source_record


def test_rotation_and_separator():
    texts = rd.long_passages()
    assert texts == rd.LONG_PASSAGES and len(texts) == 16 and len(set(texts)) == 16
    k = len(rd.PASSAGES)
    for i, t in enumerate(texts):
        parts = t.split("\n\n")
        assert parts == [rd.PASSAGES[(i + j) % k] for j in range(k)]
    assert rd.long_passages(3) == texts[:3]


@pytest.mark.parametrize("bad", [0, 17, -1, 2.0, True, "4", None])
def test_bad_n_texts(bad):
    with pytest.raises(
        InvalidParameterError,
        match=r"`n_texts` parameter of long_passages must be an int in the range \[1, 16\]",
    ):
        rd.long_passages(bad)


def test_every_long_text_fills_both_models():
    """Over 1,024 SmolLM2 tokens and 512 WordPiece positions each: truncation, never padding."""
    assert min(len(t) for t in _smollm.smollm2_tokenize(rd.LONG_PASSAGES, max_len=None)) >= 1024
    assert min(len(t) for t in rd.tokenize(rd.LONG_PASSAGES, max_len=512)) == 512


def test_study_source_reads_the_long_texts(monkeypatch, tmp_path):
    monkeypatch.setenv("RFKIT_CACHE", str(tmp_path))
    factory = data_source_record("minilm").factory
    q, k, v = factory({"texts": "long", "n_texts": 1, "layer": 0, "head": 1, "max_len": 96}, None)
    ref = rd.minilm_qk(rd.LONG_PASSAGES[:1], layers=[0], heads=[1], max_len=96, cache=False)
    assert q.shape == (1, 96, 32)
    np.testing.assert_array_equal(q, ref.q[:, 0, 0])
    np.testing.assert_array_equal(v, ref.v[:, 0, 0])
    with pytest.raises(InvalidParameterError, match=r"`data.texts` must be one of \['long', 'passages'\]"):
        factory({"texts": "short", "layer": 0, "head": 0}, None)
