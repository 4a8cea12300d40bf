r"""Exponential (positive) random-feature maps: PRF, hyperbolic PRF, CEXP, HCEXP, OPRF.

All share one form. With :math:`u' = Mu` (:math:`M = A` for queries,
:math:`A^{-\top}` for keys; :math:`M = I` for PRF/OPRF) and
:math:`\omega_1..\omega_m` from :mod:`rfkit.projections`,

.. math::

    \phi_i(u) = \frac{(1-4a)^{d/4}}{\sqrt m}
        \exp\!\big(a\|\omega_i\|^2 + \sqrt{1-4a}\,\omega_i^\top u' - \tfrac12\|u'\|^2\big)

(:math:`a = 0` except OPRF, GERF and SADERF), and the hyperbolic variants use both signs
:math:`\pm\omega_i^\top u'` with :math:`1/\sqrt{2m}`. Then
:math:`\mathbb E[\phi(x)^\top\phi(y)] = \exp(x^\top y)` for every :math:`\omega_i \sim
\mathcal N(0, I_d)` marginally (Choromanski et al. (ICLR 2021), Lemma 1; Choromanski et al. (ICLR 2022); Likhosherstov et al. (NeurIPS 2022)).
Features are built in log space: nothing overflows for any input norm.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._backend import get_backend
from .._validation import check_n_features, check_option, check_real
from ..exceptions import InvalidParameterError, NotFittedError, RFKitWarning, ShapeError
from ..projections import PROJECTIONS, sample_projection, sample_projection_streams
from ._adaptive import A_RULES, adaptive_A, oprf_optimal_A, validate_A
from ._base import FeatureMap
from ._draw import ExpForm, FeatureDraw, Features
from ._ops import block_projection, paired_logsumexp, project
from ._optimal import gerf_optimal_A
from ._pairs import check_fit_pairs

__all__ = ["Positive", "Hyperbolic", "CEXP", "HCEXP", "OPRF", "ExpDraw"]


def _check_common(spec: Any) -> None:
    owner = type(spec).__name__
    object.__setattr__(spec, "n_features", check_n_features(spec.n_features, owner))
    check_option(spec.projection, "projection", owner, PROJECTIONS)


class _ExpMap(FeatureMap):
    n_features: int
    projection: str
    hyperbolic: bool = False
    shares_projection = True  # directions: sample_projection_streams(projection, n_features, ...)
    device_draws = True  # its draws take directions drawn on a device (draws = "backend")

    def feature_dim(self, dim: int) -> int:
        return (2 if self.hyperbolic else 1) * self.n_features  # type: ignore[attr-defined]

    def _oprf_a(self) -> float:
        return 0.0

    def _transform(self) -> np.ndarray | None:
        return None

    def _projection(self, dim: int, *, rng: Any, n_draws: int | None) -> np.ndarray:
        return sample_projection(
            self.projection,
            self.n_features,
            dim,
            rng=rng,
            n_draws=n_draws,  # type: ignore[attr-defined]
        )

    def _projection_streams(self, dim: int, rngs: list[Any]) -> np.ndarray:
        return sample_projection_streams(self.projection, self.n_features, dim, rngs)  # type: ignore[attr-defined]

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        A = self._transform()
        if A is not None and A.shape[0] != dim:
            raise ShapeError(
                f"The `A` parameter of {self.name} has shape {A.shape} but the draw is for dim={dim}."
            )
        assert W is not None
        return ExpDraw(self, dim, n_draws, W, A=A, a=self._oprf_a(), hyperbolic=self.hyperbolic)


@dataclasses.dataclass(frozen=True)
class Positive(_ExpMap):
    r"""Positive random features :math:`\phi^+` (PRF; FAVOR+ with ``projection="orthogonal"``).

    .. math:: \phi^+(u) = \frac{e^{-\|u\|^2/2}}{\sqrt m}\big(e^{\omega_i^\top u}\big)_{i\le m},
        \qquad \widehat{\mathrm{SM}} = \Lambda\,\frac1m\sum_i e^{\omega_i^\top(x+y)},

    :math:`\Lambda = e^{-(\|x\|^2+\|y\|^2)/2}`. Unbiased and strictly positive for
    ``projection`` in {"iid", "orthogonal", "qmc"}; MSE
    :math:`\frac1m\Lambda^2(e^{2\|z\|^2} - e^{\|z\|^2})` for iid :math:`\omega`
    (Choromanski et al. (ICLR 2021), Lemmas 1-2).

    Parameters
    ----------
    n_features : int
        Number of random directions ``m`` (feature dimension ``m``).
    projection : {"iid", "orthogonal", "orthogonal-fixed", "qmc", "structured"}, default="iid"
        Distribution of the directions (:mod:`rfkit.projections`).

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> X, Y = 0.3 * rng.normal(size=(2, 5, 4))
    >>> draw = rk.features.Positive(n_features=64).sample(dim=4, rng=0)
    >>> draw.kernel(X, Y).shape
    (5, 5)
    """

    n_features: int
    projection: str = "iid"

    def __post_init__(self) -> None:
        _check_common(self)


@dataclasses.dataclass(frozen=True)
class Hyperbolic(_ExpMap):
    r"""Hyperbolic positive random features :math:`\phi^{++}` (Performer's :math:`\widehat{\mathrm{SM}}^{\rm hyp+}`).

    .. math:: \phi^{++}(u) = \frac{e^{-\|u\|^2/2}}{\sqrt{2m}}\big(e^{\omega_i^\top u}, e^{-\omega_i^\top u}\big)_{i\le m},
        \qquad \widehat{\mathrm{SM}} = \Lambda\,\frac1m\sum_i\cosh(\omega_i^\top(x+y)).

    Feature dimension ``2m``; MSE :math:`\frac1{2m}\Lambda^2(e^{\|z\|^2}-1)^2`
    (Choromanski et al. (ICLR 2021), Lemma 2). Blackwelder (2024) calls this map "PRF"; PRF is
    :class:`Positive`.

    Parameters
    ----------
    n_features : int
        Number of random directions ``m``.
    projection : str, default="iid"
    """

    n_features: int
    projection: str = "iid"
    hyperbolic = True

    def __post_init__(self) -> None:
        _check_common(self)


class _AdaptiveExpMap(_ExpMap):
    A: Any

    fit_pairs: str
    _pair_fit = True  # fit() takes pairs=, key_padding_mask=, exclude=

    def __post_init__(self) -> None:
        _check_common(self)
        object.__setattr__(self, "fit_pairs", check_fit_pairs(self.fit_pairs, self.name))
        if isinstance(self.A, str):
            check_option(self.A, "A", self.name, A_RULES)
        else:
            object.__setattr__(self, "A", validate_A(self.A, self.name))

    @property
    def needs_data(self) -> bool:
        return isinstance(self.A, str) and self.A != "identity"

    def _raise_needs_data(self) -> None:
        raise NotFittedError(
            f"{self.name}(A={self.A!r}) resolves A from data: call .fit(Q, K) first, pass "
            "data=(Q, K) to sample(), or give A explicitly (rk.features.adaptive_A)."
        )

    def fit(
        self, queries: Any, keys: Any, *, pairs: Any = None, key_padding_mask: Any = None, exclude: Any = None
    ) -> FeatureMap:
        """Resolve a rule name for ``A`` into its diagonal from the query/key sample (:func:`adaptive_A`).

        The rule's means and variances are taken over the pairs ``pairs`` selects (default: this
        map's ``fit_pairs``; ``"causal"`` needs (..., n, d) inputs with the sequence axis);
        padded keys and ``exclude`` pairs never count.
        """
        if not isinstance(self.A, str) or self.A == "identity":
            return self
        A = adaptive_A(
            queries,
            keys,
            rule=self.A,
            pairs=self.fit_pairs if pairs is None else pairs,
            key_padding_mask=key_padding_mask,
            exclude=exclude,
        )
        return dataclasses.replace(self, A=A)  # type: ignore[type-var]

    def _transform(self) -> np.ndarray | None:
        if isinstance(self.A, str):
            return None  # identity (rules are resolved before sampling)
        return np.asarray(self.A)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class CEXP(_AdaptiveExpMap):
    r"""CEXP: positive features of :math:`Ax` and :math:`A^{-\top}y` (Choromanski et al. (ICLR 2022); Blackwelder (2024)).

    .. math:: \widehat{\mathrm{SM}}^{\rm cexp}_{A,m}(x, y) = \Psi^m_A(x)^\top\Psi^m_{A^{-\top}}(y),
        \quad \Psi^m_M(u) = \frac{e^{-\|Mu\|^2/2}}{\sqrt m}\big(e^{\omega_i^\top Mu}\big)_i .

    Unbiased for every invertible :math:`A` since :math:`(Ax)^\top A^{-\top}y = x^\top y`;
    MSE :math:`\frac1m e^{\|z_A\|^2}\mathrm{SM}^2(1-e^{-\|z_A\|^2})`,
    :math:`z_A = Ax + A^{-\top}y` (Blackwelder (2024), Lemma 3.1).

    Parameters
    ----------
    n_features : int
    A : {"identity", "mean", "variance"} or array_like, default="identity"
        A rule name (resolved from data by :meth:`fit` / ``sample(data=...)``
        via :func:`adaptive_A`), a diagonal ``(d,)`` or a full invertible ``(d, d)``.
        Singular ``A`` raises :class:`~rfkit.exceptions.SingularMatrixError`;
        ill-conditioned ``A`` warns.
    projection : str, default="iid"
    fit_pairs : {"all", "sequence", "causal"}, default="all"
        The query-key pairs a rule's means and variances are taken over: ``"all"`` the plain
        sample (Blackwelder (2024)), ``"causal"`` the pairs :math:`j \le i` of each sequence
        (each query counted once per key it sees, each key once per query that sees it; rfkit's
        own weighting), ``"sequence"`` every pair within a sequence (:func:`adaptive_A`).
    """

    n_features: int
    A: Any = "identity"
    projection: str = "iid"
    fit_pairs: str = "all"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class HCEXP(_AdaptiveExpMap):
    r"""HCEXP: hyperbolic features of :math:`Ax` and :math:`A^{-\top}y` (Blackwelder (2024)).

    MSE :math:`\frac1{2m}e^{\|z_A\|^2}\mathrm{SM}^2(1-e^{-\|z_A\|^2})^2` (Blackwelder (2024),
    Lemma 3.1). Parameters as :class:`CEXP`; feature dimension ``2m``.

    Parameters
    ----------
    n_features : int
        The number ``m`` of random directions (``2m`` feature columns).
    A : {"identity", "mean", "variance"} or array_like, default="identity"
        A rule name (resolved from data, :func:`adaptive_A`), a diagonal ``(d,)`` or a full
        invertible ``(d, d)``, as in :class:`CEXP`.
    projection : str, default="iid"
        The distribution of the directions (:func:`rfkit.projections.sample_projection`).
    fit_pairs : {"all", "sequence", "causal"}, default="all"
        The query-key pairs a rule's means and variances are taken over, as in :class:`CEXP`.
    """

    n_features: int
    A: Any = "identity"
    projection: str = "iid"
    fit_pairs: str = "all"
    hyperbolic = True


@dataclasses.dataclass(frozen=True)
class OPRF(_ExpMap):
    r"""Optimal positive random features (FAVOR++; Likhosherstov et al. (NeurIPS 2022)).

    .. math:: \phi(u) = \frac{(1-4A)^{d/4}}{\sqrt m}
        \Big(\exp\big(A\|\omega_i\|^2 + \sqrt{1-4A}\,\omega_i^\top u - \tfrac12\|u\|^2\big)\Big)_{i\le m}.

    Unbiased for :math:`A < 1/4`; the variance is finite only for :math:`A < 1/8`.
    With ``A=None`` the data-averaged optimum :func:`oprf_optimal_A` is resolved
    from the query/key sample (:meth:`fit` or ``sample(data=...)``); ``A=0``
    is :class:`Positive`.

    ``hyperbolic=True`` uses both :math:`\pm\omega_i` (feature dimension ``2m``, factor
    :math:`1/\sqrt{2m}`): :math:`\widehat{\mathrm{SM}} = \Lambda(1-4A)^{d/2}\frac1m\sum_i
    e^{2A\|\omega_i\|^2}\cosh(\sqrt{1-4A}\,\omega_i^\top(x+y))`, unbiased for :math:`A < 1/4`, with
    relative second moment :math:`\tfrac12\big(\frac{(1-4A)^2}{1-8A}\big)^{d/2}\big(e^{-\|z\|^2} +
    e^{\|z\|^2/(1-8A)}\big)` per direction (docs page *Theory*, section 1a, "Hyperbolic OPRF"; ``A=0`` is
    :class:`Hyperbolic`). Its ``A=None`` optimum is not affine in the data and is found
    numerically by :func:`gerf_optimal_A` (``hyperbolic=True``).

    Parameters
    ----------
    n_features : int
    A : float or None, default=None
        Must be < 1/4; values in [1/8, 1/4) warn (infinite variance).
    projection : str, default="iid"
    hyperbolic : bool, default=False
        Use the :math:`\pm\omega` pair of every direction (``2m`` columns).
    fit_pairs : {"all", "sequence", "causal"}, default="all"
        The query-key pairs :meth:`fit` averages the log second moment over: ``"all"`` every
        pair of the sample (the paper's objective), ``"causal"`` the pairs :math:`j \le i` of each
        sequence, those a decoder's causal attention uses (rfkit's own weighting; the fit then
        needs (..., n, d) inputs that keep the sequence axis), ``"sequence"`` every pair within
        a sequence (:func:`rfkit.features.pair_moments`).
    """

    n_features: int
    A: float | None = None
    projection: str = "iid"
    hyperbolic: bool = False
    fit_pairs: str = "all"

    _fitted_params = ("A",)  # resolved by fit() when None
    _pair_fit = True  # fit() takes pairs=, key_padding_mask=, exclude=

    def __post_init__(self) -> None:
        _check_common(self)
        object.__setattr__(self, "fit_pairs", check_fit_pairs(self.fit_pairs, "OPRF"))
        if not isinstance(self.hyperbolic, (bool, np.bool_)):
            raise InvalidParameterError(
                f"The `hyperbolic` parameter of OPRF must be a bool. Got {self.hyperbolic!r} instead."
            )
        object.__setattr__(self, "hyperbolic", bool(self.hyperbolic))
        if self.A is not None:
            a = check_real(self.A, "A", "OPRF", high=0.25, closed="neither")
            if a >= 0.125:
                warnings.warn(
                    f"OPRF with A={a} >= 1/8 is unbiased but has infinite variance.",
                    RFKitWarning,
                    stacklevel=3,
                )
            object.__setattr__(self, "A", a)

    def fit(
        self, queries: Any, keys: Any, *, pairs: Any = None, key_padding_mask: Any = None, exclude: Any = None
    ) -> FeatureMap:
        """Resolve ``A=None`` to the data-averaged optimum (:func:`oprf_optimal_A`; hyperbolic:
        :func:`gerf_optimal_A` with ``hyperbolic=True``).

        The mean runs over the pairs ``pairs`` selects (default: this map's ``fit_pairs``);
        padded keys (``key_padding_mask``, True = padded) and ``exclude`` pairs never count.
        """
        if self.A is not None:
            return self
        sel = {
            "pairs": self.fit_pairs if pairs is None else pairs,
            "key_padding_mask": key_padding_mask,
            "exclude": exclude,
        }
        if self.hyperbolic:
            return dataclasses.replace(self, A=gerf_optimal_A(queries, keys, s=1, hyperbolic=True, **sel))
        return dataclasses.replace(self, A=oprf_optimal_A(queries, keys, **sel))

    def _oprf_a(self) -> float:
        return float(self.A)  # type: ignore[arg-type]


def _xp(a: Any) -> Any:
    """The array namespace of a device array (directions drawn with ``draws = "backend"``)."""
    return get_backend(("W", a)).xp


class ExpDraw(FeatureDraw):
    """A draw of an exponential-family map (see the module docstring for the formula).

    Attributes
    ----------
    projection : ndarray of shape (m, d) or (T, m, d)
        The directions :math:`\\omega_i` (float64, NumPy: drawn by a NumPy Generator and
        moved to the input's device when an estimate is made on another backend).
    A : ndarray or None
        The CEXP/HCEXP matrix (diagonal or full), None for the identity.
    a : float
        The OPRF parameter (0 for PRF/CEXP).
    """

    def __init__(
        self,
        spec: FeatureMap,
        dim: int,
        n_draws: int | None,
        W: np.ndarray,
        *,
        A: np.ndarray | None,
        a: float,
        hyperbolic: bool,
    ) -> None:
        super().__init__(spec, dim, n_draws)
        self.projection = W
        self.A = A
        self.a = a
        self.hyperbolic = hyperbolic
        self._Ainv: np.ndarray | None = None
        if A is not None and A.ndim == 2:
            self._Ainv = np.linalg.inv(A)
        m = W.shape[-2]
        self._sqnorm_cache: Any = None
        # python floats: "weak" scalars that keep float32 inputs in float32 (NEP 50)
        self._b = float(np.sqrt(1.0 - 4.0 * a))
        half_logdet = float(0.25 * dim * np.log1p(-4.0 * a))
        self._c = half_logdet - 0.5 * float(np.log((2 if hyperbolic else 1) * m))
        self._c_pair = 2.0 * half_logdet - float(np.log((2 if hyperbolic else 1) * m))
        self._llf: tuple[np.ndarray, np.ndarray | None, float] | None = None

    @property
    def _sqnorm(self) -> Any:
        """``||omega_i||^2``, (T?, m): made when first used (only maps with ``a != 0`` use it).

        W may live on a device (``draws = "backend"``): computed with its own library. NumPy:
        ``einsum``, one pass over W, no W * W temporary (4x faster than ``np.sum(W * W, axis=-1)``
        at 250 x 256 x 16).
        """
        if self._sqnorm_cache is None:
            W = self.projection
            self._sqnorm_cache = (
                np.einsum("...i,...i->...", W, W) if isinstance(W, np.ndarray) else _xp(W).sum(W * W, axis=-1)
            )
        return self._sqnorm_cache

    def transform(self, X: Any, side: str) -> Any:
        r"""Rows mapped by :math:`A` (``side="query"``) or :math:`A^{-\top}` (``side="key"``); identity without ``A``."""
        return self._map(X, side)

    def log_linear_form(self) -> tuple[np.ndarray, np.ndarray | None, float]:
        r"""The affine form of the log-features: ``(W, e, c)`` with

        .. math:: \log\phi_k(u) = W_k^\top u' + e_k + c - \tfrac12\|u'\|^2,\qquad u' = \mathrm{transform}(u),

        ``W`` of shape (D, d) (or (T, D, d)): :math:`\sqrt{1-4a}\,\omega_i` (and its negative for
        the hyperbolic maps); ``e`` of shape (D,) (or (T, D)): :math:`a\|\omega_i\|^2`, None when
        :math:`a = 0`; and the constant ``c``. NumPy float64 arrays (computed once per draw);
        :meth:`linear_form_like` gives them on an input's backend. Lets attention code build
        features in one product.
        """
        if self._llf is None:
            W = self.projection * self._b
            e = self.a * self._sqnorm if self.a != 0.0 else None
            if self.hyperbolic:
                cat = np.concatenate if isinstance(W, np.ndarray) else _xp(W).concat
                W = cat([W, -W], axis=-2)
                if e is not None:
                    e = cat([e, e], axis=-1)
            self._llf = (W, e, float(self._c))
        return self._llf

    def exp_form(self) -> ExpForm:
        """The draw's :class:`~rfkit.features.ExpForm`: :meth:`log_linear_form` and :meth:`transform`."""
        W, e, c = self.log_linear_form()
        return ExpForm(W=W, offsets=e, constant=c, transform=self.transform)

    def linear_form_like(self, X: Any) -> tuple[Any, Any | None, float]:
        """:meth:`log_linear_form` on the library, device and dtype of ``X``."""
        W, e, c = self.log_linear_form()
        return self.param("llf_W", W, X), (None if e is None else self.param("llf_e", e, X)), c

    def _map(self, X: Any, side: str) -> Any:
        """Apply :math:`A` (queries) or :math:`A^{-\\top}` (keys) to the rows."""
        if self.A is None:
            return X
        if self.A.ndim == 1:
            a = self.param("A", self.A, X)
            return X * a if side == "query" else X / a
        if side == "query":
            return X @ self.param("AT", self.A.T, X)  # rows (A x)^T
        return X @ self.param("Ainv", self._Ainv, X)  # type: ignore[arg-type]  # (A^-T y)^T

    def _features(self, X: Any, side: str) -> Features:
        """Scaled features in fixed row blocks: one product, a max-shift and an in-place ``exp``.

        The same values as ``Features.from_log``; on NumPy the blocks run on rfkit's thread
        pool (results do not depend on the number of threads).
        """
        bk = get_backend(("X", X))
        xp = bk.xp
        U = self._map(X, side)
        W, e, c = self.linear_form_like(U)
        Uf, WT, T, D, unflatten = block_projection(bk, U, W)
        N = int(Uf.shape[0])
        e3 = None if e is None else xp.reshape(e, (T, D))
        out = bk.empty((N, T, D), U.dtype)
        ls = bk.empty((N, T), U.dtype)

        def one(rows: slice) -> None:
            u = Uf[rows, ...]
            P = xp.reshape(u @ WT, (-1, T, D))  # a fresh block
            if e3 is not None:
                P = bk.update(P, "+", e3)
            rm = xp.max(P, axis=-1)
            P = bk.update(P, "-", rm[..., None])
            out[rows, ...] = bk.exp_(P)
            ls[rows, ...] = rm + (c - 0.5 * xp.sum(u * u, axis=-1))[:, None]

        bk.run_blocks(one, bk.row_blocks(N, T * D))
        return Features(values=unflatten(out), log_scale=unflatten(ls[..., None])[..., 0])

    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        xp = get_backend(("X", X)).xp
        U = self._map(X, side)
        W, e, c = self.linear_form_like(U)
        P = project(U, W)  # ([T,] ..., n, D)
        if e is not None:
            P = P + (
                e if W.ndim == 2 else xp.reshape(e, (e.shape[0],) + (1,) * (P.ndim - 2) + (e.shape[-1],))
            )
        return None, P + (c - 0.5 * xp.sum(U * U, axis=-1))[..., None]

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        bk = get_backend(("X", X))
        xp = bk.xp
        Xq, Yk = self._map(X, "query"), self._map(Y, "key")
        Z = Xq + Yk
        base = self._c_pair - 0.5 * (xp.sum(Xq * Xq, axis=-1) + xp.sum(Yk * Yk, axis=-1))  # (..., n)
        W = self.param("W", self.projection, Z)
        e = 2.0 * self.a * self.param("sqnorm", self._sqnorm, Z) if self.a != 0.0 else None
        logabs = paired_logsumexp(bk, Z, W, e, b=self._b, mirrored=self.hyperbolic) + base
        return xp.ones_like(logabs), logabs
