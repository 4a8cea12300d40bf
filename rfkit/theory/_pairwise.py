r"""Cross-key second moments of random-feature kernel estimates: the input of the general delta method.

One query :math:`q` and keys :math:`k_1..k_M`; a feature map estimates
:math:`\kappa_j = e^{q^\top k_j}` by :math:`\frac1m\sum_i F(\omega_i; q, k_j)`. The delta method of
a ratio estimator (:mod:`rfkit.theory._delta`) needs the covariance of these estimates across
keys,

.. math::

    \mathrm{Cov}(\hat\kappa_j, \hat\kappa_l) = \frac{C_{jl}}m + \frac{K}{m^2}P_{jl},\qquad
    C_{jl} = \kappa_j\kappa_l\big(e^{L_{jl}} - 1\big),\qquad
    P_{jl} = \kappa_j\kappa_l\,r_{jl},

with :math:`e^{L_{jl}} = \mathbb E[F(\omega;q,k_j)F(\omega;q,k_l)]/(\kappa_j\kappa_l)` (one
direction), :math:`r_{jl} = \mathbb E[F(\omega_1;q,k_j)F(\omega_2;q,k_l)]/(\kappa_j\kappa_l) - 1`
for two directions of one orthogonal block, and :math:`K = \sum_b k_b(k_b-1)` the ordered
same-block pairs (0 for iid directions). Closed forms (derived in docs page *Sparse + random
features*, section "Theory"; the diagonal :math:`j = l` is the relative variance of docs page
*Theory*, section 1), with :math:`z_j = Mq + M'k_j` (:math:`M = M' = I` except CEXP/HCEXP
:math:`A, A^{-\top}`; SADERF :math:`\Psi, \Psi^{-1}`; ADERF :math:`G, G^{-\top}`) and
:math:`\Delta_j = q - k_j`:

* positive maps (Positive, CEXP, OPRF and GERF :math:`s=+1` with parameter :math:`a`, SADERF,
  ADERF; SDERF with one :math:`a_c` per eigen-direction of :math:`A`, coordinates in its
  eigenbasis): :math:`L_{jl} = \sum_c\big[\log\frac{1-4a_c}{\sqrt{1-8a_c}} + \frac{(1-4a_c)(z_j+z_l)_c^2}{2(1-8a_c)}\big]
  - \frac{\|z_j\|^2+\|z_l\|^2}2` (:math:`a = 0`: :math:`z_j^\top z_l`);
* hyperbolic maps: the mean of that form at :math:`z_j + z_l` and :math:`z_j - z_l`
  (:math:`a=0`: :math:`\log\cosh z_j^\top z_l`);
* trigonometric maps (Trig; GERF :math:`s=-1`): :math:`L_{jl} = \log K(a) + \frac{\|\Delta_j\|^2+\|\Delta_l\|^2}2
  + \log\tfrac12\big(e^{-w\|\Delta_j+\Delta_l\|^2} + e^{-w\|\Delta_j-\Delta_l\|^2}\big)`,
  :math:`w = \frac{1-4a}{2(1-8a)}` (:math:`a = 0`: :math:`\log\cosh\Delta_j^\top\Delta_l`);
* orthogonal blocks (``projection="orthogonal"``, :math:`\chi(d)` norms, scalar :math:`a`):
  :math:`r_{jl} = R(\|z_j\|^2, \|z_l\|^2, z_j^\top z_l) - 1` for the positive and hyperbolic
  maps and :math:`R^{-}(\|\Delta_j\|^2, \|\Delta_l\|^2, \Delta_j^\top\Delta_l) - 1` for the
  trigonometric ones (:func:`rfkit.theory._orth_pair.orth_pair_gap`; independent of
  :math:`a`).

Maps without a closed-form cross moment here raise :class:`~rfkit.exceptions.InvalidParameterError`
naming the map: RandomMaclaurin, TensorSketch, the deterministic maps, fitted maps not yet
fitted, and the projections ``"orthogonal-fixed"`` (biased), ``"simplex"``, ``"qmc"``,
``"structured"``, and SDERF with orthogonal blocks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..exceptions import InvalidParameterError, ShapeError
from ..features import ADERF, GERF, SADERF, SDERF, Positive, sderf_eig
from ._closed_form import _Plan, _plan
from ._derf_mse import _aderf_plan
from ._gerf import _plan_of
from ._orth_pair import orth_pair_gap

__all__ = [
    "CrossMoments",
    "cross_moments",
    "CrossState",
    "cross_state",
    "cross_block",
    "PAIRWISE_PROJECTIONS",
]

#: Projections with a closed-form cross-key covariance.
PAIRWISE_PROJECTIONS = ("iid", "orthogonal")


@dataclasses.dataclass(frozen=True)
class CrossMoments:
    """Relative cross-key moments of one query (see the module docstring).

    Attributes
    ----------
    log_kappa : ndarray (M,)
        :math:`\\log\\kappa_j = q^\\top k_j`.
    log_second : ndarray (M, M)
        :math:`L_{jl}` (one direction).
    pair_gap : ndarray (M, M) or None
        :math:`r_{jl}` (two directions of one orthogonal block); None for iid directions.
    dim : int
        :math:`d` (block size of the orthogonal construction).
    """

    log_kappa: np.ndarray
    log_second: np.ndarray
    pair_gap: np.ndarray | None
    dim: int


@dataclasses.dataclass(frozen=True)
class _Family:
    kind: str  # "exp", "hyp" or "trig"
    projection: str
    a: np.ndarray  # (d,) per-coordinate parameter (scalar maps: constant)
    transform: Any  # None, or (M_q, M_k) applied as q @ M_q, K @ M_k (rows)


def _no_closed_form(fm: Any, owner: str, why: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"{owner}: the feature map {type(fm).__name__} has no closed-form cross-key second moment "
        f"E[phi(q)^T phi(k_i) phi(q)^T phi(k_j)] here ({why}). Supported: Positive, Hyperbolic, CEXP, HCEXP, "
        "OPRF, GERF, SADERF, ADERF, SDERF (iid) and Trig, with projection 'iid' or 'orthogonal'; measure other "
        "maps by simulation."
    )


def _from_plan(plan: _Plan, d: int) -> _Family:
    kind = "trig" if plan.family == "trig" else ("hyp" if plan.hyperbolic else "exp")
    transform: Any = None
    if plan.A is not None:
        A = np.asarray(plan.A, dtype=np.float64)
        if A.ndim == 1:
            transform = (np.diag(A), np.diag(1.0 / A))
        else:
            transform = (A.T, np.linalg.inv(A))
    return _Family(kind, plan.projection, np.full(d, float(plan.a)), transform)


def _family(fm: Any, d: int, owner: str) -> _Family:
    if fm is None:
        fm = Positive(1)
    if isinstance(fm, (GERF, SADERF)):
        plan = _plan_of(fm, owner)
        if isinstance(fm, SADERF) and np.asarray(fm.psi).shape[0] != d:
            raise ShapeError(f"{owner}: SADERF's `psi` has {np.asarray(fm.psi).shape[0]} entries but d={d}.")
    elif isinstance(fm, ADERF):
        plan = _aderf_plan(fm, d)
    elif isinstance(fm, SDERF):
        if fm.A is None:
            raise InvalidParameterError(
                f"{owner}: SDERF(A=None) resolves its optimal A from data; call fm.fit(Q, K) first."
            )
        if fm.projection != "iid":
            raise _no_closed_form(
                fm, owner, f"projection={fm.projection!r}; SDERF has a closed form for 'iid' only"
            )
        a, V = sderf_eig(fm.A if isinstance(fm.A, float) else np.asarray(fm.A, dtype=np.float64), d, owner)
        tr = None if V is None else (V, V)
        return _Family("exp", "iid", np.asarray(a, dtype=np.float64), tr)
    else:
        try:
            plan = _plan(fm, owner)
        except InvalidParameterError as exc:
            if "no closed form for feature map" in str(exc):
                raise _no_closed_form(fm, owner, "no closed form is known to rfkit") from None
            raise
    if plan.projection not in PAIRWISE_PROJECTIONS:
        raise _no_closed_form(fm, owner, f"projection={plan.projection!r}; only {list(PAIRWISE_PROJECTIONS)}")
    if plan.A is not None and np.asarray(plan.A).shape[0] != d:
        raise ShapeError(
            f"{owner}: the transform of {type(fm).__name__} has shape {np.asarray(plan.A).shape}; d={d}."
        )
    return _from_plan(plan, d)


def _log_k(a: np.ndarray) -> float:
    """:math:`\\sum_c\\log\\frac{1-4a_c}{\\sqrt{1-8a_c}}` (0 for :math:`a = 0`)."""
    return float(np.sum(np.log1p(-4.0 * a) - 0.5 * np.log1p(-8.0 * a)))


def _quad(Zr: np.ndarray, Zc: np.ndarray, w: np.ndarray, sign: float) -> np.ndarray:
    """:math:`\\sum_c w_c(z_j \\pm z_l)_c^2` for rows ``Zr`` against rows ``Zc``, shape (len(Zr), len(Zc))."""
    nr, nc = (Zr * Zr) @ w, (Zc * Zc) @ w
    return nr[:, None] + nc[None, :] + sign * 2.0 * ((Zr * w) @ Zc.T)


@dataclasses.dataclass(frozen=True)
class CrossState:
    """What :func:`cross_block` needs of one query: the per-key vectors and the map's constants.

    ``vecs`` are :math:`z_j` (positive and hyperbolic maps) or :math:`\\Delta_j` (trigonometric
    maps), one row per key; ``norms`` their squared norms.
    """

    kind: str
    projection: str
    vecs: np.ndarray
    norms: np.ndarray
    w: np.ndarray
    log_k: float
    log_kappa: np.ndarray
    dim: int


def cross_state(fm: Any, q: np.ndarray, K: np.ndarray, owner: str) -> CrossState:
    """The :class:`CrossState` of ``fm`` (None: iid :class:`~rfkit.features.Positive`) for one query."""
    d = int(q.shape[0])
    fam = _family(fm, d, owner)
    if np.any(fam.a >= 0.125):
        raise InvalidParameterError(
            f"{owner}: {type(fm).__name__} with A >= 1/8 has infinite variance (the delta method needs a finite "
            "second moment); use A < 1/8."
        )
    w = (1.0 - 4.0 * fam.a) / (2.0 * (1.0 - 8.0 * fam.a))
    if fam.kind == "trig":
        Z = q[None, :] - K
    elif fam.transform is None:
        Z = q[None, :] + K
    else:
        Z = (q @ fam.transform[0])[None, :] + K @ fam.transform[1]
    return CrossState(fam.kind, fam.projection, Z, np.sum(Z * Z, axis=1), w, _log_k(fam.a), K @ q, d)


def cross_block(
    st: CrossState, rows: slice, cols: slice, pair: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """:math:`L_{jl}` and (orthogonal blocks, ``pair``) :math:`r_{jl}` for the keys ``rows`` x ``cols``.

    Memory is that of the block: callers walk the (M, M) matrices in row blocks.
    """
    Zr, Zc = st.vecs[rows], st.vecs[cols]
    nr, nc = st.norms[rows][:, None], st.norms[cols][None, :]
    half = 0.5 * (nr + nc)
    if st.kind == "trig":
        L = (
            st.log_k
            + half
            + np.logaddexp(-_quad(Zr, Zc, st.w, 1.0), -_quad(Zr, Zc, st.w, -1.0))
            - np.log(2.0)
        )
    elif st.kind == "hyp":
        L = st.log_k + np.logaddexp(_quad(Zr, Zc, st.w, 1.0), _quad(Zr, Zc, st.w, -1.0)) - np.log(2.0) - half
    else:
        L = st.log_k + _quad(Zr, Zc, st.w, 1.0) - half
    gap = None
    if pair and st.projection == "orthogonal" and st.dim > 1:
        G = Zr @ Zc.T
        gap = orth_pair_gap(
            st.dim, np.broadcast_to(nr, G.shape), np.broadcast_to(nc, G.shape), G, signed=st.kind == "trig"
        )
    return L, gap


def cross_diag(st: CrossState) -> np.ndarray:
    """The diagonal :math:`L_{jj}` (one key with itself) without any (M, M) block."""
    n = st.norms
    q4 = 4.0 * ((st.vecs * st.vecs) @ st.w)  # sum_c w_c (2 z_c)^2; the difference term is 0
    if st.kind == "trig":
        return st.log_k + n + np.logaddexp(-q4, 0.0) - np.log(2.0)
    if st.kind == "hyp":
        return st.log_k + np.logaddexp(q4, 0.0) - np.log(2.0) - n
    return st.log_k + q4 - n


def cross_moments(fm: Any, q: np.ndarray, K: np.ndarray, owner: str) -> CrossMoments:
    """The relative cross moments of ``fm`` (None: iid :class:`~rfkit.features.Positive`) for one query.

    Builds the whole (M, M) matrices; :func:`cross_state` and :func:`cross_block` give them in blocks.
    """
    st = cross_state(fm, q, K, owner)
    every = slice(None)
    L, gap = cross_block(st, every, every)
    L = 0.5 * (L + L.T)  # symmetric up to round-off
    if gap is not None:
        gap = 0.5 * (gap + gap.T)
    return CrossMoments(log_kappa=st.log_kappa, log_second=L, pair_gap=gap, dim=st.dim)
