"""Shared plumbing of the attention estimators: backend, input checks, masks, batching, blocks.

Every public call resolves its array backend once (:func:`rfkit._backend.get_backend` over
``Q``, ``K``, ``V``, the key padding mask and any array-valued proposal means together), so
arrays of two libraries or two devices in one call are refused with a
:class:`~rfkit.exceptions.BackendError` naming the arguments. The estimate code then works
through ``x.bk`` (the array-API namespace ``bk.xp`` and the named shims of
:class:`~rfkit._backend.Backend`) and never calls NumPy on user arrays.

Work is cut into **fixed** row blocks whose layout depends only on the array sizes; on
NumPy the blocks run on rfkit's thread pool (:func:`run`), elsewhere in order. Reductions
across blocks are combined in block order, so results are bit-identical for every
``n_threads``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._backend import Backend, get_backend, is_array
from .._backend_random import is_torch_generator, torch_generator_for
from .._parallel import resolve_threads
from .._random import TrialStreams, check_rng_or_trials
from .._validation import (
    check_broadcast,
    check_finite_and_norms,
    check_int,
    check_option,
    check_points,
    float_dtype,
)
from ..exceptions import BackendError, InvalidParameterError, ShapeError
from ..features import FeatureMap
from ..projections import PROJECTIONS, sample_projection, sample_projection_on

__all__ = [
    "QKV",
    "check_qkv",
    "row_blocks",
    "CHUNK_ELEMS",
    "check_chunk_size",
    "check_bool",
    "check_threads",
    "check_shared_options",
    "gaussian_noise",
    "run",
    "budget",
    "with_ones",
    "finish_ratio",
    "nonpositive_message",
]

#: Work arrays of the chunked loops stay below about this many elements (16 MiB in float64).
CHUNK_ELEMS = 1 << 21


@dataclasses.dataclass(frozen=True)
class QKV:
    """Validated attention inputs, broadcast and flattened to ``(B, n, d)`` slices.

    Attributes
    ----------
    Q, K, V : arrays of shape (B, n, d), (B, M, d), (B, M, dv)
        Slices in C order of the broadcast batch shape (views where possible), on the
        call's backend, in the common float dtype. The sizes are the properties
        ``n_slices`` (B), ``n_queries`` (n), ``n_keys`` (M), ``dim`` (d) and ``value_dim`` (dv).
    batch_shape : tuple of int
        Broadcast leading shape; ``B = prod(batch_shape)``.
    n_heads : int
        Length of the head axis (``batch_shape[-1]``; 1 for 2-D input).
    dtype : dtype
        Common float dtype of the output (float32 only if all inputs are), of the
        backend's namespace.
    bk : Backend
        Library and device of the call.
    mask : array of bool, shape (B, M), or None
        Key padding mask (True = padded key, ignored), flattened like ``K``.
    """

    Q: Any
    K: Any
    V: Any
    batch_shape: tuple[int, ...]
    n_heads: int
    dtype: Any
    bk: Backend
    mask: Any = None

    n_slices: int = dataclasses.field(init=False)  #: B, the (batch, head) slices
    n_queries: int = dataclasses.field(init=False)  #: n, queries per slice
    n_keys: int = dataclasses.field(init=False)  #: M, keys (and values) per slice, padded ones included
    dim: int = dataclasses.field(init=False)  #: d, the query/key dimension
    value_dim: int = dataclasses.field(init=False)  #: dv, the value dimension

    def __post_init__(self) -> None:
        (B, n, d), M, dv = self.Q.shape, self.K.shape[1], self.V.shape[2]
        for name, size in zip(("n_slices", "n_queries", "n_keys", "dim", "value_dim"), (B, n, M, d, dv)):
            object.__setattr__(self, name, int(size))

    @property
    def xp(self) -> Any:
        return self.bk.xp

    def unflatten(self, arr: Any, lead: tuple[int, ...] = ()) -> Any:
        """Reshape ``lead + (B, ...)`` back to ``lead + batch_shape + (...)``."""
        rest = tuple(arr.shape[len(lead) + 1 :])
        return self.xp.reshape(arr, lead + self.batch_shape + rest)

    def kept_keys(self) -> list[int]:
        """Number of unmasked keys of every slice (M for every slice without a mask)."""
        if self.mask is None:
            return [self.n_keys] * self.n_slices
        keep = self.xp.sum(self.xp.astype(~self.mask, self.xp.int64), axis=-1)
        return [int(v) for v in self.bk.to_numpy(keep).tolist()]


def _flat(bk: Backend, X: Any, dt: Any, batch: tuple[int, ...], B: int) -> Any:
    xp = bk.xp
    X = xp.astype(X, dt, copy=False)
    tail = tuple(X.shape[-2:])
    if tuple(X.shape[:-2]) != batch:
        X = xp.broadcast_to(X, batch + tail)
    return xp.reshape(X, (B,) + tail)


def check_qkv(
    Q: Any,
    K: Any,
    V: Any,
    owner: str,
    *,
    causal: bool = False,
    key_padding_mask: Any = None,
    extra: Sequence[tuple[str, Any]] = (),
    refuse_hidden: bool = True,
) -> QKV:
    """Validate ``Q`` (..., n, d), ``K`` (..., M, d), ``V`` (..., M, dv) and flatten the batch.

    The backend is resolved over ``Q``, ``K``, ``V``, ``key_padding_mask`` and the
    ``(name, value)`` pairs of ``extra`` (e.g. proposal means) together. With
    ``refuse_hidden`` a mask that hides every key a query may see is an error.

    Raises
    ------
    BackendError
        Arrays of an unsupported library, of two libraries or on two devices.
    InvalidParameterError
        Non-float dtypes; a non-boolean ``key_padding_mask``.
    NonFiniteInputError
        NaN or infinity in any input.
    NumericalOverflowError
        A row of ``Q`` or ``K`` whose squared norm overflows the dtype.
    ShapeError
        ``d`` differs between ``Q`` and ``K``, ``K`` and ``V`` have different
        numbers of rows, batch shapes do not broadcast, empty inputs,
        ``causal=True`` with ``n != M``, a mask of the wrong shape, or a mask
        that hides every key of some query.
    """
    bk = get_backend(("Q", Q), ("K", K), ("V", V), ("key_padding_mask", key_padding_mask), *extra)
    Q = check_points(Q, "Q", backend=bk, check_finite=False)
    K = check_points(K, "K", backend=bk, check_finite=False)
    V = check_points(V, "V", backend=bk, check_finite=False)
    qs, ks, vs = tuple(Q.shape), tuple(K.shape), tuple(V.shape)
    if qs[-1] != ks[-1]:
        raise ShapeError(
            f"{owner}: `Q` and `K` must have the same feature dimension d (last axis): "
            f"Q.shape={qs}, K.shape={ks}."
        )
    if ks[-2] != vs[-2]:
        raise ShapeError(
            f"{owner}: `K` and `V` must have the same number of rows M (axis -2, one value per key): "
            f"K.shape={ks}, V.shape={vs}."
        )
    if qs[-2] == 0 or ks[-2] == 0 or qs[-1] == 0 or vs[-1] == 0:
        raise ShapeError(
            f"{owner}: empty input (Q.shape={qs}, K.shape={ks}, V.shape={vs}); "
            "attention needs n >= 1 queries, M >= 1 keys, d >= 1 and dv >= 1."
        )
    if causal and qs[-2] != ks[-2]:
        raise ShapeError(
            f"{owner}: `causal=True` needs as many queries as keys (query i sees keys 0..i): "
            f"Q has n={qs[-2]} rows, K has M={ks[-2]}."
        )
    batch = check_broadcast({"Q": qs[:-2], "K": ks[:-2], "V": vs[:-2]})
    check_finite_and_norms({"Q": Q, "K": K, "V": V}, owner, norms=("Q", "K"))
    dt = float_dtype(Q, K, V)
    B = math.prod(batch)
    n_heads = int(batch[-1]) if batch else 1
    x = QKV(
        _flat(bk, Q, dt, batch, B),
        _flat(bk, K, dt, batch, B),
        _flat(bk, V, dt, batch, B),
        tuple(batch),
        n_heads,
        dt,
        bk,
    )
    if key_padding_mask is None:
        return x
    mask = _check_mask(key_padding_mask, x, owner, causal, refuse_hidden)
    return dataclasses.replace(x, mask=mask)


def _check_mask(mask: Any, x: QKV, owner: str, causal: bool, refuse_hidden: bool = True) -> Any:
    """``key_padding_mask`` (..., M) bool -> (B, M) on the backend; refuses rows that see no key."""
    bk, xp, M = x.bk, x.xp, x.n_keys
    arr = mask if is_array(mask) else bk.asarray(mask)
    dname = bk.dtype_name(arr.dtype)
    ok = dname == "bool"
    if not ok:
        raise InvalidParameterError(
            f"The `key_padding_mask` parameter of {owner} must be a boolean array of shape (..., M) with True "
            f"marking padded keys to ignore. Got dtype {dname} instead."
        )
    shape = tuple(arr.shape)
    if len(shape) < 1 or shape[-1] != M:
        raise ShapeError(
            f"The `key_padding_mask` parameter of {owner} must have shape (..., M) with M={M} (one entry per "
            f"key). Got shape {shape} instead."
        )
    batch = x.batch_shape
    full = check_broadcast({"Q/K/V": batch, "key_padding_mask": shape[:-1]})
    if full != batch:
        raise ShapeError(
            f"The `key_padding_mask` parameter of {owner} has batch shape {shape[:-1]}, which must broadcast to "
            f"the batch shape {batch} of Q, K, V."
        )
    B = x.n_slices
    flat = _flat_bool(bk, arr, batch, B, M)
    if not refuse_hidden:
        return flat
    # a query that sees no key has no attention output: refuse it (never NaN)
    hidden = flat[:, 0] if causal else xp.all(flat, axis=-1)
    if bk.any(hidden):
        h = bk.to_numpy(hidden)
        b = int(np.flatnonzero(h)[0])
        where = np.unravel_index(b, batch) if batch else ()
        if causal:
            first = bk.to_numpy(flat[b, ...])
            kept = np.flatnonzero(~first)
            queries = f"queries 0..{int(kept[0]) - 1}" if kept.size else "every query"
            rule = "with causal=True query i sees keys 0..i, so key 0 must be kept"
        else:
            queries = "every query"
            rule = "every query must see at least one key"
        raise ShapeError(
            f"The `key_padding_mask` parameter of {owner} hides every key that {queries} of batch index "
            f"{tuple(int(i) for i in where)} may see ({rule}); such a query has no attention output. "
            "Keep at least one of its keys, or drop that query."
        )
    return flat


def _flat_bool(bk: Backend, arr: Any, batch: tuple[int, ...], B: int, M: int) -> Any:
    xp = bk.xp
    if tuple(arr.shape[:-1]) != batch:
        arr = xp.broadcast_to(arr, batch + (M,))
    return xp.reshape(arr, (B, M))


def row_blocks(total: int, per_row: int, budget: int = CHUNK_ELEMS, cap: int | None = None) -> list[slice]:
    """Contiguous row blocks so that a ``(block, per_row)`` work array stays within ``budget``.

    The layout depends only on the sizes (never on the number of threads).
    """
    step = max(1, budget // max(per_row, 1))
    if cap is not None:
        step = min(step, cap)
    return [slice(start, min(total, start + step)) for start in range(0, total, step)]


def budget(bk: Backend, numpy_elems: int) -> int:
    """Elements of a work block: the NumPy (cache-sized, thread-pool) budget, more on accelerators.

    Accelerators get at least :attr:`Backend.block_elems` (fewer, larger kernels); the NumPy
    layout is what makes results independent of the thread count.
    """
    return bk.work_budget(numpy_elems)


def run(bk: Backend, fn: Callable[[Any], Any], blocks: Sequence[Any], n_threads: int) -> list[Any]:
    """``[fn(b) for b in blocks]``: on rfkit's thread pool for NumPy, in order for other libraries."""
    return bk.run_blocks(fn, blocks, n_threads)


