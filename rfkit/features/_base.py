r"""Scaled-feature representation, the feature-map base class and the draw object.

Every feature map returns :class:`Features` ``(values, log_scale)`` meaning
:math:`\phi(x) = e^{\text{log\_scale}(x)}\,\text{values}(x)` with
:math:`\max_k |\text{values}_k(x)| \le 1` per row. Kernel estimates
:math:`\hat K(x, y) = \phi(x)^\top\phi(y)` are formed by one matrix product of the
values with the row scales folded in after a per-slice common maximum shift, so
nothing overflows; entries whose folded product would underflow are recomputed
exactly from log-features with a signed log-sum-exp.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
from scipy.special import logsumexp

from .._validation import (
    check_broadcast,
    check_int,
    check_points,
    check_same_dim,
    check_square_norms,
    float_dtype,
)
from ..exceptions import NumericalOverflowError, ShapeError

__all__ = ["Features", "FeatureMap", "FeatureDraw"]

# Work arrays in chunked reductions stay below this many elements (~16 MiB in float64).
_CHUNK_ELEMS = 1 << 21


@dataclasses.dataclass(frozen=True)
class Features:
    r"""Scaled features :math:`\phi(x) = \exp(\text{log\_scale})\cdot\text{values}`.

    Attributes
    ----------
    values : ndarray of shape (..., n, D)
        Feature values with :math:`|\text{values}| \le 1` (maximum 1 in every row
        with a non-zero feature).
    log_scale : ndarray of shape (..., n)
        Natural log of the per-row scale.
    """

    values: np.ndarray
    log_scale: np.ndarray

    @property
    def n_columns(self) -> int:
        """Feature dimension ``D`` (``2m`` for trig and hyperbolic maps)."""
        return int(self.values.shape[-1])

    def dense(self) -> np.ndarray:
        """Unscaled feature matrix :math:`\\phi(x)`, shape (..., n, D).

        Raises
        ------
        NumericalOverflowError
            If some scale exceeds the float range; keep the scaled form instead.
        """
        limit = np.log(np.finfo(self.values.dtype).max)
        if self.log_scale.size and np.max(self.log_scale) > limit:
            raise NumericalOverflowError(
                f"Features.dense(): a row scale exp({float(np.max(self.log_scale)):.4g}) exceeds "
                f"the {self.values.dtype} range (log max {limit:.4g}); use the scaled "
                "representation (values, log_scale) or log-space estimates."
            )
        return np.exp(self.log_scale)[..., None] * self.values

    @classmethod
    def from_log(cls, sign: np.ndarray | None, logabs: np.ndarray) -> Features:
        """Build scaled features from ``sign`` (None: all positive) and ``log|phi|``."""
        ls = np.max(logabs, axis=-1) if logabs.shape[-1] else np.zeros(logabs.shape[:-1], logabs.dtype)
        empty = ~np.isfinite(ls)  # every feature exactly zero in that row
        if np.any(empty):
            ls = np.where(empty, 0.0, ls).astype(logabs.dtype, copy=False)
        values = np.exp(logabs - ls[..., None])
        if sign is not None:
            values = values * sign
        return cls(values=values, log_scale=ls)


def _signed_lse(logabs: np.ndarray, sign: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Signed log-sum-exp over the last axis: returns (sign, log|sum|)."""
    if sign is None:
        with np.errstate(divide="ignore"):
            out = logsumexp(logabs, axis=-1)
        return np.ones_like(out), out
    with np.errstate(divide="ignore", invalid="ignore"):
        out, s = logsumexp(logabs, axis=-1, b=sign, return_sign=True)
        # scipy gives NaN when terms of huge magnitude (|log| >~ 1e16) cancel to 0 in floating
        # point; sum those rows directly (max-shifted): 0 -> (sign 0, -inf), never NaN
        redo = np.isnan(out) & np.all(np.isfinite(logabs), axis=-1)
        if np.any(redo):
            a = logabs[redo]
            top = np.max(a, axis=-1, keepdims=True)
            total = np.sum(np.broadcast_to(sign, logabs.shape)[redo] * np.exp(a - top), axis=-1)
            out[redo] = np.log(np.abs(total)) + top[..., 0]
            s[redo] = np.sign(total)
    s = np.where(np.isneginf(out), 0.0, s)
    return s, out


