r"""Closed-form theory for rfkit's estimators: exact MSEs, bounds, conformance checks.

Formulas, sources and derivations: ``docs/theory.md`` and THEORY.md. Nothing here
samples except :func:`check` (which calls the estimators' own draws).

Kernel estimators (THEORY.md §1-§4, §6)
    :func:`mse`, :func:`log_mse`, :func:`relative_mse`, :func:`bias`,
    :func:`performer_orthogonal_bound`, :func:`expected_mse`, :func:`check`.
    ADERF, SDERF, RandomMaclaurin and TensorSketch plug into :func:`mse` and friends
    through :func:`register_closed_form` (docs/theory.md §7-§8).
Deterministic maps (§7)
    :func:`truncated_kernel`, :func:`relative_truncation_error`,
    :func:`truncation_error_bound`, :func:`deterministic_feature_dim`,
    :func:`negative_region`, :func:`taylor_real_root`.
Ratio estimators (§9, §10)
    :func:`rfa_delta_method`, :func:`ratio_bias_identity`, :func:`ra_mse`,
    :func:`attention_error_bound`.
Bounds (§5)
    :mod:`rfkit.theory.bounds`.
"""

from . import (
    _deterministic,
    _gerf,  # noqa: F401  (registers the closed forms of GERF and SADERF)
    bounds,
)
from ._check import CheckResult, check
from ._closed_form import CLOSED_FORM_PROJECTIONS, register_closed_form
from ._deterministic import *  # noqa: F403  (the names of its __all__)
from ._expected import EXPECTED_MSE_THRESHOLDS, expected_mse
from ._kernel_mse import bias, log_mse, mse, performer_orthogonal_bound, relative_mse
from ._ratio import RFADeltaMethod, attention_error_bound, ra_mse, ratio_bias_identity, rfa_delta_method

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
    "register_closed_form",
    "check",
    "CheckResult",
    "rfa_delta_method",
    "RFADeltaMethod",
    "ratio_bias_identity",
    "ra_mse",
    "attention_error_bound",
]
__all__ += _deterministic.__all__

# Imported for their side effect: they register the closed forms of ADERF, SDERF (DERF family),
# RandomMaclaurin and TensorSketch with register_closed_form (issue 12).
from . import _derf_mse, _sketch_mse  # noqa: E402, F401
