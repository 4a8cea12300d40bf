r"""Scaled-feature representation and the draw object (what a sampled feature map exposes).

Every feature map returns :class:`Features` ``(values, log_scale)`` meaning
:math:`\phi(x) = e^{\text{log\_scale}(x)}\,\text{values}(x)` with
:math:`\max_k |\text{values}_k(x)| \le 1` per row. Kernel estimates
:math:`\hat K(x, y) = \phi(x)^\top\phi(y)` are formed by one matrix product of the
values with the row scales folded in after a per-slice common maximum shift, so
nothing overflows; entries whose folded product would underflow are recomputed
exactly from log-features with a signed log-sum-exp.

Backends: draws hold NumPy parameters (directions from NumPy Generators); every method
takes arrays of any supported library (:mod:`rfkit._backend`: NumPy, PyTorch, CuPy,
array_api_strict), moves the parameters to the input's device once (cached per draw)
and returns arrays of the input's library, device and dtype. On NumPy the row blocks of
the heavy steps run on rfkit's thread pool (:mod:`rfkit._parallel`), with results that
do not depend on the number of threads.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .._backend import Backend, get_backend
from .._validation import (
    check_pairwise_memory,
    check_point_pair,
    check_points,
    check_square_norms,
    exp_checked,
    half_precision,
)
from ..exceptions import BackendError
from ._io import save_draw
from ._ops import iter_chunks
from ._repr import array_summary, map_repr

if TYPE_CHECKING:
    from ._base import FeatureMap

__all__ = ["Features", "FeatureDraw", "ExpForm"]


@dataclasses.dataclass(frozen=True)
class Features:
    r"""Scaled features :math:`\phi(x) = \exp(\text{log\_scale})\cdot\text{values}`.

    Parameters
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
        scale = exp_checked(
            self.log_scale,
            "Features.dense() (a row scale)",
            "the scaled representation (values, log_scale) or log-space estimates",
        )
        return scale[..., None] * self.values

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """The dense features :math:`\\phi(x)` for ``np.asarray(features)`` (NumPy's ``__array__``).

        Parameters
        ----------
        dtype : data-type, optional
            The dtype of the result (default: that of :attr:`values`).
        copy : bool, optional
            NumPy 2's copy request: the dense matrix is always a new array, so ``copy=False``
            is refused.

        Returns
        -------
        ndarray of shape (..., n, D)
            ``exp(log_scale)[..., None] * values``, as :meth:`dense`.

        Raises
        ------
        NumericalOverflowError
            If some row scale exceeds the float range; use ``values`` and ``log_scale``.
        BackendError
            If the features hold arrays of another library (PyTorch, CuPy, ...): call
            :meth:`dense` and that library's own conversion.
        ValueError
            For ``copy=False``.
        """
        if copy is False:
            raise ValueError(
                "np.asarray(Features, copy=False): the dense features exp(log_scale) * values are "
                "computed, so a copy cannot be avoided; pass copy=None or copy=True."
            )
        if not (isinstance(self.values, np.ndarray) and isinstance(self.log_scale, np.ndarray)):
            lib = type(self.values).__module__.split(".", 1)[0]
            raise BackendError(
                f"np.asarray(Features) needs NumPy features; these hold {lib}.{type(self.values).__name__} "
                f"arrays (device {getattr(self.values, 'device', 'unknown')}). Call features.dense() and "
                "convert it with the library's own conversion (PyTorch: .detach().cpu().numpy(); "
                "CuPy: cupy.asnumpy(a)), or keep the scaled form (values, log_scale)."
            )
        scale = exp_checked(
            self.log_scale,
            "np.asarray(Features) (a row scale)",
            "the scaled form (Features.values and Features.log_scale) or log-space estimates",
        )
        out = scale[..., None] * self.values
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"Features(values={array_summary(self.values)}, log_scale={array_summary(self.log_scale)})"

    @classmethod
    def from_log(cls, sign: Any | None, logabs: Any) -> Features:
        """Build scaled features from ``sign`` (None: all positive) and ``log|phi|``."""
        xp = get_backend(("logabs", logabs)).xp
        if logabs.shape[-1]:
            ls = xp.max(logabs, axis=-1)
        else:
            ls = xp.zeros_like(logabs[..., 0])
        empty = ~xp.isfinite(ls)  # every feature exactly zero in that row
        if bool(xp.any(empty)):
            ls = xp.where(empty, xp.zeros_like(ls), ls)
        values = xp.exp(logabs - ls[..., None])
        if sign is not None:
            values = values * sign
        return cls(values=values, log_scale=ls)


