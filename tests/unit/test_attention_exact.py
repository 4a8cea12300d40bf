"""Exact softmax attention: reference values, masks, chunking, stability, bad input."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from rfkit import attention as att
from rfkit.exceptions import (
    DegenerateInputWarning,
    InvalidParameterError,
    NonFiniteInputError,
    ShapeError,
)


def naive(Q, K, V, causal=False, pad=None):
    """Textbook softmax(Q K^T) V in extended precision (no shifting needed for small logits)."""
    Q, K, V = (np.asarray(a, dtype=np.longdouble) for a in (Q, K, V))
    L = Q @ np.swapaxes(K, -1, -2)
    keep = np.ones(L.shape, dtype=bool)
    if causal:
        keep &= np.tri(L.shape[-2], L.shape[-1], dtype=bool)
    if pad is not None:
        keep &= ~np.asarray(pad)[..., None, :]
    L = np.where(keep, L, -np.inf)
    L = L - L.max(-1, keepdims=True)
    P = np.exp(L)
    return (P / P.sum(-1, keepdims=True)) @ V


@pytest.fixture
def qkv():
    rng = np.random.default_rng(20240601)
    Q = 0.6 * rng.standard_normal((2, 3, 9, 5))
    K = 0.6 * rng.standard_normal((2, 3, 9, 5))
    V = rng.standard_normal((2, 3, 9, 4))
    return Q, K, V


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 1, 4, 100])
def test_matches_naive(qkv, causal, chunk_size):
    Q, K, V = qkv
    out = att.softmax(Q, K, V, causal=causal, chunk_size=chunk_size)
    assert isinstance(out, np.ndarray)
    assert out.shape == (2, 3, 9, 4) and out.dtype == np.float64
    np.testing.assert_allclose(out, naive(Q, K, V, causal).astype(float), rtol=1e-13, atol=1e-14)


def test_causal_first_row_is_first_value(qkv):
    Q, K, V = qkv
    out = att.softmax(Q, K, V, causal=True)
    np.testing.assert_array_equal(out[..., 0, :], V[..., 0, :])


def test_rectangular_and_broadcasting():
    rng = np.random.default_rng(11)
    Q = rng.standard_normal((4, 1, 6, 3))  # broadcasts over heads
    K = rng.standard_normal((2, 11, 3))  # broadcasts over batch
    V = rng.standard_normal((11, 7))
    out = att.softmax(Q, K, V)
    assert out.shape == (4, 2, 6, 7)
    ref = naive(np.broadcast_to(Q, (4, 2, 6, 3)), np.broadcast_to(K, (4, 2, 11, 3)), V)
    np.testing.assert_allclose(out, ref.astype(float), rtol=1e-13, atol=1e-14)


def test_key_padding_mask(qkv):
    Q, K, V = qkv
    pad = np.zeros((2, 3, 9), dtype=bool)
    pad[0, :, -3:] = True
    pad[1, 1, ::2] = True
    for causal in (False, True):
        if causal:
            pad[..., 0] = False  # every causal row must see at least one key
        out = att.softmax(Q, K, V, causal=causal, key_padding_mask=pad, chunk_size=2)
        np.testing.assert_allclose(out, naive(Q, K, V, causal, pad).astype(float), rtol=1e-13, atol=1e-14)
    # padding = dropping the keys
    out = att.softmax(Q[0], K[0], V[0], key_padding_mask=pad[0])
    np.testing.assert_allclose(out, att.softmax(Q[0], K[0, :, :6], V[0, :, :6]), rtol=1e-14, atol=1e-15)
    # a (M,) mask broadcasts over the batch
    m1 = np.zeros(9, dtype=bool)
    m1[4] = True
    np.testing.assert_allclose(
        att.softmax(Q, K, V, key_padding_mask=m1),
        att.softmax(Q, np.delete(K, 4, axis=-2), np.delete(V, 4, axis=-2)),
        rtol=1e-14,
        atol=1e-15,
    )


def test_fully_padded_row_is_nan_with_warning(qkv):
    Q, K, V = qkv
    pad = np.zeros(9, dtype=bool)
    pad[:3] = True
    with pytest.warns(DegenerateInputWarning, match="see no key") as rec:
        out = att.softmax(Q, K, V, causal=True, key_padding_mask=pad)
    assert rec[0].filename == __file__
    assert np.all(np.isnan(out[..., :3, :]))
    assert np.all(np.isfinite(out[..., 3:, :]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_large_logits_finite_and_accurate(dtype, causal):
    # logits up to ~60 (beyond pretrained-model ranges of ~45); exp(60) overflows float32 unshifted
    rng = np.random.default_rng(31337)
    d = 16
    U = rng.standard_normal((64, d))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    Q = (np.sqrt(60.0) * U).astype(dtype)
    K = (np.sqrt(60.0) * (U + 0.3 * rng.standard_normal((64, d))) / 1.05).astype(dtype)
    V = rng.standard_normal((64, 3)).astype(dtype)
    L = Q.astype(float) @ K.astype(float).T
    assert L.max() > 50
    out = att.softmax(Q, K, V, causal=causal, chunk_size=16)
    assert out.dtype == dtype
    assert np.all(np.isfinite(out))
    ref = naive(Q, K, V, causal).astype(float)
    tol = 1e-12 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * 10)


def test_memory_is_chunked():
    rng = np.random.default_rng(5)
    n, d = 2048, 8
    Q, K, V = rng.standard_normal((3, n, d))
    tracemalloc.start()
    att.softmax(Q, K, V, chunk_size=64)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 0.15 * n * n * 8  # an n x n float64 array would be 32 MiB


def test_chunking_does_not_change_result(qkv):
    Q, K, V = qkv
    a = att.softmax(Q, K, V, causal=True)
    b = att.softmax(Q, K, V, causal=True, chunk_size=1)
    np.testing.assert_allclose(a, b, rtol=1e-15, atol=1e-16)


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        (
            (np.ones((4, 3)), np.ones((5, 3)), np.ones((6, 2))),
            {},
            ShapeError,
            "`K` and `V` must have the same number of rows",
        ),
        (
            (np.ones((4, 3)), np.ones((5, 2)), np.ones((5, 2))),
            {},
            ShapeError,
            "`Q` and `K` must have the same feature dimension",
        ),
        ((np.ones((4, 3)), np.ones((5, 3)), np.ones((5, 2))), {"causal": True}, ShapeError, "causal=True"),
        ((np.ones(3), np.ones((5, 3)), np.ones((5, 2))), {}, ShapeError, "`Q` must have ndim >= 2"),
        ((np.ones((2, 4, 3)), np.ones((3, 5, 3)), np.ones((5, 2))), {}, ShapeError, "not broadcastable"),
        (
            (np.ones((4, 3), dtype=int), np.ones((5, 3)), np.ones((5, 2))),
            {},
            InvalidParameterError,
            "`Q` must be a floating-point",
        ),
        (
            (np.ones((4, 3)), np.ones((5, 3)), np.ones((5, 2))),
            {"chunk_size": 0},
            InvalidParameterError,
            "`chunk_size`",
        ),
        (
            (np.ones((4, 3)), np.ones((5, 3)), np.ones((5, 2))),
            {"causal": "yes"},
            InvalidParameterError,
            "`causal`",
        ),
        (
            (np.ones((4, 3)), np.ones((5, 3)), np.ones((5, 2))),
            {"key_padding_mask": np.zeros(5)},
            InvalidParameterError,
            "boolean",
        ),
        (
            (np.ones((4, 3)), np.ones((5, 3)), np.ones((5, 2))),
            {"key_padding_mask": np.zeros(4, bool)},
            ShapeError,
            "M=5",
        ),
    ],
)
def test_bad_input(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        att.softmax(*args, **kwargs)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_non_finite_input(bad, which):
    arrs = [np.ones((4, 3)), np.ones((5, 3)), np.ones((5, 2))]
    arrs[which][1, 1] = bad
    name = "QKV"[which]
    with pytest.raises(NonFiniteInputError, match=f"`{name}`"):
        att.softmax(*arrs)
