"""The result object returned by every randomized attention estimator."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._backend import get_backend
from .._validation import exp_checked
from ..features._repr import array_summary, map_repr

__all__ = ["AttentionResult", "QueryCost"]


def _is_array(v: Any) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype") and len(v.shape) > 0


def _short(v: Any) -> str:
    """A value in a result's repr: arrays by shape and dtype, specs by their non-default parameters."""
    if _is_array(v):
        return array_summary(v)
    if isinstance(v, tuple) and v:
        return f"({len(v)} x {type(v[0]).__name__})"  # one draw per head
    if isinstance(v, QueryCost):  # inside a result: the four counts share one shape
        return f"QueryCost(4 counts of shape {tuple(int(n) for n in v.exact_logits.shape)}: result.cost)"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _spec_repr(v)
    return repr(v)


def _is_default(f: dataclasses.Field[Any], v: Any) -> bool:
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        return False
    if _is_array(v) or _is_array(default):
        return False
    try:
        return bool(v == default)
    except Exception:  # noqa: BLE001 - a value that cannot be compared is shown
        return False


def _spec_repr(spec: Any) -> str:
    """An estimator by the parameters that differ from their defaults (a map as :func:`map_repr`)."""
    parts = []
    for f in dataclasses.fields(spec):
        v = getattr(spec, f.name)
        if not f.repr or _is_default(f, v):
            continue
        shown = map_repr(v) if dataclasses.is_dataclass(v) else _short(v)
        parts.append(f"{f.name}={shown}")
    return f"{type(spec).__name__}({', '.join(parts)})"


