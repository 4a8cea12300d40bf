r"""The candidates :func:`rfkit.advice.advise` compares at one cost per query, and their theory.

Every candidate costs ``budget`` exact logits or random-feature columns per query:

* RFA with every positive random feature map of the registry (``rk.study.records("feature
  map")``) with iid directions, ``budget`` feature columns (maps with 2 columns per direction get
  ``budget // 2`` directions), and FAVOR+ (the positive map with block-orthogonal directions);
* Hybrid with a window, sinks and positive random features (iid) for the rest (window 8 + 4 sinks at budget 64
  and above, smaller below, as docs page *Keys by content* runs it);
* Hybrid with keys by content: window 4 + 4 sinks (smaller at small budgets), ``top_k`` keys by the
  ``"quest"`` or ``"proxy"`` scorer and the remainder dropped, sampled uniformly or by importance,
  the budget split as ``rfkit.study``'s ``hybrid_budget`` splits it;
* SNIS with ``n_samples = budget`` and LARA with ``n_proposals = budget`` (its ``"optimal"``
  weights; causal: ``"balance"``, the only causal ones).

Maps that cannot serve attention are left out with the reason (:data:`SKIPPED`): signed maps
(their estimated normalisers can be zero or negative) and deterministic ones (their feature count
is fixed by the degree, not by the budget).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .. import attention, features, theory
from ..attention._common import check_qkv
from ..attention._scorers import Scorer, visible_rows
from ..exceptions import InvalidParameterError, NumericalOverflowError, OutOfDomainWarning
from ..study import records
from ..study._builtin_records import hybrid_budget

__all__ = ["Candidate", "candidates", "predict"]

#: Parameters of maps whose defaults would duplicate another candidate (CEXP with A = I is Positive).
_MAP_PARAMS: dict[str, dict[str, Any]] = {"CEXP": {"A": "variance"}, "HCEXP": {"A": "variance"}}
#: FAVOR+ is the positive map with block-orthogonal directions; the other maps use iid directions,
#: whose delta-method theory costs O(M^2 d) per query. The orthogonal pair moment costs special
#: functions per key pair (measured 2026-11-28, 2-core CI-class machine: 8.3 s per query at M = 128,
#: 29.6 s at M = 256), too slow for an advice, so FAVOR+'s prediction is not evaluated.
_ORTHOGONAL = ("Positive",)
#: Content scorers and remainders compared (docs page *Keys by content*).
SCORERS = ("quest", "proxy")
REMAINDERS = ("none", "uniform", "importance")
#: Quest's block size, as the studies of docs page *Keys by content* use it.
QUEST_BLOCK = 4


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One estimator at the budget.

    Parameters
    ----------
    name : str
        The row's name in the table.
    family : {"RFA", "Hybrid", "keys by content", "SNIS", "LARA"}
    estimator : object
        The attention estimator (called as ``estimator(Q, K, V, rng=...)``).
    cost : int
        Nominal exact logits plus random-feature columns per query.
    theory : {"rfa", "hybrid", "sampled", ""}
        Which closed form predicts its MSE ("" none).
    n_features : int or None
        The ``m`` of the prediction (random-feature candidates).
    draws_at_once : bool
        Whether ``n_draws=T`` gives T draws in one call.
    deterministic : bool
        Nothing is sampled (top-k keys, remainder dropped): every draw is the same.
    """

    name: str
    family: str
    estimator: Any
    cost: int
    theory: str
    n_features: int | None = None
    draws_at_once: bool = True
    deterministic: bool = False