def blocks_per_job(
    bk: Backend, fn: Callable[[Any], Any], tasks: Sequence[tuple[int, Any]], n_jobs: int, n_threads: int
) -> list[list[Any]]:
    """Run ``fn`` on every ``(job index, block)`` task (on the thread pool for NumPy) and group the
    results per job, in block order."""
    per_job: list[list[Any]] = [[] for _ in range(n_jobs)]
    for (ji, _), part in zip(tasks, run(bk, fn, tasks, n_threads)):
        per_job[ji].append(part)
    return per_job


def shifted_sum(xp: Any, blocks: Sequence[tuple[Any, Any]], expand: Callable[[Any], Any]) -> tuple[Any, Any]:
    r"""``(top, sum_b S_b * expand(exp(t_b - top)))`` for block results ``(t_b, S_b)``, each summed with
    its own shift ``t_b``: the exact total on the common shift ``top = max_b t_b`` (never per key).

    Summed in block order, so the result does not depend on the number of threads. ``expand``
    broadcasts the rescaling factors against ``S_b`` (e.g. ``lambda f: f[..., None]``).
    """
    top = blocks[0][0]
    for t, _ in blocks[1:]:
        top = xp.maximum(top, t)
    if len(blocks) == 1:
        return top, blocks[0][1]
    acc = None
    for t, part in blocks:
        term = part * expand(xp.exp(t - top))  # t = -inf (nothing accumulated) gives 0
        acc = term if acc is None else acc + term
    return top, acc


