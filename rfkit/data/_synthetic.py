"""Synthetic query/key data: pairs with given norms, anisotropic Gaussians, and the anisotropic
offset-mean pairs of Blackwelder (2024), Sec. 4 (:func:`hard_qk`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._params import check_allocation
from .._random import check_rng
from .._validation import as_float_array, check_int, check_real
from ..exceptions import InvalidParameterError, ShapeError

__all__ = ["SyntheticQK", "pairs_with_norms", "gaussian_qk", "hard_qk", "HARD_REGIMES"]


@dataclasses.dataclass(frozen=True)
class SyntheticQK:
    """Queries and keys with the parameters of the distribution they were drawn from.

    Unpacks as ``q, k = sample``.

    Parameters
    ----------
    q, k : ndarray of shape ([sets,] n, d)
        Queries and keys (points are rows).
    mean_q, mean_k : ndarray of shape ([sets,] d)
        True means (after any rescaling).
    cov_q, cov_k : ndarray of shape ([sets,] d, d)
        True covariances (after any rescaling).
    """

    q: np.ndarray
    k: np.ndarray
    mean_q: np.ndarray
    cov_q: np.ndarray
    mean_k: np.ndarray
    cov_k: np.ndarray

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.q, self.k))


def pairs_with_norms(
    n_pairs: int,
    dim: int,
    *,
    norm_x: float = 1.0,
    norm_y: float = 1.0,
    cosine: float | None = None,
    rng: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Draw pairs :math:`(x_i, y_i)` with :math:`\|x_i\| = ` ``norm_x``, :math:`\|y_i\| = ` ``norm_y``.

    Directions are uniform on the sphere; with ``cosine`` the angle between
    :math:`x_i` and :math:`y_i` is fixed (:math:`x_i^\top y_i = ` ``cosine * norm_x * norm_y``).

    Parameters
    ----------
    n_pairs : int
        The number of pairs (>= 1).
    dim : int
        The dimension (>= 1).
    norm_x, norm_y : float, default=1.0
        The norms of :math:`x_i` and :math:`y_i` (>= 0).
    cosine : float, optional
        The cosine of the angle between :math:`x_i` and :math:`y_i`, in ``[-1, 1]``; None:
        independent directions.
    rng : {None, int, SeedSequence, Generator}, optional
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system. Types other than Generator are passed to
        :func:`numpy.random.default_rng`. Pass an int for reproducible output.

    Returns
    -------
    X, Y : ndarray of shape (n_pairs, dim)
        The pairs ``(X[i], Y[i])``.
    """
    owner = "pairs_with_norms"
    n = check_int(n_pairs, "n_pairs", owner, low=1)
    d = check_int(dim, "dim", owner, low=1)
    check_allocation((3, n, d), 8, "the points and a work array (n_pairs, dim)", owner)
    nx = check_real(norm_x, "norm_x", owner, low=0.0)
    ny = check_real(norm_y, "norm_y", owner, low=0.0)
    gen = check_rng(rng)
    U = gen.standard_normal((n, d))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    if cosine is None:
        V = gen.standard_normal((n, d))
        V /= np.linalg.norm(V, axis=1, keepdims=True)
    else:
        c = check_real(cosine, "cosine", owner, low=-1.0, high=1.0)
        if d == 1 and abs(c) != 1.0:
            raise InvalidParameterError(f"`cosine`={c} is impossible in dim=1 (only -1 or 1).")
        W = gen.standard_normal((n, d))
        W -= np.sum(W * U, axis=1, keepdims=True) * U  # orthogonal to U
        nw = np.linalg.norm(W, axis=1, keepdims=True)
        W = np.divide(W, nw, out=np.zeros_like(W), where=nw > 0)
        V = c * U + np.sqrt(max(0.0, 1.0 - c * c)) * W
    return nx * U, ny * V