@dataclasses.dataclass(frozen=True)
class ExpForm:
    r"""The exponential form of a draw whose log-features are affine in the (mapped) input.

    .. math::

        \log\phi_k(x) = W_k^\top u + e_k + c - \tfrac12\|u\|^2,
        \qquad u = \mathrm{transform}(x, \mathrm{side}),

    so :math:`\phi(x) = \exp(u W^\top + e)\cdot e^{c - \|u\|^2/2}` is one matrix product, a
    shift and an ``exp``. Returned by :meth:`FeatureDraw.exp_form` (PRF, hyperbolic PRF,
    CEXP, HCEXP, OPRF, ADERF, SADERF and GERF with ``s=1`` have it); attention code uses
    it to build features in one pass.

    Parameters
    ----------
    W : ndarray of shape (D, d) or (T, D, d)
        Rows :math:`W_k` (NumPy float64; move them with :meth:`FeatureDraw.param_on`).
    offsets : ndarray of shape (D,) or (T, D), or None
        The :math:`e_k` (None when all are 0).
    constant : float
        The constant :math:`c`.
    transform : callable
        ``transform(X, side) -> U``: the input map (rows of ``X`` times :math:`A` for
        ``side="query"``, times :math:`A^{-\top}` for ``side="key"``; the identity for PRF).
        Takes and returns validated arrays of any supported library.
    """

    W: np.ndarray
    offsets: np.ndarray | None
    constant: float
    transform: Callable[[Any, str], Any]