def check_chunk_size(chunk_size: Any, owner: str) -> int | None:
    """``None`` (automatic) or an int >= 1."""
    if chunk_size is None:
        return None
    return check_int(chunk_size, "chunk_size", owner, low=1)


def check_threads(n_threads: Any, owner: str) -> int | None:
    """``None`` (rfkit's default: ``rk.threads``, ``RFKIT_NUM_THREADS`` or all CPUs) or an int >= 1."""
    if n_threads is None:
        return None
    return check_int(n_threads, "n_threads", owner, low=1)


def check_feature_map_field(estimator: Any, owner: str) -> None:
    """The ``feature_map`` field of a random-feature estimator must be an rfkit feature map."""
    fm = estimator.feature_map
    if not isinstance(fm, FeatureMap):
        raise InvalidParameterError(
            f"The `feature_map` parameter of {owner} must be an rfkit feature map "
            f"(e.g. rk.features.Positive(256)). Got {fm!r} instead."
        )


def check_shared_options(estimator: Any, owner: str) -> None:
    """Validate, in place, the options attention estimators share (frozen dataclass fields).

    ``projection`` (one of :data:`rfkit.projections.PROJECTIONS`), ``shared_across_heads``
    and ``causal`` (bools), ``chunk_size`` and ``n_threads`` (None or an int >= 1): each
    when the estimator has the field.
    """
    fields = {f.name for f in dataclasses.fields(estimator)}
    if "projection" in fields:
        check_option(estimator.projection, "projection", owner, PROJECTIONS)
    for name in ("shared_across_heads", "causal"):
        if name in fields:
            object.__setattr__(estimator, name, check_bool(getattr(estimator, name), name, owner))
    if "chunk_size" in fields:
        object.__setattr__(estimator, "chunk_size", check_chunk_size(estimator.chunk_size, owner))
    if "n_threads" in fields:
        object.__setattr__(estimator, "n_threads", check_threads(estimator.n_threads, owner))


