r"""Conformance check: simulate a feature map's kernel estimate and compare it with its theory.

Any :class:`~rfkit.features.FeatureMap` can be checked, a map of your own included:

* the map has a method ``mse(x, y)`` (and optionally ``bias(x, y)``) returning the exact MSE
  (bias) of ``draw.pairwise`` per pair: the simulation is compared with it
  (``prediction="fm.mse"``);
* otherwise, where rfkit has a closed form (:func:`rfkit.theory.mse`, :func:`rfkit.theory.bias`;
  it dispatches on the class, so a subclass of an rfkit map inherits its formula: give a
  subclass that changes the estimator its own ``mse``), the simulation is compared with that
  (``prediction="rfkit.theory"``);
* otherwise the check is simulation only (``prediction="none"``): bias, variance and MSE with
  their Monte Carlo standard errors, and NaN predictions and z-scores.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._random import check_rng
from .._validation import check_int
from ..exceptions import InvalidParameterError, MonteCarloPrecisionWarning
from ..features import FeatureMap, check_feature_map
from ._closed_form import _REGISTRY, _exp, _pair_iv, _plan
from ._kernel_mse import bias, mse

__all__ = ["check", "CheckResult"]

_BUDGET = 1 << 22  # elements of the (trials, pairs, features) work array per chunk


@dataclasses.dataclass(frozen=True)
class CheckResult:
    r"""Predicted vs simulated MSE, bias and variance of a kernel estimator, one entry per pair.

    Every array has the pair shape ``broadcast(x.shape[:-1], y.shape[:-1])``.

    Parameters
    ----------
    estimator : str
        ``repr`` of the feature-map specification.
    n_trials : int
        Number ``T`` of independent draws.
    kernel : ndarray
        Target :math:`e^{x^\top y}`.
    predicted_mse, measured_mse, mse_mcse : ndarray
        The prediction (see ``prediction``; NaN without one), the Monte Carlo mean of the
        squared error, and its Monte Carlo standard error :math:`\mathrm{sd}(e^2)/\sqrt T`.
    z : ndarray
        ``(measured_mse - predicted_mse) / mse_mcse`` (NaN without a prediction).
    predicted_bias, measured_bias, bias_se, bias_z : ndarray
        Same for the bias; ``bias_se`` is :math:`\mathrm{sd}(e)/\sqrt T`. The predicted bias
        is rfkit's closed form, or the map's ``bias(x, y)`` method, else NaN.
    measured_variance, variance_mcse : ndarray
        Sample variance of the estimates (divisor ``T - 1``) and its standard error
        :math:`\sqrt{(\mu_4 - \sigma^4 (T-3)/(T-1))/T}` from the sample central moments.
    max_share : ndarray
        Largest single squared error divided by the sum of squared errors; large
        values (heavy tails, :math:`\|x+y\|^2` too large for ``T``) make the MCSE unreliable.
    prediction : {"rfkit.theory", "fm.mse", "none"}
        Where ``predicted_mse`` comes from: rfkit's closed form, the map's own ``mse(x, y)``
        method, or nowhere (simulation only).
    """

    estimator: str
    n_trials: int
    kernel: np.ndarray
    predicted_mse: np.ndarray
    measured_mse: np.ndarray
    mse_mcse: np.ndarray
    z: np.ndarray
    predicted_bias: np.ndarray
    measured_bias: np.ndarray
    bias_se: np.ndarray
    bias_z: np.ndarray
    max_share: np.ndarray
    measured_variance: np.ndarray | None = None
    variance_mcse: np.ndarray | None = None
    prediction: str = "rfkit.theory"

    def to_frame(self) -> Any:
        """One row per pair as a :class:`pandas.DataFrame` (pandas is imported here, lazily)."""
        import pandas as pd

        shape = self.kernel.shape
        idx = np.indices(shape).reshape(len(shape), -1).T if shape else np.zeros((1, 0), dtype=int)
        cols = {
            "pair": [tuple(int(i) for i in row) for row in idx],
            "estimator": self.estimator,
            "n_trials": self.n_trials,
            "prediction": self.prediction,
        }
        for name in (
            "kernel",
            "predicted_mse",
            "measured_mse",
            "mse_mcse",
            "z",
            "predicted_bias",
            "measured_bias",
            "bias_se",
            "bias_z",
            "measured_variance",
            "variance_mcse",
            "max_share",
        ):
            value = getattr(self, name)
            if value is not None:
                cols[name] = np.asarray(value).reshape(-1)
        return pd.DataFrame(cols)


class _Moments:
    """Chan et al. parallel mean/M2 accumulation over the trial axis."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.n = 0
        self.mean = np.zeros(shape)
        self.m2 = np.zeros(shape)

    def add(self, block: np.ndarray) -> None:
        nb = block.shape[0]
        mb = block.mean(axis=0)
        m2b = np.sum((block - mb) ** 2, axis=0)
        n = self.n + nb
        delta = mb - self.mean
        self.mean = self.mean + delta * (nb / n)
        self.m2 = self.m2 + m2b + delta**2 * (self.n * nb / n)
        self.n = n

    def se(self) -> np.ndarray:
        return np.sqrt(self.m2 / (self.n - 1) / self.n)


