r"""Randomised polynomial maps: random Maclaurin features and TensorSketch.

**Random Maclaurin** (Kar & Karnick, "Random Feature Maps for Dot Product Kernels",
AISTATS 2012). For :math:`e^t = \sum_n a_n t^n`, :math:`a_n = 1/n!`, one feature draws a
degree :math:`N` with :math:`P(N=n) = q_n` and :math:`N` independent vectors
:math:`w_1..w_N` (Rademacher, or Gaussian), and

.. math:: Z(x) = \sqrt{a_N/q_N}\,\prod_{j=1}^N w_j^\top x,\qquad
    \mathbb E[Z(x)Z(y)] = \sum_n q_n\frac{a_n}{q_n}(x^\top y)^n = e^{x^\top y}.

rfkit uses the geometric measure :math:`q_n = (p-1)p^{-(n+1)}` (the paper's
:math:`P(N=n) = p^{-(n+1)}` with its :math:`p = 2`, normalised for other :math:`p > 1`), or
that measure truncated to :math:`n \le` ``max_degree`` (then the estimator is unbiased for
the Taylor truncation :math:`T_K(t)` instead).

**TensorSketch** (Pham & Pagh, "Fast and Scalable Polynomial Kernels via Explicit Feature
Maps", KDD 2013). A count sketch :math:`C(x)_k = \sum_{i: h(i)=k}s(i)x_i` with a random hash
:math:`h:[d]\to[D]` and signs :math:`s`; the degree-:math:`j` sketch is the circular
convolution of :math:`j` independent count sketches,
:math:`\mathrm{TS}_j(x) = \mathrm{FFT}^{-1}\big(\prod_{l\le j}\mathrm{FFT}(C_l(x))\big)`, with
:math:`\mathbb E\langle\mathrm{TS}_j(x), \mathrm{TS}_j(y)\rangle = (x^\top y)^j`. rfkit
concatenates independent sketches of every degree :math:`j \le n` scaled by
:math:`1/\sqrt{j!}` (and the constant 1 for :math:`j = 0`), an unbiased estimator of
:math:`T_n(x^\top y) = \sum_{j\le n}(x^\top y)^j/j!`.

Both maps are signed: features are returned as sign and log-magnitude (in log space for
any input norm). Exact variances: docs page *Theory*, section 1c, and :func:`rfkit.theory.mse`.
"""

from __future__ import annotations

import dataclasses
from math import lgamma
from typing import Any

import numpy as np

from .._backend import get_backend
from .._random import check_rng
from .._validation import check_int, check_n_features, check_option, check_real
from ._base import FeatureMap
from ._draw import FeatureDraw
from ._ops import project

__all__ = ["RandomMaclaurin", "TensorSketch", "MaclaurinDraw", "TensorSketchDraw", "DISTRIBUTIONS"]

#: Distributions of the random Maclaurin projection vectors.
DISTRIBUTIONS = ("rademacher", "gaussian")


def _log_degree_probability(n: np.ndarray, p: float, max_degree: int | None) -> np.ndarray:
    r""":math:`\log q_n` of the (possibly truncated) geometric measure :math:`q_n \propto p^{-n}`."""
    r = 1.0 / p
    out = np.log1p(-r) + n * np.log(r)
    if max_degree is not None:
        out = out - np.log1p(-(r ** (max_degree + 1)))
    return out


