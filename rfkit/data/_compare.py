r"""How far a model's outputs moved: next-token KL, top-1 agreement, perplexity, cosine similarity.

Functions of the outputs of two forward passes of the same model on the same texts (exact
attention, and attention replaced by an estimator): the drop-in study's measures of damage,
computed in float64 and in log space (``scipy.special.log_softmax``), so no probability
underflows to a zero that a logarithm would turn into infinity.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import log_softmax

from .._validation import host_float_array
from ..exceptions import InvalidParameterError, ShapeError

__all__ = [
    "next_token_kl",
    "top1_agreement",
    "token_nll",
    "next_token_nll",
    "perplexity",
    "cosine_similarity",
]


def _pair(a: Any, b: Any, names: tuple[str, str], owner: str) -> tuple[np.ndarray, np.ndarray]:
    """Two float arrays of one shape, as float64 (NaN and infinity are kept: they give NaN results)."""
    x = host_float_array(a, names[0], min_ndim=1, check_finite=False)
    y = host_float_array(b, names[1], min_ndim=1, check_finite=False)
    if x.shape != y.shape:
        raise ShapeError(
            f"{owner}: `{names[0]}` and `{names[1]}` must have the same shape. Got {x.shape} and {y.shape}."
        )
    return x, y


def next_token_kl(exact_logits: Any, approx_logits: Any) -> np.ndarray:
    r"""Per-position :math:`\mathrm{KL}(p\,\|\,q)` of the next-token distributions, in nats.

    .. math::

        \mathrm{KL}(p\,\|\,q) = \sum_v p_v\,(\log p_v - \log q_v),\qquad
        \log p = \mathrm{log\_softmax}(z^{\rm exact}),\ \log q = \mathrm{log\_softmax}(z^{\rm approx}),

    over the vocabulary (the last axis) (Kullback & Leibler (1951); Cover & Thomas (2006),
    ch. 2, relative entropy). Zero when the two distributions are equal, never negative (up to round-off,
    about 1e-16 per position); finite for finite logits (the log-softmax never underflows to
    :math:`-\infty`).

    Parameters
    ----------
    exact_logits, approx_logits : array_like of shape (..., vocab)
        Finite next-token logits of the exact and the approximate model.

    Returns
    -------
    ndarray of shape (...)
    """
    z, w = _pair(exact_logits, approx_logits, ("exact_logits", "approx_logits"), "next_token_kl")
    lp, lq = log_softmax(z, axis=-1), log_softmax(w, axis=-1)
    return np.sum(np.exp(lp) * (lp - lq), axis=-1)  # type: ignore[no-any-return]


def top1_agreement(exact_logits: Any, approx_logits: Any) -> np.ndarray:
    """Per position, whether the most likely next token is the same (bool; ties go to the first index).

    Parameters
    ----------
    exact_logits, approx_logits : array_like of shape (..., vocab)

    Returns
    -------
    ndarray of bool, shape (...)
    """
    z, w = _pair(exact_logits, approx_logits, ("exact_logits", "approx_logits"), "top1_agreement")
    return np.argmax(z, axis=-1) == np.argmax(w, axis=-1)  # type: ignore[no-any-return]


def token_nll(logits: Any, targets: Any) -> np.ndarray:
    r"""Negative log-likelihood :math:`-\log q(y)` of given tokens ``targets`` under ``logits``.

    .. math:: -\log q(y) = \log\sum_v e^{z_v} - z_y

    computed with ``scipy.special.log_softmax`` (no overflow for any finite logits).

    Parameters
    ----------
    logits : array_like of shape (..., vocab)
    targets : array_like of int, shape (...)
        Token ids in [0, vocab).

    Returns
    -------
    ndarray of shape (...)
    """
    z = host_float_array(logits, "logits", min_ndim=1, check_finite=False)
    y = np.asarray(targets)
    V = z.shape[-1]
    if y.shape != z.shape[:-1] or y.dtype.kind not in "iu":
        raise ShapeError(
            f"token_nll: `targets` must be integer token ids of shape {z.shape[:-1]} (the logits' leading axes). "
            f"Got {y.dtype} of shape {y.shape}."
        )
    if y.size and (y.min() < 0 or y.max() >= V):
        raise InvalidParameterError(f"token_nll: `targets` must lie in [0, {V - 1}] (the vocabulary).")
    lq = log_softmax(z, axis=-1)
    return -np.take_along_axis(lq, y[..., None].astype(np.intp), axis=-1)[..., 0]  # type: ignore[no-any-return]


def next_token_nll(logits: Any, ids: Any, mask: Any = None) -> np.ndarray:
    r"""Negative log-likelihood of each actual next token: :math:`-\log q(x_{t+1}\mid x_{\le t})`.

    Position ``t`` of ``logits`` predicts token ``t + 1`` of ``ids``; the last position of each
    text (and any position whose next token is padding) has no target and gets NaN.

    Parameters
    ----------
    logits : array_like of shape (texts, tokens, vocab)
    ids : array_like of int, shape (texts, tokens)
    mask : array_like of bool, shape (texts, tokens), optional
        Valid (non-padding) tokens; default all.

    Returns
    -------
    ndarray of shape (texts, tokens): NaN where there is no target.
    """
    z = host_float_array(logits, "logits", min_ndim=3, check_finite=False)
    if z.ndim != 3:
        raise ShapeError(f"next_token_nll: `logits` must have shape (texts, tokens, vocab). Got {z.shape}.")
    ids_a = np.asarray(ids)
    n, T, V = z.shape
    if ids_a.shape != (n, T) or ids_a.dtype.kind not in "iu":
        raise ShapeError(
            f"next_token_nll: `ids` must be integer token ids of shape (texts, tokens) = {(n, T)}. "
            f"Got {ids_a.dtype} of shape {ids_a.shape}."
        )
    if ids_a.size and (ids_a.min() < 0 or ids_a.max() >= V):
        raise InvalidParameterError(f"next_token_nll: `ids` must lie in [0, {V - 1}] (the vocabulary).")
    m = np.ones((n, T), dtype=bool) if mask is None else np.asarray(mask)
    if m.shape != (n, T) or m.dtype != bool:
        raise ShapeError(
            f"next_token_nll: `mask` must be a bool array of shape {(n, T)}. Got {m.dtype} {m.shape}."
        )
    out = np.full((n, T), np.nan)
    if T < 2:
        return out
    nll = token_nll(z[:, :-1], ids_a[:, 1:])
    has = m[:, :-1] & m[:, 1:]
    out[:, :-1] = np.where(has, nll, np.nan)
    return out


def perplexity(logits: Any, ids: Any, mask: Any = None) -> float:
    r"""Perplexity of the texts under the model: :math:`\exp` of the mean next-token NLL.

    .. math:: \mathrm{PPL} = \exp\Big(\frac{1}{N}\sum_{(b,t)} -\log q(x_{b,t+1}\mid x_{b,\le t})\Big)

    over the :math:`N` positions that have a next token (:func:`next_token_nll`); pooled over
    texts, as language-model evaluations report it (Jelinek et al. (1977); Jurafsky & Martin,
    *Speech and Language Processing*, 3rd ed. draft (2024), ch. 3).

    Parameters
    ----------
    logits : array_like of shape (texts, tokens, vocab)
    ids : array_like of int, shape (texts, tokens)
    mask : array_like of bool, shape (texts, tokens), optional

    Returns
    -------
    float
    """
    nll = next_token_nll(logits, ids, mask)
    if not np.isfinite(nll).any():
        raise InvalidParameterError("perplexity: no position has a next token (every text has one token).")
    return float(np.exp(np.nanmean(nll)))


def cosine_similarity(a: Any, b: Any) -> np.ndarray:
    r"""Cosine similarity along the last axis: :math:`a\cdot b / (\|a\|\,\|b\|)`.

    NaN where either vector is zero (no direction to compare).

    Parameters
    ----------
    a, b : array_like of shape (..., dim)

    Returns
    -------
    ndarray of shape (...)
    """
    x, y = _pair(a, b, ("a", "b"), "cosine_similarity")
    num = np.sum(x * y, axis=-1)
    den = np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)  # type: ignore[no-any-return]
