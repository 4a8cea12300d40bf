r"""Trigonometric random features for the softmax kernel (Rahimi & Recht (NeurIPS 2007); Choromanski et al. (ICLR 2021), eq. (5)).

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

from .._backend import get_backend
from .._validation import check_n_features, check_option
from ..projections import PROJECTIONS, sample_projection, sample_projection_streams
from ._base import FeatureMap
from ._draw import FeatureDraw, Features
from ._ops import block_projection, iter_chunks, project

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
    shares_projection = True  # directions: sample_projection_streams(projection, n_features, ...)
    device_draws = True  # its draws take directions drawn on a device (draws = "backend")

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_features", check_n_features(self.n_features, "Trig"))
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
    """A draw of :class:`Trig`; ``projection`` holds the directions (m, d) or (T, m, d) (NumPy)."""

    def __init__(self, spec: FeatureMap, dim: int, n_draws: int | None, W: np.ndarray) -> None:
        super().__init__(spec, dim, n_draws)
        self.projection = W
        self._logm = 0.5 * float(np.log(W.shape[-2]))

    def _scale(self, X: Any, P: Any) -> Any:
        xp = get_backend(("X", X)).xp
        ls = 0.5 * xp.sum(X * X, axis=-1) - self._logm
        return xp.broadcast_to(ls, tuple(P.shape[:-1]))

    def _features(self, X: Any, side: str) -> Features:
        """sin/cos features in fixed row blocks (on NumPy: on rfkit's thread pool)."""
        bk = get_backend(("X", X))
        xp = bk.xp
        W = self.param("W", self.projection, X)
        lead = tuple(X.shape[:-1])
        Xf, WT, T, m, unflatten = block_projection(bk, X, W)
        N = int(Xf.shape[0])
        values = bk.empty((N, T, 2 * m), X.dtype)
        ls = bk.empty((N,), X.dtype)

        def one(rows: slice) -> None:
            x = Xf[rows, ...]
            P = xp.reshape(x @ WT, (-1, T, m))
            values[rows, :, :m] = xp.sin(P)
            values[rows, :, m:] = xp.cos(P)
            ls[rows] = 0.5 * xp.sum(x * x, axis=-1) - self._logm

        bk.run_blocks(one, bk.row_blocks(N, T * 3 * m))
        vals = unflatten(values)
        if W.ndim == 2:
            return Features(values=vals, log_scale=xp.reshape(ls, lead))
        log_scale = xp.broadcast_to(xp.reshape(ls, lead), (T,) + lead) + xp.zeros_like(vals[..., 0])
        return Features(values=vals, log_scale=log_scale)

    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        xp = get_backend(("X", X)).xp
        P = project(X, self.param("W", self.projection, X))
        v = xp.concat([xp.sin(P), xp.cos(P)], axis=-1)
        with np.errstate(divide="ignore"):
            logabs = xp.log(xp.abs(v)) + self._scale(X, P)[..., None]
        return xp.sign(v), logabs

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        bk = get_backend(("X", X))
        xp = bk.xp
        Dl = X - Y
        base = 0.5 * (xp.sum(X * X, axis=-1) + xp.sum(Y * Y, axis=-1)) - 2.0 * self._logm  # (..., n)
        lead = tuple(Dl.shape[:-1])
        Df = xp.reshape(Dl, (-1, self.dim))
        N = int(Df.shape[0])
        W = self.param("W", self.projection, Dl)
        batched = W.ndim == 3
        Wb = W if batched else W[None, ...]
        T, m = int(Wb.shape[0]), int(Wb.shape[1])

        def block(tn: tuple[slice, slice]) -> None:
            ts, ns = tn
            s[ts, ns] = xp.sum(xp.cos(project(Df[ns, ...], Wb[ts, ...])), axis=-1)  # (tc, Nc)

        s = bk.empty((T, N), Dl.dtype)
        budget = bk.row_block_elems * 2
        chunks = [
            (ts, ns)
            for ts in iter_chunks(T, N * m, budget=budget)
            for ns in iter_chunks(N, m * (ts.stop - ts.start), budget=budget)
        ]
        bk.run_blocks(block, chunks)
        s = xp.reshape(s, (T,) + lead)
        if not batched:
            s = s[0, ...]
        with np.errstate(divide="ignore"):
            logabs = xp.log(xp.abs(s)) + base
        return xp.sign(s), logabs
