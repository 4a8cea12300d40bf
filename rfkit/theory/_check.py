r"""Conformance check: simulate an estimator and compare with its closed-form MSE and bias."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._random import check_rng
from .._validation import check_int
from ..exceptions import MonteCarloPrecisionWarning
from ._kernel_mse import _REGISTRY, _exp, _pair_iv, _plan, bias, mse

__all__ = ["check", "CheckResult"]

_BUDGET = 1 << 22  # elements of the (trials, pairs, features) work array per chunk


@dataclasses.dataclass(frozen=True)
class CheckResult:
    r"""Predicted vs simulated MSE and bias of a kernel estimator, one entry per pair.

    Every array has the pair shape ``broadcast(x.shape[:-1], y.shape[:-1])``.

    Attributes
    ----------
    estimator : str
        ``repr`` of the feature-map specification.
    n_trials : int
        Number ``T`` of independent draws.
    kernel : ndarray
        Target :math:`e^{x^\top y}`.
    predicted_mse, measured_mse, mse_mcse : ndarray
        Closed form (:func:`rfkit.theory.mse`), the Monte Carlo mean of the squared
        error, and its Monte Carlo standard error :math:`\mathrm{sd}(e^2)/\sqrt T`.
    z : ndarray
        ``(measured_mse - predicted_mse) / mse_mcse``.
    predicted_bias, measured_bias, bias_se, bias_z : ndarray
        Same for the bias (:func:`rfkit.theory.bias`); ``bias_se`` is :math:`\mathrm{sd}(e)/\sqrt T`.
    max_share : ndarray
        Largest single squared error divided by the sum of squared errors; large
        values (heavy tails, :math:`\|x+y\|^2` too large for ``T``) make the MCSE unreliable.
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

    def to_frame(self) -> Any:
        """One row per pair as a :class:`pandas.DataFrame` (pandas is imported here, lazily)."""
        import pandas as pd

        shape = self.kernel.shape
        idx = np.indices(shape).reshape(len(shape), -1).T if shape else np.zeros((1, 0), dtype=int)
        cols = {
            "pair": [tuple(int(i) for i in row) for row in idx],
            "estimator": self.estimator,
            "n_trials": self.n_trials,
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
            "max_share",
        ):
            cols[name] = np.asarray(getattr(self, name)).reshape(-1)
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


def check(
    fm: Any,
    x: Any,
    y: Any,
    *,
    n_trials: int = 10_000,
    rng: Any = None,
    chunk_trials: int | None = None,
) -> CheckResult:
    r"""Simulate ``fm.sample(d, n_draws=T).pairwise(x, y)`` and compare with the closed forms.

    Parameters
    ----------
    fm : feature-map specification
        Any spec accepted by :func:`rfkit.theory.mse` (Trig, Positive, Hyperbolic,
        CEXP, HCEXP, OPRF; projections "iid", "orthogonal", "orthogonal-fixed").
    x, y : array_like of shape (..., d)
        Paired inputs (leading axes broadcast).
    n_trials : int, default=10000
        Number of independent draws ``T`` (>= 2).
    rng : {None, int, SeedSequence, Generator}, optional
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system; pass an int for reproducible results.
    chunk_trials : int, optional
        Draws per vectorised ``pairwise`` call (default: sized to ~4M elements).

    Returns
    -------
    CheckResult
        Predicted and measured MSE with MCSE and z-scores, and the bias with its SE.

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
    if type(fm) not in _REGISTRY:
        _plan(fm, owner)
    T = check_int(n_trials, "n_trials", owner, low=2)
    X, Y, d = _pair_iv(x, y, owner)
    pred = mse(fm, X, Y)
    pbias = bias(fm, X, Y)
    shape = np.broadcast_shapes(X.shape[:-1], Y.shape[:-1])
    Xf = np.broadcast_to(X, shape + (d,)).reshape(-1, d)
    Yf = np.broadcast_to(Y, shape + (d,)).reshape(-1, d)
    N = Xf.shape[0]
    sm = _exp(np.sum(Xf * Yf, axis=-1), "check")
    gen = check_rng(rng)
    per_trial = max(1, N * fm.n_features * 2)
    step = chunk_trials if chunk_trials is not None else max(2, _BUDGET // per_trial)
    step = check_int(step, "chunk_trials", owner, low=1)
    e_acc, e2_acc = _Moments((N,)), _Moments((N,))
    e2_max = np.zeros(N)
    e2_sum = np.zeros(N)
    done = 0
    while done < T:
        tc = min(step, T - done)
        est = fm.sample(d, rng=gen, n_draws=tc).pairwise(Xf, Yf)  # (tc, N)
        err = est - sm
        e2 = err * err
        e_acc.add(err)
        e2_acc.add(e2)
        e2_max = np.maximum(e2_max, e2.max(axis=0))
        e2_sum += e2.sum(axis=0)
        done += tc
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(e2_sum > 0, e2_max / e2_sum, 0.0)
        mcse = e2_acc.se()
        diff = e2_acc.mean - pred.reshape(-1)
        z = np.where((mcse == 0) & (diff == 0), 0.0, diff / mcse)
        bse = e_acc.se()
        bdiff = e_acc.mean - pbias.reshape(-1)
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
    )
