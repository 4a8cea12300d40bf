r"""The query-key pairs a data-dependent feature map is fitted on, and their pair-weighted moments.

The fitted maps (OPRF/FAVOR++ and its hyperbolic form, GERF, SADERF, ADERF, SDERF, CEXP/HCEXP
with a rule for ``A``) choose their parameters :math:`\theta` by minimising a mean over
query-key pairs, :math:`J(\theta) = \frac1W\sum_{i,j} w_{ij}\,\ell(\theta; x_i, y_j)` with
:math:`w_{ij} \in \{0, 1\}` and :math:`W = \sum_{ij} w_{ij}`. The papers (Likhosherstov et al.
(NeurIPS 2022) for OPRF, Likhosherstov et al. (2023) and (NeurIPS 2023) for SADERF, ADERF,
SDERF, Blackwelder (2024) for the CEXP rules) average over every pair of the sample; the pair
selection below, and the causal weighting in particular, is rfkit's own (docs page *Attention
estimators*, "Fitting on the pairs attention uses").

Which pairs (``pairs``, or a map's ``fit_pairs``):

* ``"all"``: every query with every key of the whole sample, leading axes pooled (the papers'
  objective, and rfkit's fit before pair selection; a query of one sequence is paired with the
  keys of the others too);
* ``"sequence"``: every query with every key of its own sequence (leading axes index sequences:
  the pairs of bidirectional attention);
* ``"causal"``: :math:`(i, j)` with :math:`j \le i` in the same sequence (the pairs of causal
  attention; needs as many queries as keys);
* a boolean array of shape ``(..., n, M)``: the pairs marked True, within each sequence.

In every case ``key_padding_mask`` (``(..., M)``, True = padded) removes padded keys from every
pair, and ``exclude = (idx, valid)`` (``(..., n, s)`` integer key positions and booleans, the
format of :class:`rfkit.attention.Hybrid`'s exact support) removes query :math:`i`'s pairs with
the keys ``idx[..., i, t]`` where ``valid[..., i, t]``.

Every closed-form fit depends on the data only through the pair-weighted moments, with
:math:`r_i = \sum_j w_{ij}` (the keys query :math:`i` is paired with) and
:math:`c_j = \sum_i w_{ij}`:

.. math::

    \mu_x = \tfrac1W\textstyle\sum_i r_i x_i,\quad M_x = \tfrac1W\sum_i r_i x_ix_i^\top,\quad
    \mu_y = \tfrac1W\sum_j c_j y_j,\quad M_y = \tfrac1W\sum_j c_j y_jy_j^\top,\quad
    C = \tfrac1W\sum_{ij} w_{ij}\,x_iy_j^\top = \tfrac1W\sum_i x_iP_i^\top,\ P_i = \sum_j w_{ij}y_j.

With every pair (``"all"``), :math:`\mu_x, M_x` are the plain sample moments and
:math:`C = \mu_x\mu_y^\top`. Causally :math:`P_i` is a prefix sum over the keys, so the moments
cost :math:`O(nd^2)` time and :math:`O(nd)` memory per sequence, never :math:`O(n^2)`;
``exclude`` subtracts the excluded pairs' terms (:math:`O(|E|d^2)`). The fits whose objective
is not a function of moments (the hyperbolic OPRF, GERF with ``s=-1``) use the selected pairs'
values :math:`\|x_i \pm y_j\|^2` (:func:`pair_values`), as they use all pairs' values today.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .._backend import Backend, get_backend, is_array, to_numpy
from .._validation import as_float_array, check_broadcast, check_option, check_same_dim
from ..exceptions import InvalidParameterError, ShapeError
from ._base import FeatureMap

__all__ = ["FIT_PAIRS", "PairMoments", "check_fit_pairs", "fit_to_pairs", "pair_moments", "pair_values"]

#: The named pair selections of a fit (see the module docstring).
FIT_PAIRS = ("all", "sequence", "causal")


def check_fit_pairs(value: Any, owner: str) -> str:
    """A map's ``fit_pairs`` option, or InvalidParameterError naming the options."""
    return check_option(value, "fit_pairs", owner, FIT_PAIRS)


