r"""Per-head splits of a budget of exact logits: :class:`HybridPerHead` and :func:`calibrate_split`.

:class:`~rfkit.attention.Hybrid` with keys by content spends a per-query budget of exact logits on
a sliding window, sink keys, ``top_k`` keys chosen by a scorer and ``n_samples`` sampled keys. One
split for every head is rarely best for each: a local head wants the window, another the sinks or
the scorer's keys. :func:`calibrate_split` tries a small grid of splits of the budget on each head
of calibration data (the output MSE against exact softmax attention) and returns a
:class:`HybridPerHead`, one :class:`Hybrid` per head, to be used on other data of the same heads.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._backend import get_backend
from .._random import check_rng
from .._validation import check_int, check_option
from ..exceptions import InvalidParameterError, RFKitWarning
from ._common import check_bool
from ._exact import softmax
from ._hybrid import Hybrid
from ._remainder import REMAINDERS, SAMPLED
from ._result import AttentionResult, QueryCost
from ._scorers import SCORERS

__all__ = ["HybridPerHead", "calibrate_split", "split_grid"]

#: The keys of a candidate split.
SPLIT_KEYS = ("window", "n_global", "top_k", "n_samples")
#: Hybrid options a calibration passes on to every head (the split and the remainder are its own).
PASSED_OPTIONS = ("proposal_mix", "refresh", "block_size", "n_hashes")
# Default grid: window half-widths, sink counts and the scorer's share of the rest (sampled remainders).
_WINDOWS = (0, 4, 8, 16, 32)
_SINKS = (0, 4, 8)
_SHARES = (0.25, 0.5, 0.75)


def split_cost(split: Mapping[str, Any], causal: bool) -> int:
    """Nominal exact logits per query of a split: window keys + sinks + ``top_k`` + ``n_samples``."""
    w = split.get("window")
    keys = 0 if w is None else (w + 1 if causal else 2 * w + 1)
    return keys + (split.get("n_global") or 0) + (split.get("top_k") or 0) + (split.get("n_samples") or 0)


def split_grid(budget: int, *, scorer: str | None, remainder: str, causal: bool) -> list[dict[str, Any]]:
    """The default candidate splits of ``budget`` exact logits per query (see :func:`calibrate_split`).

    Window half-widths 0, 4, 8, 16, 32 and 0, 4 or 8 sinks where they fit; the rest all to
    ``top_k`` (remainder ``"none"``), all to ``n_samples`` (no scorer), or a quarter, a half or
    three quarters (rounded down) to ``top_k`` and the others to ``n_samples`` (a scorer and a
    sampled remainder). Without a scorer and with remainder ``"none"`` the rest is unspent.
    """
    budget = check_int(budget, "budget", "split_grid", low=1)
    out: list[dict[str, Any]] = []
    for w in _WINDOWS:
        for g in _SINKS:
            base = {"window": w, "n_global": g, "top_k": None, "n_samples": None}
            rest = budget - split_cost(base, causal)
            if rest < 0 or (rest == 0 and (scorer is not None or remainder in SAMPLED)):
                continue
            if remainder not in SAMPLED:
                out.append({**base, "top_k": rest if scorer is not None else None})
            elif scorer is None:
                out.append({**base, "n_samples": rest})
            else:
                for share in _SHARES:
                    t = int(share * rest)
                    if remainder == "importance" or t >= 1:
                        if rest - t >= 1:
                            out.append({**base, "top_k": t or None, "n_samples": rest - t})
    unique = {tuple(c[k] for k in SPLIT_KEYS): c for c in out}
    return list(unique.values())


@dataclasses.dataclass(frozen=True)
class HybridPerHead:
    r"""One :class:`Hybrid` per head: ``heads[h]`` estimates attention for head ``h``.

    Inputs are ``Q`` (..., H, n, d), ``K`` (..., H, M, d), ``V`` (..., H, M, dv) with the heads on
    axis -3; the result stacks the heads' results on that axis (the cost counts on axis -2).
    :func:`calibrate_split` builds one from calibration data; any sequence of Hybrid estimators
    with the same ``causal`` works as well.

    Parameters
    ----------
    heads : sequence of Hybrid
        The estimator of each head (at least one; all with the same ``causal``).
    candidates : sequence of dict, optional
        The splits a calibration chose from (``window``, ``n_global``, ``top_k``, ``n_samples``).
    mse : ndarray of shape (H, len(candidates)), optional
        The calibration's output MSE of each candidate on each head (mean over the calibration
        data's leading axes, queries, value dimensions and draws).

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> Q, K, V = 0.3 * np.random.default_rng(0).normal(size=(3, 2, 32, 8))
    >>> a = rk.attention.Hybrid(window=4, remainder="none")
    >>> b = rk.attention.Hybrid(n_global=8, remainder="none")
    >>> rk.attention.HybridPerHead((a, b))(Q, K, V).output.shape
    (2, 32, 8)
    """

    heads: Sequence[Hybrid]
    candidates: Sequence[Mapping[str, Any]] | None = dataclasses.field(default=None, repr=False)
    mse: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        heads = tuple(self.heads) if isinstance(self.heads, (list, tuple)) else None
        if not heads or not all(isinstance(h, Hybrid) for h in heads):
            raise InvalidParameterError(
                "The `heads` parameter of HybridPerHead must be a non-empty list or tuple of Hybrid "
                f"estimators (one per head). Got {self.heads!r} instead."
            )
        if len({h.causal for h in heads}) > 1:
            raise InvalidParameterError(
                "The `heads` parameter of HybridPerHead must hold estimators with the same `causal` "
                f"setting. Got causal={[h.causal for h in heads]} instead."
            )
        object.__setattr__(self, "heads", heads)
        if self.candidates is not None:
            object.__setattr__(self, "candidates", tuple(dict(c) for c in self.candidates))

    @property
    def causal(self) -> bool:
        """Whether the heads' estimators are causal."""
        return bool(self.heads[0].causal)

    @property
    def splits(self) -> list[dict[str, Any]]:
        """Each head's split: ``window``, ``n_global``, ``top_k`` and ``n_samples``."""
        return [{k: getattr(h, k) for k in SPLIT_KEYS} for h in self.heads]

    def __call__(
        self,
        Q: Any,
        K: Any,
        V: Any,
        *,
        rng: Any = None,
        n_draws: int | None = None,
        key_padding_mask: Any = None,
    ) -> AttentionResult:
        """Estimate attention head by head; arguments as for :meth:`Hybrid.__call__`.

        ``key_padding_mask`` (..., M) broadcasts against the batch shape including the head axis
        (e.g. (B, 1, M)). The heads draw from ``rng`` one after the other.
        """
        H = len(self.heads)
        for name, a in (("Q", Q), ("K", K), ("V", V)):
            shape = tuple(getattr(a, "shape", ()))
            if len(shape) < 3 or shape[-3] != H:
                raise InvalidParameterError(
                    f"The `{name}` parameter of HybridPerHead must have shape (..., H, rows, dim) with H={H} "
                    f"heads on axis -3 (one per estimator). Got shape {shape} instead."
                )
        gen = check_rng(rng)
        mask = key_padding_mask
        if mask is not None:
            xp = get_backend(("key_padding_mask", mask)).xp
            mask = xp.broadcast_to(mask, tuple(Q.shape[:-2]) + (int(K.shape[-2]),))
        res = []
        for h, est in enumerate(self.heads):
            m = None if mask is None else mask[..., h, :]
            res.append(
                est(
                    Q[..., h, :, :],
                    K[..., h, :, :],
                    V[..., h, :, :],
                    rng=gen,
                    n_draws=n_draws,
                    key_padding_mask=m,
                )
            )
        xp = get_backend(("output", res[0].output)).xp

        def stack(name: str, axis: int, items: Sequence[Any]) -> Any:
            values = [getattr(r, name) for r in items]
            return None if any(v is None for v in values) else xp.stack(values, axis=axis)

        costs = [r.cost for r in res]
        cost = None
        if all(c is not None for c in costs):
            cost = QueryCost(**{f.name: stack(f.name, -2, costs) for f in dataclasses.fields(QueryCost)})
        return AttentionResult(
            output=stack("output", -3, res),
            method="HybridPerHead",
            estimator=self,
            log_scale=stack("log_scale", -2, res),
            numerator_values=stack("numerator_values", -3, res),
            denominator_values=stack("denominator_values", -2, res),
            n_nonpositive=sum(r.n_nonpositive for r in res),
            cost=cost,
        )


