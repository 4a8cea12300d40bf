"""Array and parameter checks, in one place (scikit-learn / SciPy ``_iv`` style).

Messages name the argument in backticks, state the rule and show the value
received: ``"The `n_features` parameter of Positive must be an int in the range
[1, inf). Got 0 instead."`` The scalar checks (``check_int``, ``check_real``,
``check_option``, ``check_n_features``) are defined in :mod:`rfkit._params`, below the
array backends, and re-exported here; the array checks sit above :mod:`rfkit._backend`.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import numpy as np

from ._backend import get_backend, is_array, to_numpy
from ._backend_half import HALF_DTYPES, float_tensor_dtype, half_name, to_float32
from ._backend_half import cast_back as cast_half
from ._params import check_allocation, check_int, check_n_features, check_option, check_real
from .exceptions import InvalidParameterError, NonFiniteInputError, NumericalOverflowError, ShapeError

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "check_int",
    "check_n_features",
    "check_real",
    "check_option",
    "as_float_array",
    "refuse_masked_and_matrix",
    "check_pairwise_memory",
    "check_points",
    "check_same_dim",
    "check_point_pair",
    "check_square_norms",
    "float_dtype",
    "exp_checked",
    "half_precision",
    "HALF_DTYPES",
]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the first caller outside rfkit.

    Call it in the argument list of :func:`warnings.warn`; wrappers such as :func:`half_precision`
    add frames between a public call and the code that warns, so a fixed count would point inside
    rfkit.
    """
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def half_precision(*, cast_back: bool = True) -> Callable[[F], F]:
    """Accept float16/bfloat16 PyTorch inputs: compute in float32, return the input's dtype.

    Half-precision tensor arguments are cast to float32 before the call (autograd follows the
    cast); when every floating tensor argument has the same half dtype, the float32 tensors of
    the result are cast back to it (``cast_back=False``: log-space results stay float32, as do
    ``log_*`` fields everywhere: a bfloat16 logarithm keeps 8 bits). Other inputs, NumPy
    ``float16`` included, pass through unchanged (and are refused by :func:`as_float_array`).
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            values = (*args, *kwargs.values())
            if not any(half_name(a) for a in values):
                return fn(*args, **kwargs)
            floats = {t for t in map(float_tensor_dtype, values) if t is not None}
            res = fn(*map(to_float32, args), **{k: to_float32(v) for k, v in kwargs.items()})
            if not cast_back or len(floats) != 1:  # mixed dtypes: float32 or wider, as PyTorch promotes
                return res
            return cast_half(res, next(a for a in values if half_name(a)).dtype)

        return inner  # type: ignore[return-value]

    return wrap


def float_dtype(*arrays: Any) -> Any:
    """Common floating dtype of already-validated float arrays (float32 only if all are)."""
    return get_backend(*(("array", a) for a in arrays)).xp.result_type(*arrays)


def as_float_array(
    X: Any,
    name: str,
    *,
    min_ndim: int = 0,
    check_finite: bool = True,
    shape_hint: str = "",
    backend: Any = None,
) -> Any:
    """Validate a float32/float64 array, refusing other dtypes and non-finite values.

    Arrays of a supported library (NumPy, PyTorch, CuPy, array_api_strict: see
    :mod:`rfkit._backend`) are checked in that library and returned as they are; plain
    Python data becomes an array of the call's backend. Integer, boolean, complex,
    half-precision and object inputs raise :class:`InvalidParameterError` (no silent casts:
    an integer array is almost always a bug in a kernel study); so do masked arrays
    (:func:`refuse_masked_and_matrix`). A ``numpy.matrix`` becomes a plain ndarray (lossless).

    Parameters
    ----------
    backend : Backend, optional
        The call's backend (from :func:`rfkit._backend.get_backend`); resolved from ``X``
        alone when omitted.
    """
    X = refuse_masked_and_matrix(X, name)
    bk = get_backend((name, X)) if backend is None else backend
    try:
        arr = X if is_array(X) else bk.asarray(X)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(
            f"`{name}` must be a floating-point array (float32 or float64); got {type(X).__name__} "
            f"that is not an array ({exc})."
        ) from None
    dname = bk.dtype_name(arr.dtype)
    if dname not in ("float32", "float64"):
        raise InvalidParameterError(
            f"`{name}` must be a floating-point array (float32 or float64); got a {bk.name} array of dtype "
            f"{dname}. Convert it explicitly to float32 or float64 (rfkit never casts silently)."
        )
    if arr.ndim < min_ndim:
        hint = f" {shape_hint}" if shape_hint else ""
        raise ShapeError(f"`{name}` must have ndim >= {min_ndim}; got shape {tuple(arr.shape)}.{hint}")
    if check_finite and all(int(n) for n in arr.shape):  # 0-d arrays too
        xp = bk.xp
        with np.errstate(over="ignore", invalid="ignore"):
            # fast path (scikit-learn's): a finite sum means finite entries; a sum that overflows
            # (large but finite float32 entries) falls through to the exact check below
            total = xp.sum(arr)
        if not bool(xp.isfinite(total)) and not bool(xp.all(xp.isfinite(arr))):
            host = bk.to_numpy(arr)
            idx = tuple(int(i) for i in np.argwhere(~np.isfinite(host))[0])
            if np.isnan(host[idx]):
                raise NonFiniteInputError(f"Input `{name}` contains NaN (first at index {idx}).")
            raise NonFiniteInputError(
                f"Input `{name}` contains infinity or a value too large for {bk.name} {dname} "
                f"(first at index {idx})."
            )
    return arr


def host_float_array(X: Any, name: str, **kwargs: Any) -> np.ndarray:
    """:func:`as_float_array` of any supported library, then a host NumPy float64 copy.

    For reference computations (closed forms, bounds) that run in float64 NumPy whatever the
    input's library: a PyTorch, CuPy or ``array_api_strict`` array is validated in its own
    library first (same errors as everywhere), then moved to the host.
    """
    return np.asarray(to_numpy(as_float_array(X, name, **kwargs)), dtype=np.float64)


def refuse_masked_and_matrix(X: Any, name: str) -> Any:
    """Refuse a NumPy masked array; turn a ``numpy.matrix`` into a plain ndarray.

    A masked array would silently lose its mask (rfkit computes on the data underneath), so it
    raises :class:`InvalidParameterError`; a ``numpy.matrix`` keeps its values exactly as an
    ndarray (``numpy.asarray``), which rfkit then computes on (matrix semantics of ``*`` and
    indexing would otherwise give wrong shapes).
    """
    if isinstance(X, np.ma.MaskedArray):
        raise InvalidParameterError(
            f"`{name}` is a numpy masked array (MaskedArray); rfkit does not honour masks and would "
            "silently compute on the masked entries. Pass key_padding_mask= (attention) or fill the masked "
            f"entries ({name}.filled(value)) and pass a plain ndarray."
        )
    if isinstance(X, np.matrix):
        return np.asarray(X)
    return X


def check_points(
    X: Any, name: str, *, dim: int | None = None, check_finite: bool = True, backend: Any = None
) -> Any:
    """Validate a point array of shape (..., n, d) (points are rows)."""
    arr = as_float_array(
        X,
        name,
        min_ndim=2,
        check_finite=check_finite,
        shape_hint=f"`{name}` must have shape (..., n, d). Use {name}[None, :] for a single point.",
        backend=backend,
    )
    if dim is not None and arr.shape[-1] != dim:
        raise ShapeError(f"`{name}` has d={arr.shape[-1]} but these features were sampled for dim={dim}.")
    return arr


def check_point_pair(
    X: Any,
    Y: Any,
    owner: str,
    *,
    dim: int | None = None,
    check_finite: bool = True,
    paired: bool = False,
) -> tuple[Any, Any, Any]:
    """Validate the two point sets of a kernel-type call: ``X`` (..., n, d) and ``Y`` (..., m, d).

    One backend for both (:func:`rfkit._backend.get_backend`); each a float point array
    (:func:`check_points`, last axis ``dim`` when given); a shared last axis; broadcastable
    batch axes (``paired=True``: equal row counts and broadcastable leading axes, rows taken
    pairwise); with ``check_finite``, squared norms that fit the dtype
    (:func:`check_square_norms`). Returns ``X`` and ``Y`` in their common float dtype and the
    backend.
    """
    bk = get_backend(("X", X), ("Y", Y))
    X = check_points(X, "X", dim=dim, check_finite=check_finite, backend=bk)
    Y = check_points(Y, "Y", dim=dim, check_finite=check_finite, backend=bk)
    check_same_dim(X, Y, "X", "Y")
    if paired:
        if X.shape[-2] != Y.shape[-2]:
            raise ShapeError(
                f"`X` and `Y` must have the same number of rows for pairwise(): "
                f"{X.shape[-2]} != {Y.shape[-2]} (X.shape={tuple(X.shape)}, Y.shape={tuple(Y.shape)})."
            )
        check_broadcast({"X": X.shape[:-1], "Y": Y.shape[:-1]})
    else:
        check_broadcast({"X": X.shape[:-2], "Y": Y.shape[:-2]})
    if check_finite:
        check_square_norms(X, "X", owner)
        check_square_norms(Y, "Y", owner)
    dt = float_dtype(X, Y)
    return bk.xp.astype(X, dt, copy=False), bk.xp.astype(Y, dt, copy=False), bk


def check_square_norms(X: Any, name: str, owner: str) -> None:
    r"""Refuse rows whose squared norm does not fit the dtype (with a factor 4 to spare).

    Kernels and feature maps need :math:`\|x\|^2`, :math:`x^\top y` or :math:`\|x - y\|^2`;
    with every :math:`\|x\|^2 \le` max/4 none of them overflows, so finite inputs never turn
    into inf or NaN on the way. Any array library (:mod:`rfkit._backend`).
    """
    if not math.prod(X.shape):
        return
    bk = get_backend((name, X))
    xp = bk.xp
    limit = float(xp.finfo(X.dtype).max) / 4
    X = bk.detached(X)  # a check reads values only: no autograd history
    amax = max(float(xp.max(X)), -float(xp.min(X)))  # no temporaries: the fast path
    if amax * amax * X.shape[-1] <= limit:  # ||x||^2 <= d max|x|^2 (Python floats: no overflow)
        return
    with np.errstate(over="ignore", invalid="ignore"):
        sq = float(xp.max(xp.sum(X * X, axis=-1)))
    if not sq <= limit:
        raise NumericalOverflowError(
            f"Input `{name}` of {owner} is too large for {bk.dtype_name(X.dtype)}: a row's squared norm "
            f"overflows (largest |entry| {amax:.3g}). Rescale it, or use float64 if it is float32."
        )


def check_finite_and_norms(arrays: dict[str, Any], owner: str, norms: tuple[str, ...] = ()) -> None:
    r"""Finiteness of every array and the squared-norm bound of those named in ``norms``, in one pass.

    The largest magnitude of each array is computed on its device and read back together (one
    synchronisation for all of them): a finite maximum means finite entries, and
    :math:`d\max|x|^2 \le` max/4 bounds every squared row norm. Only when one of these fails
    is the exact check (:func:`as_float_array`, :func:`check_square_norms`) run, to name the
    first bad entry.
    """
    live = {k: a for k, a in arrays.items() if math.prod(a.shape)}
    if not live:
        return
    bk = get_backend(*live.items())
    xp = bk.xp
    with np.errstate(invalid="ignore"):
        maxima = [bk.max_abs(a) for a in live.values()]
        if len({str(m.dtype) for m in maxima}) > 1:
            maxima = [xp.astype(m, xp.float64) for m in maxima]
        tops = bk.to_numpy(xp.stack(maxima)).astype(np.float64)
    for (name, a), top in zip(live.items(), tops.tolist()):
        if not math.isfinite(top):
            as_float_array(a, name, backend=bk)  # raises, naming the first NaN or infinity
        if name in norms:
            limit = float(xp.finfo(a.dtype).max) / 4
            if top * top * a.shape[-1] > limit:
                check_square_norms(a, name, owner)


def check_pairwise_memory(
    X: Any, Y: Any, owner: str, *, lead: tuple[int, ...] = (), width: int | None = None, copies: int = 2
) -> int:
    """Refuse an (``lead``, batch..., n, ``width`` or m) result of rows ``X`` and ``Y`` beyond the memory limit.

    The batch axes of ``X`` (..., n, d) and ``Y`` (..., m, d) broadcast; ``width`` replaces
    ``m`` for feature arrays (``D`` columns); ``copies`` counts the temporaries of the same
    size (2: a result and one work array). See :func:`rfkit._params.check_allocation`.
    """
    batch = check_broadcast({"X": X.shape[:-2], "Y": Y.shape[:-2]})
    cols = int(Y.shape[-2]) if width is None else int(width)
    itemsize = int(np.dtype(get_backend(("X", X)).dtype_name(X.dtype)).itemsize)
    shape = (copies, *lead, *batch, int(X.shape[-2]), cols)
    what = "an (n, m) result and its work array" if width is None else "the (n, D) features and a work array"
    return check_allocation(shape, itemsize, what, owner, "Split the rows into smaller blocks.")


def check_same_dim(X: Any, Y: Any, nx: str, ny: str) -> None:
    """Raise ShapeError unless ``X`` and ``Y`` share their last axis."""
    if X.shape[-1] != Y.shape[-1]:
        raise ShapeError(
            f"`{nx}` and `{ny}` must share the last dimension: {nx}.shape={tuple(X.shape)}, "
            f"{ny}.shape={tuple(Y.shape)}."
        )


def check_broadcast(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Broadcast the leading (batch) shapes, or raise ShapeError naming the arrays."""
    try:
        return tuple(np.broadcast_shapes(*(tuple(int(n) for n in v) for v in shapes.values())))
    except ValueError:
        desc = ", ".join(f"{k}: {tuple(v)}" for k, v in shapes.items())
        raise ShapeError(f"Batch dimensions are not broadcastable ({desc}).") from None


