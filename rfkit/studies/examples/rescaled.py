r"""A feature map of your own: positive random features of a fixed, learned-looking rescaling.

:class:`RescaledPositive` maps queries to :math:`s \odot x` and keys to :math:`y / s` for a
fixed per-coordinate scale :math:`s` (it looks learned, but it is a fixed formula of the
coordinate index), then applies positive random features (PRF, Choromanski et al. (ICLR 2021),
Lemma 1):

.. math::

    \phi_q(x) = \frac{e^{-\|s\odot x\|^2/2}}{\sqrt m}\big(e^{\omega_i^\top (s\odot x)}\big)_{i\le m},
    \qquad
    \phi_k(y) = \frac{e^{-\|y/s\|^2/2}}{\sqrt m}\big(e^{\omega_i^\top (y/s)}\big)_{i\le m},

with :math:`\omega_i \sim \mathcal N(0, I_d)` i.i.d. Since :math:`(s\odot x)^\top(y/s) = x^\top y`
the estimate :math:`\phi_q(x)^\top\phi_k(y)` stays unbiased for :math:`e^{x^\top y}`, and its MSE is
the PRF formula at :math:`z = s\odot x + y/s` (it is rfkit's ``CEXP`` with a diagonal
:math:`A`; Blackwelder (2024), Lemma 3.1):

.. math:: \mathrm{MSE}(x, y) = \frac{1}{m}\,e^{2x^\top y}\,\big(e^{\|z\|^2} - 1\big).

When queries are larger than keys (transformer heads often are), a scale below 1 balances
them and shrinks :math:`\|z\|`, hence the MSE.

This module is the example of the docs page "Bring your own estimator" and of
``studies/examples/rescaled-vs-prf.toml``; make it importable with
``PYTHONPATH=studies/examples`` (or run from this folder with ``python -m rfkit.cli``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

import rfkit as rk

__all__ = ["RescaledPositive", "RescaledPositiveDraw"]


@dataclasses.dataclass(frozen=True)
class RescaledPositive(rk.features.FeatureMap):
    """Positive random features of ``s * x`` (queries) and ``y / s`` (keys); unbiased.

    Parameters
    ----------
    n_features : int
        Number of random directions ``m`` (also the number of feature columns).
    scale : float, default=0.5
        Overall query/key balance (the geometric mean of ``s``).
    wiggle : float, default=0.3
        Size of the per-coordinate variation: ``s_i = scale * exp(wiggle * sin(1.7 i + 0.4))``.
    """

    n_features: int
    scale: float = 0.5
    wiggle: float = 0.3

    def __post_init__(self) -> None:
        if isinstance(self.n_features, bool) or not isinstance(self.n_features, int) or self.n_features < 1:
            raise rk.exceptions.InvalidParameterError(
                f"The `n_features` parameter of RescaledPositive must be an int >= 1. "
                f"Got {self.n_features!r} instead."
            )
        if not self.scale > 0:
            raise rk.exceptions.InvalidParameterError(
                f"The `scale` parameter of RescaledPositive must be > 0. Got {self.scale!r} instead."
            )

    def scales(self, dim: int) -> np.ndarray:
        """The per-coordinate scale ``s`` (d,)."""
        i = np.arange(dim)
        return self.scale * np.exp(self.wiggle * np.sin(1.7 * i + 0.4))

    # -- the protocol: the feature dimension and one draw from `rng` -------------------------
    def feature_dim(self, dim: int) -> int:
        return self.n_features

    def sample_one(self, dim: int, *, rng: np.random.Generator) -> RescaledPositiveDraw:
        W = rng.standard_normal((self.n_features, dim))  # every random number from `rng`
        return RescaledPositiveDraw(self, dim, W)

    # -- optional: a closed form, compared with simulation by rk.theory.check and studies ----
    def mse(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Exact MSE of ``draw.pairwise(x, y)`` per pair: ``e^{2x.y} (e^{|z|^2} - 1) / m``."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        s = self.scales(x.shape[-1])
        z = s * x + y / s
        return np.exp(2.0 * np.sum(x * y, axis=-1)) * np.expm1(np.sum(z * z, axis=-1)) / self.n_features


class RescaledPositiveDraw(rk.features.FeatureDraw):
    """One draw: the directions ``W`` (m, d)."""

    def __init__(self, spec: RescaledPositive, dim: int, W: np.ndarray) -> None:
        super().__init__(spec, dim)  # n_draws=None: a single draw
        self.W = W
        self.s = spec.scales(dim)

    def _log_features(self, X: np.ndarray, side: str) -> tuple[None, np.ndarray]:
        # log phi = w_i.u - |u|^2/2 - log(m)/2 with u = s*x (queries) or y/s (keys); all positive
        U = X * self.s if side == "query" else X / self.s
        m = self.W.shape[0]
        return None, U @ self.W.T - 0.5 * np.sum(U * U, axis=-1, keepdims=True) - 0.5 * np.log(m)
