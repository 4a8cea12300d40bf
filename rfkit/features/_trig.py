r"""Trigonometric random features for the softmax kernel (Performer eq. 5, THEORY.md §1).

.. math::

    \phi_{\rm trig}(u) = \frac{e^{\|u\|^2/2}}{\sqrt m}\big(\sin\omega_i^\top u,\ \cos\omega_i^\top u\big)_{i\le m}
    \in \mathbb R^{2m},\qquad
    \widehat{\mathrm{SM}}^{\rm trig} = e^{(\|x\|^2+\|y\|^2)/2}\,\frac1m\sum_i\cos\omega_i^\top(x-y).

Unbiased; MSE :math:`\frac1{2m}e^{\|x\|^2+\|y\|^2}(1-e^{-\|x-y\|^2})^2` for iid
:math:`\omega` (Performer Lemma 2). The estimate can be negative (attention
normalisers may be <= 0); rfkit reports such values, never clips them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._validation import check_int, check_option
from ..projections import PROJECTIONS, sample_projection, sample_projection_streams
from ._base import FeatureDraw, FeatureMap, Features, iter_chunks, project

__all__ = ["Trig", "TrigDraw"]


@dataclasses.dataclass(frozen=True)
class Trig(FeatureMap):
    r"""Trigonometric (sin/cos) random features :math:`\phi_{\rm trig}` (feature dimension ``2m``).

    Parameters
    ----------
    n_features : int
        Number of random directions ``m``.
    projection : {"iid", "orthogonal", "orthogonal-fixed", "qmc", "structured"}, default="iid"

    Notes
    -----
    Relative MSE :math:`\frac2m\sinh^2(\|x-y\|^2/2)`: accurate where
    :math:`\mathrm{SM}` is large (:math:`x \approx y`), poor where it is small
    (Performer §2.3). ``is_positive`` is False: estimates may be <= 0.
    """

    n_features: int
    projection: str = "iid"
    is_positive = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_features", check_int(self.n_features, "n_features", "Trig", low=1))
        check_option(self.projection, "projection", "Trig", PROJECTIONS)

    def feature_dim(self, dim: int) -> int:
        return 2 * self.n_features

    def _projection(self, dim: int, *, rng: Any, n_draws: int | None) -> np.ndarray:
        return sample_projection(self.projection, self.n_features, dim, rng=rng, n_draws=n_draws)

    def _projection_streams(self, dim: int, rngs: list[Any]) -> np.ndarray:
        return sample_projection_streams(self.projection, self.n_features, dim, rngs)

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        assert W is not None
        return TrigDraw(self, dim, n_draws, W)


class TrigDraw(FeatureDraw):
    """A draw of :class:`Trig`; ``projection`` holds the directions (m, d) or (T, m, d)."""

    def __init__(self, spec: FeatureMap, dim: int, n_draws: int | None, W: np.ndarray) -> None:
        super().__init__(spec, dim, n_draws)
        self.projection = W
        self._logm = 0.5 * float(np.log(W.shape[-2]))

    def _scale(self, X: np.ndarray, P: np.ndarray) -> np.ndarray:
        ls = (0.5 * np.sum(X * X, axis=-1) - self._logm).astype(X.dtype)
        return np.ascontiguousarray(np.broadcast_to(ls, P.shape[:-1]))

    def _features(self, X: np.ndarray, side: str) -> Features:
        P = project(X, self.projection)
        m = P.shape[-1]
        values = np.empty(P.shape[:-1] + (2 * m,), dtype=P.dtype)
        np.sin(P, out=values[..., :m])  # written into the two halves: no temporaries, no concatenate
        np.cos(P, out=values[..., m:])
        return Features(values=values, log_scale=self._scale(X, P))

    def _log_features(self, X: np.ndarray, side: str) -> tuple[np.ndarray | None, np.ndarray]:
        P = project(X, self.projection)
        v = np.concatenate([np.sin(P), np.cos(P)], axis=-1)
        with np.errstate(divide="ignore"):
            logabs = np.log(np.abs(v)) + self._scale(X, P)[..., None]
        return np.sign(v), logabs

    def _slog_pairwise(self, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Dl = X - Y
        base = 0.5 * (np.sum(X * X, -1) + np.sum(Y * Y, -1)) - 2.0 * self._logm  # (..., n)
        lead = Dl.shape[:-1]
        Df = Dl.reshape(-1, self.dim)
        N = Df.shape[0]
        W = self.projection
        batched = W.ndim == 3
        Wb = W if batched else W[None]
        T, m = Wb.shape[0], Wb.shape[1]
        s = np.empty((T, N), dtype=Dl.dtype)
        for ts in iter_chunks(T, N * m):
            for ns in iter_chunks(N, m * (ts.stop - ts.start)):
                P = project(Df[ns], Wb[ts])  # (tc, Nc, m)
                s[ts, ns] = np.cos(P).sum(axis=-1)
        s = s.reshape((T,) + lead)
        if not batched:
            s = s[0]
        with np.errstate(divide="ignore"):
            logabs = np.log(np.abs(s)) + base
        return np.sign(s), logabs