class _Central4:
    """Power sums of ``e - c`` (``c``: the first block's mean) up to order 4, for the variance's SE."""

    def __init__(self) -> None:
        self.n = 0
        self.c: np.ndarray | None = None
        self.s = [0.0, 0.0, 0.0, 0.0]

    def add(self, block: np.ndarray) -> None:
        if self.c is None:
            self.c = block.mean(axis=0)
        u = block - self.c
        u2 = u * u
        for k, v in enumerate((u, u2, u2 * u, u2 * u2)):
            self.s[k] = self.s[k] + v.sum(axis=0)
        self.n += block.shape[0]

    def variance(self) -> tuple[np.ndarray, np.ndarray]:
        """Sample variance (divisor n - 1) and its standard error."""
        n = self.n
        a1, a2, a3, a4 = (np.asarray(s) / n for s in self.s)
        m2 = np.maximum(a2 - a1**2, 0.0)
        m4 = np.maximum(a4 - 4.0 * a1 * a3 + 6.0 * a1**2 * a2 - 3.0 * a1**4, 0.0)
        var = m2 * n / (n - 1)
        se = np.sqrt(np.maximum(m4 - m2**2 * (n - 3) / (n - 1), 0.0) / n)
        return var, se


def _prediction(fm: Any, X: np.ndarray, Y: np.ndarray, shape: tuple[int, ...], owner: str) -> Any:
    """(source, predicted MSE, predicted bias): the map's own mse first, then rfkit's, else NaN."""
    nan = np.full(shape, np.nan)
    if not callable(getattr(fm, "mse", None)):
        try:
            if type(fm) not in _REGISTRY:
                _plan(fm, owner)
            return "rfkit.theory", mse(fm, X, Y), bias(fm, X, Y)
        except InvalidParameterError:
            return "none", nan, nan  # no closed form in rfkit.theory
    out = []
    for name in ("mse", "bias"):
        method = getattr(fm, name, None)
        if not callable(method):
            out.append(nan)
            continue
        try:
            value = np.asarray(method(X, Y), dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - the map's own code
            raise InvalidParameterError(
                f"{owner}: {type(fm).__qualname__}.{name}(x, y) raised {type(exc).__name__}: {exc}"
            ) from exc
        try:
            value = np.broadcast_to(value, shape)
        except ValueError:
            raise InvalidParameterError(
                f"{owner}: {type(fm).__qualname__}.{name}(x, y) must return one value per pair, shape {shape}. "
                f"Got shape {value.shape} instead."
            ) from None
        if name == "mse" and np.any(value < 0):
            raise InvalidParameterError(
                f"{owner}: {type(fm).__qualname__}.mse(x, y) must be >= 0. Got {float(np.min(value))!r} instead."
            )
        out.append(value)
    return "fm.mse", out[0], out[1]


#: Work limit of :func:`check`: trials x pairs x feature columns (about an hour of computing).
MAX_CHECK_ELEMENTS = 10**12


def check(
    fm: Any,
    x: Any,
    y: Any,
    *,
    n_trials: int = 10_000,
    rng: Any = None,
    chunk_trials: int | None = None,
    require_prediction: bool = False,
) -> CheckResult:
    r"""Simulate ``fm.sample(d, n_draws=T).pairwise(x, y)`` and compare with the theory.

    Parameters
    ----------
    fm : FeatureMap
        Any feature-map specification, a map of your own included (it is checked against the
        protocol first, :func:`rfkit.features.check_feature_map`). The prediction is the map's
        own ``mse(x, y)`` method (and ``bias(x, y)`` if it has one) where it has one, else
        rfkit's closed form where :func:`rfkit.theory.mse` has one (Trig, Positive, Hyperbolic,
        CEXP, HCEXP, OPRF, GERF, SADERF, ...; projections "iid", "orthogonal",
        "orthogonal-fixed", "simplex"), else none: the result then holds the simulation only
        (bias, variance, MSE with MCSE).
    x, y : array_like of shape (..., d)
        Paired inputs (leading axes broadcast).
    n_trials : int, default=10000
        Number of independent draws ``T`` (>= 2).
    rng : {None, int, SeedSequence, Generator}, optional
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system; pass an int for reproducible results.
    chunk_trials : int, optional
        Draws per vectorised ``pairwise`` call (default: sized to ~4M elements).
    require_prediction : bool, default=False
        Raise instead of returning a simulation-only result when nothing predicts the MSE.

    Returns
    -------
    CheckResult
        Predicted and measured MSE with MCSE and z-scores, the bias with its SE, the variance
        with its SE, and where the prediction came from (``prediction``).

    Raises
    ------
    InvalidParameterError
        ``fm`` is not a feature map or breaks the protocol; a bad ``n_trials``; the map's own
        ``mse``/``bias`` fails or returns the wrong shape; ``require_prediction`` without a prediction.

    Warns
    -----
    MonteCarloPrecisionWarning
        If one trial carries more than 10% of the total squared error for some pair
        (heavy-tailed errors: the MCSE and z are then unreliable; use smaller norms or
        more trials).

    Notes
    -----
    Under the formula, ``z`` is approximately standard normal when ``T`` is large
    and the squared error has a finite variance (for PRF-type maps this needs
    roughly :math:`T \gg e^{3\|x+y\|^2}/m`).
    """
    owner = "rfkit.theory.check"
    if not isinstance(fm, FeatureMap):
        raise InvalidParameterError(
            f"{owner}: `fm` must be a feature map (an rk.features.FeatureMap instance). Got {fm!r:.80} instead."
        )
    T = check_int(n_trials, "n_trials", owner, low=2)
    if not isinstance(require_prediction, bool):
        raise InvalidParameterError(
            f"The `require_prediction` parameter of {owner} must be True or False. Got {require_prediction!r} instead."
        )
    if fm.needs_data:
        raise InvalidParameterError(
            f"{owner}: {fm!r} resolves parameters from data; the check needs a concrete map. Call "
            "fm.fit(Q, K) first (or pass the parameters explicitly)."
        )
    X, Y, d = _pair_iv(x, y, owner)
    shape = np.broadcast_shapes(X.shape[:-1], Y.shape[:-1])
    source, pred, pbias = _prediction(fm, X, Y, shape, owner)
    if source == "none" and require_prediction:
        raise InvalidParameterError(
            f"{owner}: no closed-form MSE for {fm!r}: rfkit.theory has none for this map / projection and the "
            "map has no mse(x, y) method. Got require_prediction=True."
        )
    check_feature_map(fm, d)
    Xf = np.broadcast_to(X, shape + (d,)).reshape(-1, d)
    Yf = np.broadcast_to(Y, shape + (d,)).reshape(-1, d)
    N = Xf.shape[0]
    sm = _exp(np.sum(Xf * Yf, axis=-1), "check")
    gen = check_rng(rng)
    per_trial = max(1, N * int(fm.feature_dim(d)))
    if T * per_trial > MAX_CHECK_ELEMENTS:
        raise InvalidParameterError(
            f"{owner}: n_trials={T} trials of {N} pairs x {fm.feature_dim(d)} features would compute about "
            f"{T * per_trial:.3g} feature entries (hours to years; the limit is {MAX_CHECK_ELEMENTS:.0e}). "
            "Use fewer trials, pairs or features."
        )
    step = chunk_trials if chunk_trials is not None else max(2, _BUDGET // per_trial)
    step = check_int(step, "chunk_trials", owner, low=1)
    e_acc, e2_acc, c4 = _Moments((N,)), _Moments((N,)), _Central4()
    e2_max = np.zeros(N)
    e2_sum = np.zeros(N)
    done = 0
    while done < T:
        tc = min(step, T - done)
        est = np.asarray(fm.sample(d, rng=gen, n_draws=tc).pairwise(Xf, Yf), dtype=np.float64)  # (tc, N)
        err = est - sm
        e2 = err * err
        e_acc.add(err)
        e2_acc.add(e2)
        c4.add(err)
        e2_max = np.maximum(e2_max, e2.max(axis=0))
        e2_sum += e2.sum(axis=0)
        done += tc
    var, var_se = c4.variance()
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(e2_sum > 0, e2_max / e2_sum, 0.0)
        mcse = e2_acc.se()
        diff = e2_acc.mean - np.asarray(pred).reshape(-1)
        z = np.where((mcse == 0) & (diff == 0), 0.0, diff / mcse)
        bse = e_acc.se()
        bdiff = e_acc.mean - np.asarray(pbias).reshape(-1)
        bz = np.where((bse == 0) & (bdiff == 0), 0.0, bdiff / bse)
    if np.any(share > 0.1):
        warnings.warn(
            f"{owner}: a single trial carries {float(share.max()):.0%} of the squared error for some pair; "
            "the error distribution is heavy-tailed and the MCSE / z-scores are unreliable "
            "(use smaller norms or more trials).",
            MonteCarloPrecisionWarning,
            stacklevel=2,
        )

    def r(a: np.ndarray) -> np.ndarray:
        return np.asarray(a).reshape(shape)

    return CheckResult(
        estimator=repr(fm),
        n_trials=T,
        kernel=r(sm),
        predicted_mse=r(pred),
        measured_mse=r(e2_acc.mean),
        mse_mcse=r(mcse),
        z=r(z),
        predicted_bias=r(pbias),
        measured_bias=r(e_acc.mean),
        bias_se=r(bse),
        bias_z=r(bz),
        max_share=r(share),
        measured_variance=r(var),
        variance_mcse=r(var_se),
        prediction=source,
    )
