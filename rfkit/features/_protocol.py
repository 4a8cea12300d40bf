r"""The feature-map extension protocol: the batching fallback and the protocol check.

A feature map of your own subclasses :class:`~rfkit.features.FeatureMap` and implements

* ``feature_dim(dim) -> int``: the number of feature columns ``D`` for inputs of dimension ``d``;
* ``sample_one(dim, *, rng) -> FeatureDraw``: one draw, every random number taken from the
  :class:`numpy.random.Generator` ``rng``;

and its draw subclasses :class:`~rfkit.features.FeatureDraw` and implements
``_log_features(X, side) -> (sign or None, log|phi|)`` (``side`` is ``"query"`` or ``"key"``;
``X`` is a validated ``(..., n, d)`` array; ``log|phi|`` has shape ``(..., n, D)``), or
``_features(X, side) -> Features`` directly. Everything else (``queries``, ``keys``,
``kernel``, ``log_kernel``, ``pairwise``, batches of draws, per-trial streams) comes from the
base classes.

Batches: without a vectorised ``_sample_many``, ``sample(dim, rng=g, n_draws=T)`` makes ``T``
single draws from the independent child streams ``g.spawn(T)`` and ``sample_streams(dim, rngs)``
one draw from each stream; :class:`StackedDraw` stacks their outputs along a leading axis, so
draw ``t`` depends on its own stream only (a study's numbers then do not depend on chunking or
workers).

:func:`check_feature_map` verifies all of this on small inputs and raises an
:class:`~rfkit.exceptions.InvalidParameterError` that names the class, what it lacks and what
was received. Studies and :func:`rfkit.theory.check` run it on every map, rfkit's own included.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .._backend import to_numpy
from .._validation import check_int
from ..exceptions import InvalidParameterError
from ._base import FeatureMap
from ._draw import FeatureDraw, Features
from ._stacked import (
    DOCS,
    ProtocolViolation,
    StackedDraw,
    class_name,
    sample_with_hook,
    stack_draws,
    streams_with_hook,
    violation,
)

__all__ = ["StackedDraw", "check_feature_map", "sample_with_hook", "streams_with_hook", "stack_draws"]

#: seeds of the protocol check's draws and probe data (fixed: the check is reproducible)
_SEED_A = 0x5EED_0A11
_SEED_B = 0x5EED_0B22
_SEED_DATA = 0x5EED_0D47


# ----------------------------------------------------------------------------- protocol check
def _call(fm: Any, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run user code; anything it raises becomes an error that says which call failed."""
    try:
        return fn(*args, **kwargs)
    except ProtocolViolation:
        raise
    except Exception as exc:  # noqa: BLE001 - user code may raise anything
        raise InvalidParameterError(f"{class_name(fm)}: {what} raised {type(exc).__name__}: {exc}") from exc


def _as_np(a: Any) -> np.ndarray:
    return to_numpy(a)


def _check_features(fm: Any, f: Any, call: str, lead: tuple[int, ...], n: int, D: int) -> Features:
    if not isinstance(f, Features):
        shape = getattr(f, "shape", None)
        raise violation(
            fm,
            f"{call} must return rk.features.Features(values, log_scale) "
            "(build it with rk.features.Features.from_log(sign, log_abs_phi))",
            f"{type(f).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else ""),
        )
    values, ls = _as_np(f.values), _as_np(f.log_scale)
    want = (*lead, n, D)
    if values.shape != want:
        what = (
            f"{call}.values must have shape {want} (feature_dim(d) = {D} columns)"
            if values.shape[:-1] == want[:-1]
            else f"{call}.values must have shape {want}"
        )
        raise violation(fm, what, f"shape {values.shape}")
    if ls.shape != want[:-1]:
        raise violation(fm, f"{call}.log_scale must have shape {want[:-1]}", f"shape {ls.shape}")
    if values.dtype.kind != "f" or ls.dtype.kind != "f":
        raise violation(fm, f"{call} must hold real floating arrays", f"dtypes {values.dtype} and {ls.dtype}")
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(ls))):
        raise violation(fm, f"{call} must be finite for finite inputs", "NaN or inf")
    top = float(np.max(np.abs(values))) if values.size else 0.0
    if top > 1.0 + 1e-6:
        raise violation(
            fm,
            f"{call}.values must satisfy |values| <= 1 (the scale belongs in log_scale; "
            "Features.from_log(sign, log_abs_phi) normalises)",
            f"max |values| = {top:.6g}",
        )
    return f