@dataclasses.dataclass(frozen=True, eq=False)
class QueryCost:
    r"""What one query of a support + remainder estimator (:class:`~rfkit.attention.Hybrid`) costs.

    Every attribute is an array of shape (..., n) (the batch shape and the queries; float64, in
    the namespace and on the device of the inputs), counted per query as the algorithm needs
    them, not as rfkit's reference implementation happens to compute them. With an (ε, δ) budget
    (``Hybrid(epsilon=...)``) the count varies by draw: the arrays are (T, ..., n) with ``n_draws=T``.

    Parameters
    ----------
    exact_logits : ndarray
        Exact logits :math:`q_n^\top k_j`: the support :math:`|S(n)|`, the sampled keys
        :math:`\min(s, N_R)` and, for the ``"oracle"`` scorer, every key the query may see
        :math:`|J(n)|` (its scores are the exact logits).
    random_features : ndarray
        Random features of the query and its keys' sums: the map's ``n_features`` :math:`m`
        for the ``"features"`` remainder, else 0.
    values_read : ndarray
        Value rows read: :math:`|S(n)| + \min(s, N_R)`.
    scoring_products : ndarray
        Dot products of length d a cheap scorer spends per query, amortised over the queries
        (``"proxy"``: each key against one summary per refresh period; ``"quest"``: the query
        against two corners per block; ``"lsh"``: the hash projections of the query and of the
        keys); 0 for ``"oracle"`` (counted in ``exact_logits``) and without a scorer.
    """

    exact_logits: Any
    random_features: Any
    values_read: Any
    scoring_products: Any

    def __repr__(self) -> str:
        """The four counts by shape and dtype, no values."""
        shown = ", ".join(f"{f.name}={_short(getattr(self, f.name))}" for f in dataclasses.fields(self))
        return f"QueryCost({shown})"


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionResult:
    r"""Output of a randomized attention estimator with its diagnostics.

    Ratio estimators (RFA, SNIS, LARA) estimate the numerator
    :math:`\hat N_n \approx Z_n\,\mathrm{Attn}(q_n)` and the normaliser
    :math:`\hat D_n \approx Z_n = \sum_m e^{q_n^\top k_m}` and return
    :math:`\hat N_n / \hat D_n`. Both are kept in the scaled form used across
    rfkit: :math:`\hat N_n = e^{s_n}\,\text{numerator\_values}_n` and
    :math:`\hat D_n = e^{s_n}\,\text{denominator\_values}_n` with
    :math:`s_n` = ``log_scale``, so they never overflow.

    Every array has the namespace, device and dtype of the estimator's inputs (NumPy,
    PyTorch, CuPy or ``array_api_strict``).

    Parameters
    ----------
    output : ndarray of shape (..., n, dv)
        The attention estimate. Rows whose estimated normaliser is <= 0 are NaN
        (never clipped) and counted in ``n_nonpositive``.
    method : str
        ``"RFA"``, ``"RA"``, ``"SNIS"`` or ``"LARA"``.
    estimator : object
        The estimator specification that produced the result.
    feature_map : FeatureMap or None
        RFA: the feature map actually used (data-dependent parameters resolved).
    draw : FeatureDraw or tuple of FeatureDraw or None
        RFA: the draw (one per head when draws are not shared across heads).
    log_scale : ndarray of shape (..., n) or None
        Common log scale :math:`s_n` of numerator and denominator (ratio estimators).
    numerator_values : ndarray of shape (..., n, dv) or None
    denominator_values : ndarray of shape (..., n) or None
    n_nonpositive : int
        Number of query rows with estimated normaliser <= 0 (output NaN there).
    ess : ndarray of shape (..., n) or None
        SNIS/LARA: effective sample size :math:`(\sum_s|w_{ns}|)^2/\sum_s w_{ns}^2`
        of the importance weights of each query (between 1 and the number of samples).
    n_floored : int or None
        LARA with ``weights="optimal"``: how many weights :math:`\alpha_{nc}(\omega)`
        were raised to ``alpha_floor``.
    n_negative_alpha : int or None
        LARA ``"optimal"``: how many raw weights were negative.
    omega : ndarray or None
        SNIS/LARA: the samples :math:`\omega_s`, shape (S, d) when shared by all
        slices, else (..., S, d).
    proposal_means : ndarray or None
        SNIS/LARA: proposal means, shape (..., C, d).
    mcse : ndarray of shape (..., n, dv) or None
        RA: Monte Carlo standard error of each output entry (sample standard
        deviation of :math:`f_n(\omega_s)` over :math:`\sqrt S`; NaN for S = 1).
    cost : QueryCost or None
        Hybrid: per-query counts of exact logits, random features, values read and scoring
        products (:class:`QueryCost`).
    """

    output: Any
    method: str
    estimator: Any = None
    feature_map: Any = None
    draw: Any = None
    log_scale: Any = None
    numerator_values: Any = None
    denominator_values: Any = None
    n_nonpositive: int = 0
    ess: Any = None
    n_floored: int | None = None
    n_negative_alpha: int | None = None
    omega: Any = None
    proposal_means: Any = None
    mcse: Any = None
    cost: QueryCost | None = None

    def __repr__(self) -> str:
        """The method, the output's shape and dtype, the estimator and the diagnostics present.

        Arrays are named by shape and dtype (:func:`~rfkit.features._repr.array_summary`), never
        printed; the estimator by its non-default parameters; fields that are None are left
        out, and so is ``feature_map`` when ``draw`` (which names its map) is there.
        """
        parts = [f"method={self.method!r}", f"output={_short(self.output)}"]
        for f in dataclasses.fields(self):
            if f.name in ("method", "output"):
                continue
            v = getattr(self, f.name)
            if v is None or (f.name == "feature_map" and self.draw is not None):
                continue
            parts.append(f"{f.name}={_short(v)}")
        return f"AttentionResult({', '.join(parts)})"

    def _need_ratio(self, what: str) -> None:
        if self.log_scale is None or self.denominator_values is None:
            raise AttributeError(f"{self.method} does not estimate a normaliser (`{what}` is undefined).")

    @property
    def normalizer_sign(self) -> Any:
        """Sign of the estimated normaliser :math:`\\hat D_n` (..., n)."""
        self._need_ratio("normalizer_sign")
        return get_backend(("d", self.denominator_values)).xp.sign(self.denominator_values)

    @property
    def log_normalizer(self) -> Any:
        r""":math:`\log|\hat D_n|` (..., n); finite even where :math:`\hat D_n` overflows."""
        self._need_ratio("log_normalizer")
        xp = get_backend(("d", self.denominator_values)).xp
        with np.errstate(divide="ignore"):
            return self.log_scale + xp.log(xp.abs(self.denominator_values))

    @property
    def normalizer(self) -> Any:
        r"""Estimated normaliser :math:`\hat D_n \approx Z_n` (..., n).

        Raises
        ------
        NumericalOverflowError
            If it exceeds the float range (use ``log_normalizer`` and ``normalizer_sign``).
        """
        self._need_ratio("normalizer")
        assert self.log_scale is not None and self.denominator_values is not None
        return self.denominator_values * exp_checked(
            self.log_scale, "AttentionResult.normalizer", "`log_normalizer`"
        )

    @property
    def numerator(self) -> Any:
        r"""Estimated numerator :math:`\hat N_n \approx Z_n\,\mathrm{Attn}(q_n)` (..., n, dv).

        Defined also in rows whose normaliser is <= 0 (where ``output`` is NaN).
        """
        self._need_ratio("numerator")
        scale = exp_checked(self.log_scale, "AttentionResult.numerator", "`log_scale` and `numerator_values`")  # type: ignore[arg-type]
        return self.numerator_values * scale[..., None]  # type: ignore[operator]
