r"""Tables of a drop-in study computed from its trials: does the per-head MSE predict the damage?

One point per (setting, estimator, budget): the mean over draws of the per-head attention-output
MSE measured on the exact model's q, k, v (the proxy) and of the end-to-end damage (SmolLM2:
next-token KL; MiniLM: one minus the sentence-embedding cosine). Across the points of one
setting (context length, model), the Spearman rank correlation of proxy and damage, with a
bootstrap interval (draws resampled within each point) and a permutation p-value. Seeded, so
the tables are the same every time they are computed from the same trials.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .._params import check_int
from ..exceptions import InvalidParameterError

__all__ = ["DAMAGE_PAIRS", "dropin_points", "proxy_correlation", "spearman", "mid_ranks"]

#: (model, proxy column, damage column, how the damage is computed from its column)
DAMAGE_PAIRS = (
    ("smollm2", "dec_head_mse", "kl", "KL(exact || approx) of the next-token distribution"),
    ("minilm", "enc_head_mse", "emb_cos", "1 - cosine of the sentence embeddings"),
)
_RESAMPLE_SEED = 0x0D_2024  # bootstrap and permutations: fixed, so the tables are reproducible


def _damage(values: np.ndarray, column: str) -> np.ndarray:
    """The damage (larger = worse) of a trial column: 1 - cosine for the cosine columns."""
    return 1.0 - values if column.endswith("_cos") else values


def _setting_axes(trials: pd.DataFrame, grid_cols: list[str]) -> list[str]:
    return [c for c in grid_cols if c != "feature_dim" and c in trials.columns]


def dropin_points(trials: pd.DataFrame, grid_cols: list[str]) -> pd.DataFrame:
    """One row per (setting, model, estimator, budget): mean and MCSE over draws of proxy and damage.

    Parameters
    ----------
    trials : DataFrame
        ``StudyResult.trials`` of a drop-in study.
    grid_cols : list of str
        The design's grid axes (``feature_dim`` is the budget; the others define the setting).

    Returns
    -------
    DataFrame
        Columns: the setting axes, ``model``, ``estimator``, ``feature_dim``, ``proxy``,
        ``proxy_mcse``, ``damage``, ``damage_mcse``, ``n_trials`` (failed trials left out).
    """
    setting = _setting_axes(trials, grid_cols)
    ok = trials[trials["status"] == "ok"]
    rows = []
    for model, proxy, dmg, _ in DAMAGE_PAIRS:
        if proxy not in ok or ok[proxy].isna().all():
            continue
        for key, g in ok.groupby([*setting, "estimator", "feature_dim"], sort=False):
            vals = dict(
                zip([*setting, "estimator", "feature_dim"], key if isinstance(key, tuple) else (key,))
            )
            x = g[proxy].to_numpy(dtype=float)
            y = _damage(g[dmg].to_numpy(dtype=float), dmg)
            rows.append(
                {
                    **vals,
                    "model": model,
                    "proxy": float(np.mean(x)),
                    "proxy_mcse": _mcse(x),
                    "damage": float(np.mean(y)),
                    "damage_mcse": _mcse(y),
                    "n_trials": len(g),
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    front = [*setting, "model", "estimator", "feature_dim"]
    return out[front + [c for c in out.columns if c not in front]]


def _mcse(a: np.ndarray) -> float:
    """Standard error of the mean over draws (NaN for one draw)."""
    return float(np.std(a, ddof=1) / np.sqrt(len(a))) if len(a) > 1 else float("nan")


def spearman(x: Any, y: Any) -> float:
    """Compute Spearman's rank correlation (the Pearson correlation of the mid-ranks; Spearman (1904)).

    Pairs where either side is NaN are left out (infinities rank as the largest or smallest
    values), as ``pandas.Series.corr(method="spearman")`` and ``scipy.stats.spearmanr`` with
    ``nan_policy="omit"`` do; fewer than two pairs give NaN.

    Parameters
    ----------
    x, y : array_like
        The paired values (flattened; the same size).

    Returns
    -------
    float
        The rank correlation; NaN if a side is constant or fewer than two pairs remain.
    """
    a, b = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    keep = ~(np.isnan(a) | np.isnan(b))
    if int(keep.sum()) < 2:
        return float("nan")
    return float(_rowwise_spearman(a[keep][None], b[keep][None])[0])


def mid_ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 1..N along the last axis of ``a`` (no NaN), ties sharing their mean rank (``scipy.stats.rankdata``'s
    ``"average"`` method), by pandas' ranking: SciPy's stats module takes most of a second to import."""
    a = np.asarray(a, dtype=float)
    rows = pd.DataFrame(a.reshape(-1, a.shape[-1])).rank(axis=1, method="average")
    return rows.to_numpy(dtype=float, copy=True).reshape(a.shape)