def exp_checked(log_values: Any, where: str, alternative: str) -> Any:
    """``exp(log_values)``, raising :class:`NumericalOverflowError` where it would give inf.

    The one overflow-checked exponential of rfkit (kernels, feature draws, attention
    results). NaN entries are left to ``exp`` (they stay NaN); the largest other entry is
    compared with ``log(max)`` of the dtype. Any array library (:mod:`rfkit._backend`).

    Parameters
    ----------
    log_values : array
        Logarithms of the values.
    where : str
        The call that needs the values, named in the message (``"Positive draw.kernel"``).
    alternative : str
        What to use instead, named in the message (``"log_kernel()"``).

    Raises
    ------
    NumericalOverflowError
        If some entry of ``exp(log_values)`` exceeds the float range.
    """
    bk = get_backend(("log_values", log_values))
    xp = bk.xp
    limit = float(np.log(float(xp.finfo(log_values.dtype).max)))
    if math.prod(log_values.shape):
        with np.errstate(invalid="ignore"):
            top = float(xp.max(xp.where(xp.isnan(log_values), xp.full_like(log_values, -np.inf), log_values)))
        if top > limit:
            raise NumericalOverflowError(
                f"exp overflow in {where}: the largest log value {top:.4g} exceeds "
                f"log(max {bk.dtype_name(log_values.dtype)}) = {limit:.4g}; use {alternative} instead."
            )
    return xp.exp(log_values)
