r"""Query/key pair sets of the ``softmax-kernel-estimators`` benchmark, and pairs from real heads.

:func:`kernel_benchmark_pairs` gives one of a fixed list of pair sets, so one study compares
every softmax-kernel estimator on synthetic pairs of three norms, on the anisotropic offset-mean
pairs of Blackwelder (2024), Sec. 4 (:func:`hard_qk`), and on pairs from the attention heads of a real transformer (:func:`real_pairs`).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .._random import check_rng
from .._validation import check_int, check_option
from ..exceptions import InvalidParameterError
from ._minilm import minilm_qk
from ._passages import PASSAGES
from ._smollm import smollm2_qk
from ._synthetic import hard_qk, pairs_with_norms

__all__ = ["BENCHMARK_SETS", "kernel_benchmark_pairs", "real_pairs"]

#: Pair sets of :func:`kernel_benchmark_pairs`.
BENCHMARK_SETS: tuple[str, ...] = ("norm-0.5", "norm-1.0", "norm-1.5", "anisotropic", "minilm")
#: Other names of pair sets, accepted as aliases (study designs written with them keep their meaning).
BENCHMARK_SET_ALIASES: dict[str, str] = {"seed004": "anisotropic"}


def real_pairs(
    n_pairs: int,
    *,
    model: str = "minilm",
    n_texts: int | None = None,
    max_len: int = 64,
    rng: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Query/key pairs :math:`(q_i, k_j)` drawn from the attention heads of a pretrained model.

    Every (text, layer, head, query position, key position) the model attends over is equally
    likely: valid (unpadded) tokens of the same text, and for the causal decoder only keys at or
    before the query. The vectors are scaled so that :math:`q_i^\top k_j` is the model's
    attention logit (``scale="symmetric"`` of :func:`minilm_qk` / :func:`smollm2_qk`), so
    :math:`\exp(q^\top k)` is the unnormalised attention weight the estimators approximate.

    Parameters
    ----------
    n_pairs : int
        Number of pairs drawn (with replacement).
    model : {"minilm", "smollm2"}, default="minilm"
        all-MiniLM-L6-v2 (encoder; d = 32) or SmolLM2-135M-Instruct (causal decoder; d = 64).
    n_texts : int, optional
        Use the first ``n_texts`` built-in passages (default: all 16).
    max_len : int, default=64
        Tokens per passage.
    rng : {None, int, SeedSequence, Generator}, optional
        Chooses the pairs.

    Returns
    -------
    Q, K : ndarray of shape (n_pairs, d)
    """
    owner = "real_pairs"
    n = check_int(n_pairs, "n_pairs", owner, low=1)
    check_option(model, "model", owner, ("minilm", "smollm2"))
    gen = check_rng(rng)
    texts = None if n_texts is None else tuple(PASSAGES[: check_int(n_texts, "n_texts", owner, low=1)])
    q, k, (t_idx, i_idx, j_idx) = _model_pairs(model, texts, max_len)
    n_lay, n_head = q.shape[1:3]
    # uniform over (text, layer, head, i, j): a valid (text, i, j) and an independent (layer, head)
    pick = gen.integers(0, t_idx.size, size=n)
    lay = gen.integers(0, n_lay, size=n)
    head = gen.integers(0, n_head, size=n)
    t, i, j = t_idx[pick], i_idx[pick], j_idx[pick]
    return np.ascontiguousarray(q[t, lay, head, i]), np.ascontiguousarray(k[t, lay, head, j])


def kernel_benchmark_pairs(
    set: str, n_pairs: int, dim: int = 32, *, rng: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    r"""One pair set of the ``softmax-kernel-estimators`` benchmark, shape (n_pairs, dim) each.

    ``"norm-0.5"``, ``"norm-1.0"``, ``"norm-1.5"``
        Gaussian (uniformly random) directions with :math:`\|x\| = \|y\| = r`
        (:func:`pairs_with_norms`): the estimators' textbook regime, from easy to hard
        (:math:`\mathbb E\|x+y\|^2 = 2r^2`).
    ``"anisotropic"`` (also accepted as ``"seed004"``)
        The anisotropic offset-mean pairs of Blackwelder (2024), Sec. 4 (:func:`hard_qk`, its
        ``"writeup"`` regime): Laplace means, Gamma variances.
    ``"minilm"``
        Pairs from the 72 attention heads of all-MiniLM-L6-v2 on the built-in passages
        (:func:`real_pairs`); needs ``dim = 32``, the model's head dimension.

    Parameters
    ----------
    set : {"norm-0.5", "norm-1.0", "norm-1.5", "anisotropic", "minilm"}
        The pair set (``"seed004"`` is an alias of ``"anisotropic"``).
    n_pairs : int
        The number of pairs (>= 1).
    dim : int, default=32
        The dimension (>= 1; 32 for ``"minilm"``).
    rng : {None, int, SeedSequence, Generator}, optional
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system. Types other than Generator are passed to
        :func:`numpy.random.default_rng`. Pass an int for reproducible output.

    Returns
    -------
    X, Y : ndarray of shape (n_pairs, dim)
        The pairs ``(X[i], Y[i])``.

    Raises
    ------
    InvalidParameterError
        An unknown set, or ``"minilm"`` with ``dim != 32``.
    """
    name = check_option(
        BENCHMARK_SET_ALIASES.get(set, set) if isinstance(set, str) else set,
        "set",
        "kernel_benchmark_pairs",
        BENCHMARK_SETS,
    )
    n = check_int(n_pairs, "n_pairs", "kernel_benchmark_pairs", low=1)
    d = check_int(dim, "dim", "kernel_benchmark_pairs", low=1)
    gen = check_rng(rng)
    if name.startswith("norm-"):
        r = float(name.split("-", 1)[1])
        return pairs_with_norms(n, d, norm_x=r, norm_y=r, rng=gen)
    if name == "anisotropic":
        s = hard_qk(n, d, rng=gen)
        return s.q, s.k
    if d != 32:
        raise InvalidParameterError(
            f"The `dim` parameter of kernel_benchmark_pairs must be 32 (all-MiniLM-L6-v2's head dimension) for "
            f"set='minilm'. Got {d} instead."
        )
    return real_pairs(n, model="minilm", rng=gen)


@functools.lru_cache(maxsize=2)
def _model_pairs(
    model: str, texts: tuple[str, ...] | None, max_len: int
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """q, k (texts, layers, heads, tokens, d) of a model and the (text, query, key) positions it attends.

    Kept for the process (two entries): a study draws pairs from the same model for many cells,
    and reading and verifying the cache entry each time cost more than drawing. The data are
    those of the pinned weights and passages, so a kept entry never goes stale; callers get
    fancy-indexed copies, never these arrays.
    """
    load = minilm_qk if model == "minilm" else smollm2_qk
    res = load(None if texts is None else list(texts), max_len=max_len, scale="symmetric")
    mask = res.mask  # (texts, tokens)
    n_tok = res.q.shape[3]
    valid = mask[:, :, None] & mask[:, None, :]  # (texts, tokens, tokens): query i, key j
    if res.causal:
        valid = valid & np.tril(np.ones((n_tok, n_tok), dtype=bool))[None]
    return res.q, res.k, np.nonzero(valid)
