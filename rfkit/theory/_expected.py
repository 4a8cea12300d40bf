r"""Input-averaged kernel MSE for Gaussian inputs :math:`x, y \stackrel{iid}\sim \mathcal N(0, \sigma^2 I_d)`.

Derived here (docs page *Theory*, section 1, "Input-averaged MSE").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_int, check_real
from ..exceptions import InvalidParameterError
from ..features import Hyperbolic, Positive, Trig

__all__ = ["expected_mse", "EXPECTED_MSE_THRESHOLDS"]

#: sigma^2 beyond which E_{x,y}[MSE] is infinite.
EXPECTED_MSE_THRESHOLDS = {"Positive": 1.0 / 6.0, "Hyperbolic": 1.0 / 6.0, "Trig": 0.5}


def expected_mse(fm: Any, sigma2: float, dim: int) -> float:
    r"""Expected MSE :math:`\mathbb E_{x,y}[\mathrm{MSE}(x, y)]` for :math:`x, y \stackrel{iid}\sim\mathcal N(0,\sigma^2I_d)`.

    .. math::

        \mathbb E\,\mathrm{MSE}^+ &= \tfrac1m\big[((1-6\sigma^2)(1+2\sigma^2))^{-d/2} - (1-4\sigma^4)^{-d/2}\big],\\
        \mathbb E\,\mathrm{MSE}^{++} &= \tfrac1{2m}\big[((1-6\sigma^2)(1+2\sigma^2))^{-d/2}
            - 2(1-4\sigma^4)^{-d/2} + (1+2\sigma^2)^{-d}\big],\\
        \mathbb E\,\mathrm{MSE}^{\rm trig} &= \tfrac1{2m}\big[(1-2\sigma^2)^{-d} - 2(1-4\sigma^4)^{-d/2}
            + ((1-2\sigma^2)(1+6\sigma^2))^{-d/2}\big].

    Source: derived here (docs page *Theory*, section 1) from the MSEs of Choromanski et al.
    (ICLR 2021), Lemma 2, and
    :math:`\mathbb E e^{u^\top Mu} = \det(I - 2\sigma^2M)^{-1/2}`; iid directions only.

    Parameters
    ----------
    fm : Positive, Hyperbolic or Trig with ``projection="iid"``
    sigma2 : float
        Input variance :math:`\sigma^2 > 0`.
    dim : int
        Dimension ``d``.

    Returns
    -------
    float

    Raises
    ------
    InvalidParameterError
        Other maps or projections, or :math:`\sigma^2` at/above the domain threshold
        (1/6 for Positive and Hyperbolic, 1/2 for Trig), where the expectation is infinite
        (heavy tails).
    """
    owner = "rfkit.theory.expected_mse"
    if not isinstance(fm, (Positive, Hyperbolic, Trig)) or fm.projection != "iid":
        raise InvalidParameterError(
            f"{owner}: closed form only for Positive, Hyperbolic and Trig with projection='iid'; got {fm!r}."
        )
    name = type(fm).__name__
    thr = EXPECTED_MSE_THRESHOLDS[name]
    s2 = check_real(sigma2, "sigma2", owner, low=0.0, closed="left")
    if s2 >= thr:
        raise InvalidParameterError(
            f"The `sigma2` parameter of {owner} must be < {thr:.6g} for {name}: the expected MSE is "
            f"infinite there (heavy tails). Got {s2!r} instead."
        )
    d = check_int(dim, "dim", owner, low=1)
    m = fm.n_features
    s4 = s2 * s2
    if name == "Trig":
        a = np.exp(-d * np.log1p(-2 * s2))
        b = np.exp(-0.5 * d * np.log1p(-4 * s4))
        c = np.exp(-0.5 * d * (np.log1p(-2 * s2) + np.log1p(6 * s2)))
        return float((a - 2 * b + c) / (2 * m))
    big = np.exp(-0.5 * d * (np.log1p(-6 * s2) + np.log1p(2 * s2)))
    mid = np.exp(-0.5 * d * np.log1p(-4 * s4))
    if name == "Positive":
        return float((big - mid) / m)
    return float((big - 2 * mid + np.exp(-d * np.log1p(2 * s2))) / (2 * m))