def threads_of(n_threads: int | None, owner: str) -> int:
    """The number of threads of one call (see :func:`rfkit._parallel.resolve_threads`)."""
    return resolve_threads(n_threads, owner)


def check_bool(value: Any, name: str, owner: str) -> bool:
    """Refuse non-bool flags (``causal="yes"`` is a bug, not True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be a bool. Got {value!r} instead."
        )
    return bool(value)


def check_draw_library(gen: Any, bk: Backend, owner: str) -> None:
    """Trials drawn on a device (:class:`~rfkit._random.TrialStreams` of ``BackendGenerator``) must
    draw with the inputs' own library; raises :class:`~rfkit.exceptions.BackendError` otherwise."""
    if isinstance(gen, TrialStreams) and gen.on_device:
        library = gen.generators[0].backend.name
        if library != bk.name:
            raise BackendError(
                f"{owner} was given random generators of {library}, but Q, K and V are {bk.name} arrays: "
                "draws on a device use the inputs' own library."
            )


def sampler_rng(rng: Any, x: Any, owner: str) -> Any:
    """The ``rng`` of a sampled estimator (RA, SNIS, LARA): :func:`~rfkit._random.check_rng_or_trials`, or,
    for a ``torch.Generator`` and torch inputs on its device, one trial drawn on that device by it
    (advancing its state: the same state gives the same numbers). A ``torch.Generator`` with other
    inputs raises :class:`~rfkit.exceptions.InvalidParameterError`."""
    if not is_torch_generator(rng):
        return check_rng_or_trials(rng)
    wrapped, got = torch_generator_for(rng, x.bk.name, x.Q)
    if wrapped is None:
        raise InvalidParameterError(
            f"The `rng` parameter of {owner} is a torch.Generator on {rng.device}, which draws on that device "
            f"only: Q, K and V must be torch tensors there. Got {got}. Pass tensors on {rng.device}, or an "
            "rng that is None, an int, a SeedSequence or a numpy.random.Generator."
        )
    return TrialStreams((wrapped,))


