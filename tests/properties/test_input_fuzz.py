"""Fuzzing the kernel and attention entry points with shapes, dtypes and values.

The only allowed outcomes: a named rfkit error (or an rfkit warning, which the test escalates),
or a finite result of the right shape, dtype and namespace. A raw NumPy warning (overflow,
invalid value), a traceback from NumPy/SciPy, a NaN or an infinity is a failure.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import rfkit as rk
from rfkit.exceptions import RFKitError, RFKitWarning

CI = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: mostly valid dtypes, so that most examples reach the computation
DTYPES = [
    np.float64,
    np.float64,
    np.float64,
    np.float32,
    np.float32,
    np.float16,
    np.int64,
    np.bool_,
    np.complex128,
]
SCALES = [0.0, 1e-300, 1e-3, 0.3, 1.0, 5.0, 30.0, 1e3, 1e10, 1e20, 1e200]
F = rk.features
MAPS = [
    F.Positive(4),
    F.Positive(4, projection="orthogonal"),
    F.Trig(3, projection="qmc"),
    F.Hyperbolic(2, projection="structured"),
    F.CEXP(4, A=np.array([2.0, 0.5, 1.0])),
    F.HCEXP(3),
    F.OPRF(4, A=-0.1),
    F.Taylor(3),
    F.Limit(2),
]


@st.composite
def arrays(draw: Any, d: int | None = None, rows: tuple[int, int] = (0, 4), dtype: Any = None) -> np.ndarray:
    """An array (batch..., n, d) of any dtype and scale, sometimes with one NaN or infinity."""
    dtype = draw(st.sampled_from(DTYPES)) if dtype is None else dtype
    lead = draw(st.sampled_from([(), (), (2,), (1, 2)]))
    n = draw(st.integers(*rows))
    d = draw(st.integers(0, 4)) if d is None else d
    scale = draw(st.sampled_from(SCALES))
    a = scale * np.random.default_rng(draw(st.integers(0, 2**32 - 1))).normal(size=lead + (n, d))
    special = draw(st.sampled_from([None] * 7 + [np.nan, np.inf, -np.inf]))
    if special is not None and a.size:
        a.flat[draw(st.integers(0, a.size - 1))] = special
    if dtype is np.bool_:
        return a > 0
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dtype)


def _float_out(*arrays: np.ndarray) -> type:
    return np.float32 if all(a.dtype == np.float32 for a in arrays) else np.float64


def _batch(*arrays: np.ndarray) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*(a.shape[:-2] for a in arrays)))
    except ValueError:
        return None


def outcome(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None if it raised an rfkit error or warning; raw warnings fail the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            out = fn()
        except (RFKitError, RFKitWarning) as exc:
            event(f"rfkit {type(exc).__name__}")
            return None
    event("result")
    return out


def check_result(out: Any, shape: tuple[int, ...] | None, dtype: type, *, allow_nan: bool = False) -> None:
    assert isinstance(out, np.ndarray), type(out)  # NumPy in, NumPy out
    assert shape is not None, "the inputs do not fit together, yet no rfkit error was raised"
    assert out.shape == shape, (out.shape, shape)
    assert out.dtype == dtype, (out.dtype, dtype)
    finite = np.isfinite(out) | (np.isnan(out) if allow_nan else False)
    assert np.all(finite), out


@st.composite
def pairs(draw: Any) -> tuple[np.ndarray, np.ndarray]:
    d = draw(st.integers(0, 4))
    X = draw(arrays(d=d))
    return X, draw(arrays(d=d if draw(st.integers(0, 9)) else draw(st.integers(0, 4))))


@CI
@given(xy=pairs())
def test_softmax_kernel_fuzz(xy: tuple[np.ndarray, np.ndarray]) -> None:
    X, Y = xy
    batch = _batch(X, Y) if X.ndim >= 2 and Y.ndim >= 2 else None
    ok = batch is not None and X.shape[-1] == Y.shape[-1]
    shape = batch + (X.shape[-2], Y.shape[-2]) if ok else None  # type: ignore[operator]
    for fn in (rk.softmax_kernel, rk.log_softmax_kernel):
        out = outcome(lambda fn=fn: fn(X, Y))  # type: ignore[misc]
        if out is not None:
            check_result(out, shape, _float_out(X, Y))


@CI
@given(
    X=arrays(d=3),
    Y=arrays(d=3),
    which=st.integers(0, len(MAPS) - 1),
    n_draws=st.sampled_from([None, 2]),
)
def test_feature_draws_fuzz(X: np.ndarray, Y: np.ndarray, which: int, n_draws: int | None) -> None:
    fm = MAPS[which]
    draw = fm.sample(3, rng=7, n_draws=n_draws)
    T = () if n_draws is None else (n_draws,)
    batch = _batch(X, Y)
    dt = _float_out(X, Y)
    kshape = None if batch is None else T + batch + (X.shape[-2], Y.shape[-2])
    out = outcome(lambda: draw.kernel(X, Y))
    if out is not None:
        check_result(out, kshape, dt)
    out = outcome(lambda: draw.log_kernel(X, Y))
    if out is not None:  # NaN marks an estimate <= 0 of a signed map (documented); never +inf
        check_result(np.where(np.isneginf(out), 0.0, out), kshape, dt, allow_nan=not fm.is_positive)
    if X.shape[-2] == Y.shape[-2]:
        pshape = None if batch is None else T + batch + (X.shape[-2],)
        out = outcome(lambda: draw.pairwise(X, Y))
        if out is not None:
            check_result(out, pshape, dt)
    feats = outcome(lambda: draw.queries(X))
    if feats is not None:
        n_cols = fm.feature_dim(3)
        check_result(feats.values, T + X.shape[:-1] + (n_cols,), _float_out(X))
        check_result(feats.log_scale, T + X.shape[:-1], _float_out(X))


ESTIMATORS: list[Callable[[np.ndarray, np.ndarray, np.ndarray, bool], Any]] = [
    lambda Q, K, V, c: rk.attention.softmax(Q, K, V, causal=c),
    lambda Q, K, V, c: rk.attention.RFA(F.Positive(4), causal=c)(Q, K, V, rng=0).output,
    lambda Q, K, V, c: rk.attention.RFA(F.Hyperbolic(2, projection="orthogonal"))(Q, K, V, rng=0).output,
    lambda Q, K, V, c: rk.attention.RA(n_samples=3)(Q, K, V, rng=0).output,
    lambda Q, K, V, c: rk.attention.SNIS(n_samples=3)(Q, K, V, rng=0).output,
    lambda Q, K, V, c: rk.attention.SNIS(proposal="chunk-mean", n_samples=3)(Q, K, V, rng=0).output,
    lambda Q, K, V, c: rk.attention.LARA(n_proposals=2)(Q, K, V, rng=0).output,
    lambda Q, K, V, c: rk.attention.LARA(n_proposals=2, weights="balance")(Q, K, V, rng=0).output,
]


@st.composite
def qkv(draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = draw(st.integers(0, 3))
    dt = draw(st.sampled_from([None, np.float64, np.float64, np.float32]))  # mostly one float dtype
    Q = draw(arrays(d=d, dtype=dt))
    K = draw(arrays(d=d if draw(st.integers(0, 9)) else d + 1, dtype=dt))  # mostly matching d
    M = K.shape[-2] if draw(st.integers(0, 9)) else K.shape[-2] + 1  # mostly matching rows
    V = draw(arrays(d=draw(st.integers(0, 3)), rows=(M, M), dtype=dt))
    return Q, K, V


@CI
@given(qkv=qkv(), which=st.integers(0, len(ESTIMATORS) - 1), causal=st.booleans())
def test_attention_fuzz(qkv: tuple[np.ndarray, np.ndarray, np.ndarray], which: int, causal: bool) -> None:
    Q, K, V = qkv
    out = outcome(lambda: ESTIMATORS[which](Q, K, V, causal))
    if out is not None:
        batch = _batch(Q, K, V)
        shape = None if batch is None else batch + (Q.shape[-2], V.shape[-1])
        check_result(out, shape, _float_out(Q, K, V))