def _same(a: Features, b: Features, index_a: Any = (), index_b: Any = (), exact: bool = True) -> bool:
    va, vb = _as_np(a.values)[index_a], _as_np(b.values)[index_b]
    la, lb = _as_np(a.log_scale)[index_a], _as_np(b.log_scale)[index_b]
    if exact:
        return bool(np.array_equal(va, vb) and np.array_equal(la, lb))
    return bool(np.allclose(va, vb, rtol=1e-9, atol=1e-12) and np.allclose(la, lb, rtol=1e-9, atol=1e-12))


def _probe(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Probe points (2d + 4 rows: enough for data-adaptive fits that need a spanning sample)."""
    g = np.random.default_rng(_SEED_DATA)
    n = 2 * dim + 4
    return 0.3 * g.standard_normal((n, dim)), 0.3 * g.standard_normal((n, dim))


#: default row norms of the realistic-size probe (those of a study's pairs: small, unit, large)
PROBE_NORMS: tuple[float, ...] = (0.1, 1.0, 3.0)
#: rows of the realistic-size probe (fewer when the map has very many columns: see _scale_rows)
PROBE_ROWS = 256
_SCALE_STREAMS = 3
_SCALE_BUDGET = 1 << 19  # elements of one probe's features (streams x rows x D)


def _scale_rows(D: int, n_rows: int, streams: int) -> int:
    """Rows of the realistic-size probe: ``n_rows``, fewer (>= 8) for maps with very many columns."""
    return max(8, min(n_rows, _SCALE_BUDGET // (streams * D)))


def _rows_at_norms(d: int, n: int, norms: tuple[float, ...], seed: int) -> np.ndarray:
    """``n`` rows with random directions and norms cycling through ``norms``."""
    g = np.random.default_rng(seed)
    U = g.standard_normal((n, d))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    return U * np.resize(np.asarray(norms, dtype=np.float64), n)[:, None]


def _check_norms(norms: Any) -> tuple[float, ...]:
    vals = np.asarray(norms, dtype=object).ravel().tolist() if norms is not None else []
    ok = norms is not None and len(vals) > 0
    ok = ok and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < float(v) < 1e150 for v in vals
    )
    ok = ok and all(np.isfinite(float(v)) for v in vals)
    if not ok:
        raise InvalidParameterError(
            "The `norms` parameter of check_feature_map must be a non-empty sequence of finite reals > 0 "
            f"(row norms of the realistic-size probe). Got {norms!r:.80} instead."
        )
    return tuple(float(v) for v in vals)


def _check_at_scale(spec: Any, d: int, D: int, X: np.ndarray, Y: np.ndarray, array_api: bool) -> None:
    """Hundreds of rows, several streams, float32 and float64, and array_api_strict when installed."""
    n = int(X.shape[0])
    T = _SCALE_STREAMS if spec.is_random else 1  # a deterministic map's streams are all alike
    seeds = [np.random.SeedSequence(_SEED_A + 7 * t) for t in range(T)]
    draw = _call(spec, f"sample_streams({d}, [{T} streams])", spec.sample_streams, d, seeds)
    for dtype in (np.float64, np.float32):
        Xd, Yd = X.astype(dtype), Y.astype(dtype)
        call = f"queries(X) of {n} rows at norms up to {float(np.max(np.linalg.norm(X, axis=1))):.3g} ({dtype.__name__})"
        fq = _check_features(spec, _call(spec, call, draw.queries, Xd), call, (T,), n, D)
        kcall = call.replace("queries(X)", "keys(Y)")
        _check_features(spec, _call(spec, kcall, draw.keys, Yd), kcall, (T,), n, D)
        pcall = call.replace("queries(X)", "log_pairwise(X, Y)")
        lp = _as_np(_call(spec, pcall, draw.log_pairwise, Xd, Yd))
        if lp.shape != (T, n) or np.any(np.isinf(lp) & (lp > 0)):
            raise violation(spec, f"{pcall} must have shape ({T}, {n}) and no +inf", f"shape {lp.shape}")
        if spec.is_random and _same(fq, fq, 0, 1):
            raise violation(
                spec,
                "draws from different streams must differ (every random number from the stream's Generator)",
                "identical features for two different streams",
            )
    if not array_api:
        return
    try:
        import array_api_strict as xps
    except ImportError:  # pragma: no cover - the strict namespace is a test dependency
        return
    call = f"queries(X) of {n} rows on array_api_strict"
    _check_features(spec, _call(spec, call, draw.queries, xps.asarray(X)), call, (T,), n, D)


def check_feature_map(
    fm: Any,
    dim: int | None = None,
    *,
    data: tuple[Any, Any] | None = None,
    norms: Any = None,
    n_rows: int = PROBE_ROWS,
    array_api: bool | None = None,
) -> None:
    """Check that ``fm`` follows rfkit's feature-map protocol, on small and realistic-size probes.

    The checks, each with an error that names the class, what it lacks and what was received:

    1. ``fm`` is an :class:`~rfkit.features.FeatureMap`; ``feature_dim(d)`` is an int >= 1;
    2. ``sample(d, rng=...)`` returns a :class:`~rfkit.features.FeatureDraw` whose ``queries``
       and ``keys`` return :class:`~rfkit.features.Features` with values of shape
       ``(n, feature_dim(d))``, ``|values| <= 1``, finite, and a log scale of shape ``(n,)``;
    3. the same seed gives the same features (no randomness from outside ``rng``) and, for a
       random map (``is_random``), two seeds give different features (the draw uses ``rng``);
    4. ``sample(d, n_draws=2)`` adds a leading axis 2 to features and ``pairwise``;
    5. ``sample_streams(d, [a, b])`` gives for stream ``b`` the features that
       ``sample_streams(d, [b])`` gives (draw ``t`` depends on stream ``t`` alone);
    6. ``pairwise(X, Y)`` equals the diagonal of ``kernel(X, Y)`` (up to round-off);
    7. an optional ``mse(x, y)`` method returns one finite value >= 0 per pair;
    8. at realistic size: ``n_rows`` (256) rows whose norms cycle through ``norms`` (default
       0.1, 1 and 3, as in a study), three streams of ``sample_streams``, in float64 and in
       float32: features of the right shape, finite, ``|values| <= 1``; ``log_pairwise``
       never ``+inf``; different streams give different features (random maps); and the
       same on the ``array_api_strict`` namespace when it is installed (``array_api``). Maps with very many
       columns get fewer rows (at least 8) so the probe stays small. For a built-in map the
       whole check takes well under 0.2 s.

    Parameters
    ----------
    fm : FeatureMap
        The specification to check (data-adaptive maps are fitted on the probe first).
    dim : int, optional
        Input dimension of the probe points (standard normal times 0.3, fixed seed).
    data : (Q, K), optional
        Points of your own, arrays (n, d): data-adaptive maps are fitted on them and the
        first three rows are the probe (default: ``2d + 4`` standard normal rows times 0.3);
        with ``norms`` omitted, the realistic-size probe is the first ``n_rows`` rows of it.
    norms : sequence of float, optional
        Row norms of the realistic-size probe (default :data:`PROBE_NORMS`, 0.1, 1, 3).
    n_rows : int, default=256
        Rows of the realistic-size probe.
    array_api : bool, optional
        Also probe the ``array_api_strict`` namespace (when installed): default True for
        rfkit's own maps, False for maps of your own (which may compute in NumPy only); pass
        True before running a study of your map on PyTorch or CuPy.

    Raises
    ------
    InvalidParameterError
        The first check that fails.

    Examples
    --------
    >>> import rfkit as rk
    >>> rk.features.check_feature_map(rk.features.Positive(8), dim=4)
    """
    if not isinstance(fm, FeatureMap):
        raise InvalidParameterError(
            "The `fm` parameter of check_feature_map must be an rk.features.FeatureMap (a subclass "
            f"implementing feature_dim and sample_one; {DOCS}). Got {type(fm).__name__} {fm!r:.80} instead."
        )
    if data is not None:
        QF, KF = (np.asarray(a, dtype=np.float64) for a in data)
    else:
        QF, KF = _probe(check_int(dim, "dim", "check_feature_map", low=1))
    rows = check_int(n_rows, "n_rows", "check_feature_map", low=1)
    levels = PROBE_NORMS if norms is None else _check_norms(norms)
    X, Y = QF[:3], KF[:3]
    d, n = int(X.shape[-1]), int(X.shape[0])
    spec = _call(fm, "fit(Q, K)", fm.fit, QF, KF) if fm.needs_data else fm
    D = _call(spec, f"feature_dim({d})", spec.feature_dim, d)
    if isinstance(D, bool) or not isinstance(D, numbers.Integral) or D < 1:
        raise violation(spec, f"feature_dim({d}) must return an int >= 1", repr(D))
    D = int(D)
    sa, sb = np.random.SeedSequence(_SEED_A), np.random.SeedSequence(_SEED_B)
    draw = _call(spec, f"sample({d}, rng=...)", spec.sample, d, rng=sa)
    if not isinstance(draw, FeatureDraw):
        raise violation(spec, "sample() must return an rk.features.FeatureDraw", type(draw).__name__)
    fq = _check_features(spec, _call(spec, "draw.queries(X)", draw.queries, X), "draw.queries(X)", (), n, D)
    _check_features(spec, _call(spec, "draw.keys(Y)", draw.keys, Y), "draw.keys(Y)", (), n, D)
    again = _call(spec, f"sample({d}, rng=...)", spec.sample, d, rng=np.random.SeedSequence(_SEED_A))
    if not _same(fq, _call(spec, "draw.queries(X)", again.queries, X)):
        raise violation(
            spec,
            "the same seed must give the same features (draw every random number from the `rng` "
            "Generator passed to sample_one: no np.random.* global functions, no state kept between draws)",
            "different features from two draws with the same seed",
        )
    if spec.is_random:
        other = _call(spec, f"sample({d}, rng=...)", spec.sample, d, rng=sb)
        if _same(fq, _call(spec, "draw.queries(X)", other.queries, X)):
            raise violation(
                spec,
                "a random map must use `rng`: two different seeds must give different features "
                "(set is_random = False for a deterministic map)",
                "identical features for two different seeds (the draw ignores `rng`)",
            )
    batch = _call(spec, f"sample({d}, rng=..., n_draws=2)", spec.sample, d, rng=sa, n_draws=2)
    _check_features(
        spec, _call(spec, "queries(X) of n_draws=2", batch.queries, X), "queries(X) of n_draws=2", (2,), n, D
    )
    pb = _as_np(_call(spec, "pairwise(X, Y) of n_draws=2", batch.pairwise, X, Y))
    if pb.shape != (2, n):
        raise violation(spec, f"pairwise(X, Y) of n_draws=2 must have shape (2, {n})", f"shape {pb.shape}")
    both = _call(spec, "sample_streams(d, [a, b])", spec.sample_streams, d, [sa, sb])
    alone = _call(spec, "sample_streams(d, [b])", spec.sample_streams, d, [np.random.SeedSequence(_SEED_B)])
    fb2 = _check_features(
        spec,
        _call(spec, "queries(X) of sample_streams", both.queries, X),
        "queries(X) of sample_streams(d, [a, b])",
        (2,),
        n,
        D,
    )
    fb1 = _call(spec, "queries(X) of sample_streams", alone.queries, X)
    if not _same(fb2, fb1, 1, 0, exact=False):
        raise violation(
            spec,
            "draw t of sample_streams(d, rngs) must depend on rngs[t] alone (else a study's numbers "
            "depend on how its trials are chunked)",
            "different features for the same stream alone and after another one",
        )
    own = getattr(spec, "mse", None)
    if callable(own):  # an optional closed form: one finite, non-negative value per pair
        value = np.asarray(_call(spec, "mse(x, y)", own, X, Y), dtype=np.float64)
        if value.shape != (n,) or not np.all(np.isfinite(value)) or np.any(value < 0):
            raise violation(
                spec,
                f"mse(x, y) must return one finite value >= 0 per pair, shape ({n},)",
                f"{value!r:.120}",
            )
    p = _as_np(_call(spec, "draw.pairwise(X, Y)", draw.pairwise, X, Y))
    if p.shape != (n,):
        raise violation(spec, f"draw.pairwise(X, Y) must have shape ({n},)", f"shape {p.shape}")
    k = np.diagonal(_as_np(_call(spec, "draw.kernel(X, Y)", draw.kernel, X, Y)))
    scale = float(np.max(np.abs(k))) if k.size else 0.0
    if not np.allclose(p, k, rtol=1e-6, atol=1e-9 * scale):
        raise violation(
            spec,
            "draw.pairwise(X, Y) must equal the diagonal of draw.kernel(X, Y) (an override of "
            "_slog_pairwise disagrees with the features)",
            f"pairwise {p[:3]} vs kernel diagonal {k[:3]}",
        )
    rows = _scale_rows(D, rows, _SCALE_STREAMS if spec.is_random else 1)
    strict = type(spec).__module__.startswith("rfkit.") if array_api is None else bool(array_api)
    if data is not None and norms is None:
        _check_at_scale(spec, d, D, QF[:rows], KF[:rows], strict)
    else:
        XS = _rows_at_norms(d, rows, levels, _SEED_DATA)
        _check_at_scale(spec, d, D, XS, _rows_at_norms(d, rows, levels, _SEED_DATA + 1), strict)
