"""The per-trial columns of rfkit's own metrics: the ``compute`` functions of their records.

Each takes the keyword arguments a design kind gives every metric's ``compute``
(:class:`~rfkit.study.MetricRecord`): kernel designs ``ratio``, ``truth``, ``ok``; attention
designs ``output``, ``exact``, ``ok``, ``nonpositive_rows``; concentration designs ``rms_max``,
``realized_max``, ``bound``. A metric of both kernel and attention designs is a :class:`PerKind`.
The attention columns are computed together, in one pass over the outputs, by
:func:`rfkit.study._eval_attention.attention_error_columns` (which remembers its last call).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "PerKind",
    "kernel_err",
    "kernel_sq_err",
    "kernel_rel_err",
    "kernel_rel_sq_err",
    "kernel_abs_rel_err",
    "kernel_max_rel_err",
    "kernel_med_rel_sq_err",
    "kernel_sq_dev",
    "attention_column",
    "covered",
    "rms_over_bound",
    "realized_exceeds",
]


@dataclasses.dataclass(frozen=True)
class PerKind:
    """A ``compute`` for a metric of kernel and attention designs: the function of the kind it is called for.

    The kind is read from the keywords: ``ratio`` (kernel designs) or ``output`` (attention designs).
    """

    kernel: Callable[..., np.ndarray]
    attention: Callable[..., np.ndarray]

    def __call__(self, **arrays: Any) -> np.ndarray:
        if "ratio" in arrays:
            return self.kernel(**arrays)
        return self.attention(**arrays)


# ----------------------------------------------------------------------------- kernel designs
# ratio: estimate/truth (trials, pairs), NaN for failed trials; truth (pairs,); ok (trials,)
def kernel_err(*, ratio: np.ndarray, truth: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean over pairs of K_hat - K."""
    return ((ratio - 1.0) * truth).mean(axis=1)


def kernel_sq_err(*, ratio: np.ndarray, truth: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean over pairs of (K_hat - K)^2."""
    return (((ratio - 1.0) * truth) ** 2).mean(axis=1)


def kernel_rel_err(*, ratio: np.ndarray, truth: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean over pairs of (K_hat - K)/K."""
    return (ratio - 1.0).mean(axis=1)


def kernel_rel_sq_err(*, ratio: np.ndarray, truth: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean over pairs of ((K_hat - K)/K)^2."""
    return ((ratio - 1.0) ** 2).mean(axis=1)


def kernel_abs_rel_err(*, ratio: np.ndarray, truth: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean over pairs of |K_hat - K|/K."""
    return np.abs(ratio - 1.0).mean(axis=1)


def kernel_max_rel_err(*, ratio: np.ndarray, truth: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Max over pairs of |K_hat - K|/K."""
    return np.abs(ratio - 1.0).max(axis=1)


def kernel_med_rel_sq_err(*, ratio: np.ndarray, truth: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Median over pairs of ((K_hat - K)/K)^2."""
    return np.median((ratio - 1.0) ** 2, axis=1)


def kernel_sq_dev(*, ratio: np.ndarray, truth: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean over pairs of (K_hat - mean over the trials that ran of K_hat)^2 (ddof=1 makes it Var[K_hat])."""
    est = ratio * truth
    mean_est = est[ok].mean(axis=0) if ok.any() else np.full(est.shape[1], np.nan)
    return ((est - mean_est) ** 2).mean(axis=1)


# ----------------------------------------------------------------------------- attention designs
def attention_column(column: str) -> Callable[..., np.ndarray]:
    """The ``compute`` of an attention error column (``"err"``, ``"sq_err"``, ``"abs_err"``,
    ``"max_abs_err"``, ``"sq_dev"``, ``"nonpositive_rows"``), from
    :func:`~rfkit.study._eval_attention.attention_error_columns`.

    A trial whose output has NaN or infinite rows gets NaN errors (the error of its other rows is
    not its error); failed trials are left out of the mean output that ``sq_dev`` deviates from.
    """

    def compute(
        *, output: np.ndarray, exact: np.ndarray, ok: np.ndarray, nonpositive_rows: np.ndarray
    ) -> np.ndarray:
        # registered when rfkit.study is imported; building a design loads no evaluation module
        from ._eval_attention import attention_error_columns  # lazy: computed inside a run only

        trials, _ = attention_error_columns(output, exact, ok, nonpositive_rows)
        return np.asarray(trials[column])

    compute.__name__ = compute.__qualname__ = f"attention_{column}"
    return compute


# ----------------------------------------------------------------------------- concentration designs
def covered(*, rms_max: np.ndarray, realized_max: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """1 where max sqrt(MSE)/SM <= the bound, else 0; NaN where the error is NaN (no outcome, not a miss)."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(rms_max), np.nan, (rms_max <= bound).astype(float))


def rms_over_bound(*, rms_max: np.ndarray, realized_max: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """max sqrt(MSE)/SM divided by the bound."""
    return rms_max / bound


def realized_exceeds(*, rms_max: np.ndarray, realized_max: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """1 where one draw's max realised relative error exceeds the bound, else 0; NaN where it is NaN."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(realized_max), np.nan, (realized_max > bound).astype(float))
