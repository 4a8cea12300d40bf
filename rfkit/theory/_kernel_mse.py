r"""Exact MSE and bias of the random-feature softmax-kernel estimators: the public functions.

:func:`log_mse`, :func:`relative_mse`, :func:`mse` and :func:`bias` take a feature-map
specification and pairs of inputs; they assemble
:math:`\mathrm{MSE}/\mathrm{SM}^2 = \rho_V/m + (K/m^2)\rho_C + \rho_B^2` from the parts of
:mod:`rfkit.theory._prf_parts` (built-in maps) or a registered closed form
(:mod:`rfkit.theory._closed_form`), in log space, so :func:`log_mse` is finite for
:math:`\|x+y\|^2` in the hundreds (and much beyond). Formulas and sources: docs page
*Theory*, section 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_int
from ..features import Positive
from ._closed_form import (
    _REGISTRY,
    CLOSED_FORM_PROJECTIONS,
    _exp,
    _log_relative,
    _m_array,
    _pair_iv,
    _plan,
    _registered_relative,
    register_mse_formula,
)
from ._prf_parts import _parts

__all__ = [
    "mse",
    "log_mse",
    "bias",
    "relative_mse",
    "performer_orthogonal_bound",
    "CLOSED_FORM_PROJECTIONS",
    "register_mse_formula",
]


def _log_sm_and_relative(
    fm: Any, x: Any, y: Any, n_features: Any, owner: str
) -> tuple[np.ndarray, np.ndarray]:
    """:math:`x^\top y` and :math:`\\log(\\mathrm{MSE}/\\mathrm{SM}^2)` of each pair, for a built-in or registered map."""
    if type(fm) in _REGISTRY:
        X, Y, d = _pair_iv(x, y, owner)
        return np.sum(X * Y, axis=-1), _registered_relative(fm, X, Y, d, n_features, owner)
    plan = _plan(fm, owner)
    X, Y, d = _pair_iv(x, y, owner)
    m = _m_array(n_features, plan, owner)
    parts = _parts(plan, X, Y, d)
    return parts.log_sm, _log_relative(parts, m, d, plan.projection)


def log_mse(fm: Any, x: Any, y: Any, *, n_features: Any = None) -> np.ndarray:
    r"""Natural log of the exact MSE of ``draw.pairwise`` for each pair, overflow-free.

    Parameters
    ----------
    fm : Trig, Positive, Hyperbolic, CEXP, HCEXP, OPRF, GERF, SADERF or a registered map
        Feature-map specification with a concrete ``A`` (CEXP/HCEXP: array or
        ``"identity"``; OPRF/GERF/SADERF: a float, SADERF also ``psi``) and ``projection`` in
        ``{"iid", "orthogonal", "orthogonal-fixed", "simplex"}``.
    x, y : array_like of shape (..., d)
        Paired inputs; leading axes broadcast.
    n_features : int or array_like of int, optional
        Feature counts ``m`` to evaluate (broadcast against the pair shape);
        defaults to ``fm.n_features``.

    Returns
    -------
    ndarray of shape broadcast(x.shape[:-1], y.shape[:-1], n_features.shape)
        :math:`\log\mathrm{MSE}`; ``-inf`` where the MSE is exactly 0 (e.g. PRF at
        :math:`x=-y`), ``+inf`` for OPRF with :math:`A \ge 1/8` and :math:`\chi(d)`-normed
        directions (infinite variance; with fixed norms every moment is finite).

    Raises
    ------
    InvalidParameterError
        Deterministic maps (see :func:`relative_truncation_error`), ``projection`` "qmc" /
        "structured" (no closed form), unresolved rule names for ``A``, bad ``n_features``.
    ShapeError, NonFiniteInputError
        Mismatched ``d`` or non-broadcastable pairs; NaN/inf inputs.

    Notes
    -----
    :math:`\log\mathrm{MSE} = 2x^\top y + \log\big(\rho_V/m + (K/m^2)\rho_C + \rho_B^2\big)` with the
    relative variance :math:`\rho_V`, pair covariance :math:`\rho_C` and bias :math:`\rho_B`
    (Choromanski et al. (ICLR 2021), Lemma 2; Blackwelder (2024), Lemma 3.1; Likhosherstov et al.
    (NeurIPS 2022); the orthogonal and fixed-norm forms derived in docs page *Theory*, section 1):

    * iid, PRF/CEXP: :math:`\rho_V = e^{\|z\|^2}-1`; hyperbolic/HCEXP :math:`2\sinh^2(\|z\|^2/2)`;
      trig :math:`2\sinh^2(\|\Delta\|^2/2)`; OPRF :math:`\big(\tfrac{(1-4A)^2}{1-8A}\big)^{d/2}e^{\|z\|^2/(1-8A)}-1`,
      with :math:`z = Ax + A^{-\top}y` for CEXP/HCEXP.
    * ``"orthogonal"`` (:math:`\chi(d)` norms): :math:`\rho_C = e^{-\|z\|^2}{}_1F_1(d;\tfrac d2;\tfrac{\|z\|^2}2)-1`
      for every exponential map (A-independent for OPRF), trig
      :math:`e^{\|\Delta\|^2}{}_1F_1(d;\tfrac d2;-\tfrac{\|\Delta\|^2}2)-1`; :math:`K=\sum_b k_b(k_b-1)`
      over the blocks of :func:`rfkit.projections.block_sizes` (exact for :math:`m>d`).
    * ``"simplex"`` (simplex random features, Reid et al. ICML 2023; :math:`\chi(d)` norms): the pair
      moment is :math:`\mathbb E_S\,{}_1F_1(d;\tfrac d2;(1+cS)\tfrac{\|z\|^2}2)`, :math:`c=-1/(d-1)`,
      :math:`S=\sin\psi`, :math:`\psi\propto\sin^{d-1}` on :math:`[0,\pi]` (hyperbolic maps and trig average
      :math:`\pm c`; trig with :math:`-\|\Delta\|^2`), evaluated by quadrature
      (:mod:`rfkit.theory._simplex`; docs page *Theory*, section 1a). Same :math:`K` as ``"orthogonal"``.
    * hyperbolic OPRF (``OPRF(hyperbolic=True)``): :math:`\rho_V = \tfrac12K(A)(e^{-\|z\|^2} +
      e^{\|z\|^2/(1-8A)}) - 1`, :math:`K(A) = ((1-4A)^2/(1-8A))^{d/2}` (derived, docs page *Theory*, section 1a).
      GERF and SADERF are registered from :mod:`rfkit.theory._gerf`.
    * ``"orthogonal-fixed"`` (norms :math:`\sqrt d`): moments from
      :math:`{}_0F_1(;\tfrac d2;\cdot)` (docs page *Theory*, section 1) and bias
      :math:`\rho_B = \mathrm{SMREG}/\mathrm{SM} - 1` (Choromanski et al. (ICLR 2021), Thm 1).

    Domain: any finite inputs; positive-series evaluation keeps relative error at
    a few :math:`10^{-13}` for :math:`\|z\|^2` up to ~1000 (series length grows like
    :math:`\|z\|^2`). The trig fixed-norm form loses relative accuracy near zeros of
    the Bessel function and for :math:`d\|\Delta\|^2 \ll 1` (cancellation in
    :math:`\mu_{sq}-\mu_1^2`).
    """
    log_sm, rel = _log_sm_and_relative(fm, x, y, n_features, "rfkit.theory.log_mse")
    return 2.0 * log_sm + rel


def relative_mse(fm: Any, x: Any, y: Any, *, n_features: Any = None) -> np.ndarray:
    r"""Relative MSE :math:`\mathrm{MSE}/\mathrm{SM}^2` for each pair; see :func:`log_mse`.

    Parameters
    ----------
    fm : Trig, Positive, Hyperbolic, CEXP, HCEXP, OPRF, GERF, SADERF or a registered map
        Feature-map specification, as in :func:`log_mse`.
    x, y : array_like of shape (..., d)
        Paired inputs; leading axes broadcast.
    n_features : int or array_like of int, optional
        Feature counts ``m`` to evaluate (broadcast against the pair shape);
        defaults to ``fm.n_features``.

    Returns
    -------
    ndarray of shape broadcast(x.shape[:-1], y.shape[:-1], n_features.shape)
        :math:`\mathrm{MSE}/\mathrm{SM}^2` of each pair and feature count.

    Raises
    ------
    NumericalOverflowError
        If it exceeds the float range; use :func:`log_mse`.
    """
    _, rel = _log_sm_and_relative(fm, x, y, n_features, "rfkit.theory.relative_mse")
    return _exp(rel, "relative_mse")


def mse(fm: Any, x: Any, y: Any, *, n_features: Any = None) -> np.ndarray:
    r"""Exact MSE :math:`\mathbb E_\omega[(\widehat{\mathrm{SM}}(x,y)-e^{x^\top y})^2]` of ``draw.pairwise``.

    Same parameters, formulas, sources and domain as :func:`log_mse`, of which
    this is the exponential. For ``projection="orthogonal-fixed"`` the estimator is
    biased and the MSE is variance + bias².

    Parameters
    ----------
    fm : Trig, Positive, Hyperbolic, CEXP, HCEXP, OPRF, GERF, SADERF or a registered map
        Feature-map specification, as in :func:`log_mse`.
    x, y : array_like of shape (..., d)
        Paired inputs; leading axes broadcast.
    n_features : int or array_like of int, optional
        Feature counts ``m`` to evaluate (broadcast against the pair shape);
        defaults to ``fm.n_features``.

    Returns
    -------
    ndarray of shape broadcast(x.shape[:-1], y.shape[:-1], n_features.shape)
        The MSE of each pair and feature count.

    Raises
    ------
    NumericalOverflowError
        If the MSE exceeds the float range; use :func:`log_mse`.

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> x = np.array([0.3, -0.1, 0.2, 0.0]); y = np.array([0.1, 0.4, -0.2, 0.3])
    >>> float(rk.theory.mse(rk.features.Positive(16), x, y)) > 0
    True
    """
    return _exp(log_mse(fm, x, y, n_features=n_features), "mse")


def bias(fm: Any, x: Any, y: Any) -> np.ndarray:
    r"""Exact bias :math:`\mathbb E_\omega\widehat{\mathrm{SM}}(x,y) - \mathrm{SM}(x,y)` for each pair.

    Zero for ``projection`` "iid" and "orthogonal" (all estimators are unbiased:
    :math:`\omega_i\sim\mathcal N(0,I_d)` marginally). For ``"orthogonal-fixed"``
    (norms :math:`\sqrt d`): :math:`\mathrm{SMREG}(x,y)-\mathrm{SM}(x,y)` with
    :math:`\mathrm{SMREG}=\Lambda\,{}_0F_1(;\tfrac d2;\tfrac{d\|z\|^2}4)\le\mathrm{SM}`
    for the exponential maps (Choromanski et al. (ICLR 2021), Thm 1; docs page *Theory*, section 1; OPRF: with the extra factor
    :math:`(1-4A)^{d/2}e^{2Ad}` and :math:`\|z\|^2(1-4A)`), and
    :math:`e^{(\|x\|^2+\|y\|^2)/2}{}_0F_1(;\tfrac d2;-\tfrac{d\|\Delta\|^2}4)-\mathrm{SM}` for trig.

    Parameters
    ----------
    fm : Trig, Positive, Hyperbolic, CEXP, HCEXP, OPRF, GERF, SADERF or a registered map
        Feature-map specification, as in :func:`log_mse`.
    x, y : array_like of shape (..., d)
        Paired inputs; leading axes broadcast.

    Returns
    -------
    ndarray of shape broadcast(x.shape[:-1], y.shape[:-1])
        The bias of each pair (zeros for unbiased settings).
    """
    owner = "rfkit.theory.bias"
    if type(fm) in _REGISTRY:
        X, Y, d = _pair_iv(x, y, owner)
        bias_fn = _REGISTRY[type(fm)][1]
        if bias_fn is None:
            return np.zeros(np.broadcast_shapes(X.shape[:-1], Y.shape[:-1]))
        s, lg = bias_fn(fm, X, Y, d)
        return s * _exp(lg + np.sum(X * Y, axis=-1), "bias")
    plan = _plan(fm, owner)
    X, Y, d = _pair_iv(x, y, owner)
    parts = _parts(plan, X, Y, d)
    if parts.bias is None:
        return np.zeros(np.broadcast_shapes(X.shape[:-1], Y.shape[:-1]))
    s, lg = parts.bias
    return s * _exp(lg + parts.log_sm, "bias")


def performer_orthogonal_bound(x: Any, y: Any, n_features: int) -> np.ndarray:
    r"""Choromanski et al. (ICLR 2021), Thm 2: upper bound on the MSE of orthogonal positive features (FAVOR+).

    .. math::

        \mathrm{MSE}(\widehat{\mathrm{SM}}^{\rm ort+}_m) \le \mathrm{MSE}(\widehat{\mathrm{SM}}^{+}_m)
        - \frac{2(m-1)}{m(d+2)}\Big(\mathrm{SM}(x,y) - e^{-\frac{\|x\|^2+\|y\|^2}2}\Big)^2

    Source: Choromanski et al. (ICLR 2021), Thm 2. A *bound*, not the
    exact value (use :func:`mse` with ``Positive(m, projection="orthogonal")``); it is
    tight to leading order :math:`\|x+y\|^4`.

    Domain: one orthogonal block, :math:`1 \le m \le d` (the theorem says nothing for
    :math:`m > d`).

    Parameters
    ----------
    x, y : array_like of shape (..., d)
        Paired inputs; leading axes broadcast.
    n_features : int
        The number of features ``m``, in ``[1, d]``.

    Returns
    -------
    ndarray of shape broadcast(x.shape[:-1], y.shape[:-1])
        The bound on the MSE of each pair.

    Raises
    ------
    InvalidParameterError
        If ``n_features`` is not an int in ``[1, d]``.
    """
    owner = "rfkit.theory.performer_orthogonal_bound"
    X, Y, d = _pair_iv(x, y, owner)
    m = check_int(n_features, "n_features", owner, low=1, high=d)
    iid = mse(Positive(m), X, Y)
    sm = _exp(np.sum(X * Y, -1), "performer_orthogonal_bound")
    lam = np.exp(-0.5 * (np.sum(X * X, -1) + np.sum(Y * Y, -1)))
    return iid - 2.0 * (m - 1) / (m * (d + 2.0)) * (sm - lam) ** 2