def _positive_maps(budget: int, dim: int) -> tuple[list[tuple[str, Any, int]], dict[str, str]]:
    """``(name, map, m)`` for every positive random map of the registry, and the skipped ones with why."""
    maps: list[tuple[str, Any, int]] = []
    skipped: dict[str, str] = {}
    for rec in records("feature map"):
        cls = rec.factory
        if not cls.is_random:
            skipped[rec.name] = "deterministic: its feature count is fixed by the degree, not by the budget"
            continue
        params = dict(_MAP_PARAMS.get(rec.name, {}))
        params["projection"] = "orthogonal" if rec.name in _ORTHOGONAL else "iid"
        try:
            probe = cls(n_features=1, **params)
        except (TypeError, InvalidParameterError):
            skipped[rec.name] = "its constructor takes no n_features/projection: not a random-feature map"
            continue
        if not bool(probe.is_positive):
            skipped[rec.name] = "signed features: estimated normalisers can be zero or negative"
            continue
        per_direction = max(1, probe.feature_dim(dim))
        m = budget // per_direction
        if m < 1:
            skipped[rec.name] = f"{per_direction} columns per direction exceed the budget of {budget}"
            continue
        if rec.name in _ORTHOGONAL:
            maps.append(("FAVOR+ (RFA, Positive orthogonal)", cls(n_features=m, **params), m))
            params["projection"] = "iid"
        maps.append((f"RFA {rec.name}", cls(n_features=m, **params), m))
    return maps, skipped


def _support_size(budget: int, causal: bool, window: int, sinks: int) -> tuple[int, int]:
    """The largest ``(window, sinks)`` up to the given ones whose exact keys fit half the budget."""
    w, g = window, sinks
    while w > 0 or g > 0:
        exact = (w + 1 if causal else 2 * w + 1) + g
        if exact <= budget // 2:
            return w, g
        w, g = (w - 1, g) if w >= g else (w, g - 1)
    return 0, 0