class FeatureMap(abc.ABC):
    """Base class of rfkit's frozen feature-map specifications.

    Subclasses are frozen dataclasses whose fields are the hyperparameters;
    ``sample`` draws the random part and returns a :class:`FeatureDraw`.
    """

    #: True when estimates are strictly positive for every input (PRF family).
    is_positive: bool = True
    #: True for random maps; deterministic maps ignore ``rng``.
    is_random: bool = True

    @property
    def name(self) -> str:
        """Short name of the estimator family."""
        return type(self).__name__

    @abc.abstractmethod
    def feature_dim(self, dim: int) -> int:
        """Number of feature columns ``D`` for inputs of dimension ``dim``."""

    def fit(self, queries: Any, keys: Any) -> FeatureMap:
        """Resolve data-adaptive parameters from a query/key sample.

        Returns a new specification with every parameter concrete (maps without
        adaptive parameters return ``self``).
        """
        return self

    @property
    def needs_data(self) -> bool:
        """True if some parameter is a rule that must be resolved with :meth:`fit`."""
        return False

    def sample(
        self,
        dim: int | None = None,
        *,
        rng: Any = None,
        n_draws: int | None = None,
        data: tuple[Any, Any] | None = None,
    ) -> FeatureDraw:
        """Draw the random part of the feature map.

        Parameters
        ----------
        dim : int, optional
            Input dimension ``d``; inferred from ``data`` when omitted.
        rng : {None, int, SeedSequence, Generator}, optional
            When ``rng`` is None, a new Generator is created using entropy from the
            operating system. Types other than Generator are passed to
            :func:`numpy.random.default_rng`. Pass an int for reproducible output
            across calls; a Generator passed twice gives different draws.
        n_draws : int, optional
            Number ``T`` of independent draws made at once. Every output of the
            draw then has a leading axis of length ``T``, so Monte Carlo trials
            vectorise.
        data : (queries, keys), optional
            Sample used to resolve data-adaptive parameters (``A="mean"``,
            OPRF's ``A=None``) through :meth:`fit`.

        Returns
        -------
        FeatureDraw
        """
        spec: FeatureMap = self
        if data is not None:
            q, k = data
            spec = self.fit(q, k)
            if dim is None:
                dim = int(np.shape(q)[-1])
        if spec.needs_data:
            spec._raise_needs_data()
        if dim is None:
            raise ShapeError(f"{self.name}.sample() needs `dim` (or `data` to infer it from).")
        d = check_int(dim, "dim", f"{self.name}.sample", low=1)
        T = None if n_draws is None else check_int(n_draws, "n_draws", f"{self.name}.sample", low=1)
        return spec._sample(d, rng=rng, n_draws=T)

    def sample_streams(self, dim: int, rngs: Any, *, data: tuple[Any, Any] | None = None) -> FeatureDraw:
        """Draw ``T = len(rngs)`` independent feature sets, draw ``t`` using only ``rngs[t]``.

        The result behaves like ``sample(dim, n_draws=T)`` (leading axis ``T`` on every
        output) but draw ``t`` depends only on its own stream, so a Monte Carlo trial's
        numbers do not depend on how trials are chunked or distributed over workers.

        Parameters
        ----------
        dim : int
            Input dimension.
        rngs : sequence of {int, SeedSequence, Generator}
            One random stream per draw.
        data : (queries, keys), optional
            Resolves data-adaptive parameters as in :meth:`sample`.
        """
        spec: FeatureMap = self.fit(*data) if data is not None else self
        if spec.needs_data:
            spec._raise_needs_data()
        d = check_int(dim, "dim", f"{self.name}.sample_streams", low=1)
        streams = list(rngs)
        if not streams:
            raise ShapeError(f"{self.name}.sample_streams() needs at least one stream in `rngs`.")
        if not spec.is_random:
            return spec._from_projection(d, len(streams), None)
        return spec._from_projection(d, len(streams), spec._projection_streams(d, streams))

    def _raise_needs_data(self) -> None:  # pragma: no cover - overridden where needed
        raise ShapeError(f"{self.name} needs data: call .fit(Q, K) or pass data=(Q, K).")

    def _sample(self, dim: int, *, rng: Any, n_draws: int | None) -> FeatureDraw:
        """Draw for a validated dimension."""
        W = self._projection(dim, rng=rng, n_draws=n_draws) if self.is_random else None
        return self._from_projection(dim, n_draws, W)

    def _projection(self, dim: int, *, rng: Any, n_draws: int | None) -> np.ndarray:
        """The random directions of one (or ``n_draws``) draws."""
        raise NotImplementedError  # pragma: no cover - random maps override

    def _projection_streams(self, dim: int, rngs: list[Any]) -> np.ndarray:
        """Directions of one draw per stream, stacked (T, m, d)."""
        return np.stack([self._projection(dim, rng=r, n_draws=None) for r in rngs])

    @abc.abstractmethod
    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        """Build the draw object around given directions."""