def is_plain(pairs: Any, exclude: Any) -> bool:
    """True for the papers' objective: every pair of the pooled sample, nothing excluded."""
    return isinstance(pairs, str) and pairs == "all" and exclude is None


def pooled(Q: Any, K: Any, key_padding_mask: Any) -> tuple[Any, Any]:
    """The sample of the ``"all"`` fit: the queries, and the keys that are not padded.

    Without a mask ``(Q, K)`` unchanged (the fits pool leading axes themselves); with one, the
    keys' rows pooled and the padded ones dropped.
    """
    if key_padding_mask is None:
        return Q, K
    bk = get_backend(("K", K), ("key_padding_mask", key_padding_mask))
    K = as_float_array(K, "K", min_ndim=2, shape_hint="`K` must have shape (..., M, d).", backend=bk)
    mask = _device_mask(key_padding_mask, bk)
    if mask.ndim < 1 or mask.shape[-1] != K.shape[-2]:
        raise ShapeError(
            f"`key_padding_mask` must have shape (..., M) with M = {K.shape[-2]} keys; "
            f"got shape {tuple(mask.shape)}."
        )
    lead = check_broadcast({"K": tuple(K.shape[:-2]), "key_padding_mask": tuple(mask.shape[:-1])})
    xp = bk.xp
    d = int(K.shape[-1])
    shape = (*lead, int(K.shape[-2]))
    Kb = xp.broadcast_to(K, (*shape, d)) if tuple(K.shape[:-1]) != shape else K
    mb = xp.broadcast_to(mask, shape) if tuple(mask.shape) != shape else mask
    return Q, xp.reshape(Kb, (-1, d))[xp.reshape(~mb, (-1,))]


def _device_mask(mask: Any, bk: Backend) -> Any:
    """A boolean mask on the call's backend (InvalidParameterError for another dtype)."""
    arr = mask if is_array(mask) else bk.asarray(np.asarray(mask))
    if bk.dtype_name(arr.dtype) != "bool":
        raise InvalidParameterError(
            f"`key_padding_mask` must be a boolean array (True marks a padded key). Got dtype {arr.dtype} instead."
        )
    return arr


def _host_bool(a: Any, name: str, rule: str) -> np.ndarray:
    arr = np.asarray(to_numpy(a)) if is_array(a) else np.asarray(a)
    if arr.dtype != np.bool_:
        raise InvalidParameterError(
            f"`{name}` must be a boolean array ({rule}). Got dtype {arr.dtype} instead."
        )
    return arr


@dataclasses.dataclass(frozen=True)
class _Layout:
    """The selected pairs of a fit: data as (S, n, d) / (S, M, d), and host weights."""

    bk: Backend
    X: Any  # (S, n, d) float64, the data's backend
    Y: Any  # (S, M, d)
    rule: str  # "all", "sequence", "causal" or "mask"
    keep: np.ndarray  # (S, M) bool: keys not padded
    allowed: np.ndarray | None  # (S, n, M) bool for a pair mask (padding applied)
    exc: tuple[np.ndarray, np.ndarray, np.ndarray]  # (slice, query, key) of the excluded pairs
    r: np.ndarray  # (S, n) float64: pairs of each query
    c: np.ndarray  # (S, M) float64: pairs of each key
    weight: float  # W