class FeatureDraw(abc.ABC):
    """One draw (or ``T`` independent draws) of a feature map.

    Subclasses implement :meth:`_log_features` (sign and ``log|phi|`` of every
    feature) and may override :meth:`_features` and :meth:`_slog_pairwise` with
    faster exact paths. Inputs reaching these methods are validated arrays of one
    library; :meth:`param` gives the draw's NumPy parameters on that library, device
    and dtype.

    What a draw exposes to attention (and any other consumer that validates its inputs
    once and builds features many times), every map alike:

    * :meth:`features` ``(X, side)``: the scaled :class:`Features` of already validated
      rows (``side`` is ``"query"`` or ``"key"``), with the draw's leading ``T`` axis when
      it has one; no checks are repeated. :meth:`queries` and :meth:`keys` are the
      checked entry points.
    * :meth:`log_features` ``(X, side)``: ``(sign or None, log|phi|)`` of the same rows, for
      exact log-space sums (log-sum-exp with shared shifts).
    * :meth:`param_on` ``(backend, key, value, dtype)``: the draw's per-backend parameter
      cache: a NumPy parameter moved to a backend's device once per (library, device,
      dtype) and kept on the draw, so a draw reused across calls moves it once.
    * :meth:`exp_form` ``()``: an optional fast path: the :class:`ExpForm` ``(W, offsets,
      constant, transform)`` of maps whose features are ``exp(u W^T + e + c - |u|^2/2)``,
      else None. A consumer may build the features from it in one product; the result
      equals :meth:`features` up to round-off.

    Parameters
    ----------
    spec : FeatureMap
        The feature map drawn from (kept as ``self.spec``).
    dim : int
        The input dimension ``d``.
    n_draws : int, optional
        The number ``T`` of independent draws held; None for a single draw (no leading axis).
    """

    #: the attribute holding the array ``W`` that ``spec.from_projection(dim, n_draws, W)`` rebuilds
    #: this draw from (read by :meth:`save` for random maps; deterministic maps have no ``W``)
    _saved_source: ClassVar[str] = "projection"

    def __init__(self, spec: FeatureMap, dim: int, n_draws: int | None = None) -> None:
        self.spec = spec
        self.dim = dim
        self.n_draws = n_draws
        self._params: dict[tuple[Any, ...], Any] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(map={map_repr(self.spec)}, dim={self.dim}, n_draws={self.n_draws})"

    def save(self, path: str | Path) -> Path:
        """Write this draw to ``path``: its arrays in an ``.npz`` file with JSON metadata, atomically.

        :func:`rfkit.features.load_draw` reads it back, equal bit for bit. The file holds the
        map's class and parameters, ``dim``, ``n_draws``, rfkit's version and the format version;
        no pickle. Draws of maps of your own that draw through ``sample_one`` are refused.

        Parameters
        ----------
        path : str or path-like
            The file to write (replaced if it exists; ``.npz`` is the usual suffix).

        Returns
        -------
        Path
            ``path``.
        """
        return save_draw(self, path)

    # ---------------------------------------------------------------- parameters
    def param(self, key: str, value: np.ndarray, like: Any) -> Any:
        """The NumPy parameter ``value`` on the library, device and dtype of ``like``.

        NumPy: a cast (no copy when the dtype already matches). Other libraries: moved to
        the device once per (library, device, dtype) and cached on the draw.
        """
        return self.param_on(get_backend(("X", like)), key, value, like.dtype)

    def param_on(self, backend: Backend, key: str, value: np.ndarray, dtype: Any) -> Any:
        """The NumPy parameter ``value`` on ``backend`` in ``dtype``, cached on the draw.

        ``key`` names the parameter (one key per value: a consumer uses its own prefix).
        NumPy: a cast (no copy when the dtype already matches). Other libraries: moved to
        the backend's device once per (library, device, dtype).
        """
        return backend.from_host(self._params, key, value, dtype)

    # ---------------------------------------------------------------- the draw protocol
    def features(self, X: Any, side: str) -> Features:
        """Scaled features of validated rows ``X`` (..., n, d) -> ([T,] ..., n, D); no checks.

        ``side`` is ``"query"`` or ``"key"``. ``X`` must already be a float array of one
        supported library with ``d = self.dim`` (as :meth:`queries` checks it).
        """
        return self._features(X, side)

    def log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        """``(sign or None, log|phi|)`` of validated rows ``X``, each ([T,] ..., n, D); no checks.

        ``sign`` is None for positive maps.
        """
        return self._log_features(X, side)

    def exp_form(self) -> ExpForm | None:
        """The :class:`ExpForm` of this draw, or None when its features have no such form.

        The default is None; exponential maps override it.
        """
        return None

    # ---------------------------------------------------------------- subclass API
    @abc.abstractmethod
    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        """(sign or None, log|phi|) of shape ([T,] ..., n, D) for validated X."""

    def _features(self, X: Any, side: str) -> Features:
        sign, logabs = self._log_features(X, side)
        return Features.from_log(sign, logabs)

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        """(sign, log|estimate|) for paired rows; generic path through the features."""
        xp = get_backend(("X", X)).xp
        fx = self._features(X, "query")
        fy = self._features(Y, "key")
        s = xp.sum(fx.values * fy.values, axis=-1)
        with np.errstate(divide="ignore"):
            out = xp.log(xp.abs(s)) + fx.log_scale + fy.log_scale
        sign = xp.sign(s)
        bad = xp.abs(s) < _tiny(xp, s.dtype)
        if bool(xp.any(bad)):
            sx, lx = self._log_features(X, "query")
            sy, ly = self._log_features(Y, "key")
            terms = lx + ly  # broadcast ([T,] ..., n, D)
            sg = None
            if sx is not None or sy is not None:
                sg = (sx if sx is not None else 1.0) * (sy if sy is not None else 1.0)
            fs, fl = get_backend(("X", X)).signed_logsumexp(terms, sg)
            sign = xp.where(bad, fs, sign)
            out = xp.where(bad, fl, out)
        return sign, out

    # ---------------------------------------------------------------- validation
    @property
    def owner(self) -> str:
        return f"{self.spec.name} draw"

    def _check(self, X: Any, name: str, bk: Backend | None = None) -> Any:
        X = check_points(X, name, dim=self.dim, backend=bk)
        check_square_norms(X, name, self.owner)
        self._check_memory(X, X)
        return X

    def _check_memory(self, X: Any, Y: Any, *, kernel: bool = False) -> None:
        """Refuse features ([T,] ..., n, D) or a kernel ([T,] ..., n, m) beyond rfkit's memory limit."""
        lead = () if self.n_draws is None else (self.n_draws,)
        width = self.spec.feature_dim(self.dim)
        check_pairwise_memory(X, X, self.owner, lead=lead, width=width)
        check_pairwise_memory(Y, Y, self.owner, lead=lead, width=width)
        if kernel:
            check_pairwise_memory(X, Y, self.owner, lead=lead)

    def _check_pair(self, X: Any, Y: Any, *, paired: bool) -> tuple[Any, Any]:
        X, Y, bk = check_point_pair(X, Y, self.owner, dim=self.dim, paired=paired)
        self._check_memory(X, Y, kernel=not paired)
        if self.n_draws is not None and X.ndim != Y.ndim:
            # the draw axis T leads every output: align the batch axes, not T with a batch axis
            nd = max(X.ndim, Y.ndim)
            xp = bk.xp
            X = xp.reshape(X, (1,) * (nd - X.ndim) + tuple(X.shape))
            Y = xp.reshape(Y, (1,) * (nd - Y.ndim) + tuple(Y.shape))
        return X, Y

    # ---------------------------------------------------------------- public API
    @half_precision()
    def queries(self, X: Any) -> Features:
        """Query-side features of the rows of ``X`` (..., n, d) -> ([T,] ..., n, D)."""
        return self._features(self._check(X, "X"), "query")

    @half_precision()
    def keys(self, Y: Any) -> Features:
        """Key-side features of the rows of ``Y`` (..., n, d) -> ([T,] ..., n, D)."""
        return self._features(self._check(Y, "Y"), "key")

    @half_precision(cast_back=False)
    def slog_kernel(self, X: Any, Y: Any) -> tuple[Any, Any]:
        """Sign and log-magnitude of the kernel estimate, each ([T,] ..., n, m).

        Like :func:`numpy.linalg.slogdet`: the estimate is ``sign * exp(logabs)``;
        ``sign`` is 0 where the estimate is exactly 0 (``logabs = -inf``).
        """
        X, Y = self._check_pair(X, Y, paired=False)
        fx, fy = self._features(X, "query"), self._features(Y, "key")
        return self._combine(fx, fy, X, Y, log=True)  # type: ignore[return-value]

    @half_precision(cast_back=False)
    def log_kernel(self, X: Any, Y: Any) -> Any:
        r"""Log of the kernel estimate :math:`\log\hat K(x_i, y_j)`, ([T,] ..., n, m).

        Finite wherever the estimate is positive (always, for positive maps, even
        when the estimate itself over- or underflows). Where a signed map (trig,
        odd-degree Taylor) gives an estimate <= 0 the entry is NaN (0 gives
        ``-inf``); use :meth:`slog_kernel` to see the sign.
        """
        sign, logabs = self.slog_kernel(X, Y)
        return _log_where_positive(sign, logabs)

    @half_precision()
    def kernel(self, X: Any, Y: Any) -> Any:
        r"""Kernel estimate :math:`\hat K(x_i, y_j) = \phi(x_i)^\top\phi(y_j)`, ([T,] ..., n, m).

        Raises
        ------
        NumericalOverflowError
            If an estimate exceeds the float range (use :meth:`log_kernel`).
        """
        X, Y = self._check_pair(X, Y, paired=False)
        fx, fy = self._features(X, "query"), self._features(Y, "key")
        return self._combine(fx, fy, X, Y, log=False)  # type: ignore[return-value]

    @half_precision(cast_back=False)
    def slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        """Sign and log-magnitude of the paired estimates, each ([T,] ..., n)."""
        X, Y = self._check_pair(X, Y, paired=True)
        if self.n_draws is not None and self.n_draws > 1:
            bk = get_backend(("X", X))
            rows = math.prod(np.broadcast_shapes(tuple(X.shape[:-1]), tuple(Y.shape[:-1])))
            per_trial = self._pair_work_per_trial(rows)
            if per_trial is not None and bk.uses_thread_pool:
                return self._slog_pairwise_in_trial_blocks(bk, X, Y, per_trial)
        return self._slog_pairwise(X, Y)

    def _pair_work_per_trial(self, rows: int) -> int | None:
        """Elements of one trial's paired work on ``rows`` pairs, for maps that compute the paired
        estimates of all trials at once in large arrays with no blocking of their own (they also
        provide :meth:`_trials`): their batched draws then run in fixed blocks of trials on rfkit's
        thread pool (NumPy). None (the default): :meth:`_slog_pairwise` on the whole batch."""
        return None

    def _trials(self, ts: slice) -> FeatureDraw:
        """The draw of trials ``ts`` of this batched draw (the same arrays, sliced)."""
        raise NotImplementedError

    def _sliced(self, ts: slice, **arrays: Any) -> FeatureDraw:
        """A shallow copy for trials ``ts``: ``n_draws`` set, ``arrays`` (already sliced) replaced, an
        empty parameter cache (the cached arrays hold every trial)."""
        sub = copy.copy(self)
        sub.n_draws = ts.stop - ts.start
        sub._params = {}
        for name, value in arrays.items():
            setattr(sub, name, value)
        return sub

    def _slog_pairwise_in_trial_blocks(self, bk: Backend, X: Any, Y: Any, per_trial: int) -> tuple[Any, Any]:
        """:meth:`_slog_pairwise` in fixed blocks of trials on the thread pool.

        The blocks depend on the sizes only (about twice the backend's row-block elements each),
        and a trial's estimates are computed by the same steps in a block as in the whole batch
        (equal to round-off: a product or FFT over fewer rows may group its arithmetic
        differently), so the results do not depend on the thread count.
        """
        T = int(self.n_draws)  # type: ignore[arg-type]
        blocks = list(iter_chunks(T, per_trial, budget=bk.row_block_elems * 2))
        if len(blocks) == 1:
            return self._slog_pairwise(X, Y)
        parts = bk.run_blocks(lambda ts: self._trials(ts)._slog_pairwise(X, Y), blocks)
        xp = bk.xp
        return xp.concat([p[0] for p in parts], axis=0), xp.concat([p[1] for p in parts], axis=0)

    @half_precision(cast_back=False)
    def log_pairwise(self, X: Any, Y: Any) -> Any:
        r"""Log of :math:`\hat K(x_i, y_i)` for paired rows (NaN where the estimate is < 0)."""
        sign, logabs = self.slog_pairwise(X, Y)
        return _log_where_positive(sign, logabs)

    @half_precision()
    def pairwise(self, X: Any, Y: Any) -> Any:
        r"""Estimate of :math:`\exp(x_i^\top y_i)` for paired rows, shape ([T,] ..., n).

        For the exponential maps this uses one projection of :math:`x_i+y_i`
        (half the work of building both feature sets) and equals the diagonal of
        :meth:`kernel` for the same draw up to round-off.
        """
        sign, logabs = self.slog_pairwise(X, Y)
        return sign * exp_checked(logabs, f"{self.owner}.pairwise", "log_pairwise()")

    # ---------------------------------------------------------------- combination
    def _combine(self, fx: Features, fy: Features, X: Any, Y: Any, *, log: bool) -> Any:
        bk = get_backend(("X", fx.values))
        xp = bk.xp
        dt = fx.values.dtype
        lsx, lsy = fx.log_scale, fy.log_scale
        if lsx.shape[-1]:
            cx = xp.max(lsx, axis=-1, keepdims=True)
        else:
            cx = xp.zeros(tuple(lsx.shape[:-1]) + (1,), dtype=dt, device=bk.device)
        if lsy.shape[-1]:
            cy = xp.max(lsy, axis=-1, keepdims=True)
        else:
            cy = xp.zeros(tuple(lsy.shape[:-1]) + (1,), dtype=dt, device=bk.device)
        C = (cx + cy)[..., None]  # (..., 1, 1): one common shift per slice
        D = max(fx.n_columns, 1)
        lim = float(np.log(float(xp.finfo(dt).max))) - float(np.log(D)) - 1.0
        Cq = xp.zeros_like(C) if log else xp.clip(C, min=-lim, max=lim)
        sx = xp.exp((lsx - cx)[..., :, None] + Cq)
        sy = xp.exp((lsy - cy)[..., :, None])
        K = bk.matmul(sx * fx.values, xp.matrix_transpose(sy * fy.values))
        rest = C - Cq  # non-zero only where a slice's estimates may overflow (linear path)
        thr = _tiny(xp, dt)
        if math.prod(K.shape) == 0:
            small = False
        elif self.spec.is_positive:
            small = float(xp.min(bk.detached(K))) < thr
        else:
            small = float(xp.min(xp.abs(bk.detached(K)))) < thr
        bad = None
        if small:
            bad = xp.abs(K) < thr  # the folded product may have lost precision to underflow
        if log:
            sign = xp.sign(K)
            with np.errstate(divide="ignore"):
                out = xp.log(xp.abs(K)) + C
            if bad is not None:
                sign, out = self._fix_entries(bk, bad, sign, out, X, Y)
            return sign, out
        if bad is None and not bool(xp.any(rest != 0)):
            return K
        # Slow path: some slices overflow the folded range or some entries underflowed.
        sign = xp.sign(K)
        with np.errstate(divide="ignore"):
            out = xp.log(xp.abs(K)) + rest
        if bad is not None:
            sign, out = self._fix_entries(bk, bad, sign, out, X, Y)
        return sign * exp_checked(out, f"{self.owner}.kernel", "log_kernel()")

    def _fix_entries(self, bk: Backend, bad: Any, sign: Any, out: Any, X: Any, Y: Any) -> tuple[Any, Any]:
        """Recompute flagged entries exactly (signed log-sum-exp over log-features)."""
        xp = bk.xp
        sx, lx = self._log_features(X, "query")
        sy, ly = self._log_features(Y, "key")
        lead = tuple(bad.shape[:-2])
        n, m = bad.shape[-2:]
        Dx = lx.shape[-1]
        lx = xp.reshape(xp.broadcast_to(lx, lead + (n, Dx)), (-1, Dx))
        ly = xp.reshape(xp.broadcast_to(ly, lead + (m, Dx)), (-1, Dx))
        if sx is not None:
            sx = xp.reshape(xp.broadcast_to(sx, lead + (n, Dx)), (-1, Dx))
        if sy is not None:
            sy = xp.reshape(xp.broadcast_to(sy, lead + (m, Dx)), (-1, Dx))
        flat_bad = xp.reshape(bad, (-1,))
        (pos,) = xp.nonzero(flat_bad)  # flat indices into (math.prod(lead), n, m)
        b_idx = pos // (n * m)
        i_idx = (pos // m) % n
        j_idx = pos % m
        rows_x = b_idx * n + i_idx
        rows_y = b_idx * m + j_idx
        sign_f = xp.reshape(sign, (-1,))
        out_f = xp.reshape(out, (-1,))
        fs_parts, fl_parts = [], []
        for sl in iter_chunks(int(pos.shape[0]), Dx):
            rx, ry = rows_x[sl], rows_y[sl]
            terms = xp.take(lx, rx, axis=0) + xp.take(ly, ry, axis=0)
            sg = None
            if sx is not None or sy is not None:
                sg = xp.ones_like(terms)
                if sx is not None:
                    sg = sg * xp.take(sx, rx, axis=0)
                if sy is not None:
                    sg = sg * xp.take(sy, ry, axis=0)
            fs, fl = bk.signed_logsumexp(terms, sg)
            fs_parts.append(fs)
            fl_parts.append(fl)
        if fs_parts:
            full_s = xp.zeros_like(sign_f)
            full_l = xp.zeros_like(out_f)
            full_s[pos] = xp.concat(fs_parts)
            full_l[pos] = xp.concat(fl_parts)
            sign_f = xp.where(flat_bad, full_s, sign_f)
            out_f = xp.where(flat_bad, full_l, out_f)
        return xp.reshape(sign_f, tuple(sign.shape)), xp.reshape(out_f, tuple(out.shape))


def _log_where_positive(sign: Any, logabs: Any) -> Any:
    """``logabs`` where ``sign > 0``, ``-inf`` where 0, NaN where negative (dtype kept)."""
    xp = get_backend(("logabs", logabs)).xp
    out = xp.where(sign == 0, xp.full_like(logabs, -np.inf), logabs)
    return xp.where(sign < 0, xp.full_like(logabs, np.nan), out)


def _tiny(xp: Any, dtype: Any) -> float:
    """Below this magnitude a folded product may have lost relative precision to underflow."""
    fi = xp.finfo(dtype)
    return float(fi.smallest_normal) / float(fi.eps)
