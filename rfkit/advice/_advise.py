r"""``rk.advise``: which attention estimator to use for these heads at this cost per query."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import attention
from .._params import check_int
from .._random import as_seed_sequence
from .._validation import host_float_array
from ..exceptions import InvalidParameterError, RFKitWarning, ShapeError
from ._candidates import Candidate, candidates, predict, theory_queries

__all__ = ["advise", "Advice"]

_OWNER = "advise"
#: Queries the closed forms are evaluated on, in all heads together, by default.
_THEORY_QUERIES = 8
#: The table's columns, in order.
COLUMNS = (
    "estimator",
    "family",
    "cost per query",
    "simulated MSE",
    "MCSE",
    "predicted MSE",
    "simulated MSE, theory queries",
    "theory",
    "rank",
)


@dataclasses.dataclass(frozen=True, repr=False)
class Advice:
    """What :func:`advise` found: a ranked table, the recommendation and what it rests on.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per candidate, best first: ``estimator``, ``family``, ``cost per query`` (the mean
        measured exact logits plus random features of a query; nominal for RFA, SNIS and LARA),
        ``simulated MSE`` (output MSE against exact attention, mean over heads, queries and value
        coordinates), ``MCSE`` (its Monte Carlo standard error), ``predicted MSE`` (the
        closed form's, mean over heads and the theory's queries; NaN without one),
        ``simulated MSE, theory queries`` (the simulation on those queries only, to compare the
        prediction with like for like; causal heads' early queries err more), ``theory``
        (``"in domain"``, ``"out of domain"`` or ``"none: ..."``) and ``rank`` (1 = best by
        simulation).
    per_head : pandas.DataFrame
        The same per head (a ``head`` column; ``rank`` within the head).
    recommendation : str
        The first choice: the smallest simulated MSE over all heads.
    rests_on : {"simulation and theory", "simulation"}
        ``"simulation and theory"`` where the first choice's prediction is in its domain for every
        head and it is also the best of the in-domain predictions.
    reason : str
        One sentence: the numbers behind the recommendation.
    budget : int
    causal : bool
    n_heads, n_draws : int
    skipped : dict of str to str
        Candidates left out and why.
    seconds : float
        Wall time of the call.
    """

    table: Any
    per_head: Any
    recommendation: str
    rests_on: str
    reason: str
    budget: int
    causal: bool
    n_heads: int
    n_draws: int
    skipped: dict[str, str]
    seconds: float

    def __repr__(self) -> str:
        return (
            f"Advice(budget={self.budget}, heads={self.n_heads}, candidates={len(self.table)}, "
            f"recommendation={self.recommendation!r}, rests_on={self.rests_on!r})"
        )

    def first_choice_per_head(self) -> dict[int, str]:
        """The candidate of smallest simulated MSE in each head."""
        best = self.per_head[self.per_head["rank"] == 1]
        return {int(h): str(e) for h, e in zip(best["head"], best["estimator"], strict=True)}

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready: NaN and inf as None)."""

        def clean(v: Any) -> Any:
            if isinstance(v, (float, np.floating)):
                return float(v) if math.isfinite(float(v)) else None
            if isinstance(v, np.integer):
                return int(v)
            return v

        rows = [{k: clean(v) for k, v in r.items()} for r in self.table.to_dict(orient="records")]
        return {
            "budget": self.budget,
            "causal": self.causal,
            "n_heads": self.n_heads,
            "n_draws": self.n_draws,
            "recommendation": self.recommendation,
            "rests_on": self.rests_on,
            "reason": self.reason,
            "table": rows,
            "skipped": dict(self.skipped),
            "seconds": round(self.seconds, 3),
        }

    def to_text(self) -> str:
        """The table as fixed-width text, ``simulated MSE ± MCSE`` and the predicted MSE or why not."""
        lines = [f"{'rank':>4}  {'estimator':<52} {'cost':>6}  {'simulated MSE ± MCSE':<24} predicted MSE"]
        for r in self.table.itertuples(index=False):
            d = r._asdict()
            sim = f"{d['_3']:.3g} ± {d['MCSE']:.2g}"
            pred = f"{d['_5']:.3g}" if d["theory"] == "in domain" else d["theory"]
            if d["theory"] == "out of domain" and math.isfinite(d["_5"]):
                pred = f"out of domain ({d['_5']:.3g})"
            lines.append(f"{d['rank']:>4}  {d['estimator']:<52} {d['_2']:>6.1f}  {sim:<24} {pred}")
        lines.append(f"recommendation: {self.recommendation} (rests on {self.rests_on}): {self.reason}")
        return "\n".join(lines)

    def plot(self, ax: Any = None) -> Any:
        """Simulated MSE (± 2 MCSE) against cost per query, with the predictions in their domain.

        matplotlib is imported here, on first use. Returns the Axes.
        """
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6.5, 4.5))
        t = self.table
        for fam, grp in t.groupby("family", sort=False):
            ax.errorbar(
                grp["cost per query"],
                grp["simulated MSE"],
                yerr=2 * grp["MCSE"],
                fmt="o",
                label=str(fam),
                capsize=2,
            )
        pred = t[t["theory"] == "in domain"]
        if len(pred):
            ax.scatter(
                pred["cost per query"],
                pred["predicted MSE"],
                marker="x",
                color="black",
                label="predicted (in domain)",
            )
        best = t.iloc[0]
        ax.annotate(
            str(best["estimator"]),
            (best["cost per query"], best["simulated MSE"]),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=7,
        )
        ax.set_yscale("log")
        ax.set_xlabel("cost per query (exact logits + random features)")
        ax.set_ylabel("output MSE")
        ax.set_title(f"budget {self.budget}, {self.n_heads} head(s)")
        ax.legend(fontsize=7)
        return ax