def candidates(budget: int, dim: int, causal: bool) -> tuple[list[Candidate], dict[str, str]]:
    """The candidates at ``budget`` for queries of dimension ``dim``, and the maps left out with why."""
    out: list[Candidate] = []
    maps, skipped = _positive_maps(budget, dim)
    for name, fm, m in maps:
        out.append(Candidate(name, "RFA", attention.RFA(fm, causal=causal), fm.feature_dim(dim), "rfa", m))
    w, g = _support_size(budget, causal, 8, 4)
    params = {"window": w, "n_global": g, "causal": causal}
    m = budget - ((w + 1 if causal else 2 * w + 1) + g)
    if m >= 1:
        est = attention.Hybrid(features.Positive(m), window=w, n_global=g, causal=causal)
        out.append(Candidate(f"Hybrid window {w} + {g} sinks + {m} PRF", "Hybrid", est, budget, "hybrid", m))
    w, g = _support_size(budget // 2, causal, 4, 4)
    for scorer in SCORERS:
        for rem in REMAINDERS:
            p = {**params, "window": w, "n_global": g, "scorer": scorer, "remainder": rem}
            try:
                split = hybrid_budget(budget, p)
            except InvalidParameterError:
                skipped[f"top-k {scorer} + {rem}"] = (
                    f"a budget of {budget} leaves no keys for top_k and samples"
                )
                continue
            est = attention.Hybrid(
                window=w,
                n_global=g,
                causal=causal,
                scorer=scorer,
                remainder=rem,
                top_k=split.get("top_k"),
                n_samples=split.get("n_samples"),
                block_size=QUEST_BLOCK if scorer == "quest" else 16,
            )
            rest = f"{split['n_samples']} {rem} samples" if "n_samples" in split else "no remainder"
            name = f"window {w} + {g} sinks + top {split['top_k']} {scorer} + {rest}"
            out.append(
                Candidate(name, "keys by content", est, budget, "sampled", deterministic=rem == "none")
            )
    out.append(
        Candidate("SNIS", "SNIS", attention.SNIS(n_samples=budget, causal=causal), budget, "", None, False)
    )
    out.append(
        Candidate(
            "LARA",
            "LARA",
            attention.LARA(n_proposals=budget, causal=causal, weights="balance" if causal else "optimal"),
            budget,
            "",
            None,
            False,
        )
    )
    return out, skipped


def theory_queries(n: int, count: int) -> np.ndarray:
    """``count`` query positions spread over ``0 .. n-1`` (never the very first ones alone)."""
    pos = np.round(np.linspace(n / (2 * count), n - 1, count)).astype(np.int64)
    return np.unique(np.clip(pos, 0, n - 1))


def row_supports(
    est: Any, Q: np.ndarray, K: np.ndarray, V: np.ndarray, rows: np.ndarray, causal: bool
) -> tuple[dict[int, np.ndarray], Any]:
    """The support of a Hybrid (window, sinks, ``top_k`` by its scorer) of the queries ``rows`` only.

    As ``Hybrid.support`` gives it for every query (``tests/unit/test_advise.py`` checks that), but
    the scorer ranks the keys of ``rows`` alone: the theory needs a few queries, not all ``n``.
    Returns ``{row: bool mask (M,)}`` and the call's scorer (for the proxy logits).
    """
    x = check_qkv(Q, K, V, "Hybrid", causal=causal)
    gen = np.random.default_rng(0)  # no random part: rfkit.advice builds no LSH support or scorer
    idx, valid = (np.asarray(a)[-1] for a in est._base_support(x, gen))
    scorer = Scorer(est, x, gen) if est.scorer is not None else None
    out = {}
    for i in (int(r) for r in rows):
        members = np.zeros(K.shape[0], dtype=bool)
        members[idx[i][valid[i]]] = True
        if est.top_k is not None and scorer is not None:
            sl = slice(i, i + 1)
            cand = np.asarray(visible_rows(x, causal, sl))[-1:, :, :] & ~members[None, None, :]
            ti, tv = (np.asarray(a)[0, 0] for a in scorer.select(sl, cand))
            members[ti[tv]] = True
        out[i] = members
    return out, scorer


def predict(
    cand: Candidate,
    fitted: Any,
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    rows: np.ndarray,
    causal: bool,
    cache: dict[Any, Any] | None = None,
) -> tuple[float, str]:
    """Predicted output MSE of ``cand`` on one head (mean over ``rows`` and value coordinates).

    Returns ``(mse, status)`` with status ``"in domain"``, ``"out of domain"`` or ``"none: why"``
    (then ``mse`` is NaN). ``fitted`` is the map the simulation used (data-dependent maps fitted).
    ``cache`` (one per head) keeps the supports candidates share (the same scorer and ``top_k``).
    """
    if not cand.theory:
        return float("nan"), "none: no closed form in rfkit.theory"
    if getattr(fitted, "projection", "iid") != "iid":
        return float("nan"), "none: block-orthogonal theory too slow (O(M^2) special functions per query)"
    support: dict[int, np.ndarray] | None = None
    scorer = None
    if cand.theory != "rfa":
        est = cand.estimator
        key = (est.window, est.n_global, est.scorer, est.top_k, est.block_size, est.refresh)
        if cache is None or key not in cache:
            found = row_supports(est, Q, K, V, rows, causal)
            if cache is not None:
                cache[key] = found
        support, scorer = found if cache is None or key not in cache else cache[key]
    values, inside = [], True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfDomainWarning)
        for i in rows:
            see = int(i) + 1 if causal else K.shape[0]
            Kv, Vv, q = K[:see], V[:see], Q[i]
            exact = None
            if support is not None:
                exact = support[int(i)][:see]
            try:
                if cand.theory == "sampled":
                    est = cand.estimator
                    proxy = None
                    if scorer is not None and est.remainder == "importance":
                        proxy = np.asarray(scorer.proxy(slice(int(i), int(i) + 1)))[-1, 0, :see]
                    sm = theory.sampled_remainder_moments(
                        q,
                        Kv,
                        Vv,
                        exact,
                        remainder=est.remainder,
                        n_samples=est.n_samples,
                        proxy_logits=proxy,
                        mix=est.proposal_mix,
                    )
                    values.append(float(np.mean(sm.mse)))
                    inside &= bool(sm.in_domain)
                    continue
                m = int(cand.n_features or 0)
                dm = theory.rfa_delta_method(q, Kv, Vv, exact=exact, feature_map=fitted, n_features=m)
                values.append(float(np.mean(dm.mse(m))))
                inside &= bool(np.all(dm.within_domain(m)))
            except InvalidParameterError as exc:
                return float("nan"), f"none: {str(exc).split('. ')[0]}"
            except NumericalOverflowError:
                return float("inf"), "out of domain"
    return float(np.mean(values)), "in domain" if inside else "out of domain"
