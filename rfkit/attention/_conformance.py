"""The attention-estimator protocol check, on a small probe and at the sizes a study uses.

An attention estimator is a callable ``est(Q, K, V, *, rng) -> AttentionResult``
(:class:`RFA`, :class:`RA`, :class:`SNIS`, :class:`LARA`, or one of your own). Its output
has the shape of exact attention, ``(..., n_queries, d_v)``; every random number comes from
``rng``; rows it cannot estimate (a non-positive normaliser) are NaN and counted in
``n_nonpositive``, every other row is finite.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import numbers
import warnings
from typing import Any

import numpy as np

from .._backend import to_numpy
from .._validation import check_int
from ..exceptions import InvalidParameterError, NonPositiveNormalizerWarning, RFKitError
from ._result import AttentionResult

__all__ = ["check_attention_estimator", "PROBE_NORMS", "PROBE_ROWS"]

#: default row norms of the realistic-size probe (small, unit and large, as in a study)
PROBE_NORMS: tuple[float, ...] = (0.1, 1.0, 3.0)
#: queries and keys of the realistic-size probe
PROBE_ROWS = 256
_STREAMS = 3
_SEED_DATA = 0x5EED_A77E
_SEED_RUN = 0x5EED_A771


def _name(est: Any) -> str:
    if isinstance(est, functools.partial):
        return str(getattr(est.func, "__qualname__", repr(est.func)))
    if inspect.isfunction(est):
        return str(est.__qualname__)
    return type(est).__qualname__


def _fail(est: Any, rule: str, got: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"{_name(est)} does not follow the rfkit attention-estimator protocol: {rule}. Got {got} instead."
    )


def _rows_at_norms(n: int, d: int, norms: tuple[float, ...], g: np.random.Generator) -> np.ndarray:
    U = g.standard_normal((n, d))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    return U * np.resize(np.asarray(norms, dtype=np.float64), n)[:, None]


def _check_norms(norms: Any) -> tuple[float, ...]:
    vals = list(np.ravel(np.asarray(norms, dtype=object))) if norms is not None else []
    good = bool(vals) and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < float(v) < 1e150 for v in vals
    )
    if not good:
        raise InvalidParameterError(
            "The `norms` parameter of check_attention_estimator must be a non-empty sequence of finite "
            f"reals > 0 (row norms of the realistic-size probe). Got {norms!r:.80} instead."
        )
    return tuple(float(v) for v in vals)


def _run(est: Any, Q: Any, K: Any, V: Any, seed: int, what: str) -> tuple[np.ndarray, int]:
    """One call: its output (NumPy) after the shape, type and finiteness checks, and n_nonpositive."""
    try:
        with warnings.catch_warnings():  # rows with a non-positive normaliser are counted below
            warnings.simplefilter("ignore", NonPositiveNormalizerWarning)
            res = est(Q, K, V, rng=np.random.SeedSequence(seed))
    except Exception as exc:  # noqa: BLE001 - user code may raise anything
        raise InvalidParameterError(
            f"{_name(est)}: a call (Q, K, V, rng=...) on {what} of shapes {tuple(Q.shape)}, {tuple(K.shape)}, "
            f"{tuple(V.shape)} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(res, AttentionResult):
        raise _fail(
            est,
            "a call (Q, K, V, *, rng) must return rk.attention.AttentionResult(output=..., method=...)",
            f"{type(res).__name__} {res!r:.80}",
        )
    out = to_numpy(res.output)
    shape = (
        *np.broadcast_shapes(tuple(Q.shape[:-2]), tuple(K.shape[:-2])),
        int(Q.shape[-2]),
        int(V.shape[-1]),
    )
    if tuple(out.shape) != shape:
        raise _fail(
            est,
            f"its output must have the shape of exact attention {shape} (..., n_queries, d_v) on {what}",
            f"shape {tuple(out.shape)}",
        )
    bad_rows = int(np.sum(~np.all(np.isfinite(out), axis=-1)))
    counted = int(getattr(res, "n_nonpositive", 0) or 0)
    if np.any(np.isinf(out)) or bad_rows > counted:
        raise _fail(
            est,
            f"its output must be finite on {what}, except rows counted in n_nonpositive (which are NaN)",
            f"{bad_rows} non-finite rows ({'inf' if np.any(np.isinf(out)) else 'NaN'}) with n_nonpositive={counted}",
        )
    return out, counted


def _is_random(est: Any, random: bool | None) -> bool:
    if random is not None:
        return bool(random)
    fm = getattr(est, "feature_map", None)
    if fm is not None:
        return bool(getattr(fm, "is_random", True))
    return type(est).__module__.startswith("rfkit.attention")  # RA, SNIS, LARA sample; others: unknown


def check_attention_estimator(
    est: Any,
    dim: int | None = None,
    *,
    data: tuple[Any, Any, Any] | None = None,
    norms: Any = None,
    n_rows: int = PROBE_ROWS,
    random: bool | None = None,
) -> None:
    """Check that ``est`` follows rfkit's attention-estimator protocol, on small and realistic probes.

    1. on a small probe (5 queries, 6 keys, ``d_v = 2``, or ``data``), a call
       ``est(Q, K, V, rng=seed)`` returns an :class:`AttentionResult` whose ``output`` has the
       shape of exact attention and is finite except rows counted in ``n_nonpositive``; the
       same seed gives the same output (every random number from ``rng``);
    2. at realistic size: ``n_rows`` (256) queries and keys whose norms cycle through
       ``norms`` (default 0.1, 1 and 3, as in a study), ``d_v = 4``, in float64 and float32,
       three streams: the same checks for every call, and different streams give different
       outputs for a random estimator;
    3. where the estimator has a ``causal`` field (:class:`RFA`, :class:`RA`,
       :class:`SNIS`, :class:`LARA`) and its options allow ``causal=True``, the same at
       realistic size with ``causal=True``.

    Parameters
    ----------
    est : callable
        The estimator, ``(Q, K, V, *, rng) -> AttentionResult``.
    dim : int, optional
        Query/key dimension of the probes (needed unless ``data`` is given).
    data : (Q, K, V), optional
        A small probe of your own; its dimension is used for the realistic-size probe.
    norms : sequence of float, optional
        Row norms of the realistic-size probe (default :data:`PROBE_NORMS`).
    n_rows : int, default=256
        Queries and keys of the realistic-size probe.
    random : bool, optional
        Whether different streams must give different outputs; inferred when omitted (the
        feature map's ``is_random`` for RFA, True for RA, SNIS and LARA, not checked for
        other callables).

    Raises
    ------
    InvalidParameterError
        Naming the estimator, the rule and what was received.

    Examples
    --------
    >>> import rfkit as rk
    >>> rk.attention.check_attention_estimator(rk.attention.RFA(rk.features.Positive(16)), dim=4)
    """
    if not callable(est):
        raise InvalidParameterError(
            "An attention estimator must be callable as (Q, K, V, *, rng) -> AttentionResult. "
            f"Got {type(est).__name__} {est!r:.80} instead."
        )
    rows = check_int(n_rows, "n_rows", "check_attention_estimator", low=2)
    levels = PROBE_NORMS if norms is None else _check_norms(norms)
    g = np.random.default_rng(_SEED_DATA)
    if data is None:
        d = check_int(dim, "dim", "check_attention_estimator", low=1)
        n = 6 if getattr(est, "causal", False) else 5  # causal attention needs as many queries as keys
        Q, K, V = 0.3 * g.standard_normal((n, d)), 0.3 * g.standard_normal((6, d)), g.standard_normal((6, 2))
    else:
        Q, K, V = (np.asarray(a, dtype=np.float64) for a in data)
        d = int(Q.shape[-1])
    first, _ = _run(est, Q, K, V, _SEED_RUN, "the small probe")
    again, _ = _run(est, Q, K, V, _SEED_RUN, "the small probe")
    if not np.array_equal(first, again, equal_nan=True):
        raise _fail(
            est,
            "the same `rng` must give the same output (draw every random number from `rng`)",
            "different outputs for the same seed",
        )
    QL, KL = _rows_at_norms(rows, d, levels, g), _rows_at_norms(rows, d, levels, g)
    VL = g.standard_normal((rows, 4))
    variants: list[tuple[Any, str]] = [(est, "")]
    spec: Any = est
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        if "causal" in {f.name for f in dataclasses.fields(spec)} and not est.causal:
            try:
                variants.append((dataclasses.replace(spec, causal=True), ", causal=True"))
            except RFKitError:  # options without a causal form (LARA's optimal weights): not supported
                pass
    rand = _is_random(est, random)
    top = max(levels)
    for variant, tag in variants:
        for dtype in (np.float64, np.float32):
            what = f"{rows} queries and keys at norms up to {top:g} ({dtype.__name__}{tag})"
            Qd, Kd, Vd = QL.astype(dtype), KL.astype(dtype), VL.astype(dtype)
            outs = [_run(variant, Qd, Kd, Vd, _SEED_RUN + 11 * t, what)[0] for t in range(_STREAMS)]
            if rand and any(np.array_equal(outs[0], o, equal_nan=True) for o in outs[1:]):
                raise _fail(
                    variant,
                    f"different streams must give different outputs on {what} (a random estimator uses `rng`)",
                    "identical outputs for two different seeds",
                )
