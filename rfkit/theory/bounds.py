r"""Max-relative-error bounds and their probabilistic (concentration) versions.

The quantity bounded is the *root-mean-square* relative error over a set
:math:`C` of inputs (as defined by Choromanski et al. (ICLR 2022) and used by
Blackwelder (2024)),

.. math:: \epsilon_C(\widehat{\mathrm{SM}}) = \sup_{x,y\in C}\frac{\sqrt{\mathrm{MSE}(\widehat{\mathrm{SM}}(x,y))}}{\mathrm{SM}(x,y)},

an expectation over the random features, **not** a bound on realised errors
(Blackwelder (2024), Theorem 3.3, says "largest observed relative error": an imprecision,
corrected here; see docs page *Theory*, section 5).

* :func:`max_relative_error` - :math:`W(r)/\sqrt{2m}` with the corrected
  :math:`W(r) = e^{2r^2}(1-e^{-4r^2}) = 2\sinh(2r^2)` (the printed Lemma 3.2 of
  Blackwelder (2024) has :math:`e^{2r^2}(1-e^{4r^2})`, which is negative), and variants for
  every map with a closed-form relative MSE: ``kind`` in ``"hcexp"``, ``"cexp"``,
  ``"positive"``, ``"hyperbolic"``, ``"trig"``, with ``projection="orthogonal"`` for all but trig.
* :func:`chi2_concentration` - Blackwelder (2024), Theorem 3.3, restated precisely.
* :func:`hotelling_concentration` - the same with estimated means and covariances
  (Hotelling :math:`T^2 \to F` quantile, union bound).

Every function returns a frozen dataclass with ``.bound``, all intermediates and ``vacuous``:
a bound ``>= 1`` says nothing (the estimate 0 has relative error 1 at every pair) and warns
with :class:`~rfkit.exceptions.VacuousBoundWarning`. The formulas and their derivations: docs
page *Theory*, section 4.
"""

from __future__ import annotations

from ._concentration import ConcentrationBound, chi2_concentration, hotelling_concentration
from ._max_error import MaxRelativeErrorBound, W, max_relative_error

__all__ = [
    "W",
    "max_relative_error",
    "chi2_concentration",
    "hotelling_concentration",
    "MaxRelativeErrorBound",
    "ConcentrationBound",
]