@dataclasses.dataclass(frozen=True)
class RandomMaclaurin(FeatureMap):
    r"""Random Maclaurin features for :math:`e^{x^\top y}` (Kar & Karnick, AISTATS 2012).

    Feature :math:`i` draws a degree :math:`N_i` with :math:`P(N = n) = q_n =
    (p-1)p^{-(n+1)}` and :math:`N_i` independent vectors :math:`w_{ij}` with iid entries
    (Rademacher :math:`\pm1`, or standard normal), and

    .. math:: \phi_i(x) = \frac1{\sqrt m}\sqrt{\frac{1}{N_i!\,q_{N_i}}}\prod_{j=1}^{N_i}w_{ij}^\top x,
        \qquad \mathbb E[\phi(x)^\top\phi(y)] = \sum_{n\ge0}\frac{(x^\top y)^n}{n!} = e^{x^\top y}.

    Unbiased for every :math:`x, y` (the series converges absolutely) with finite variance:
    with :math:`\kappa = \mathbb E[(w^\top x)^2(w^\top y)^2] = \|x\|^2\|y\|^2 + 2(x^\top y)^2 -
    2\sum_i x_i^2y_i^2` (Rademacher; Gaussian: without the last term) and :math:`r = 1/p`,

    .. math:: m\,\mathrm{Var}\,\hat K = \frac{I_0\big(2\sqrt{\kappa/r}\big)}{1-r} - e^{2x^\top y}

    (:math:`I_0` the modified Bessel function; derived on the docs page *Theory*, section 1c). With
    ``max_degree=K`` the measure is truncated to :math:`n \le K` (renormalised) and the map is
    unbiased for :math:`T_K(x^\top y) = \sum_{n\le K}(x^\top y)^n/n!` instead of
    :math:`e^{x^\top y}` (its MSE for :math:`e^{x^\top y}` then includes the truncation bias).

    Parameters
    ----------
    n_features : int
        Number of features ``m`` (columns).
    p : float, default=2.0
        Degree measure parameter, :math:`p > 1`; mean degree :math:`1/(p-1)`. The paper uses
        :math:`p = 2`. (The variance-optimal measure for one pair is Poisson with mean
        :math:`\sqrt\kappa`; it depends on the data, so rfkit keeps the paper's geometric one.)
    max_degree : int or None, default=None
        Truncation degree :math:`K \ge 0`, or None for the untruncated (exact-in-mean) map.
    distribution : {"rademacher", "gaussian"}, default="rademacher"
        Entries of the projection vectors (Rademacher has the smaller variance).

    Notes
    -----
    Estimates can be negative (``is_positive`` is False). Memory and time grow with the
    largest sampled degree, about :math:`\log_p(m)` for one draw.
    """

    n_features: int
    p: float = 2.0
    max_degree: int | None = None
    distribution: str = "rademacher"
    is_positive = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_features", check_n_features(self.n_features, "RandomMaclaurin"))
        object.__setattr__(self, "p", check_real(self.p, "p", "RandomMaclaurin", low=1.0, closed="neither"))
        if self.max_degree is not None:
            object.__setattr__(
                self, "max_degree", check_int(self.max_degree, "max_degree", "RandomMaclaurin", low=0)
            )
        check_option(self.distribution, "distribution", "RandomMaclaurin", DISTRIBUTIONS)

    def feature_dim(self, dim: int) -> int:
        return self.n_features

    def log_degree_probability(self, n: Any) -> np.ndarray:
        r""":math:`\log P(N = n)` of the degree measure (``n`` an integer array)."""
        return _log_degree_probability(np.asarray(n, dtype=np.float64), self.p, self.max_degree)

    def _degrees(self, g: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Degrees by inversion of the (truncated) geometric CDF."""
        r = 1.0 / self.p
        u = g.random(shape)
        if self.max_degree is not None:
            u = u * -np.expm1((self.max_degree + 1) * np.log(r))  # u * (1 - r^(K+1))
        N = np.floor(np.log1p(-u) / np.log(r)).astype(np.int64)
        if self.max_degree is not None:
            N = np.minimum(N, self.max_degree)  # round-off at the top of the truncated CDF
        return N

    def _vectors(self, g: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if self.distribution == "rademacher":
            return 2.0 * g.integers(0, 2, size=shape).astype(np.float64) - 1.0
        return g.standard_normal(shape)

    def _projection(self, dim: int, *, rng: Any, n_draws: int | None) -> np.ndarray:
        """Rows ``[feature index, w (d)]`` in (feature, level) order; index -1 pads a draw.

        Shape (J, d + 1) for one draw (J = total degree) or (T, R, d + 1) for ``n_draws=T``
        (R = the largest total degree of the T draws).
        """
        g = check_rng(rng)
        m = self.n_features
        T = 1 if n_draws is None else n_draws
        N = self._degrees(g, (T, m))
        J = N.sum(axis=1)
        R = int(J.max())
        V = self._vectors(g, (T, R, dim))
        feat = np.repeat(np.tile(np.arange(m), T), N.ravel())  # feature of every row, draws concatenated
        tt = np.repeat(np.arange(T), J)
        pos = np.arange(feat.size) - np.repeat(np.cumsum(J) - J, J)  # row position within its draw
        idx = np.full((T, R), -1.0)
        idx[tt, pos] = feat
        rows = np.concatenate([idx[..., None], V], axis=-1)
        return rows[0] if n_draws is None else rows

    def _projection_streams(self, dim: int, rngs: list[Any]) -> np.ndarray:
        parts = [self._projection(dim, rng=r, n_draws=None) for r in rngs]
        R = max(p.shape[0] for p in parts)
        out = np.zeros((len(parts), R, dim + 1))
        out[..., 0] = -1.0
        for t, part in enumerate(parts):
            out[t, : part.shape[0]] = part
        return out

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        assert W is not None
        return MaclaurinDraw(self, dim, n_draws, W)


class MaclaurinDraw(FeatureDraw):
    r"""A draw of :class:`RandomMaclaurin`.

    Features are ordered by decreasing degree within each draw (the estimate is a sum over
    features, so the order does not matter). The factor vectors are stored by level:
    level :math:`j` holds :math:`w_{ij}` of the features with :math:`N_i > j`.

    Attributes
    ----------
    degrees : ndarray of shape (m,) or (T, m)
        Sampled degrees :math:`N_i` (non-increasing along the feature axis).
    rows : ndarray
        The draw as sampled: ``[feature index, w]`` rows (see ``RandomMaclaurin._projection``).
    """

    _saved_source = "rows"  # the array RandomMaclaurin._from_projection builds the draw from

    def __init__(self, spec: RandomMaclaurin, dim: int, n_draws: int | None, rows: np.ndarray) -> None:
        super().__init__(spec, dim, n_draws)
        self.rows = rows
        r3 = rows if rows.ndim == 3 else rows[None]
        T, R = r3.shape[0], r3.shape[1]
        m = spec.n_features
        idx = r3[..., 0].astype(np.int64)  # (T, R), -1 pads
        V = r3[..., 1:]
        valid = idx >= 0
        flat = (np.arange(T)[:, None] * m + idx)[valid]
        N = np.bincount(flat, minlength=T * m).reshape(T, m)
        start = np.cumsum(N, axis=1) - N  # first row of each feature (rows are in feature order)
        order = np.argsort(-N, axis=1, kind="stable")
        Ns = np.take_along_axis(N, order, axis=1)
        L = int(Ns.max()) if Ns.size else 0
        levels, acts = [], []
        for j in range(L):
            Cj = int((Ns > j).sum(axis=1).max())
            feat = order[:, :Cj]
            act = Ns[:, :Cj] > j
            rowpos = np.where(act, np.take_along_axis(start, feat, axis=1) + j, 0)
            Wj = np.take_along_axis(V, rowpos[..., None], axis=1) if R else np.zeros((T, Cj, dim))
            levels.append(np.where(act[..., None], Wj, 0.0))
            acts.append(act)
        self._sizes = [int(a.shape[1]) for a in acts]
        self._W = np.concatenate(levels, axis=1) if levels else np.zeros((T, 0, dim))  # (T, S, d)
        self._act = (np.concatenate(acts, axis=1) if acts else np.zeros((T, 0), dtype=bool)).astype(
            np.float64
        )
        lw = np.array(
            [0.5 * (-lgamma(n + 1.0) - float(spec.log_degree_probability(n))) for n in range(L + 1)]
        )
        self._logw = lw[Ns] - 0.5 * np.log(m)  # (T, m): log of sqrt(a_N / q_N) / sqrt(m)
        self.degrees = Ns if n_draws is not None else Ns[0]
        if n_draws is None:
            self._W, self._act, self._logw = self._W[0], self._act[0], self._logw[0]

    def _pair_work_per_trial(self, rows: int) -> int | None:
        """Elements of one trial's paired work: the factor logs of both sides and the features."""
        return rows * (2 * int(self._W.shape[-2]) + int(self._logw.shape[-1]))

    def _trials(self, ts: slice) -> FeatureDraw:
        return self._sliced(
            ts,
            rows=self.rows[ts],
            degrees=self.degrees[ts],
            _W=self._W[ts],
            _act=self._act[ts],
            _logw=self._logw[ts],
        )

    def _factor_logs(self, X: Any) -> tuple[Any, Any]:
        """Sign and ``log|w^T x|`` of every stored factor, ([T,] ..., n, S); inactive slots give (1, 0)."""
        xp = get_backend(("X", X)).xp
        P = project(X, self.param("W", self._W, X))  # ([T,] ..., n, S)
        act = self.param("act", self._act, X) > 0.5
        if self.n_draws is not None:
            act = xp.reshape(act, (act.shape[0],) + (1,) * (X.ndim - 1) + (act.shape[-1],))
        P = xp.where(act, P, xp.ones_like(P))
        with np.errstate(divide="ignore"):
            return xp.sign(P), xp.log(xp.abs(P))

    def _per_feature(self, X: Any, s: Any, la: Any, weight: float) -> tuple[Any, Any]:
        """Sum the factor logs (and multiply the signs) of each feature over its levels.

        Level ``j`` occupies the stored columns ``o_j .. o_j + C_j`` and belongs to features
        ``0 .. C_j`` (features are sorted by decreasing degree), so each level is one slice.
        Returns sign and ``weight * log|sqrt(a_N/q_N)/sqrt(m)| + sum of factor logs``, ([T,] ..., n, m).
        """
        bk = get_backend(("X", X))
        xp = bk.xp
        batched = self.n_draws is not None
        logw = self.param("logw", self._logw, X)
        if batched:
            logw = xp.reshape(logw, (logw.shape[0],) + (1,) * (X.ndim - 1) + (logw.shape[-1],))
        m = int(self._logw.shape[-1])
        shape = ((int(self._logw.shape[0]),) if batched else ()) + tuple(X.shape[:-1]) + (m,)
        acc = xp.zeros(shape, dtype=X.dtype, device=bk.device) + weight * logw
        sg = xp.ones(shape, dtype=X.dtype, device=bk.device)
        o = 0
        for c in self._sizes:  # one slice per level (at most the largest sampled degree)
            if bk.inplace_ok:
                acc[..., :c] = acc[..., :c] + la[..., o : o + c]
                sg[..., :c] = sg[..., :c] * s[..., o : o + c]
            else:  # autograd records the call: whole-array updates, no slice written twice
                rest = tuple(la.shape[:-1]) + (m - c,)
                acc = acc + xp.concat([la[..., o : o + c], bk.zeros(rest, la.dtype)], axis=-1)
                sg = sg * xp.concat(
                    [s[..., o : o + c], xp.ones(rest, dtype=s.dtype, device=bk.device)], axis=-1
                )
            o += c
        return sg, acc

    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        if not self._sizes:
            return self._per_feature(X, None, None, 1.0)
        s, la = self._factor_logs(X)
        return self._per_feature(X, s, la, 1.0)

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        r"""Sum over features of :math:`\frac{a_N}{m q_N}\prod_j (w_j^\top x)(w_j^\top y)` in signed log space."""
        bk = get_backend(("X", X))
        if self._sizes:
            sx, lx = self._factor_logs(X)
            sy, ly = self._factor_logs(Y)
            sg, acc = self._per_feature(X + Y, sx * sy, lx + ly, 2.0)
        else:
            sg, acc = self._per_feature(X + Y, None, None, 2.0)
        return bk.signed_logsumexp(acc, sg, axis=-1)


@dataclasses.dataclass(frozen=True)
class TensorSketch(FeatureMap):
    r"""TensorSketch features for the Taylor truncation :math:`T_n(x^\top y)` (Pham & Pagh, KDD 2013).

    .. math:: \phi(x) = \Big(1,\ \tfrac{1}{\sqrt{1!}}\mathrm{TS}_1(x),\ \dots,\ \tfrac{1}{\sqrt{n!}}\mathrm{TS}_n(x)\Big),
        \qquad \mathbb E[\phi(x)^\top\phi(y)] = \sum_{j=0}^n\frac{(x^\top y)^j}{j!} = T_n(x^\top y),

    where :math:`\mathrm{TS}_j(x)\in\mathbb R^D` is the circular convolution (by FFT) of
    :math:`j` independent count sketches of :math:`x` (fully random hashes
    :math:`h:[d]\to[D]` and signs), independent across degrees. Unbiased for
    :math:`T_n`; as an estimator of :math:`e^{x^\top y}` it carries the truncation bias
    :math:`T_n(t) - e^t`. Exact variance (derived on the docs page *Theory*, section 1c; it depends on
    the parity of :math:`D`): :math:`\mathrm{Var} = \sum_{j=1}^n V_j/(j!)^2` with

    .. math:: V_j = \frac{(c+w_3)^j + (c+w_4)^j - 2c^j}{D}
        + \frac{\gcd(2, D)}{D^2}\big[(c+w_3+w_4)^j - (c+w_3)^j - (c+w_4)^j + c^j\big],

    :math:`c = (x^\top y)^2`, :math:`w_3 = \|x\|^2\|y\|^2 - \sum_i x_i^2y_i^2`,
    :math:`w_4 = (x^\top y)^2 - \sum_i x_i^2y_i^2`.

    Parameters
    ----------
    n_features : int
        Sketch size ``D`` of every degree (>= 1); the map has ``1 + degree * D`` columns.
    degree : int
        Truncation degree ``n`` (>= 0; 0 is the constant map 1, with no randomness).

    Notes
    -----
    Signed for ``degree >= 1`` (``is_positive`` is False). Features are computed on
    :math:`x/\max_i|x_i|` and rescaled in log space (degree-:math:`j` sketches are
    homogeneous of degree :math:`j`), so nothing overflows.
    """

    n_features: int
    degree: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_features", check_n_features(self.n_features, "TensorSketch"))
        object.__setattr__(self, "degree", check_int(self.degree, "degree", "TensorSketch", low=0))

    @property
    def is_positive(self) -> bool:  # type: ignore[override]
        return self.degree == 0

    @property
    def is_random(self) -> bool:  # type: ignore[override]
        return self.degree > 0

    @property
    def n_sketches(self) -> int:
        """Number of count sketches: :math:`n(n+1)/2` (degree :math:`j` uses :math:`j` of them)."""
        return self.degree * (self.degree + 1) // 2

    def feature_dim(self, dim: int) -> int:
        return 1 + self.degree * self.n_features

    def _projection(self, dim: int, *, rng: Any, n_draws: int | None) -> np.ndarray:
        """Hashes and signs, shape ([T,] K, 2, d): ``[..., 0, :]`` buckets in [0, D), ``[..., 1, :]`` signs."""
        g = check_rng(rng)
        lead = () if n_draws is None else (n_draws,)
        K = self.n_sketches
        h = g.integers(0, self.n_features, size=lead + (K, dim)).astype(np.float64)
        s = 2.0 * g.integers(0, 2, size=lead + (K, dim)).astype(np.float64) - 1.0
        return np.stack([h, s], axis=-2)

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        if W is None:  # degree 0: nothing random
            lead = () if n_draws is None else (n_draws,)
            W = np.zeros(lead + (0, 2, dim))
        return TensorSketchDraw(self, dim, n_draws, W)


class TensorSketchDraw(FeatureDraw):
    r"""A draw of :class:`TensorSketch`.

    The :math:`D` columns of degree :math:`j` are the orthonormal real Fourier coefficients of
    :math:`\mathrm{TS}_j(x)/\sqrt{j!}`: with :math:`F = \mathrm{rfft}(\mathrm{TS}_j(x)) =
    \prod_l\mathrm{rfft}(C_l(x))`, the columns :math:`(F_0, \sqrt2\,\mathrm{Re}F_k,
    \sqrt2\,\mathrm{Im}F_k, F_{D/2})/\sqrt D` (:math:`0<k<D/2`; :math:`F_{D/2}` for even
    :math:`D`). This is an orthogonal transform of :math:`\mathrm{TS}_j(x)` (Parseval), so every
    inner product, hence every estimate, is exactly the TensorSketch one, and it needs no
    inverse FFT (nor leaves FFT round-off in place of the exact zeros of empty buckets).

    Attributes
    ----------
    hashes : ndarray of shape ([T,] K, 2, d)
        Buckets ``[..., 0, :]`` and signs ``[..., 1, :]`` of the ``K = n(n+1)/2`` count
        sketches (degree ``j`` uses sketches ``j(j-1)/2 .. j(j+1)/2 - 1``).
    """

    _saved_source = "hashes"  # the array TensorSketch._from_projection builds the draw from

    def __init__(self, spec: TensorSketch, dim: int, n_draws: int | None, hs: np.ndarray) -> None:
        super().__init__(spec, dim, n_draws)
        self.hashes = hs
        D = spec.n_features
        h = hs[..., 0, :].astype(np.int64)  # ([T,] K, d)
        s = hs[..., 1, :]
        K = h.shape[-2]
        # dense count-sketch matrices, rows (sketch k, bucket b): S[k*D + b, i] = s_k(i) [h_k(i) = b]
        dense = np.zeros(h.shape[:-1] + (D, dim))
        np.put_along_axis(dense, h[..., None, :], s[..., None, :], axis=-2)
        self._S = dense.reshape(h.shape[:-2] + (K * D, dim))
        self._lf = [0.5 * lgamma(j + 1.0) for j in range(spec.degree + 1)]
        # log of the orthonormal real-DFT weights: 1/sqrt(D), sqrt(2/D) on the paired frequencies
        half = (D - 1) // 2
        self._off = np.full(D, -0.5 * np.log(D))
        self._off[1 : 2 * half + 1] += 0.5 * np.log(2.0)
        # Parseval: <a, b> = sum_k w_k Re(A_k conj B_k) over the rfft bins, w = (1, 2, ..., 2[, 1]) / D
        self._wfreq = np.full(D // 2 + 1, 2.0 / D)
        self._wfreq[0] = 1.0 / D
        if D % 2 == 0:
            self._wfreq[-1] = 1.0 / D

    def _pair_work_per_trial(self, rows: int) -> int | None:
        """Elements of one trial's paired work: the count sketches of both sides (and their spectra)."""
        S: Any = self._S
        return 2 * rows * int(S.shape[-2])

    def _trials(self, ts: slice) -> FeatureDraw:
        return self._sliced(ts, hashes=self.hashes[ts], _S=self._S[ts])

    def _spectra(self, X: Any) -> tuple[Any, list[Any]]:
        r"""``log max|x_i|`` and, per degree :math:`j\ge1`, :math:`\mathrm{rfft}(\mathrm{TS}_j(x/\max|x_i|))`."""
        bk = get_backend(("X", X))
        xp = bk.xp
        spec: TensorSketch = self.spec  # type: ignore[assignment]
        lead = ((self.n_draws,) if self.n_draws is not None else ()) + tuple(X.shape[:-1])
        scale = xp.max(xp.abs(X), axis=-1)  # (..., n_pts)
        U = X / xp.where(scale > 0, scale, xp.ones_like(scale))[..., None]
        with np.errstate(divide="ignore"):
            lscale = xp.log(scale)
        P = project(U, self.param("S", self._S, U))  # (lead, K*D)
        F = xp.fft.rfft(
            xp.reshape(P, lead + (spec.n_sketches, spec.n_features)), axis=-1
        )  # (lead, K, D//2+1)
        out, o = [], 0
        for j in range(1, spec.degree + 1):
            out.append(xp.prod(F[..., o : o + j, :], axis=-2))  # rfft of TS_j: convolution theorem
            o += j
        return lscale, out

    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        bk = get_backend(("X", X))
        xp = bk.xp
        spec: TensorSketch = self.spec  # type: ignore[assignment]
        n, D = spec.degree, spec.n_features
        lead = ((self.n_draws,) if self.n_draws is not None else ()) + tuple(X.shape[:-1])
        zero_col = xp.zeros(lead + (1,), dtype=X.dtype, device=bk.device)
        if n == 0:
            return xp.ones_like(zero_col), zero_col
        lscale, spectra = self._spectra(X)
        h = (D - 1) // 2  # frequencies 1..h carry a real and an imaginary part
        off = self.param("off", self._off, X)
        signs, logs = [xp.ones_like(zero_col)], [zero_col]
        with np.errstate(divide="ignore"):
            for j, Fj in enumerate(spectra, start=1):
                re, im = xp.real(Fj), xp.imag(Fj)
                parts = [re[..., :1], re[..., 1 : h + 1], im[..., 1 : h + 1]]
                if D % 2 == 0:
                    parts.append(re[..., D // 2 : D // 2 + 1])
                v = xp.concat(parts, axis=-1)  # (lead, D)
                signs.append(xp.sign(v))
                logs.append(xp.log(xp.abs(v)) + (j * lscale - self._lf[j])[..., None] + off)
        return xp.concat(signs, axis=-1), xp.concat(logs, axis=-1)

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        r""":math:`1 + \sum_j \langle\mathrm{TS}_j(x), \mathrm{TS}_j(y)\rangle/j!` from the spectra.

        Parseval on the rfft bins; degrees combined in signed log space.
        """
        bk = get_backend(("X", X))
        xp = bk.xp
        spec: TensorSketch = self.spec  # type: ignore[assignment]
        lead = ((self.n_draws,) if self.n_draws is not None else ()) + tuple((X + Y).shape[:-1])
        zero = xp.zeros(lead + (1,), dtype=X.dtype, device=bk.device)
        if spec.degree == 0:
            return xp.ones_like(zero[..., 0]), zero[..., 0]
        lx, Fx = self._spectra(X)
        ly, Fy = self._spectra(Y)
        w = self.param("wfreq", self._wfreq, X)  # Parseval weights of the rfft bins, / D
        signs, logs = [xp.ones_like(zero)], [zero]
        with np.errstate(divide="ignore"):
            for j in range(1, spec.degree + 1):
                a, b = Fx[j - 1], Fy[j - 1]
                s = xp.sum(w * (xp.real(a) * xp.real(b) + xp.imag(a) * xp.imag(b)), axis=-1)
                signs.append(xp.sign(s)[..., None])
                logs.append((xp.log(xp.abs(s)) + j * (lx + ly) - 2.0 * self._lf[j])[..., None])
        return bk.signed_logsumexp(xp.concat(logs, axis=-1), xp.concat(signs, axis=-1), axis=-1)
