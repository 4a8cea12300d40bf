r"""Closed-form theory for rfkit's estimators: exact MSEs, bounds, conformance checks.

Formulas, sources and derivations: docs page *Theory*; the papers are listed on the docs page
*References*. Nothing here samples except :func:`check` (which calls the estimators' own draws).

Kernel estimators (docs page *Theory*, sections 1, 1a-1c)
    :func:`mse`, :func:`log_mse`, :func:`relative_mse`, :func:`bias`,
    :func:`performer_orthogonal_bound`, :func:`expected_mse`, :func:`check`.
    GERF, SADERF, ADERF, SDERF, RandomMaclaurin and TensorSketch plug into :func:`mse` and
    friends through :func:`register_mse_formula`.
Deterministic maps (section 2)
    :func:`truncated_kernel`, :func:`relative_truncation_error`,
    :func:`truncation_error_bound`, :func:`deterministic_feature_dim`,
    :func:`negative_region`, :func:`taylor_real_root`.
Ratio estimators (section 3)
    :func:`rfa_delta_method`, :func:`ratio_bias_identity`, :func:`ra_mse`,
    :func:`attention_error_bound`.
Sampled remainders of sparse attention (section "Sampled remainders")
    :func:`sampled_remainder_moments` (exact finite-population variances, delta-method output).
Bounds (section 4)
    :mod:`rfkit.theory.bounds`.
"""

from . import (
    _derf_mse,  # noqa: F401  (registers the closed forms of ADERF and SDERF)
    _deterministic,
    _gerf,  # noqa: F401  (registers the closed forms of GERF and SADERF)
    _sketch_mse,  # noqa: F401  (registers the closed forms of RandomMaclaurin and TensorSketch)
    bounds,
)
from ._check import CheckResult, check
from ._closed_form import CLOSED_FORM_PROJECTIONS, register_mse_formula
from ._closed_form import register_closed_form as register_closed_form  # deprecated alias, not in __all__
from ._deterministic import *  # noqa: F403  (the names of its __all__)
from ._expected import EXPECTED_MSE_THRESHOLDS, expected_mse
from ._hybrid import HybridSplit, hybrid_budget_split, hybrid_delta_method
from ._kernel_mse import bias, log_mse, mse, performer_orthogonal_bound, relative_mse
from ._ratio import RFADeltaMethod, attention_error_bound, ra_mse, ratio_bias_identity, rfa_delta_method
from ._sampling import SampledRemainderMoments, sampled_remainder_moments

__all__ = [
    "bounds",
    "mse",
    "log_mse",
    "relative_mse",
    "bias",
    "performer_orthogonal_bound",
    "expected_mse",
    "EXPECTED_MSE_THRESHOLDS",
    "CLOSED_FORM_PROJECTIONS",
    "register_mse_formula",
    "check",
    "CheckResult",
    "rfa_delta_method",
    "RFADeltaMethod",
    "ratio_bias_identity",
    "ra_mse",
    "attention_error_bound",
]
__all__ += _deterministic.__all__
__all__ += ["hybrid_delta_method", "hybrid_budget_split", "HybridSplit"]
__all__ += ["sampled_remainder_moments", "SampledRemainderMoments"]