def device_gaussian_noise(gen: Any, n_samples: int, dim: int, projection: str) -> Any:
    """:func:`gaussian_noise` drawn by a ``BackendGenerator`` on its device (``draws = "backend"``):
    the same distribution (:func:`rfkit.projections.sample_projection_on`), other numbers."""
    return sample_projection_on(projection, n_samples, dim, gen)


def gaussian_noise(gen: np.random.Generator, n_samples: int, dim: int, projection: str) -> np.ndarray:
    """``(n_samples, dim)`` standard-normal rows drawn like ``Positive(n_samples, projection)``.

    Uses :func:`rfkit.projections.sample_projection`, so with the same generator
    state the rows equal the directions of a positive-feature draw (the RFA/SNIS
    and RFA/LARA identities rely on this). NumPy, float64: moved to the input's
    device by the caller.
    """
    return sample_projection(projection, n_samples, dim, rng=gen)


def with_ones(bk: Backend, V: Any, keep: Any | None = None) -> Any:
    """``[V | 1]`` (one matrix product then gives both the numerator and the normaliser).

    With ``keep`` (a float 0/1 array broadcasting against ``V[..., 0]``), padded keys get
    the row ``[0 | 0]``.
    """
    shape = tuple(V.shape)
    V1 = bk.empty(shape[:-1] + (shape[-1] + 1,), V.dtype)
    V1[..., :-1] = V
    V1[..., -1] = 1.0
    if keep is not None:
        V1 = V1 * keep[..., None]
    return V1


def finish_ratio(log_scale: Any, num: Any, den: Any, n_threads: int | None = None) -> tuple[Any, int]:
    """Output ``num / den`` with NaN rows where ``den <= 0`` (or non-finite); count of such rows.

    In fixed row blocks (on NumPy: on rfkit's thread pool; the division is exact, so the blocks
    change nothing but the speed).
    """
    bk = get_backend(("num", num), ("den", den))
    xp = bk.xp
    shape = tuple(num.shape)
    nan = bk.scalar(math.nan, num.dtype)
    inf = bk.scalar(math.inf, num.dtype)
    lead = math.prod(shape[:-2])
    blocks = bk.row_blocks(shape[-2], lead * (shape[-1] + 1))
    if len(blocks) == 1 and not bk.uses_thread_pool:  # an accelerator: a few large kernels, one read-back
        ok = (den > 0) & (den < inf)  # False for NaN, infinity and den <= 0
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            out = xp.where(ok[..., None], num / den[..., None], nan)
        return out, math.prod(shape[:-1]) - bk.count(ok)
    out = bk.empty(shape, num.dtype)

    def one(rows: slice) -> int:
        d = den[..., rows]
        bad = ~(d > 0) | ~xp.isfinite(d)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            o = num[..., rows, :] / d[..., None]
        nbad = bk.count(bad)
        out[..., rows, :] = xp.where(bad[..., None], nan, o) if nbad else o
        return nbad

    return out, sum(bk.run_blocks(one, blocks, n_threads))


def nonpositive_message(owner: str, nbad: int, shape: tuple[int, ...], hint: str) -> str:
    total = math.prod(int(s) for s in shape)
    return (
        f"{owner}: {nbad} of {total} query rows have an estimated normaliser <= 0; their output is NaN "
        f"(counted in AttentionResult.n_nonpositive, never clipped). {hint}"
    )