def calibrate_split(
    Q: Any,
    K: Any,
    V: Any,
    *,
    budget: int,
    candidates: Sequence[Mapping[str, Any]] | None = None,
    scorer: str | None = None,
    remainder: str = "none",
    causal: bool = False,
    trials: int = 4,
    rng: Any = None,
    **options: Any,
) -> HybridPerHead:
    r"""Choose, per head, the split of a budget of exact logits that attends best on calibration data.

    Each candidate split (``window``, ``n_global``, ``top_k``, ``n_samples``) becomes a
    :class:`Hybrid` with ``scorer``, ``remainder`` and ``options``; on every head of the calibration
    data its output MSE against exact softmax attention is measured (mean over the leading axes,
    queries, value dimensions and, for a random estimator, ``trials`` draws), and each head keeps
    the candidate with the smallest. Calibrate on one text and use the result on others: on the
    calibration data itself the choice is optimistic.

    Parameters
    ----------
    Q, K, V : ndarray
        Calibration data, NumPy arrays (..., H, n, d), (..., H, M, d), (..., H, M, dv): the heads on
        axis -3, other leading axes (texts) pooled. No padding (pass valid tokens only).
    budget : int
        Nominal exact logits per query (>= 1): window keys (``w + 1`` causally, ``2w + 1``
        bidirectionally) + sinks + ``top_k`` + ``n_samples``. Every candidate must fit it. The
        measured cost can be lower (windows near the ends, causal queries that see fewer keys) or,
        with ``scorer="quest"``, up to ``block_size - 1`` higher (whole blocks); the ``"oracle"``
        scorer also pays every visible key's logit.
    candidates : sequence of dict, optional
        The splits to try, each a mapping with keys among ``window``, ``n_global``, ``top_k``,
        ``n_samples`` (missing: None, ``n_global`` 0). Default: :func:`split_grid` (window
        half-widths 0-32, 0-8 sinks, the rest to ``top_k`` and/or ``n_samples``).
    scorer : {"oracle", "proxy", "quest", "lsh"}, optional
        The content scorer of every candidate (as :class:`Hybrid`).
    remainder : {"none", "uniform", "stratified", "importance"}, default="none"
        What becomes of the other keys (as :class:`Hybrid`; ``"features"`` is not calibrated here).
    causal : bool, default=False
        Causal attention (``n == M``).
    trials : int, default=4
        Draws per candidate and head for a random estimator (>= 1; a sampled remainder or the
        ``"lsh"`` scorer); deterministic ones are computed once.
    rng : int, Generator or None
        Randomness of the calibration's draws (keyword-only).
    **options
        Passed to every :class:`Hybrid`: ``proposal_mix``, ``refresh``, ``block_size``, ``n_hashes``.

    Returns
    -------
    HybridPerHead
        One Hybrid per head, with ``candidates`` and the calibration's ``mse`` (H, candidates).

    Raises
    ------
    InvalidParameterError
        A budget below 1, data without a head axis or not NumPy, a candidate with unknown keys,
        over the budget or that :class:`Hybrid` refuses, an unknown option, remainder="features".

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> Q, K, V = 0.5 * np.random.default_rng(0).normal(size=(3, 2, 64, 8))
    >>> est = rk.attention.calibrate_split(Q, K, V, budget=16, scorer="quest", causal=True, block_size=4)
    >>> len(est.heads), est.splits[0]["top_k"] is not None
    (2, True)
    """
    owner = "calibrate_split"
    budget = check_int(budget, "budget", owner, low=1)
    causal = check_bool(causal, "causal", owner)
    trials = check_int(trials, "trials", owner, low=1)
    check_option(remainder, "remainder", owner, tuple(r for r in REMAINDERS if r != "features"))
    if scorer is not None:
        check_option(scorer, "scorer", owner, SCORERS)
    unknown = sorted(set(options) - set(PASSED_OPTIONS))
    if unknown:
        raise InvalidParameterError(
            f"calibrate_split passes only {list(PASSED_OPTIONS)} on to Hybrid (the split, scorer, remainder "
            f"and causal are its own arguments). Got {unknown} instead."
        )
    for name, a in (("Q", Q), ("K", K), ("V", V)):
        if not isinstance(a, np.ndarray) or a.ndim < 3:
            raise InvalidParameterError(
                f"The `{name}` parameter of calibrate_split must be a NumPy array of shape (..., H, rows, dim) "
                f"with the heads on axis -3. Got {type(a).__name__} of shape {getattr(a, 'shape', None)} instead."
            )
    cands = (
        split_grid(budget, scorer=scorer, remainder=remainder, causal=causal)
        if candidates is None
        else candidates
    )
    splits = [_check_candidate(c, i, budget, causal) for i, c in enumerate(cands)]
    if not splits:
        raise InvalidParameterError(
            f"The `candidates` parameter of calibrate_split must hold at least one split of budget={budget}. "
            "Got none (a budget too small for the default grid needs candidates of your own)."
        )
    ests = []
    for i, s in enumerate(splits):
        try:
            ests.append(Hybrid(**s, scorer=scorer, remainder=remainder, causal=causal, **options))
        except InvalidParameterError as err:
            raise InvalidParameterError(
                f"The `candidates` parameter of calibrate_split: candidate {i} {s}: {err}"
            ) from err
    gen = check_rng(rng)
    random = remainder in SAMPLED or scorer == "lsh"
    H = int(Q.shape[-3])
    mse = np.empty((H, len(ests)))
    for h in range(H):
        q, k, v = Q[..., h, :, :], K[..., h, :, :], V[..., h, :, :]
        exact = np.asarray(softmax(q, k, v, causal=causal))
        for i, est in enumerate(ests):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RFKitWarning)
                out = np.asarray(est(q, k, v, rng=gen, n_draws=trials if random else None).output)
            sq = (out - exact) ** 2
            mse[h, i] = float(np.mean(sq)) if np.all(np.isfinite(sq)) else math.inf
    best = np.argmin(mse, axis=1)
    return HybridPerHead(tuple(ests[int(b)] for b in best), candidates=splits, mse=mse)


def _check_candidate(c: Any, i: int, budget: int, causal: bool) -> dict[str, Any]:
    """One candidate as a full split dict; refuses unknown keys, bad values and splits over the budget."""
    if not isinstance(c, Mapping) or set(c) - set(SPLIT_KEYS):
        raise InvalidParameterError(
            f"The `candidates` parameter of calibrate_split must hold mappings with keys among {list(SPLIT_KEYS)}. "
            f"Got candidate {i}: {c!r} instead."
        )
    s = {k: c.get(k) for k in SPLIT_KEYS}
    s["n_global"] = s["n_global"] or 0
    for k in SPLIT_KEYS:
        if s[k] is not None:
            s[k] = check_int(s[k], f"candidates[{i}][{k!r}]", "calibrate_split", low=0)
    for k in ("top_k", "n_samples"):
        s[k] = s[k] or None  # 0: none
    cost = split_cost(s, causal)
    if cost > budget:
        raise InvalidParameterError(
            f"The `candidates` parameter of calibrate_split must hold splits within budget={budget} exact "
            f"logits per query; candidate {i} {s} costs {cost}."
        )
    return s