def _heads(Q: Any, K: Any, V: Any, causal: bool, rng: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Q`` (H, n, d), ``K`` (H, M, d), ``V`` (H, M, dv) float64, validated."""
    Qa = host_float_array(Q, "Q")
    Ka = host_float_array(K, "K")
    if Qa.ndim < 2 or Ka.ndim < 2:
        raise ShapeError(
            f"advise: `Q` and `K` must have shape (..., n, d) and (..., M, d) (rows are points). "
            f"Got Q {Qa.shape} and K {Ka.shape} instead."
        )
    if Qa.shape[:-2] != Ka.shape[:-2] or Qa.shape[-1] != Ka.shape[-1]:
        raise ShapeError(
            "advise: `Q` (..., n, d) and `K` (..., M, d) must have the same leading (head) axes and the same d. "
            f"Got Q {Qa.shape} and K {Ka.shape} instead."
        )
    if causal and Qa.shape[-2] != Ka.shape[-2]:
        raise ShapeError(
            f"advise: with causal=True `Q` and `K` must hold one key per query position (n == M). "
            f"Got n = {Qa.shape[-2]} and M = {Ka.shape[-2]} instead."
        )
    lead, n, M, d = Qa.shape[:-2], Qa.shape[-2], Ka.shape[-2], Qa.shape[-1]
    if V is None:
        # unit-variance values, from a stream of rng the simulation does not use
        ss = as_seed_sequence(rng)
        gen = np.random.default_rng(np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, 2**31)))
        Va = gen.standard_normal((*lead, M, d))
    else:
        Va = host_float_array(V, "V")
        if Va.ndim < 2 or Va.shape[:-2] != lead or Va.shape[-2] != M:
            raise ShapeError(
                f"advise: `V` must have shape (..., M, dv) with the leading axes and M of `K` {Ka.shape}. "
                f"Got V {Va.shape} instead."
            )
    H = math.prod(lead)
    return (
        Qa.reshape(H, n, d).astype(np.float64),
        Ka.reshape(H, M, d).astype(np.float64),
        Va.reshape(H, M, Va.shape[-1]).astype(np.float64),
    )


def _simulate(
    cand: Candidate,
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    exact: np.ndarray,
    n_draws: int,
    seed: Any,
    rows: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float, Any]:
    """Per-draw output MSE (T,) over all queries and over ``rows``, the mean cost per query and the map used."""
    gen = np.random.default_rng(seed)
    if cand.deterministic:  # nothing sampled: one call gives every draw
        res = cand.estimator(Q, K, V, rng=gen)
        outs = np.broadcast_to(np.asarray(res.output), (n_draws, *res.output.shape))
    elif cand.draws_at_once:
        res = cand.estimator(Q, K, V, rng=gen, n_draws=n_draws)
        outs = np.asarray(res.output)
    else:
        res = None
        outs = np.stack([np.asarray(cand.estimator(Q, K, V, rng=gen).output) for _ in range(n_draws)])
    sq = (outs - exact[None]) ** 2
    err, err_rows = np.mean(sq, axis=(-2, -1)), np.mean(sq[:, rows], axis=(-2, -1))
    cost = float(cand.cost)
    if res is not None and getattr(res, "cost", None) is not None:
        c = res.cost
        cost = float(np.mean(np.asarray(c.exact_logits)) + np.mean(np.asarray(c.random_features)))
    fitted = getattr(res, "feature_map", None) if res is not None else None
    return err, err_rows, cost, fitted


def advise(
    Q: Any,
    K: Any,
    V: Any = None,
    *,
    budget: int,
    causal: bool = False,
    estimators: Sequence[str] | None = None,
    rng: Any = None,
    n_draws: int = 4,
    n_theory_queries: int | None = None,
) -> Advice:
    r"""Which attention estimator for these heads at ``budget`` exact logits or random features per query.

    Every candidate (:mod:`rfkit.advice._candidates`: RFA with each positive feature map of the
    registry, FAVOR+ among them; Hybrid with a window, sinks and FAVOR+; Hybrid with keys by content,
    Quest or proxy scores, with no, uniform or importance-sampled remainder; SNIS; LARA) is run at the
    same cost per query, ``budget``, on every head:

    * **simulation**: ``n_draws`` independent draws of the estimator on all queries of each head, the
      output MSE against exact softmax attention (mean over queries and value coordinates), with its
      Monte Carlo standard error over the draws (pooled over heads);
    * **theory**, where rfkit has a closed form: the delta-method MSE of
      :func:`rfkit.theory.rfa_delta_method` (RFA and Hybrid with features, the map the simulation
      fitted) or :func:`rfkit.theory.sampled_remainder_moments` (keys by content), averaged over
      ``n_theory_queries`` queries spread over each head; ``"out of domain"`` where the expansion's
      normaliser-variance criterion fails for any of them.

    The candidates are ranked by simulated MSE (mean over heads); the first is the recommendation.
    It rests on ``"simulation and theory"`` when its prediction is in its domain on every head and
    the best of the in-domain predictions, else on ``"simulation"``. Where theory and simulation
    disagree the simulation decides: it measures the estimator itself, the theory a first-order
    expansion.

    Parameters
    ----------
    Q : array_like (..., n, d)
        Queries of one or more heads (leading axes are heads), scaled so that ``Q Kᵀ`` are the logits.
    K : array_like (..., M, d)
        Keys, the same leading axes (causal: ``M == n``).
    V : array_like (..., M, dv), optional
        Values; None: standard normal values (``dv = d``) drawn from ``rng``.
    budget : int
        Exact logits or random-feature columns per query (>= 1); the same for every candidate.
    causal : bool, default=False
        Decoder (causal) attention.
    estimators : sequence of str, optional
        Keep only candidates whose name or family contains one of these strings (case-insensitive),
        e.g. ``["FAVOR+", "quest"]``; None: all.
    rng : None, int, SeedSequence or Generator
        Randomness (keyword-only). Draw t of candidate c on head h comes from its own stream keyed by
        (h, c), so a subset of candidates gives the same numbers for those kept.
    n_draws : int, default=4
        Draws per head and candidate (>= 2, for the MCSE).
    n_theory_queries : int, optional
        Queries per head the closed forms are evaluated on (>= 1; each costs O(M^2 d) per
        candidate, a large share of the time at n = 1,024); None: 8 queries in all, spread over the
        heads (``max(1, 8 // heads)`` per head).

    Returns
    -------
    Advice
        ``.table``, ``.per_head``, ``.recommendation``, ``.rests_on``, ``.plot(ax=None)``.

    Raises
    ------
    InvalidParameterError
        ``budget``, ``n_draws`` or ``n_theory_queries`` not an int in range, or ``estimators``
        matching no candidate.
    ShapeError
        ``Q``, ``K``, ``V`` of mismatched shapes.

    Notes
    -----
    Measured on 2026-11-28 on the 2-core CI-class machine (n = 1,024, d = 64, 8 heads, budget 64,
    defaults), other jobs sharing the cores: 43.6 s bidirectional (over the 30 s aimed at), 29.7 s
    causal; the keys-by-content simulation and the RFA maps' delta method take most of it (docs
    page *Your data and your tools*, section "Which estimator for my heads?").

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K = 0.3 * rng.normal(size=(2, 2, 64, 8))
    >>> adv = rk.advise(Q, K, budget=16, rng=0, estimators=["FAVOR+", "quest"])
    >>> list(adv.table.columns)[:4]
    ['estimator', 'family', 'cost per query', 'simulated MSE']
    """
    import pandas as pd

    start = time.perf_counter()
    budget = check_int(budget, "budget", _OWNER, low=1)
    n_draws = check_int(n_draws, "n_draws", _OWNER, low=2)
    if n_theory_queries is not None:
        n_theory_queries = check_int(n_theory_queries, "n_theory_queries", _OWNER, low=1)
    if not isinstance(causal, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The `causal` parameter of advise must be a bool. Got {causal!r} instead."
        )
    Qh, Kh, Vh = _heads(Q, K, V, bool(causal), rng)
    H, n, d = Qh.shape
    cands, skipped = candidates(budget, d, bool(causal))
    keyed = list(enumerate(cands))
    if estimators is not None:
        if isinstance(estimators, str) or not all(isinstance(e, str) for e in estimators):
            raise InvalidParameterError(
                f"The `estimators` parameter of advise must be a sequence of str. Got {estimators!r} instead."
            )
        wanted = [e.lower() for e in estimators]
        keyed = [
            (i, c) for i, c in keyed if any(w in c.name.lower() or w in c.family.lower() for w in wanted)
        ]
        if not keyed:
            raise InvalidParameterError(
                f"The `estimators` parameter of advise must match a candidate's name or family (among "
                f"{[c.name for c in cands]}). Got {list(estimators)!r} instead."
            )
    root = as_seed_sequence(rng)
    rows_th = theory_queries(n, n_theory_queries or max(1, _THEORY_QUERIES // H))
    per_head: list[dict[str, Any]] = []
    for h in range(H):
        exact = np.asarray(attention.softmax(Qh[h], Kh[h], Vh[h], causal=bool(causal)))
        cache: dict[Any, Any] = {}
        for i, cand in keyed:
            seed = np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, h, i))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RFKitWarning)
                err, err_rows, cost, fitted = _simulate(
                    cand, Qh[h], Kh[h], Vh[h], exact, n_draws, seed, rows_th
                )
            pred, status = predict(cand, fitted, Qh[h], Kh[h], Vh[h], rows_th, bool(causal), cache)
            per_head.append(
                {
                    "head": h,
                    "estimator": cand.name,
                    "family": cand.family,
                    "cost per query": cost,
                    "simulated MSE": float(np.mean(err)),
                    "MCSE": float(np.std(err, ddof=1) / math.sqrt(n_draws)),
                    "predicted MSE": pred,
                    "simulated MSE, theory queries": float(np.mean(err_rows)),
                    "theory": status,
                }
            )
    ph = pd.DataFrame(per_head)
    ph["rank"] = ph.groupby("head")["simulated MSE"].rank(method="first").astype(int)
    table = _pool(ph, pd)
    first = table.iloc[0]
    rests_on = "simulation"
    inside = table[table["theory"] == "in domain"]
    if first["theory"] == "in domain" and inside["predicted MSE"].idxmin() == table.index[0]:
        rests_on = "simulation and theory"
    reason = f"simulated MSE {first['simulated MSE']:.3g} ± {first['MCSE']:.2g} over {H} head(s)"
    if len(table) > 1:
        second = table.iloc[1]
        se = math.hypot(first["MCSE"], second["MCSE"])
        apart = (
            f"{(second['simulated MSE'] - first['simulated MSE']) / se:.1f} standard errors apart"
            if se > 0
            else "both deterministic"
        )
        reason += (
            f", next {second['estimator']} at {second['simulated MSE']:.3g} ± {second['MCSE']:.2g} ({apart})"
        )
    if first["theory"] != "in domain":
        reason += f"; its theory: {first['theory']}"
    else:
        reason += f"; predicted {first['predicted MSE']:.3g}"
    return Advice(
        table=table,
        per_head=ph[["head", *COLUMNS]].sort_values(["head", "rank"]).reset_index(drop=True),
        recommendation=str(first["estimator"]),
        rests_on=rests_on,
        reason=reason,
        budget=budget,
        causal=bool(causal),
        n_heads=H,
        n_draws=n_draws,
        skipped=skipped,
        seconds=time.perf_counter() - start,
    )


def _pool(ph: Any, pd: Any) -> Any:
    """The heads pooled per candidate: mean MSEs, MCSE of the mean, the theory's worst status."""

    def status(s: Any) -> str:
        vals = list(s)
        for tag in ("none", "out of domain"):
            hit = [v for v in vals if v.startswith(tag)]
            if hit:
                return str(hit[0])
        return "in domain"

    g = ph.groupby("estimator", sort=False)
    H = ph["head"].nunique()
    table = pd.DataFrame(
        {
            "estimator": list(g.groups),
            "family": g["family"].first().to_numpy(),
            "cost per query": g["cost per query"].mean().to_numpy(),
            "simulated MSE": g["simulated MSE"].mean().to_numpy(),
            "MCSE": (np.sqrt(g["MCSE"].apply(lambda s: float(np.sum(np.square(s))))) / H).to_numpy(),
            "predicted MSE": g["predicted MSE"].mean().to_numpy(),
            "simulated MSE, theory queries": g["simulated MSE, theory queries"].mean().to_numpy(),
            "theory": g["theory"].apply(status).to_numpy(),
        }
    )
    table = table.sort_values("simulated MSE", kind="stable").reset_index(drop=True)
    table["rank"] = np.arange(1, len(table) + 1)
    return table[list(COLUMNS)]
