r"""Dense-exponential random features (DERFs) for the softmax kernel: ADERF and SDERF.

Likhosherstov, Choromanski, Dubey, Liu, Sarlos, Weller, "Dense-Exponential Random
Features: Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023 (arXiv
2302.00787, first circulated as "FAVOR#"). A DERF pair is

.. math::

    f^{(k)}(\omega, u) = D\exp\big(\omega^\top A\,\omega + \omega^\top B^{(k)}u + u^\top C^{(k)}u\big),
    \qquad \omega\sim\mathcal N(0, I_d),

with :math:`A` symmetric. For the softmax kernel :math:`e^{x^\top y}` (derived on the
docs page *Theory*, section 1b): :math:`\mathbb E[f^{(1)}(\omega,x)f^{(2)}(\omega,y)] = e^{x^\top y}`
iff :math:`I-4A \succ 0`, :math:`B^{(1)\top}(I-4A)^{-1}B^{(2)} = I`,
:math:`C^{(k)} = -\tfrac12 B^{(k)\top}(I-4A)^{-1}B^{(k)}` and :math:`D = \det(I-4A)^{1/4}`;
the variance is finite iff :math:`I - 8A \succ 0`.

* **ADERF** (asymmetric): :math:`A = a I`, :math:`B^{(1)} = \sqrt{1-4a}\,G`,
  :math:`B^{(2)} = \sqrt{1-4a}\,G^{-\top}` for an invertible :math:`G`. This is exactly
  OPRF (FAVOR++) applied to :math:`Gx` and :math:`G^{-\top}y`, so the draw is OPRF's
  (it has an :class:`~rfkit.features.ExpForm`).
* **SDERF** (symmetric): :math:`B^{(1)} = B^{(2)} = (I-4A)^{1/2}`, :math:`C = -\tfrac12 I`.
  With :math:`A = V\,\mathrm{diag}(a)\,V^\top` and :math:`\omega` rotated by :math:`V^\top`
  (which leaves :math:`\mathcal N(0, I)` unchanged),
  :math:`f(\omega, x) = \prod_l(1-4a_l)^{1/4}\exp\big(\sum_l a_l\omega_l^2 + \sum_l\sqrt{1-4a_l}\,
  \omega_l (V^\top x)_l - \tfrac12\|x\|^2\big)`: OPRF with one parameter per eigen-direction.

The data-dependent optimum of each family (the minimiser of the log second moment averaged
over all query-key pairs, the paper's objective, or over the pairs causal attention uses with
``fit_pairs="causal"``, rfkit's own weighting) is in closed form:
:func:`aderf_optimal` and :func:`sderf_optimal_A` (:mod:`rfkit.features._derf_optimal`).
Features are built in log space.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._backend import get_backend
from .._validation import (
    check_n_features,
    check_option,
    check_real,
    check_same_dim,
)
from ..exceptions import (
    InvalidParameterError,
    RFKitWarning,
    ShapeError,
)
from ..projections import PROJECTIONS, sample_projection, sample_projection_streams
from ._adaptive import host_matrix, validate_A
from ._base import FeatureMap
from ._derf_optimal import aderf_optimal, oprf_root, sderf_optimal_A, second_moments
from ._draw import FeatureDraw, Features
from ._exp import _check_common, _ExpMap
from ._ops import paired_logsumexp, project
from ._pairs import check_fit_pairs, is_plain, pair_moments, pooled

__all__ = ["ADERF", "SDERF", "SDERFDraw", "aderf_optimal", "sderf_optimal_A"]


def _validate_G(G: Any, owner: str) -> np.ndarray:
    """An explicit ADERF matrix G: diagonal (d,) or full (d, d), finite and invertible."""
    return validate_A(G, owner, "G", "the key side needs G^-T")


def _check_a(a: float, owner: str) -> float:
    v = check_real(a, "A", owner, high=0.25, closed="neither")
    if v >= 0.125:
        warnings.warn(
            f"{owner} with A={v} >= 1/8 is unbiased but has infinite variance.",
            RFKitWarning,
            stacklevel=4,
        )
    return v


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class ADERF(_ExpMap):
    r"""Asymmetric dense-exponential random features (ADERF; Likhosherstov et al., NeurIPS 2023).

    .. math::

        \phi_q(x) = \frac{(1-4a)^{d/4}}{\sqrt m}\Big(e^{a\|\omega_i\|^2 + \sqrt{1-4a}\,\omega_i^\top Gx
            - \frac12\|Gx\|^2}\Big)_{i\le m},\qquad
        \phi_k(y) = \phi_q\text{ with } Gx \to G^{-\top}y,

    i.e. the paper's :math:`A = aI`, :math:`B^{(1)} = \sqrt{1-4a}\,G`,
    :math:`B^{(2)} = \sqrt{1-4a}\,G^{-\top}`: OPRF applied to :math:`Gx` and :math:`G^{-\top}y`.
    Unbiased for :math:`a < 1/4` and every invertible :math:`G` (with ``projection`` "iid",
    "orthogonal" or "qmc"); relative variance of one feature
    :math:`\big(\tfrac{(1-4a)^2}{1-8a}\big)^{d/2}e^{\|z_G\|^2/(1-8a)} - 1`,
    :math:`z_G = Gx + G^{-\top}y`, finite iff :math:`a < 1/8` (docs page *Theory*, section 1b;
    :func:`rfkit.theory.mse`).

    With ``A=None`` and/or ``G=None`` the paper's closed-form optimum (:func:`aderf_optimal`)
    is resolved from a query/key sample by :meth:`fit` (or ``sample(data=(Q, K))``), averaged
    over the pairs ``fit_pairs`` selects.

    Parameters
    ----------
    n_features : int
        Number of random directions ``m``.
    A : float or None, default=None
        The scalar :math:`a` of :math:`A = aI`; must be < 1/4 (values in [1/8, 1/4) warn:
        unbiased, infinite variance).
    G : array_like of shape (d,) or (d, d), or None, default=None
        Invertible matrix (a diagonal as a vector). Singular ``G`` raises
        :class:`~rfkit.exceptions.SingularMatrixError`.
    projection : str, default="iid"
        Directions :math:`\omega_i` (:mod:`rfkit.projections`).
    fit_pairs : {"all", "sequence", "causal"}, default="all"
        The query-key pairs :meth:`fit` averages the objective over: ``"all"`` every pair of the
        sample (the paper's objective), ``"causal"`` the pairs :math:`j \le i` of each sequence
        (a decoder's; rfkit's own weighting), ``"sequence"`` every pair within a sequence
        (:func:`rfkit.features.pair_moments`).

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K = 0.3 * rng.normal(size=(2, 50, 4))
    >>> fm = rk.features.ADERF(64).fit(Q, K)
    >>> fm.A < 0 and fm.G.shape == (4, 4)
    True
    """

    n_features: int
    A: float | None = None
    G: Any = None
    projection: str = "iid"
    fit_pairs: str = "all"

    _fitted_params = ("A", "G")  # resolved by fit() when None
    _pair_fit = True  # fit() takes pairs=, key_padding_mask=, exclude=

    def __post_init__(self) -> None:
        _check_common(self)
        object.__setattr__(self, "fit_pairs", check_fit_pairs(self.fit_pairs, "ADERF"))
        if self.A is not None:
            object.__setattr__(self, "A", _check_a(self.A, "ADERF"))
        if self.G is not None:
            object.__setattr__(self, "G", _validate_G(self.G, "ADERF"))

    def fit(
        self, queries: Any, keys: Any, *, pairs: Any = None, key_padding_mask: Any = None, exclude: Any = None
    ) -> FeatureMap:
        """Resolve ``A=None`` / ``G=None`` to the closed-form optimum (:func:`aderf_optimal`).

        A given ``G`` is kept and only :math:`a` is fitted (OPRF's rule on :math:`Gx`,
        :math:`G^{-\\top}y`); a given ``A`` is kept and only ``G`` is fitted (the optimal
        :math:`G` does not depend on :math:`a`). The objective is averaged over the pairs
        ``pairs`` selects (default: this map's ``fit_pairs``; ``"causal"`` needs ``queries`` and
        ``keys`` of shape (..., n, d) with the sequence axis); padded keys
        (``key_padding_mask``, True = padded) and ``exclude`` pairs never count
        (:func:`rfkit.features.pair_moments`).
        """
        if not self.needs_data:
            return self
        p = self.fit_pairs if pairs is None else pairs
        sel = {"pairs": p, "key_padding_mask": key_padding_mask, "exclude": exclude}
        if self.G is None:
            a, G = aderf_optimal(queries, keys, **sel)
            return dataclasses.replace(self, A=a if self.A is None else self.A, G=G)
        if is_plain(p, exclude):
            queries, keys = pooled(queries, keys, key_padding_mask)
            mx, M1 = second_moments(queries, "Q")
            my, M2 = second_moments(keys, "K")
            check_same_dim(mx, my, "Q", "K")
            cross = mx @ my
        else:
            pm = pair_moments(queries, keys, **sel)
            M1, M2, cross = pm.second_q, pm.second_k, np.trace(pm.cross)
        Gm = np.diag(self.G) if self.G.ndim == 1 else self.G
        if Gm.shape[0] != M1.shape[0]:
            raise ShapeError(
                f"The `G` parameter of ADERF has shape {self.G.shape} but the data have d={M1.shape[0]}."
            )
        Ginv = np.linalg.inv(Gm)
        S = Gm.T @ Gm
        val = np.trace(S @ M1) + np.trace(Ginv @ Ginv.T @ M2) + 2.0 * cross  # mean ||Gx + G^-T y||^2
        rho = max(float(val), 0.0) / M1.shape[-1]
        return dataclasses.replace(self, A=float(oprf_root(rho)))

    def _oprf_a(self) -> float:
        return float(self.A)  # type: ignore[arg-type]

    def _transform(self) -> np.ndarray | None:
        return None if self.G is None else np.asarray(self.G)

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        if self.G is not None and self.G.shape[0] != dim:
            raise ShapeError(
                f"The `G` parameter of ADERF has shape {self.G.shape} but the draw is for dim={dim}."
            )
        return super()._from_projection(dim, n_draws, W)


def _validate_sym(A: Any, owner: str) -> float | np.ndarray:
    """SDERF's A: a scalar, a diagonal (d,) or a symmetric (d, d); eigenvalues < 1/4 (warn >= 1/8)."""
    if isinstance(A, (int, float, np.integer, np.floating)) and not isinstance(A, bool):
        return _check_a(float(A), owner)
    arr = host_matrix(A, owner, "A", "a scalar, a diagonal (d,) or a symmetric (d, d) array", scalar=True)
    if arr.ndim == 0:
        return _check_a(float(arr), owner)
    if arr.ndim == 2:
        scale = max(float(np.max(np.abs(arr))), np.finfo(np.float64).tiny)
        asym = float(np.max(np.abs(arr - arr.T)))
        if asym > 1e-12 * scale:
            raise InvalidParameterError(
                f"The `A` parameter of {owner} must be a symmetric matrix. Got max|A - A^T| = {asym:.3g} instead."
            )
        arr = 0.5 * (arr + arr.T)
        evals = np.linalg.eigvalsh(arr)
    else:
        evals = arr
    top = float(np.max(evals))
    if not top < 0.25:
        raise InvalidParameterError(
            f"The `A` parameter of {owner} must have every eigenvalue in the range (-inf, 0.25) "
            f"(I - 4A positive definite). Got largest eigenvalue {top!r} instead."
        )
    if top >= 0.125:
        warnings.warn(
            f"{owner} with an eigenvalue of A equal to {top} >= 1/8 is unbiased but has infinite variance.",
            RFKitWarning,
            stacklevel=4,
        )
    arr.setflags(write=False)
    return arr


def sderf_eig(A: float | np.ndarray, dim: int, owner: str = "SDERF") -> tuple[np.ndarray, np.ndarray | None]:
    """Return the eigenvalues and eigenvectors of SDERF's ``A``.

    Parameters
    ----------
    A : float or ndarray of shape (d,) or (d, d)
        A scalar (``A I``), a diagonal or a full symmetric matrix.
    dim : int
        The input dimension ``d`` of the draw.
    owner : str, default="SDERF"
        The name that error messages give.

    Returns
    -------
    a : ndarray of shape (d,)
        The eigenvalues.
    V : ndarray of shape (d, d) or None
        The eigenvectors as columns; None for the identity (scalar or diagonal ``A``).

    Raises
    ------
    ShapeError
        If ``A`` is not of dimension ``dim``.
    """
    if isinstance(A, float):
        return np.full(dim, A), None
    if A.shape[0] != dim:
        raise ShapeError(f"The `A` parameter of {owner} has shape {A.shape} but the draw is for dim={dim}.")
    if A.ndim == 1:
        return np.array(A, dtype=np.float64), None
    w, V = np.linalg.eigh(A)
    return w, V


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SDERF(FeatureMap):
    r"""Symmetric dense-exponential random features (SDERF; Likhosherstov et al., NeurIPS 2023).

    .. math::

        \phi(u) = \frac{\det(I-4A)^{1/4}}{\sqrt m}
            \Big(e^{\omega_i^\top A\,\omega_i + \omega_i^\top(I-4A)^{1/2}u - \frac12\|u\|^2}\Big)_{i\le m}

    for queries and keys alike (the paper's :math:`B^{(1)} = B^{(2)} = (I-4A)^{1/2}`,
    :math:`C^{(k)} = -\tfrac12 I`). Positive and unbiased for :math:`I - 4A \succ 0` (with
    ``projection`` "iid", "orthogonal" or "qmc"); with :math:`A = V\mathrm{diag}(a)V^\top`
    and :math:`u = V^\top(x+y)` the relative variance of one feature is

    .. math:: \prod_l\Big(\frac{(1-4a_l)^2}{1-8a_l}\Big)^{1/2}\exp\Big(\sum_l\frac{u_l^2}{1-8a_l}\Big) - 1,

    finite iff every :math:`a_l < 1/8` (docs page *Theory*, section 1b;
    :func:`rfkit.theory.mse`, iid directions). A scalar ``A`` is OPRF. The paper's general
    SDERF also allows :math:`B = (I-4A)^{1/2}O` with an orthogonal :math:`O`; the optimum has
    :math:`O = I`, so rfkit parametrises SDERF by :math:`A` alone.

    With ``A=None`` the closed-form optimum :func:`sderf_optimal_A` is resolved from a
    query/key sample by :meth:`fit` (or ``sample(data=(Q, K))``), over the pairs ``fit_pairs``
    selects.

    Parameters
    ----------
    n_features : int
        Number of random directions ``m``.
    A : float, array_like of shape (d,) or (d, d), or None, default=None
        Symmetric matrix (a diagonal as a vector, a multiple of the identity as a scalar)
        with every eigenvalue < 1/4; eigenvalues in [1/8, 1/4) warn (infinite variance).
    projection : str, default="iid"
        Directions :math:`\omega_i` (:mod:`rfkit.projections`), drawn in the eigenbasis of A.
    fit_pairs : {"all", "sequence", "causal"}, default="all"
        The query-key pairs :meth:`fit` averages the objective over (as for :class:`ADERF`).
    """

    n_features: int
    A: Any = None
    projection: str = "iid"
    fit_pairs: str = "all"
    shares_projection = True  # directions: sample_projection_streams(projection, n_features, ...)

    _fitted_params = ("A",)  # resolved by fit() when None
    _pair_fit = True  # fit() takes pairs=, key_padding_mask=, exclude=

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_features", check_n_features(self.n_features, "SDERF"))
        check_option(self.projection, "projection", "SDERF", PROJECTIONS)
        object.__setattr__(self, "fit_pairs", check_fit_pairs(self.fit_pairs, "SDERF"))
        if self.A is not None:
            object.__setattr__(self, "A", _validate_sym(self.A, "SDERF"))

    def feature_dim(self, dim: int) -> int:
        return self.n_features

    def fit(
        self, queries: Any, keys: Any, *, pairs: Any = None, key_padding_mask: Any = None, exclude: Any = None
    ) -> FeatureMap:
        """Resolve ``A=None`` to the closed-form optimum :func:`sderf_optimal_A` over the selected pairs.

        ``pairs`` defaults to this map's ``fit_pairs``; padded keys and ``exclude`` pairs never
        count (:func:`rfkit.features.pair_moments`).
        """
        if self.A is not None:
            return self
        p = self.fit_pairs if pairs is None else pairs
        A = sderf_optimal_A(queries, keys, pairs=p, key_padding_mask=key_padding_mask, exclude=exclude)
        return dataclasses.replace(self, A=A)

    def _projection(self, dim: int, *, rng: Any, n_draws: int | None) -> np.ndarray:
        return sample_projection(self.projection, self.n_features, dim, rng=rng, n_draws=n_draws)

    def _projection_streams(self, dim: int, rngs: list[Any]) -> np.ndarray:
        return sample_projection_streams(self.projection, self.n_features, dim, rngs)

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        assert W is not None and self.A is not None
        a, V = sderf_eig(self.A, dim)
        return SDERFDraw(self, dim, n_draws, W, a, V)


class SDERFDraw(FeatureDraw):
    r"""A draw of :class:`SDERF`.

    Attributes
    ----------
    projection : ndarray of shape (m, d) or (T, m, d)
        The directions :math:`\omega_i` in the eigenbasis of :math:`A` (NumPy float64).
    eigenvalues : ndarray of shape (d,)
        :math:`a_l`.
    eigenvectors : ndarray of shape (d, d) or None
        :math:`V` (None for a diagonal or scalar :math:`A`).
    """

    def __init__(
        self,
        spec: FeatureMap,
        dim: int,
        n_draws: int | None,
        W: np.ndarray,
        a: np.ndarray,
        V: np.ndarray | None,
    ) -> None:
        super().__init__(spec, dim, n_draws)
        self.projection = W
        self.eigenvalues = a
        self.eigenvectors = V
        m = W.shape[-2]
        self._Weff = W * np.sqrt(1.0 - 4.0 * a)  # rows sqrt(1-4a) * omega
        self._e = np.sum(a * W * W, axis=-1)  # (T?, m): omega^T diag(a) omega
        half_logdet = 0.25 * float(np.sum(np.log1p(-4.0 * a)))
        self._c = half_logdet - 0.5 * float(np.log(m))
        self._c_pair = 2.0 * half_logdet - float(np.log(m))

    def _rotate(self, X: Any) -> Any:
        if self.eigenvectors is None:
            return X
        return X @ self.param("V", self.eigenvectors, X)  # rows (V^T x)^T

    def _exponents(self, U: Any, e_scale: float) -> Any:
        """``omega_eff . u + e_scale * e`` for every direction, ([T,] ..., n, m)."""
        xp = get_backend(("U", U)).xp
        P = project(U, self.param("Weff", self._Weff, U))
        e = self.param("e", self._e, U)
        if e.ndim == 1:
            return P + e_scale * e
        return P + e_scale * xp.reshape(e, (e.shape[0],) + (1,) * (P.ndim - 2) + (e.shape[-1],))

    def _features(self, X: Any, side: str) -> Features:
        xp = get_backend(("X", X)).xp
        P = self._exponents(self._rotate(X), 1.0)
        if P.shape[-1]:
            rowmax = xp.max(P, axis=-1)
        else:  # pragma: no cover - m >= 1 always
            rowmax = xp.zeros_like(P[..., 0])
        values = xp.exp(P - rowmax[..., None])
        return Features(values=values, log_scale=rowmax + (self._c - 0.5 * xp.sum(X * X, axis=-1)))

    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        xp = get_backend(("X", X)).xp
        P = self._exponents(self._rotate(X), 1.0)
        return None, P + (self._c - 0.5 * xp.sum(X * X, axis=-1))[..., None]

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        bk = get_backend(("X", X))
        xp = bk.xp
        Z = self._rotate(X + Y)
        base = self._c_pair - 0.5 * (xp.sum(X * X, axis=-1) + xp.sum(Y * Y, axis=-1))
        W, e = self.param("Weff", self._Weff, Z), self.param("e", self._e, Z)
        out = paired_logsumexp(bk, Z, W, 2.0 * e) + base
        return xp.ones_like(out), out
