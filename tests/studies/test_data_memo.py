"""Model data kept per process (a study reads the same model entry for many cells): every caller gets
its own copy, so a kept entry never changes."""

from __future__ import annotations

import numpy as np

import rfkit as rk
from rfkit.study._data_sources import _layer_qkv, _model


def test_real_pairs_are_copies_of_the_kept_model_data():
    q1, k1 = rk.data.real_pairs(8, n_texts=2, rng=1)
    before = q1.copy()
    q1 += 1.0  # the caller's own arrays
    q2, k2 = rk.data.real_pairs(8, n_texts=2, rng=1)
    np.testing.assert_array_equal(q2, before)
    np.testing.assert_array_equal(k2, k1)


def test_model_source_cells_get_copies_of_their_head():
    params = {"layer": 1, "head": 2, "n_texts": 2}
    Q, K, V = _model(dict(params), np.random.default_rng(0))
    ref = rk.data.minilm_qk(list(rk.data.PASSAGES[:2]), layers=[1], heads=[2], max_len=64)
    np.testing.assert_array_equal(Q, ref.q[:, 0, 0])
    hits = _layer_qkv.cache_info().hits
    Q[...] = 0.0
    Q2, _, _ = _model(dict(params), np.random.default_rng(0))
    assert _layer_qkv.cache_info().hits == hits + 1  # the kept layer, read once
    np.testing.assert_array_equal(Q2, ref.q[:, 0, 0])