def _layout(Q: Any, K: Any, pairs: Any, key_padding_mask: Any, exclude: Any) -> _Layout:
    named: list[tuple[str, Any]] = [("Q", Q), ("K", K)]
    if key_padding_mask is not None:
        named.append(("key_padding_mask", key_padding_mask))
    if not isinstance(pairs, str):
        named.append(("pairs", pairs))
    bk = get_backend(*named)
    Q = as_float_array(Q, "Q", min_ndim=2, shape_hint="`Q` must have shape (..., n, d).", backend=bk)
    K = as_float_array(K, "K", min_ndim=2, shape_hint="`K` must have shape (..., M, d).", backend=bk)
    check_same_dim(Q, K, "Q", "K")
    n, M, d = int(Q.shape[-2]), int(K.shape[-2]), int(Q.shape[-1])
    if n == 0 or M == 0 or d == 0:
        raise ShapeError(
            f"A fit needs at least one query, one key and d >= 1; got Q.shape={tuple(Q.shape)}, "
            f"K.shape={tuple(K.shape)}."
        )
    shapes: dict[str, tuple[int, ...]] = {"Q": tuple(Q.shape[:-2]), "K": tuple(K.shape[:-2])}
    pm = None
    if isinstance(pairs, str):
        rule = check_option(pairs, "pairs", "fit", FIT_PAIRS)
    elif is_array(pairs) or isinstance(pairs, (list, tuple)):
        rule = "mask"
        pm = _host_bool(pairs, "pairs", "True marks a pair the fit counts")
        if pm.ndim < 2 or pm.shape[-2:] != (n, M):
            raise ShapeError(f"A `pairs` mask must have shape (..., n, M) = (..., {n}, {M}); got {pm.shape}.")
        shapes["pairs"] = pm.shape[:-2]
    else:
        raise InvalidParameterError(
            f"The `pairs` parameter of fit must be one of {list(FIT_PAIRS)} or a boolean array (..., n, M). "
            f"Got {pairs!r:.80} instead."
        )
    if rule == "causal" and n != M:
        raise ShapeError(
            f"A causal fit (pairs j <= i) needs as many queries as keys per sequence; got n={n} queries, M={M} keys."
        )
    km = None
    if key_padding_mask is not None:
        km = _host_bool(key_padding_mask, "key_padding_mask", "True marks a padded key")
        if km.ndim < 1 or km.shape[-1] != M:
            raise ShapeError(f"`key_padding_mask` must have shape (..., M) with M = {M}; got {km.shape}.")
        shapes["key_padding_mask"] = km.shape[:-1]
    idx = valid = None
    if exclude is not None:
        idx, valid = _check_exclude(exclude, n)
        shapes["exclude"] = idx.shape[:-2]
    batch = check_broadcast(shapes)
    S = math.prod(batch)
    xp = bk.xp
    X = xp.reshape(xp.broadcast_to(xp.astype(Q, xp.float64), (*batch, n, d)), (S, n, d))
    Y = xp.reshape(xp.broadcast_to(xp.astype(K, xp.float64), (*batch, M, d)), (S, M, d))
    keep = np.ones((S, M), dtype=bool) if km is None else ~np.broadcast_to(km, (*batch, M)).reshape(S, M)
    allowed = None if pm is None else np.broadcast_to(pm, (*batch, n, M)).reshape(S, n, M) & keep[:, None, :]
    ok = np.zeros((S, n, 0), dtype=bool)
    safe = np.zeros((S, n, 0), dtype=np.int64)
    if idx is not None and valid is not None:
        width = int(idx.shape[-1])
        idx = np.broadcast_to(idx, (*batch, n, width)).reshape(S, n, width)
        valid = np.broadcast_to(valid, (*batch, n, width)).reshape(S, n, width)
        if np.any(valid & ((idx < 0) | (idx >= M))):
            raise ShapeError(f"`exclude` holds key positions outside [0, {M}) where valid is True.")
        safe = np.where(valid, idx, 0)
        srows = np.arange(S)[:, None, None]
        ok = valid & keep[srows, safe]  # an excluded pair must be a selected one
        if rule == "causal":
            ok &= safe <= np.arange(n)[None, :, None]
        if allowed is not None:
            ok &= allowed[srows, np.arange(n)[None, :, None], safe]
        key = np.sort(np.where(ok, safe, -1), axis=-1)
        if np.any((key[..., 1:] == key[..., :-1]) & (key[..., 1:] >= 0)):
            raise InvalidParameterError(
                "`exclude` must list each key at most once per query (valid entries of a row distinct)."
            )
    s_e, i_e, t_e = np.nonzero(ok)
    j_e = safe[s_e, i_e, t_e]
    e_row = ok.sum(axis=-1).astype(np.float64)
    e_col = np.bincount(s_e * M + j_e, minlength=S * M).reshape(S, M).astype(np.float64)
    kept = keep.astype(np.float64)
    if rule == "all":
        r = float(kept.sum()) - e_row
        c = float(S * n) * kept - e_col
    elif rule == "sequence":
        r = kept.sum(axis=1)[:, None] - e_row
        c = float(n) * kept - e_col
    elif rule == "causal":
        r = np.cumsum(kept, axis=1) - e_row
        c = kept * (n - np.arange(M))[None, :] - e_col
    else:
        assert allowed is not None
        r = allowed.sum(axis=2).astype(np.float64) - e_row
        c = allowed.sum(axis=1).astype(np.float64) - e_col
    W = float(r.sum())
    if W <= 0:
        raise ShapeError(
            f"The fit's pair selection ({rule!r}, with the key padding and exclusions given) holds no "
            "(query, key) pair: there is nothing to fit on."
        )
    return _Layout(bk, X, Y, rule, keep, allowed, (s_e, i_e, j_e), r, c, W)