class FeatureDraw(abc.ABC):
    """One draw (or ``T`` independent draws) of a feature map.

    Subclasses implement :meth:`_log_features` (sign and ``log|phi|`` of every
    feature) and may override :meth:`_features` and :meth:`_slog_pairwise` with
    faster exact paths.
    """

    def __init__(self, spec: FeatureMap, dim: int, n_draws: int | None) -> None:
        self.spec = spec
        self.dim = dim
        self.n_draws = n_draws

    # ---------------------------------------------------------------- subclass API
    @abc.abstractmethod
    def _log_features(self, X: np.ndarray, side: str) -> tuple[np.ndarray | None, np.ndarray]:
        """(sign or None, log|phi|) of shape ([T,] ..., n, D) for validated X."""

    def _features(self, X: np.ndarray, side: str) -> Features:
        sign, logabs = self._log_features(X, side)
        return Features.from_log(sign, logabs)

    def _slog_pairwise(self, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sign, log|estimate|) for paired rows; generic path through the features."""
        fx = self._features(X, "query")
        fy = self._features(Y, "key")
        s = np.sum(fx.values * fy.values, axis=-1)
        with np.errstate(divide="ignore"):
            out = np.log(np.abs(s)) + fx.log_scale + fy.log_scale
        sign = np.sign(s)
        thr = _tiny(s.dtype)
        bad = np.abs(s) < thr
        if np.any(bad):
            sx, lx = self._log_features(X, "query")
            sy, ly = self._log_features(Y, "key")
            shape = s.shape
            lx = np.broadcast_to(lx, shape + lx.shape[-1:])
            ly = np.broadcast_to(ly, shape + ly.shape[-1:])
            idx = np.nonzero(bad)
            terms = lx[idx] + ly[idx]
            sg = None
            if sx is not None or sy is not None:
                sg = np.ones_like(terms)
                if sx is not None:
                    sg = sg * np.broadcast_to(sx, lx.shape)[idx]
                if sy is not None:
                    sg = sg * np.broadcast_to(sy, ly.shape)[idx]
            fs, fl = _signed_lse(terms, sg)
            sign[idx] = fs
            out[idx] = fl
        return sign, out

    # ---------------------------------------------------------------- validation
    @property
    def owner(self) -> str:
        return f"{self.spec.name} draw"

    def _check(self, X: Any, name: str) -> np.ndarray:
        X = check_points(X, name, dim=self.dim)
        check_square_norms(X, name, self.owner)
        return X

    def _check_pair(self, X: Any, Y: Any, *, paired: bool) -> tuple[np.ndarray, np.ndarray]:
        X = self._check(X, "X")
        Y = self._check(Y, "Y")
        check_same_dim(X, Y, "X", "Y")
        if paired:
            if X.shape[-2] != Y.shape[-2]:
                raise ShapeError(
                    f"`X` and `Y` must have the same number of rows for pairwise(): "
                    f"{X.shape[-2]} != {Y.shape[-2]} (X.shape={X.shape}, Y.shape={Y.shape})."
                )
            check_broadcast({"X": X.shape[:-1], "Y": Y.shape[:-1]})
        else:
            check_broadcast({"X": X.shape[:-2], "Y": Y.shape[:-2]})
        if self.n_draws is not None and X.ndim != Y.ndim:
            # the draw axis T leads every output: align the batch axes, not T with a batch axis
            nd = max(X.ndim, Y.ndim)
            X, Y = X.reshape((1,) * (nd - X.ndim) + X.shape), Y.reshape((1,) * (nd - Y.ndim) + Y.shape)
        dt = float_dtype(X, Y)
        return X.astype(dt, copy=False), Y.astype(dt, copy=False)

    # ---------------------------------------------------------------- public API
    def queries(self, X: Any) -> Features:
        """Query-side features of the rows of ``X`` (..., n, d) -> ([T,] ..., n, D)."""
        return self._features(self._check(X, "X"), "query")

    def keys(self, Y: Any) -> Features:
        """Key-side features of the rows of ``Y`` (..., n, d) -> ([T,] ..., n, D)."""
        return self._features(self._check(Y, "Y"), "key")

    def slog_kernel(self, X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Sign and log-magnitude of the kernel estimate, each ([T,] ..., n, m).

        Like :func:`numpy.linalg.slogdet`: the estimate is ``sign * exp(logabs)``;
        ``sign`` is 0 where the estimate is exactly 0 (``logabs = -inf``).
        """
        X, Y = self._check_pair(X, Y, paired=False)
        fx, fy = self._features(X, "query"), self._features(Y, "key")
        return self._combine(fx, fy, X, Y, log=True)  # type: ignore[return-value]

    def log_kernel(self, X: Any, Y: Any) -> np.ndarray:
        r"""Log of the kernel estimate :math:`\log\hat K(x_i, y_j)`, ([T,] ..., n, m).

        Finite wherever the estimate is positive (always, for positive maps, even
        when the estimate itself over- or underflows). Where a signed map (trig,
        odd-degree Taylor) gives an estimate <= 0 the entry is NaN (0 gives
        ``-inf``); use :meth:`slog_kernel` to see the sign.
        """
        sign, logabs = self.slog_kernel(X, Y)
        return _log_where_positive(sign, logabs)

    def kernel(self, X: Any, Y: Any) -> np.ndarray:
        r"""Kernel estimate :math:`\hat K(x_i, y_j) = \phi(x_i)^\top\phi(y_j)`, ([T,] ..., n, m).

        Raises
        ------
        NumericalOverflowError
            If an estimate exceeds the float range (use :meth:`log_kernel`).
        """
        X, Y = self._check_pair(X, Y, paired=False)
        fx, fy = self._features(X, "query"), self._features(Y, "key")
        return self._combine(fx, fy, X, Y, log=False)  # type: ignore[return-value]

    def slog_pairwise(self, X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Sign and log-magnitude of the paired estimates, each ([T,] ..., n)."""
        X, Y = self._check_pair(X, Y, paired=True)
        return self._slog_pairwise(X, Y)

    def log_pairwise(self, X: Any, Y: Any) -> np.ndarray:
        r"""Log of :math:`\hat K(x_i, y_i)` for paired rows (NaN where the estimate is < 0)."""
        sign, logabs = self.slog_pairwise(X, Y)
        return _log_where_positive(sign, logabs)

    def pairwise(self, X: Any, Y: Any) -> np.ndarray:
        r"""Estimate of :math:`\exp(x_i^\top y_i)` for paired rows, shape ([T,] ..., n).

        For the exponential maps this uses one projection of :math:`x_i+y_i`
        (half the work of building both feature sets) and equals the diagonal of
        :meth:`kernel` for the same draw up to round-off.
        """
        sign, logabs = self.slog_pairwise(X, Y)
        return sign * _exp_checked(logabs, f"{self.owner}.pairwise", "log_pairwise")

    # ---------------------------------------------------------------- combination
    def _combine(
        self, fx: Features, fy: Features, X: np.ndarray, Y: np.ndarray, *, log: bool
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        dt = fx.values.dtype
        lsx, lsy = fx.log_scale, fy.log_scale
        cx = np.max(lsx, axis=-1, keepdims=True) if lsx.shape[-1] else np.zeros(lsx.shape[:-1] + (1,), dt)
        cy = np.max(lsy, axis=-1, keepdims=True) if lsy.shape[-1] else np.zeros(lsy.shape[:-1] + (1,), dt)
        C = (cx + cy)[..., None]  # (..., 1, 1): one common shift per slice
        D = max(fx.n_columns, 1)
        lim = float(np.log(np.finfo(dt).max)) - float(np.log(D)) - 1.0
        Cq = np.zeros_like(C) if log else np.clip(C, -lim, lim)
        sx = np.exp((lsx - cx)[..., :, None] + Cq)
        sy = np.exp((lsy - cy)[..., :, None])
        K = np.matmul(sx * fx.values, np.swapaxes(sy * fy.values, -1, -2))
        rest = C - Cq  # non-zero only where a slice's estimates may overflow (linear path)
        thr = _tiny(dt)
        if K.size == 0:
            small = False
        elif self.spec.is_positive:
            small = float(np.min(K)) < thr
        else:
            small = float(np.min(np.abs(K))) < thr
        bad = None
        if small:
            bad = np.abs(K) < thr  # the folded product may have lost precision to underflow
        if log:
            sign = np.sign(K)
            with np.errstate(divide="ignore"):
                out = np.log(np.abs(K)) + C
            if bad is not None:
                self._fix_entries(bad, sign, out, X, Y)
            return sign, out
        if bad is None and not np.any(rest):
            return K
        # Slow path: some slices overflow the folded range or some entries underflowed.
        sign = np.sign(K)
        with np.errstate(divide="ignore"):
            out = np.log(np.abs(K)) + rest
        if bad is not None:
            self._fix_entries(bad, sign, out, X, Y)
        return sign * _exp_checked(out, f"{self.owner}.kernel", "log_kernel")

    def _fix_entries(
        self, bad: np.ndarray, sign: np.ndarray, out: np.ndarray, X: np.ndarray, Y: np.ndarray
    ) -> None:
        """Recompute flagged entries exactly (signed log-sum-exp over log-features)."""
        sx, lx = self._log_features(X, "query")
        sy, ly = self._log_features(Y, "key")
        lead = bad.shape[:-2]
        n, m = bad.shape[-2:]
        lx = np.broadcast_to(lx, lead + (n, lx.shape[-1]))
        ly = np.broadcast_to(ly, lead + (m, ly.shape[-1]))
        if sx is not None:
            sx = np.broadcast_to(sx, lx.shape)
        if sy is not None:
            sy = np.broadcast_to(sy, ly.shape)
        idx = np.nonzero(bad)
        b_idx, i_idx, j_idx = idx[:-2], idx[-2], idx[-1]
        for sl in iter_chunks(len(i_idx), lx.shape[-1]):
            bi = tuple(b[sl] for b in b_idx)
            xi, yj = bi + (i_idx[sl],), bi + (j_idx[sl],)
            terms = lx[xi] + ly[yj]
            sg = None
            if sx is not None or sy is not None:
                sg = np.ones_like(terms)
                if sx is not None:
                    sg = sg * sx[xi]
                if sy is not None:
                    sg = sg * sy[yj]
            fs, fl = _signed_lse(terms, sg)
            pos = tuple(b[sl] for b in idx)
            sign[pos] = fs
            out[pos] = fl


def _log_where_positive(sign: np.ndarray, logabs: np.ndarray) -> np.ndarray:
    """``logabs`` where ``sign > 0``, ``-inf`` where 0, NaN where negative (dtype kept)."""
    out = np.array(logabs, copy=True)
    out[sign == 0] = -np.inf
    out[sign < 0] = np.nan
    return out


def _tiny(dtype: np.dtype[Any]) -> float:
    """Below this magnitude a folded product may have lost relative precision to underflow."""
    fi = np.finfo(dtype)
    return float(fi.tiny / fi.eps)


def _exp_checked(logabs: np.ndarray, where: str, alternative: str) -> np.ndarray:
    limit = np.log(np.finfo(logabs.dtype).max)
    if logabs.size:
        top = np.max(logabs)
        if top > limit:
            raise NumericalOverflowError(
                f"exp overflow in {where}: the largest log-estimate {float(top):.4g} exceeds "
                f"log(max {logabs.dtype}) = {limit:.4g}; use {alternative}() instead."
            )
    return np.exp(logabs)


def project(U: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Projections ``U @ W.T`` with a leading draw axis when ``W`` is (T, m, d).

    ``U`` (..., n, d), ``W`` (m, d) -> (..., n, m); ``W`` (T, m, d) -> (T, ..., n, m),
    computed as one matrix product over all draws.
    """
    W = W.astype(U.dtype, copy=False)
    if W.ndim == 2:
        return np.matmul(U, W.T)
    T, m, d = W.shape
    P = np.matmul(U.reshape(-1, d), W.reshape(T * m, d).T)  # (N, T*m)
    P = P.reshape(U.shape[:-1] + (T, m))
    return np.moveaxis(P, -2, 0)


def iter_chunks(total: int, per_item: int, budget: int = _CHUNK_ELEMS) -> Iterator[slice]:
    """Slices over ``range(total)`` so that each chunk holds at most ``budget`` elements."""
    step = max(1, budget // max(per_item, 1))
    for start in range(0, total, step):
        yield slice(start, min(total, start + step))


def fast_logsumexp(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """``log(sum(exp(a)))`` along ``axis`` for finite ``a`` (max-shifted; no SciPy overhead)."""
    mx = np.max(a, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - mx), axis=axis))
    out += np.squeeze(mx, axis=axis)
    return out