def _rowwise_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair of two (rows, points) arrays without NaN (NaN for a constant row)."""
    rx, ry = mid_ranks(x), mid_ranks(y)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    den = np.sqrt(np.sum(rx * rx, axis=1) * np.sum(ry * ry, axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, np.sum(rx * ry, axis=1) / np.where(den > 0, den, 1.0), np.nan)  # type: ignore[no-any-return]


def proxy_correlation(
    trials: pd.DataFrame,
    grid_cols: list[str],
    *,
    n_boot: int = 2000,
    n_perm: int = 9999,
    confidence: float = 0.95,
) -> pd.DataFrame:
    r"""Spearman correlation across (estimator, budget) points of per-head MSE and end-to-end damage.

    Per setting (the grid axes other than ``feature_dim``) and model, over the points of
    :func:`dropin_points`: :math:`\rho` of the mean proxy and the mean damage; a percentile
    bootstrap interval (each point's draws resampled with replacement, the same draws for its
    proxy and its damage, ``n_boot`` times; Efron & Tibshirani (1993), ch. 13), which says how
    much the Monte Carlo noise of the means moves :math:`\rho`; and a two-sided permutation
    p-value of no association (the damages permuted across points, ``n_perm`` times,
    :math:`p = (1 + \#\{|\rho^*| \ge |\rho|\})/(1 + n_{perm})`; Good (2005), ch. 3). Points with
    a non-finite value are left out and counted; fewer than 3 points give NaN.

    Parameters
    ----------
    trials : pandas.DataFrame
        The drop-in study's trial table (``StudyResult.trials``).
    grid_cols : list of str
        The design's grid axes.
    n_boot : int, default=2000
        Bootstrap resamples (>= 1).
    n_perm : int, default=9999
        Permutations of the p-value (>= 1).
    confidence : float, default=0.95
        Level of the bootstrap interval, in (0, 1).

    Returns
    -------
    DataFrame
        One row per (setting, model): ``proxy``, ``damage`` (what each measures), ``n_points``,
        ``n_left_out``, ``rho``, ``ci_low``, ``ci_high``, ``p_value``.
    """
    n_boot = check_int(n_boot, "n_boot", "proxy_correlation", low=1)
    n_perm = check_int(n_perm, "n_perm", "proxy_correlation", low=1)
    if not 0 < confidence < 1:
        raise InvalidParameterError(f"`confidence` must be in (0, 1). Got {confidence!r} instead.")
    setting = _setting_axes(trials, grid_cols)
    ok = trials[trials["status"] == "ok"]
    gen = np.random.default_rng(_RESAMPLE_SEED)
    rows = []
    for model, proxy, dmg, words in DAMAGE_PAIRS:
        if proxy not in ok or ok[proxy].isna().all():
            continue
        groups = ok.groupby(setting, sort=False) if setting else [((), ok)]
        for key, g in groups:
            vals = dict(zip(setting, key if isinstance(key, tuple) else (key,)))
            pts = [
                (p[proxy].to_numpy(dtype=float), _damage(p[dmg].to_numpy(dtype=float), dmg))
                for _, p in g.groupby(["estimator", "feature_dim"], sort=False)
            ]
            finite = [(x, y) for x, y in pts if np.isfinite(x).all() and np.isfinite(y).all()]
            mx = np.array([x.mean() for x, _ in finite])
            my = np.array([y.mean() for _, y in finite])
            rho = spearman(mx, my) if len(finite) >= 3 else float("nan")
            lo = hi = p_value = float("nan")
            if np.isfinite(rho):
                bx = np.empty((n_boot, len(finite)))
                by = np.empty_like(bx)
                for k, (x, y) in enumerate(finite):  # the same resampled draws for proxy and damage
                    idx = gen.integers(0, len(x), (n_boot, len(x)))
                    bx[:, k], by[:, k] = x[idx].mean(axis=1), y[idx].mean(axis=1)
                a = (1 - confidence) / 2
                lo, hi = (float(v) for v in np.nanquantile(_rowwise_spearman(bx, by), [a, 1 - a]))
                perm = np.argsort(gen.random((n_perm, len(my))), axis=1)
                null = _rowwise_spearman(np.broadcast_to(mx, perm.shape).copy(), my[perm])
                p_value = float((1 + np.sum(np.abs(null) >= abs(rho) - 1e-12)) / (1 + n_perm))
            rows.append(
                {
                    **vals,
                    "model": model,
                    "proxy": proxy,
                    "damage": words,
                    "n_points": len(finite),
                    "n_left_out": len(pts) - len(finite),
                    "rho": rho,
                    "ci_low": lo,
                    "ci_high": hi,
                    "p_value": p_value,
                }
            )
    return pd.DataFrame(rows)
