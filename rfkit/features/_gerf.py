r"""GERF (Chefs' Random Tables) and SADERF (FAVOR#): parameterised exponential random features.

**GERF** (generalised exponential random features; Likhosherstov, Choromanski, Dubey, Liu,
Sarlos, Weller, "Chefs' Random Tables: Non-Trigonometric Random Features", NeurIPS 2022, §3):
for :math:`\omega \sim \mathcal N(0, I_d)`,

.. math::

    f^{(1)}(\omega, x) = D\,e^{A\|\omega\|^2 + B\omega^\top x + C\|x\|^2},\qquad
    f^{(2)}(\omega, y) = D\,e^{A\|\omega\|^2 + sB\omega^\top y + C\|y\|^2},

with :math:`s \in \{+1, -1\}`, :math:`B = \sqrt{s(1-4A)}`, :math:`D = (1-4A)^{d/4}` and, for the
softmax kernel, :math:`C = -s/2` (Likhosherstov et al. (NeurIPS 2022); docs page *Theory*, section 1a). rfkit implements real :math:`A`:

* :math:`s = +1`: positive features; this is OPRF (:class:`~rfkit.features.OPRF`), the optimum
  :math:`A^*` having the closed form :func:`~rfkit.features.oprf_optimal_A`;
* :math:`s = -1`: :math:`B = i\sqrt{1-4A}`; the estimator is the real part
  :math:`e^{(\|x\|^2+\|y\|^2)/2}(1-4A)^{d/2}\frac1m\sum_i e^{2A\|\omega_i\|^2}\cos(\sqrt{1-4A}\,\omega_i^\top(x-y))`,
  realised with the real features
  :math:`\frac{(1-4A)^{d/4}}{\sqrt m}e^{\|u\|^2/2}e^{A\|\omega_i\|^2}(\sin, \cos)(\sqrt{1-4A}\,\omega_i^\top u)`
  (``2m`` columns); :math:`A = 0` is :class:`~rfkit.features.Trig`. The data-averaged optimum is
  found numerically (:func:`~rfkit.features.gerf_optimal_A`).

Unbiased for :math:`A < 1/4`; finite variance iff :math:`A < 1/8`. Complex :math:`A` (the paper's
full family) is not implemented.

**SADERF** (simplified asymmetric dense-exponential random features; Likhosherstov, Choromanski,
Dubey, Liu, Sarlos, Weller, "FAVOR#: Sharp Attention Kernel Approximations via New Classes of
Positive Random Features", 2023): the positive GERF applied to :math:`\Psi x` and
:math:`\Psi^{-1}y` with a diagonal :math:`\Psi` (unbiased since :math:`(\Psi x)^\top\Psi^{-1}y = x^\top y`).
Both :math:`\Psi` and :math:`A` are fitted to the data by minimising the mean over query/key pairs
of :math:`\log\mathbb E[(f^{(1)}f^{(2)})^2]`; the objective separates (docs page *Theory*, section 1a, "SADERF"):
:math:`\Psi_{ll}^4 = \overline{y_l^2}/\overline{x_l^2}` for every :math:`A`, then :math:`A^*` from the
transformed data.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._backend import get_backend
from .._validation import check_real
from ..exceptions import InvalidParameterError, RFKitWarning, ShapeError
from ._adaptive import _pair_moments, check_nondegenerate, fourth_root_ratio, validate_A
from ._base import FeatureMap
from ._draw import FeatureDraw, Features
from ._exp import ExpDraw, _check_common, _ExpMap
from ._ops import project
from ._optimal import check_sign, gerf_optimal_A
from ._pairs import PairMoments, check_fit_pairs, is_plain, pair_moments, pooled

__all__ = ["GERF", "SADERF", "GERFTrigDraw", "saderf_parameters"]


def _check_A(A: Any, owner: str) -> float:
    a = check_real(A, "A", owner, high=0.25, closed="neither")
    if a >= 0.125:
        warnings.warn(
            f"{owner} with A={a} in [1/8, 1/4) is unbiased but has infinite variance "
            "(the variance is finite only for A < 1/8).",
            RFKitWarning,
            stacklevel=4,
        )
    return a


@dataclasses.dataclass(frozen=True)
class GERF(_ExpMap):
    r"""Generalised exponential random features (Chefs' Random Tables, NeurIPS 2022, §3).

    ``s=1``: :math:`\phi_i(u) = \frac{(1-4A)^{d/4}}{\sqrt m}\exp\big(A\|\omega_i\|^2 + \sqrt{1-4A}\,\omega_i^\top u
    - \tfrac12\|u\|^2\big)` (the same estimator as :class:`OPRF`, ``m`` columns, positive).

    ``s=-1``: :math:`\phi(u) = \frac{(1-4A)^{d/4}}{\sqrt m}e^{\|u\|^2/2}\big(e^{A\|\omega_i\|^2}
    \sin(\sqrt{1-4A}\,\omega_i^\top u),\ e^{A\|\omega_i\|^2}\cos(\sqrt{1-4A}\,\omega_i^\top u)\big)_{i\le m}`
    (``2m`` columns, signed; ``A=0`` is :class:`Trig`).

    Both are unbiased for :math:`\exp(x^\top y)` for :math:`A < 1/4`. The relative MSE with iid
    directions is :math:`\frac1m\big(K(A)\,e^{\|x+y\|^2/(1-8A)} - 1\big)` (``s=1``) and
    :math:`\frac1m\big(\tfrac12K(A)(e^{\|x-y\|^2} + e^{-\|x-y\|^2/(1-8A)}) - 1\big)` (``s=-1``), with
    :math:`K(A) = \big(\frac{(1-4A)^2}{1-8A}\big)^{d/2}`, finite iff :math:`A < 1/8`
    (:func:`rfkit.theory.mse`; derivation on the docs page *Theory*, section 1a, "GERF").

    Parameters
    ----------
    n_features : int
        Number of random directions ``m``.
    A : float or None, default=None
        Real parameter, < 1/4 (values in [1/8, 1/4) warn: infinite variance). ``None``: the
        data-averaged optimum :func:`gerf_optimal_A`, resolved by :meth:`fit` or ``sample(data=...)``.
    s : {1, -1}, default=1
        Sign of the GERF family: positive (``1``) or trigonometric (``-1``) features.
    projection : str, default="iid"
        Directions (:mod:`rfkit.projections`).
    fit_pairs : {"all", "sequence", "causal"}, default="all"
        The query-key pairs :meth:`fit` averages the objective over: ``"all"`` every pair of the
        sample (the paper's objective), ``"causal"`` the pairs :math:`j \le i` of each sequence
        (rfkit's own weighting), ``"sequence"`` every pair within a sequence.
    """

    n_features: int
    A: float | None = None
    s: int = 1
    projection: str = "iid"
    fit_pairs: str = "all"

    _fitted_params = ("A",)  # resolved by fit() when None
    _pair_fit = True  # fit() takes pairs=, key_padding_mask=, exclude=

    def __post_init__(self) -> None:
        _check_common(self)
        object.__setattr__(self, "s", check_sign(self.s, "GERF"))
        object.__setattr__(self, "fit_pairs", check_fit_pairs(self.fit_pairs, "GERF"))
        if self.A is not None:
            object.__setattr__(self, "A", _check_A(self.A, "GERF"))

    @property
    def is_positive(self) -> bool:  # type: ignore[override]
        """True for ``s=1`` (positive features); ``s=-1`` estimates may be <= 0."""
        return self.s == 1

    def feature_dim(self, dim: int) -> int:
        return self.n_features * (1 if self.s == 1 else 2)

    def fit(
        self, queries: Any, keys: Any, *, pairs: Any = None, key_padding_mask: Any = None, exclude: Any = None
    ) -> FeatureMap:
        """Resolve ``A=None`` to the data-averaged optimum :func:`gerf_optimal_A` (for this ``s``).

        Averaged over the pairs ``pairs`` selects (default: this map's ``fit_pairs``); padded
        keys and ``exclude`` pairs never count (:func:`rfkit.features.pair_moments`).
        """
        if self.A is not None:
            return self
        p = self.fit_pairs if pairs is None else pairs
        A = gerf_optimal_A(
            queries, keys, s=self.s, pairs=p, key_padding_mask=key_padding_mask, exclude=exclude
        )
        return dataclasses.replace(self, A=A)

    def _oprf_a(self) -> float:
        return float(self.A)  # type: ignore[arg-type]

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        assert W is not None
        if self.s == 1:
            return ExpDraw(self, dim, n_draws, W, A=None, a=float(self.A), hyperbolic=False)  # type: ignore[arg-type]
        return GERFTrigDraw(self, dim, n_draws, W, a=float(self.A))  # type: ignore[arg-type]


class GERFTrigDraw(FeatureDraw):
    """A draw of :class:`GERF` with ``s=-1`` (weighted sin/cos features, ``2m`` columns).

    Attributes
    ----------
    projection : ndarray of shape (m, d) or (T, m, d)
        The directions :math:`\\omega_i` (NumPy float64).
    a : float
        The GERF parameter :math:`A`.
    """

    def __init__(self, spec: FeatureMap, dim: int, n_draws: int | None, W: np.ndarray, *, a: float) -> None:
        super().__init__(spec, dim, n_draws)
        self.projection = W
        self.a = a
        m = W.shape[-2]
        e = a * np.sum(W * W, axis=-1)  # log weight of direction i: A |w_i|^2, (T?, m)
        self._emax = np.max(e, axis=-1)  # (T?,) or ()
        self._e = e - self._emax[..., None]  # <= 0
        self._wb = W * float(np.sqrt(1.0 - 4.0 * a))
        # log D - log(m)/2 as a python float (keeps float32 inputs float32)
        self._c = float(0.25 * dim * np.log1p(-4.0 * a) - 0.5 * np.log(m))

    def _pair_work_per_trial(self, rows: int) -> int | None:
        """Elements of one trial's paired work: the projections of the differences, (rows, m)."""
        return rows * int(self.projection.shape[-2])

    def _trials(self, ts: slice) -> FeatureDraw:
        return self._sliced(
            ts, projection=self.projection[ts], _emax=self._emax[ts], _e=self._e[ts], _wb=self._wb[ts]
        )

    def _bcast(self, key: str, arr: np.ndarray, P: Any, like: Any) -> Any:
        """A per-draw parameter, (m,)/() or (T, m)/(T,), shaped to broadcast against P ([T,] ..., n, m)."""
        v = self.param(key, arr, like)
        if self.projection.ndim == 2:
            return v
        xp = get_backend(("v", v)).xp
        return xp.reshape(v, (int(v.shape[0]),) + (1,) * (P.ndim - 2) + tuple(v.shape[1:]))

    def _parts(self, X: Any) -> tuple[Any, Any, Any]:
        """Projection, per-direction log weights and per-row log scale for validated X."""
        xp = get_backend(("X", X)).xp
        P = project(X, self.param("Wb", self._wb, X))
        e = self._bcast("e", self._e, P, X)
        top = self._bcast("emax", self._emax, P, X)
        ls = 0.5 * xp.sum(X * X, axis=-1) + self._c
        return P, e, ls + top

    def _features(self, X: Any, side: str) -> Features:
        xp = get_backend(("X", X)).xp
        P, e, ls = self._parts(X)
        w = xp.exp(e)
        values = xp.concat([w * xp.sin(P), w * xp.cos(P)], axis=-1)
        return Features(
            values=values, log_scale=xp.broadcast_to(ls, tuple(P.shape[:-1])) + xp.zeros_like(P[..., 0])
        )

    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        xp = get_backend(("X", X)).xp
        P, e, ls = self._parts(X)
        v = xp.concat([xp.sin(P), xp.cos(P)], axis=-1)
        ee = xp.concat([e, e], axis=-1)
        with np.errstate(divide="ignore"):
            logabs = xp.log(xp.abs(v)) + ee + ls[..., None]
        return xp.sign(v), logabs

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        xp = get_backend(("X", X)).xp
        Dl = X - Y
        P = project(Dl, self.param("Wb", self._wb, Dl))  # ([T,] ..., n, m)
        e = self._bcast("e", self._e, P, Dl)
        top = self._bcast("emax", self._emax, P, Dl)
        s = xp.sum(xp.exp(2.0 * e) * xp.cos(P), axis=-1)
        base = 0.5 * (xp.sum(X * X, axis=-1) + xp.sum(Y * Y, axis=-1)) + 2.0 * self._c
        with np.errstate(divide="ignore"):
            logabs = xp.log(xp.abs(s)) + base + 2.0 * top
        return xp.sign(s), logabs


def saderf_parameters(
    Q: Any,
    K: Any,
    *,
    A: float | None = None,
    pairs: Any = "all",
    key_padding_mask: Any = None,
    exclude: Any = None,
) -> tuple[np.ndarray, float]:
    r"""Return SADERF's data-fitted diagonal :math:`\Psi` and parameter :math:`A` (FAVOR#).

    .. math::

        \Psi_{ll} = \Big(\frac{\overline{y_l^2}}{\overline{x_l^2}}\Big)^{1/4},\qquad
        A^* = \tfrac1{16}\Big(1 - 2\rho - \sqrt{(2\rho+1)^2 + 8\rho}\Big),\quad
        \rho = \frac1d\Big(\sum_l \Psi_{ll}^2\overline{x_l^2} + \sum_l \Psi_{ll}^{-2}\overline{y_l^2}
        + 2\bar x^\top\bar y\Big),

    (bars: means over the query sample :math:`x_i` and the key sample :math:`y_j`; leading axes pooled).
    Together they minimise the mean over all pairs :math:`(i, j)` of
    :math:`\log\mathbb E[(f^{(1)}(\omega,\Psi x_i)f^{(2)}(\omega,\Psi^{-1}y_j))^2]`: that mean is
    :math:`\tfrac d2\log\frac{(1-4A)^2}{1-8A} + \frac{1}{1-8A}\big(\overline{\|\Psi x\|^2}+\overline{\|\Psi^{-1}y\|^2}\big)
    + \dots` with the remaining terms free of :math:`\Psi`, so :math:`\Psi` minimises
    :math:`\overline{\|\Psi x\|^2}+\overline{\|\Psi^{-1}y\|^2}` for every :math:`A < 1/8` (FAVOR# eq. for
    :math:`\Psi^*`; derivation on the docs page *Theory*, section 1a, "SADERF"). :math:`O(nd)`, computed on the data's device.

    With a pair selection (``pairs``; ``"causal"``: :math:`j \le i` in each sequence, rfkit's
    own weighting) the bars are the pair-weighted means of :func:`rfkit.features.pair_moments`
    (:math:`\overline{x_l^2} = (M_x)_{ll}`, :math:`\overline{y_l^2} = (M_y)_{ll}`) and
    :math:`\bar x^\top\bar y` becomes :math:`\mathrm{tr}\,C`, the mean of :math:`x_i^\top y_j` over
    the selected pairs; the objective separates in the same way, so these are its minimisers.

    Parameters
    ----------
    Q, K : array_like of shape (..., n, d) and (..., M, d)
        Queries :math:`x_i` and keys :math:`y_j`.
    A : float, optional
        A fixed :math:`A` to return instead of :math:`A^*`.
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), default="all"
    key_padding_mask : array of bool (..., M), optional
        True marks padded keys (in no pair).
    exclude : (idx, valid), optional
        Pairs left out.

    Returns
    -------
    psi : ndarray of shape (d,)
        The diagonal of :math:`\Psi`.
    A : float
        :math:`A^*` (or the ``A`` given).

    Raises
    ------
    SingularMatrixError
        If a coordinate has zero mean square in the queries or the keys (:math:`\Psi_{ll}` would
        be 0 or infinite). rfkit does not clip.
    """
    qx, qy, cross = _saderf_moments(Q, K, pairs, key_padding_mask, exclude)
    d = qx.shape[-1]
    psi = fourth_root_ratio(qy, qx)
    check_nondegenerate(
        psi,
        lambda i: (
            f"SADERF: coordinate {i} has mean square {qx[i]:.3g} in the queries and {qy[i]:.3g} in the keys; "
            f"Psi_ii would be {psi[i]!r} (Psi singular). rfkit does not clip; pass psi explicitly."
        ),
    )
    if A is not None:
        return psi, float(A)
    s = np.sum(psi**2 * qx) + np.sum(qy / psi**2) + 2.0 * cross
    rho = max(float(s), 0.0) / d
    return psi, float((1.0 - 2.0 * rho - np.sqrt((2.0 * rho + 1.0) ** 2 + 8.0 * rho)) / 16.0)


def _saderf_moments(
    Q: Any, K: Any, pairs: Any, key_padding_mask: Any, exclude: Any
) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean squares of each coordinate of the queries and keys, and the mean of x.y, over the pairs."""
    if is_plain(pairs, exclude):
        Q, K = pooled(Q, K, key_padding_mask)
        nx, mx, ssx, ny, my, ssy = _pair_moments(Q, K)
        return ssx / nx + mx**2, ssy / ny + my**2, float(mx @ my)
    pm: PairMoments = pair_moments(Q, K, pairs=pairs, key_padding_mask=key_padding_mask, exclude=exclude)
    return np.diag(pm.second_q).copy(), np.diag(pm.second_k).copy(), float(np.trace(pm.cross))


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SADERF(_ExpMap):
    r"""Simplified asymmetric dense-exponential random features (FAVOR#, Likhosherstov et al. 2023).

    .. math:: \phi^{(1)}(x) = \phi_{\rm GERF}(\Psi x),\qquad \phi^{(2)}(y) = \phi_{\rm GERF}(\Psi^{-1}y),

    with :math:`\phi_{\rm GERF}` the positive GERF/OPRF map of parameter :math:`A` and a diagonal
    :math:`\Psi`; ``m`` columns, positive, unbiased for :math:`A < 1/4`. Relative MSE with iid
    directions :math:`\frac1m\big(K(A)e^{\|\Psi x + \Psi^{-1}y\|^2/(1-8A)} - 1\big)`,
    :math:`K(A) = \big(\frac{(1-4A)^2}{1-8A}\big)^{d/2}` (:func:`rfkit.theory.mse`). ``psi=ones`` is
    :class:`GERF` / :class:`OPRF`; ``A=0`` is :class:`CEXP` with ``A=diag(psi)``.

    Parameters
    ----------
    n_features : int
    A : float or None, default=None
        GERF parameter (< 1/4; [1/8, 1/4) warns). ``None``: :math:`A^*` of the transformed data
        (:func:`saderf_parameters`).
    psi : array_like of shape (d,) or None, default=None
        Diagonal of :math:`\Psi` (finite, non-zero). ``None``: :math:`\Psi^*` from the data.
    projection : str, default="iid"
    fit_pairs : {"all", "sequence", "causal"}, default="all"
        The query-key pairs :meth:`fit` averages the objective over: ``"all"`` every pair of the
        sample (the paper's objective), ``"causal"`` the pairs :math:`j \le i` of each sequence
        (rfkit's own weighting), ``"sequence"`` every pair within a sequence.
    """

    n_features: int
    A: float | None = None
    psi: Any = None
    projection: str = "iid"
    fit_pairs: str = "all"

    _fitted_params = ("A", "psi")  # resolved by fit() when None
    _pair_fit = True  # fit() takes pairs=, key_padding_mask=, exclude=

    def __post_init__(self) -> None:
        _check_common(self)
        object.__setattr__(self, "fit_pairs", check_fit_pairs(self.fit_pairs, "SADERF"))
        if self.A is not None:
            object.__setattr__(self, "A", _check_A(self.A, "SADERF"))
        if self.psi is not None:
            arr = validate_A(self.psi, "SADERF", "psi")
            if arr.ndim != 1:
                raise ShapeError(
                    f"The `psi` parameter of SADERF must be the diagonal of Psi, shape (d,); got shape {arr.shape}."
                )
            object.__setattr__(self, "psi", arr)

    def fit(
        self, queries: Any, keys: Any, *, pairs: Any = None, key_padding_mask: Any = None, exclude: Any = None
    ) -> FeatureMap:
        """Resolve ``psi=None`` and ``A=None`` from the query/key sample (:func:`saderf_parameters`).

        Averaged over the pairs ``pairs`` selects (default: this map's ``fit_pairs``); padded
        keys and ``exclude`` pairs never count (:func:`rfkit.features.pair_moments`).
        """
        if not self.needs_data:
            return self
        sel = {
            "pairs": self.fit_pairs if pairs is None else pairs,
            "key_padding_mask": key_padding_mask,
            "exclude": exclude,
        }
        if self.psi is None:
            psi, a = saderf_parameters(queries, keys, A=self.A, **sel)
        else:
            psi = self.psi
            a = self.A if self.A is not None else _optimal_a_given_psi(queries, keys, psi, **sel)
        return dataclasses.replace(self, psi=psi, A=a)

    def _oprf_a(self) -> float:
        return float(self.A)  # type: ignore[arg-type]

    def _transform(self) -> np.ndarray | None:
        return np.asarray(self.psi)

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        if np.asarray(self.psi).shape[0] != dim:
            raise ShapeError(
                f"The `psi` parameter of SADERF has {np.asarray(self.psi).shape[0]} entries but the draw is for dim={dim}."
            )
        return super()._from_projection(dim, n_draws, W)


def _optimal_a_given_psi(
    Q: Any, K: Any, psi: np.ndarray, *, pairs: Any = "all", key_padding_mask: Any = None, exclude: Any = None
) -> float:
    """A* of the transformed data for a given diagonal psi (moments only, over the selected pairs)."""
    qx, qy, cross = _saderf_moments(Q, K, pairs, key_padding_mask, exclude)
    if psi.shape[0] != qx.shape[-1]:
        raise InvalidParameterError(
            f"The `psi` parameter of SADERF has {psi.shape[0]} entries but the data have d={qx.shape[-1]}."
        )
    s = np.sum(psi**2 * qx) + np.sum(qy / psi**2) + 2.0 * cross
    rho = max(float(s), 0.0) / qx.shape[-1]
    return float((1.0 - 2.0 * rho - np.sqrt((2.0 * rho + 1.0) ** 2 + 8.0 * rho)) / 16.0)
