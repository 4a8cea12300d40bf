"""Random and deterministic feature maps for the softmax kernel :math:`\\exp(x^\\top y)`.

Specifications are frozen dataclasses; ``spec.sample(dim, rng=...)`` draws the
random part and returns a draw with ``queries``, ``keys``, ``kernel``,
``log_kernel``, ``slog_kernel``, ``pairwise`` and ``log_pairwise``. Every map
returns the scaled representation :class:`Features` ``(values, log_scale)``.

========================  ==================================================  =========
map                       estimator                                            columns
========================  ==================================================  =========
:class:`Trig`             sin/cos (Performer eq. 5)                            2m
:class:`Positive`         PRF :math:`\\phi^+` (FAVOR+ when orthogonal)          m
:class:`Hyperbolic`       :math:`\\phi^{++}` (cosh)                             2m
:class:`CEXP`             PRF of :math:`Ax`, :math:`A^{-T}y`                   m
:class:`HCEXP`            hyperbolic PRF of :math:`Ax`, :math:`A^{-T}y`        2m
:class:`OPRF`             optimal PRF (FAVOR++); ``hyperbolic=True``: +-w     m (2m)
:class:`GERF`             generalised exponential RF, ``s=1`` / ``s=-1``      m / 2m
:class:`SADERF`           OPRF of Psi x, Psi^-1 y, diagonal Psi (FAVOR#)      m
:class:`Taylor`           deterministic Taylor truncation                      C(d+n, n)
:class:`Limit`            deterministic :math:`(1+x^\\top y/n)^n`               C(d+n, n)
:class:`ADERF`            asymmetric dense-exp. RFs: OPRF of Gx, G^-T y        m
:class:`SDERF`            symmetric dense-exponential RFs (matrix A)           m
:class:`RandomMaclaurin`  random Maclaurin (Kar & Karnick), signed             m
:class:`TensorSketch`     TensorSketch of the Taylor truncation, signed        1 + n D
========================  ==================================================  =========

A map of your own subclasses :class:`FeatureMap` (``feature_dim`` and the hook
``sample_one(dim, *, rng)``) with a :class:`FeatureDraw` implementing ``_log_features``;
:func:`check_feature_map` checks it, :class:`StackedDraw` batches its draws (docs page
"Bring your own estimator"). What a draw exposes to attention code (``features``,
``log_features``, ``param_on``, ``exp_form`` returning an :class:`ExpForm`) is documented on
:class:`FeatureDraw`. Draws are data: ``draw.save(path)`` writes one (arrays in an ``.npz`` file,
JSON metadata, no pickle) and :func:`load_draw` reads it back bit for bit; ``np.asarray`` of
:class:`Features` is the dense feature matrix.
"""

from ._adaptive import A_RULES, adaptive_A, oprf_optimal_A
from ._base import FeatureMap
from ._derf import ADERF, SDERF, sderf_eig
from ._derf_optimal import aderf_optimal, sderf_optimal_A
from ._deterministic import Limit, Taylor, slog_taylor_polynomial, taylor_polynomial
from ._draw import ExpForm, FeatureDraw, Features
from ._exp import CEXP, HCEXP, OPRF, Hyperbolic, Positive
from ._gerf import GERF, SADERF, saderf_parameters
from ._load import load_draw
from ._optimal import gerf_optimal_A
from ._pairs import FIT_PAIRS, PairMoments, fit_to_pairs, pair_moments, pair_values
from ._protocol import check_feature_map
from ._sketch import RandomMaclaurin, TensorSketch
from ._stacked import StackedDraw
from ._trig import Trig

__all__ = [
    "Features",
    "FeatureMap",
    "FeatureDraw",
    "ExpForm",
    "StackedDraw",
    "check_feature_map",
    "load_draw",
    "Trig",
    "Positive",
    "Hyperbolic",
    "CEXP",
    "HCEXP",
    "OPRF",
    "GERF",
    "SADERF",
    "Taylor",
    "Limit",
    "ADERF",
    "SDERF",
    "RandomMaclaurin",
    "TensorSketch",
    "aderf_optimal",
    "sderf_optimal_A",
    "sderf_eig",
    "adaptive_A",
    "oprf_optimal_A",
    "gerf_optimal_A",
    "saderf_parameters",
    "A_RULES",
    "FIT_PAIRS",
    "PairMoments",
    "fit_to_pairs",
    "pair_moments",
    "pair_values",
    "taylor_polynomial",
    "slog_taylor_polynomial",
]