def _check_exclude(exclude: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    if not (isinstance(exclude, tuple) and len(exclude) == 2):
        raise InvalidParameterError(
            "The `exclude` parameter of fit must be a pair (idx, valid) of arrays of shape (..., n, s): "
            f"key positions and booleans. Got {exclude!r:.80} instead."
        )
    idx = np.asarray(to_numpy(exclude[0]) if is_array(exclude[0]) else exclude[0])
    valid = _host_bool(exclude[1], "exclude[1] (valid)", "True marks an excluded pair")
    if idx.dtype.kind not in "iu":
        raise InvalidParameterError(
            f"`exclude[0]` (idx) must hold integer key positions; got dtype {idx.dtype}."
        )
    if idx.shape != valid.shape or idx.ndim < 2 or idx.shape[-2] != n:
        raise ShapeError(
            f"`exclude` must be (idx, valid) of one shape (..., n, s) with n = {n}; "
            f"got {idx.shape} and {valid.shape}."
        )
    return idx.astype(np.int64), valid


@dataclasses.dataclass(frozen=True)
class PairMoments:
    r"""Pair-weighted moments of a query/key sample (module docstring), float64 NumPy.

    Parameters
    ----------
    weight : float
        :math:`W`, the number of selected pairs.
    mean_q, mean_k : ndarray of shape (d,)
        :math:`\mu_x`, :math:`\mu_y`.
    second_q, second_k : ndarray of shape (d, d)
        :math:`M_x`, :math:`M_y` (uncentred, symmetric).
    cross : ndarray of shape (d, d)
        :math:`C = \frac1W\sum_{ij}w_{ij}x_iy_j^\top`.
    ss_q, ss_k : ndarray of shape (d,)
        Centred weighted sums of squares :math:`\sum_i r_i(x_{il} - \mu_{x,l})^2` (keys: with :math:`c_j`).
    sq_weight_q, sq_weight_k : float
        :math:`\sum_i r_i^2` and :math:`\sum_j c_j^2` (for unbiased weighted variances).
    """

    weight: float
    mean_q: np.ndarray
    mean_k: np.ndarray
    second_q: np.ndarray
    second_k: np.ndarray
    cross: np.ndarray
    ss_q: np.ndarray
    ss_k: np.ndarray
    sq_weight_q: float
    sq_weight_k: float

    @property
    def dim(self) -> int:
        return int(self.mean_q.shape[-1])


def _side(bk: Backend, Z: Any, w: np.ndarray, W: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted mean, second moment and centred sum of squares of the rows of Z (N, d) with weights w (N,)."""
    xp = bk.xp
    wd = bk.asarray(w.reshape(-1, 1), dtype=xp.float64)
    Zw = Z * wd
    mean = xp.sum(Zw, axis=0) / W
    second = to_numpy((xp.matrix_transpose(Zw) @ Z) / W)
    ss = xp.sum(wd * (Z - mean) ** 2, axis=0)
    return to_numpy(mean), 0.5 * (second + second.T), to_numpy(ss)


def pair_moments(
    Q: Any, K: Any, *, pairs: Any = "all", key_padding_mask: Any = None, exclude: Any = None
) -> PairMoments:
    r"""Pair-weighted moments :math:`W, \mu_x, M_x, \mu_y, M_y, C` of the selected pairs (module docstring).

    Computed in the data's library and on its device (only d-vectors and d x d matrices come to
    the host): causally with prefix sums (:math:`O(nd^2)` time, :math:`O(nd)` memory per sequence),
    a pair mask with one product per sequence, exclusions by subtracting their pairs' terms.

    Parameters
    ----------
    Q, K : array_like of shape (..., n, d) and (..., M, d)
        Queries and keys; leading axes index sequences (broadcast together).
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), default="all"
    key_padding_mask : array of bool (..., M), optional
        True marks a padded key (in no pair).
    exclude : (idx, valid), optional
        Pairs removed: for query ``i``, the keys ``idx[..., i, t]`` where ``valid[..., i, t]``.

    Returns
    -------
    PairMoments
        The moments, float64 NumPy.

    Raises
    ------
    ShapeError
        Inconsistent shapes, ``"causal"`` with ``n != M``, or a selection with no pair.
    InvalidParameterError
        An unknown rule, a non-boolean mask, an ``exclude`` listing a key twice for a query.
    """
    L = _layout(Q, K, pairs, key_padding_mask, exclude)
    bk, xp = L.bk, L.bk.xp
    S, n, d = (int(v) for v in L.X.shape)
    M = int(L.Y.shape[1])
    Xf, Yf = xp.reshape(L.X, (S * n, d)), xp.reshape(L.Y, (S * M, d))
    W = L.weight
    mq, sq, ssq = _side(bk, Xf, L.r, W)
    mk, sk, ssk = _side(bk, Yf, L.c, W)
    keep = bk.asarray(L.keep.astype(np.float64)[..., None], dtype=xp.float64)
    Yk = L.Y * keep  # padded keys zeroed
    if L.rule == "all":
        cross = xp.sum(Xf, axis=0)[:, None] * xp.sum(xp.reshape(Yk, (S * M, d)), axis=0)[None, :]
    elif L.rule == "sequence":
        cross = xp.matrix_transpose(xp.sum(L.X, axis=1)) @ xp.sum(Yk, axis=1)
    else:
        if L.rule == "causal":
            P = xp.cumulative_sum(Yk, axis=1)  # P_i = sum_{j <= i} y_j
        else:
            assert L.allowed is not None
            P = bk.asarray(L.allowed.astype(np.float64), dtype=xp.float64) @ L.Y
        cross = xp.sum(xp.matrix_transpose(L.X) @ P, axis=0)
    s_e, i_e, j_e = L.exc
    if s_e.size:
        Xe = xp.take(Xf, bk.asarray(s_e * n + i_e), axis=0)
        Ye = xp.take(Yf, bk.asarray(s_e * M + j_e), axis=0)
        cross = cross - xp.matrix_transpose(Xe) @ Ye
    return PairMoments(
        weight=W,
        mean_q=mq,
        mean_k=mk,
        second_q=sq,
        second_k=sk,
        cross=to_numpy(cross) / W,
        ss_q=ssq,
        ss_k=ssk,
        sq_weight_q=float(np.sum(L.r**2)),
        sq_weight_k=float(np.sum(L.c**2)),
    )


def pair_values(
    Q: Any, K: Any, sign: float, *, pairs: Any = "all", key_padding_mask: Any = None, exclude: Any = None
) -> np.ndarray:
    r""":math:`\|x_i + \mathrm{sign}\,y_j\|^2` of the selected pairs, float64 NumPy (W,).

    For the objectives that are not functions of moments (the hyperbolic OPRF, GERF ``s=-1``).
    Formed on the data's device one sequence block at a time and brought to the host:
    :math:`O(nM)` values per sequence (``"all"``: every pair of the pooled sample).

    Parameters
    ----------
    Q, K : array_like of shape (..., n, d) and (..., M, d)
        Queries :math:`x_i` and keys :math:`y_j`; leading axes index sequences.
    sign : float
        The sign in :math:`x_i + \mathrm{sign}\,y_j` (1 or -1).
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), default="all"
        The selection (as in :func:`pair_moments`).
    key_padding_mask : array of bool (..., M), optional
        True marks a padded key (in no pair).
    exclude : (idx, valid), optional
        Pairs left out.

    Returns
    -------
    ndarray of shape (W,)
        One value per selected pair, float64 NumPy.
    """
    L = _layout(Q, K, pairs, key_padding_mask, exclude)
    xp = L.bk.xp
    S, n, d = (int(v) for v in L.X.shape)
    M = int(L.Y.shape[1])
    if L.rule == "all":  # one pooled "sequence" of S n queries and S M keys
        X, Y = xp.reshape(L.X, (1, S * n, d)), xp.reshape(L.Y, (1, S * M, d))
        allowed = np.broadcast_to(L.keep.reshape(1, 1, S * M), (1, S * n, S * M)).copy()
        s_e, i_e, j_e = L.exc
        allowed[0, s_e * n + i_e, s_e * M + j_e] = False
    else:
        X, Y = L.X, L.Y
        if L.rule == "sequence":
            allowed = np.broadcast_to(L.keep[:, None, :], (S, n, M)).copy()
        elif L.rule == "causal":
            allowed = np.tril(np.ones((n, M), dtype=bool))[None] & L.keep[:, None, :]
        else:
            assert L.allowed is not None
            allowed = L.allowed.copy()
        allowed[L.exc] = False
    sx = xp.sum(X * X, axis=-1)
    sy = xp.sum(Y * Y, axis=-1)
    t = sx[:, :, None] + sy[:, None, :] + (2.0 * sign) * (X @ xp.matrix_transpose(Y))
    return np.maximum(to_numpy(t)[allowed], 0.0)  # >= 0 exactly; the max removes round-off


def fit_to_pairs(
    fm: FeatureMap,
    queries: Any,
    keys: Any,
    *,
    pairs: Any = None,
    key_padding_mask: Any = None,
    exclude: Any = None,
) -> FeatureMap:
    """Fit a map on the selected query-key pairs (``fm`` itself when it needs no data).

    rfkit's data-dependent maps take the selection in ``fit`` (``pairs=None``: the map's own
    ``fit_pairs``). A map of your own whose ``fit(Q, K)`` takes no selection is fitted on the
    pooled queries and the unpadded keys (the ``"all"`` selection); any other selection raises.
    This is how :class:`rfkit.attention.RFA` and :class:`rfkit.attention.Hybrid` fit.

    Parameters
    ----------
    fm : FeatureMap
        The map to fit.
    queries, keys : array_like of shape (..., n, d) and (..., M, d)
        Queries and keys; leading axes index sequences.
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), optional
        The selection; None: the map's own ``fit_pairs``.
    key_padding_mask : array of bool (..., M), optional
        True marks a padded key (in no pair).
    exclude : (idx, valid), optional
        Pairs left out (Hybrid's exact support).

    Returns
    -------
    FeatureMap
        The fitted map (``fm`` itself when it needs no data).

    Raises
    ------
    InvalidParameterError
        A selection other than ``"all"`` for a map whose ``fit`` takes none.
    """
    if not fm.needs_data:
        return fm
    if getattr(type(fm), "_pair_fit", False):
        return fm.fit(queries, keys, pairs=pairs, key_padding_mask=key_padding_mask, exclude=exclude)  # type: ignore[call-arg]
    if (pairs is None or (isinstance(pairs, str) and pairs == "all")) and exclude is None:
        Qp, Kp = pooled(queries, keys, key_padding_mask)
        bk = get_backend(("Q", Qp), ("K", Kp))
        d = int(Qp.shape[-1])
        return fm.fit(bk.xp.reshape(Qp, (-1, d)), bk.xp.reshape(Kp, (-1, d)))
    raise InvalidParameterError(
        f"{fm.name}.fit(Q, K) takes no pair selection, so it cannot be fitted on {pairs!r:.40}"
        f"{' with exclusions' if exclude is not None else ''}: fit it on all pairs, or give it the keywords "
        "pairs=, key_padding_mask=, exclude= and the class attribute _pair_fit = True."
    )