def _real(value: Any, name: str) -> np.ndarray:
    """``value`` as a float64 array; complex, text, boolean and object values raise (no silent cast)."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        arr = np.asarray(None)
    if arr.dtype.kind not in "fiu":
        raise InvalidParameterError(
            f"`{name}` must be real numbers (a scalar or an array). Got {value!r:.80} (dtype {arr.dtype}) instead."
        )
    return arr.astype(np.float64)


def _moments(mean: Any, cov: Any, d: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    mean_arr = _real(mean, f"mean_{name}")
    try:
        mean_arr = np.broadcast_to(mean_arr, (d,))
    except ValueError:
        raise ShapeError(
            f"`mean_{name}` must be a scalar or have shape ({d},); got shape {mean_arr.shape}."
        ) from None
    mu = as_float_array(mean_arr, f"mean_{name}")
    c = _real(cov, f"cov_{name}")
    if c.ndim == 0:
        C = float(c) * np.eye(d)
    elif c.ndim == 1 and c.shape == (d,):
        C = np.diag(c)
    elif c.shape == (d, d):
        C = c
    else:
        raise ShapeError(
            f"`cov_{name}` must be a scalar, a (d,) diagonal or a (d, d) matrix; got shape {c.shape}."
        )
    as_float_array(C, f"cov_{name}")
    if not np.allclose(C, C.T):
        raise InvalidParameterError(f"`cov_{name}` must be symmetric.")
    ev = np.linalg.eigvalsh(C)
    if ev.min() < -1e-12 * max(1.0, ev.max()):
        raise InvalidParameterError(
            f"`cov_{name}` must be positive semi-definite; its smallest eigenvalue is {ev.min():.3g}."
        )
    return np.array(mu), C


def gaussian_qk(
    n: int,
    dim: int,
    *,
    mean_q: Any = 0.0,
    cov_q: Any = 1.0,
    mean_k: Any = 0.0,
    cov_k: Any = 1.0,
    n_k: int | None = None,
    rng: Any = None,
) -> SyntheticQK:
    r"""Independent Gaussian queries :math:`\mathcal N(\mu_q, \Sigma_q)` and keys :math:`\mathcal N(\mu_k, \Sigma_k)`.

    Means are scalars or (d,); covariances scalars (isotropic), (d,) diagonals or
    (d, d) PSD matrices. ``n`` queries and ``n_k`` (default ``n``) keys.

    Parameters
    ----------
    n : int
        The number of queries (>= 1).
    dim : int
        The dimension ``d`` (>= 1).
    mean_q, mean_k : float or array_like of shape (d,), default=0.0
        The means :math:`\mu_q`, :math:`\mu_k`.
    cov_q, cov_k : float or array_like of shape (d,) or (d, d), default=1.0
        The covariances :math:`\Sigma_q`, :math:`\Sigma_k`: isotropic, diagonal or full PSD.
    n_k : int, optional
        The number of keys; None: ``n``.
    rng : {None, int, SeedSequence, Generator}, optional
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system. Types other than Generator are passed to
        :func:`numpy.random.default_rng`. Pass an int for reproducible output.

    Returns
    -------
    SyntheticQK
        Queries (n, d), keys (n_k, d) and the distribution's means and covariances.
    """
    owner = "gaussian_qk"
    nq = check_int(n, "n", owner, low=1)
    nk = nq if n_k is None else check_int(n_k, "n_k", owner, low=1)
    d = check_int(dim, "dim", owner, low=1)
    check_allocation((nq + nk + 2 * d, d), 8, "the queries (n, dim), keys (n_k, dim) and covariances", owner)
    gen = check_rng(rng)
    mq, Cq = _moments(mean_q, cov_q, d, "q")
    mk, Ck = _moments(mean_k, cov_k, d, "k")
    Q = gen.multivariate_normal(mq, Cq, size=nq, method="eigh")
    K = gen.multivariate_normal(mk, Ck, size=nk, method="eigh")
    return SyntheticQK(Q, K, mq, Cq, mk, Ck)


#: Parameter sets of :func:`hard_qk`: Blackwelder (2024), Sec. 4, and the paper's companion notebook.
HARD_REGIMES: dict[str, dict[str, Any]] = {
    "writeup": {
        "mean_scale": 50.0,
        "var_shape_q": 0.02,
        "var_shape_k": 0.01,
        "norm_q": 5.0,
        "norm_k": 0.5,
        "covariance": "diagonal",
    },
    "notebook": {
        "mean_scale": 0.01,
        "var_shape_q": 0.1,
        "var_shape_k": 0.05,
        "norm_q": None,
        "norm_k": None,
        "covariance": "wishart",
    },
}
_WISHART_SCALE = 0.05  # the companion notebook of Blackwelder (2024): Wishart(df=d, scale=0.05 diag(v))


def hard_qk(
    n: int = 1000,
    dim: int = 50,
    *,
    n_sets: int | None = None,
    regime: str = "writeup",
    mean_scale: float | None = None,
    var_shape_q: float | None = None,
    var_shape_k: float | None = None,
    norm_q: float | None = None,
    norm_k: float | None = None,
    rng: Any = None,
) -> SyntheticQK:
    r"""The anisotropic offset-mean query/key pairs of Blackwelder (2024), Sec. 4, or of its notebook.

    ``regime="writeup"`` (Blackwelder (2024), Sec. 4; the defaults): per set, means
    :math:`\mu_{q,j}, \mu_{k,j} \sim \mathrm{Laplace}(0, 50)`, diagonal covariances with
    entries :math:`\sim \mathrm{Gamma}(0.02, 1)` (queries) and :math:`\mathrm{Gamma}(0.01, 1)`
    (keys); :math:`n` queries and :math:`n` keys drawn i.i.d.; then each sample is rescaled by
    one factor so that its mean norm is ``norm_q`` (about 5) and ``norm_k`` (about 0.5) —
    "encouraged to have norms around 5 and 0.5" in the paper, which does not give the exact
    rule; a single factor keeps the sample Gaussian, and the returned moments are those of the
    rescaled distribution.

    ``regime="notebook"`` (the data of the paper's companion notebook, ``Project Code.ipynb`` in
    the author's repository ``jblackwelder64/Adapting-Linear-Attention-to-Query-Key-Distributions``):
    means :math:`\mathrm{Laplace}(0, 0.01)`, variances :math:`v_{q,j} \sim \mathrm{Gamma}(0.1, 1)`,
    :math:`v_{k,j} \sim \mathrm{Gamma}(0.05, 1)`, and *full* covariances
    :math:`\Sigma \sim \mathrm{Wishart}(\text{df}=d, 0.05\,\mathrm{diag}(v))` (mean
    :math:`0.05 d\,\mathrm{diag}(v)`); no rescaling. Here the variances dominate the tiny means,
    so the mean rule and the mean+variance rule for CEXP's :math:`A` differ.

    Parameters
    ----------
    n : int, default=1000
        The number of queries and of keys per set (>= 1).
    dim : int, default=50
        The dimension ``d`` (>= 1).
    n_sets : int, optional
        The number of independent sets (each with its own means and covariances); None: one set,
        no leading axis.
    regime : {"writeup", "notebook"}, default="writeup"
        Parameter set (:data:`HARD_REGIMES`); the other keywords override its values.
    mean_scale, var_shape_q, var_shape_k : float, optional
        Laplace scale of the means and Gamma shapes of the variances.
    norm_q, norm_k : float, optional
        Target mean norms of the rescaled samples (``None`` in the notebook regime: no rescaling).
    rng : {None, int, SeedSequence, Generator}, optional
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system. Types other than Generator are passed to
        :func:`numpy.random.default_rng`. Pass an int for reproducible output.

    Returns
    -------
    SyntheticQK
        Arrays of shape (n, d) (or (n_sets, n, d) with ``n_sets``).
    """
    owner = "hard_qk"
    nn = check_int(n, "n", owner, low=1)
    d = check_int(dim, "dim", owner, low=1)
    sets = 1 if n_sets is None else check_int(n_sets, "n_sets", owner, low=1)
    check_allocation((4, sets, nn, d), 8, "the queries and keys (n_sets, n, dim) and work arrays", owner)
    if not isinstance(regime, str) or regime not in HARD_REGIMES:
        raise InvalidParameterError(
            f"The `regime` parameter of {owner} must be a str among {sorted(HARD_REGIMES)}. Got {regime!r} instead."
        )
    base = HARD_REGIMES[regime]
    pick = lambda v, k: base[k] if v is None else v  # noqa: E731
    b = check_real(pick(mean_scale, "mean_scale"), "mean_scale", owner, low=0.0, closed="neither")
    aq = check_real(pick(var_shape_q, "var_shape_q"), "var_shape_q", owner, low=0.0, closed="neither")
    ak = check_real(pick(var_shape_k, "var_shape_k"), "var_shape_k", owner, low=0.0, closed="neither")
    targets = []
    for value, key in ((norm_q, "norm_q"), (norm_k, "norm_k")):
        t = pick(value, key)
        targets.append(None if t is None else check_real(t, key, owner, low=0.0, closed="neither"))
    tq, tk = targets
    wishart = base["covariance"] == "wishart"
    gen = check_rng(rng)
    out = []
    for _ in range(sets):
        parts = []
        for shape, target in ((aq, tq), (ak, tk)):
            mu = gen.laplace(0.0, b, size=d)
            var = gen.gamma(shape, 1.0, size=d)
            if wishart:
                # Sigma = L L^T with L = sqrt(0.05 v) * N(0, 1)^(d x d): Wishart(df=d, 0.05 diag(v)); x = mu + L w
                L = np.sqrt(_WISHART_SCALE * var)[:, None] * gen.standard_normal((d, d))
                X = mu + gen.standard_normal((nn, d)) @ L.T
                cov = L @ L.T
            else:
                X = mu + np.sqrt(var) * gen.standard_normal((nn, d))
                cov = np.diag(var)
            s = 1.0 if target is None else target / np.mean(np.linalg.norm(X, axis=1))
            parts.append((X * s, mu * s, cov * s * s))
        out.append(parts)
    stack = lambda i, j: np.stack([o[i][j] for o in out])  # noqa: E731
    res = [stack(0, 0), stack(1, 0), stack(0, 1), stack(0, 2), stack(1, 1), stack(1, 2)]
    if n_sets is None:
        res = [r[0] for r in res]
    q, k, mq, cq, mk, ck = res
    return SyntheticQK(q, k, mq, cq, mk, ck)


def sequence_qkv(
    n_tokens: int,
    dim: int,
    d_v: int = 8,
    *,
    structure: str = "iid",
    scale: float = 1.0,
    n_clusters: int = 8,
    spread: float = 0.3,
    rng: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""A synthetic attention input ``(Q, K, V)`` of ``n_tokens`` tokens.

    ``structure="iid"``: queries and keys i.i.d. :math:`\mathcal N(0, I_d/\sqrt d)` times
    ``scale`` (logits of standard deviation about ``scale**2``): contiguous chunks carry no
    information. ``structure="local"``: tokens are clustered by position, as image patches
    or text spans are: the sequence is cut into ``n_clusters`` contiguous segments, each
    with a centre :math:`c_j \sim \mathcal N(0, I_d/\sqrt d)`; token :math:`i` of segment
    :math:`j` has :math:`q_i, k_i = \text{scale}\,(c_j + \text{spread}\,\varepsilon)`, so
    attention is peaked within segments. Values are i.i.d. :math:`\mathcal N(0, 1)`.

    Parameters
    ----------
    n_tokens : int
        The sequence length (>= 1).
    dim : int
        The query and key dimension ``d`` (>= 1).
    d_v : int, default=8
        The value dimension (>= 1).
    structure : {"iid", "local"}, default="iid"
        Independent tokens, or tokens clustered by position.
    scale : float, default=1.0
        The factor on queries and keys (>= 0).
    n_clusters : int, default=8
        ``"local"``: the number of segments, in ``[1, n_tokens]``.
    spread : float, default=0.3
        ``"local"``: the tokens' spread around their segment's centre (>= 0).
    rng : {None, int, SeedSequence, Generator}, optional
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system. Types other than Generator are passed to
        :func:`numpy.random.default_rng`. Pass an int for reproducible output.

    Returns
    -------
    Q, K : ndarray of shape (n_tokens, dim)
        Queries and keys.
    V : ndarray of shape (n_tokens, d_v)
        Values.
    """
    owner = "sequence_qkv"
    n = check_int(n_tokens, "n_tokens", owner, low=1)
    d = check_int(dim, "dim", owner, low=1)
    dv = check_int(d_v, "d_v", owner, low=1)
    check_allocation((n, 3 * d + 2 * dv), 8, "Q, K (n_tokens, dim), V (n_tokens, d_v) and work arrays", owner)
    s = check_real(scale, "scale", owner, low=0.0)
    if structure not in ("iid", "local"):
        raise InvalidParameterError(
            f"The `structure` parameter of {owner} must be a str among ['iid', 'local']. Got {structure!r} instead."
        )
    gen = check_rng(rng)
    r = d**-0.25
    if structure == "iid":
        Q = s * r * gen.standard_normal((n, d))
        K = s * r * gen.standard_normal((n, d))
    else:
        c = check_int(n_clusters, "n_clusters", owner, low=1, high=n)
        sp = check_real(spread, "spread", owner, low=0.0)
        seg = np.minimum((np.arange(n) * c) // n, c - 1)
        centres = r * gen.standard_normal((c, d))
        Q = s * (centres[seg] + sp * r * gen.standard_normal((n, d)))
        K = s * (centres[seg] + sp * r * gen.standard_normal((n, d)))
    V = gen.standard_normal((n, dv))
    return Q, K, V
