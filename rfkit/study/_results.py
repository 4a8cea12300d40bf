"""Study results: tidy trial and pair tables, MCSE-aware summaries, theory comparison, Parquet IO."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._design import Design
from ._storage import atomic_parquet, atomic_text, verify_result_folder, write_result_manifest

__all__ = ["StudyResult", "mcse_summary", "METRIC_SOURCES", "atomic_parquet", "atomic_text"]

#: summary metric -> (per-trial column, description)
METRIC_SOURCES = {
    "mse": ("sq_err", "mean over pairs of E[(K_hat - K)^2]"),
    "rel_mse": ("rel_sq_err", "mean over pairs of E[((K_hat - K)/K)^2]"),
    "bias": ("err", "mean over pairs of E[K_hat - K]"),
    "rel_bias": ("rel_err", "mean over pairs of E[(K_hat - K)/K]"),
    "variance": ("sq_dev", "mean over pairs of Var[K_hat] (divisor T-1)"),
    "mean_rel_err": ("abs_rel_err", "mean over pairs of E|K_hat - K|/K"),
    "max_rel_err": ("max_rel_err", "E[max over pairs of |K_hat - K|/K]"),
    # attention designs: errors of the output against exact softmax attention
    "mean_abs_err": ("abs_err", "mean over queries and value dims of E|A_hat - A|"),
    "max_abs_err": ("max_abs_err", "E[max over queries and value dims of |A_hat - A|]"),
    "nonpositive_rows": ("nonpositive_rows", "mean number of rows with a non-positive normaliser"),
    # concentration designs (seed 004 Thm 3.3)
    "coverage": ("covered", "fraction of data sets where max_ij sqrt(MSE)/SM <= the bound (theorem: >= p)"),
    "rms_over_bound": ("rms_over_bound", "mean over data sets of max_ij sqrt(MSE)/SM divided by the bound"),
    "realized_exceeds": (
        "realized_exceeds",
        "fraction of data sets where one draw's max realised relative error exceeds the bound",
    ),
}


def mcse_summary(values: np.ndarray, confidence: float = 0.95) -> dict[str, float]:
    """Mean of i.i.d. per-trial values with its Monte Carlo standard error and a t interval.

    The interval is ``statsmodels``' ``DescrStatsW(values).tconfint_mean``.
    """
    from statsmodels.stats.weightstats import DescrStatsW

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    n = v.size
    if n == 0:
        return {"estimate": np.nan, "mcse": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": 0}
    mean = float(v.mean())
    if n < 2:
        return {"estimate": mean, "mcse": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": n}
    se = float(v.std(ddof=1) / np.sqrt(n))
    if se == 0.0:
        lo = hi = mean
    else:
        lo, hi = DescrStatsW(v).tconfint_mean(alpha=1 - confidence)
    return {"estimate": mean, "mcse": se, "ci_low": float(lo), "ci_high": float(hi), "n": n}


@dataclasses.dataclass
class StudyResult:
    """Everything a study produced.

    Attributes
    ----------
    design : Design
    trials : DataFrame
        One row per (cell, estimator, trial): grid columns, ``status`` and per-trial metrics
        (averages over the cell's pairs of the error, squared error, relative errors, ...).
    pairs : DataFrame
        One row per (cell, estimator, pair): truth, mean and variance of the estimates,
        bias and MSE with standard errors, and the closed-form MSE (``theory_mse``, NaN where
        rfkit.theory has none).
    provenance : dict
        Seed entropy and spawn key, design hash, versions, machine, timings.
    out : Path or None
        Folder the result was written to.
    timings : DataFrame or None
        Attention designs: median wall time per call per (cell, estimator). Not reproducible,
        so kept apart from the tables that are.
    data_stats : DataFrame or None
        Real-data designs: statistics of the cell's queries and keys (``rk.data.describe``).
    """

    design: Design
    trials: pd.DataFrame
    pairs: pd.DataFrame
    provenance: dict[str, Any]
    out: Path | None = None
    timings: pd.DataFrame | None = None
    data_stats: pd.DataFrame | None = None

    @property
    def grid_columns(self) -> list[str]:
        return list(self.design.grid)

    def summary(self, confidence: float = 0.95) -> pd.DataFrame:
        """Tidy summary: one row per (cell, estimator, metric) with estimate, MCSE and CI.

        Failed trials are excluded and counted in ``n_failed``.
        """
        rows = []
        keys = ["cell", "estimator", *self.grid_columns]
        for key, grp in self.trials.groupby(keys, sort=False):
            ok = grp[grp["status"] == "ok"]
            n_failed = int((grp["status"] != "ok").sum())
            base = dict(zip(keys, key))
            for metric in self.design.metrics:
                col, _ = METRIC_SOURCES[metric]
                s = mcse_summary(ok[col].to_numpy(), confidence)
                if metric == "variance" and s["n"] > 1:
                    f = s["n"] / (s["n"] - 1)
                    s = {k: (v * f if k != "n" else v) for k, v in s.items()}
                rows.append({**base, "metric": metric, **s, "n_failed": n_failed})
        out = pd.DataFrame(rows)
        return out.rename(columns={"n": "n_trials"})

    def compare_theory(self) -> pd.DataFrame:  # noqa: C901
        """Measured vs closed-form MSE (mean over pairs), with MCSE and ``z``.

        ``z = (measured - predicted) / mcse``; rows only for estimators with a closed form.
        Also ``rel_mse`` (predicted ``mean_i theory_mse_i / K_i^2``).
        """
        summ = self.summary()
        keys = ["cell", "estimator", *self.grid_columns]
        if "theory_mse" not in self.pairs or self.pairs["theory_mse"].isna().all():
            return pd.DataFrame()
        pred = (
            self.pairs.assign(theory_rel_mse=self.pairs["theory_mse"] / self.pairs["truth"] ** 2)
            .groupby(keys, sort=False)[["theory_mse", "theory_rel_mse"]]
            .mean()
            .reset_index()
        )
        rows = []
        for metric, pcol in (("mse", "theory_mse"), ("rel_mse", "theory_rel_mse")):
            meas = summ[summ["metric"] == metric]
            if meas.empty:
                meas = self._metric_from_trials(metric)
            m = meas.merge(pred[[*keys, pcol]], on=keys)
            m = m[np.isfinite(m[pcol])]
            for _, r in m.iterrows():
                rows.append(
                    {
                        **{k: r[k] for k in keys},
                        "metric": metric,
                        "predicted": r[pcol],
                        "measured": r["estimate"],
                        "mcse": r["mcse"],
                        "z": (r["estimate"] - r[pcol]) / r["mcse"] if r["mcse"] > 0 else np.nan,
                        "n_trials": r["n_trials"],
                    }
                )
        return pd.DataFrame(rows)

    def _metric_from_trials(self, metric: str) -> pd.DataFrame:
        col, _ = METRIC_SOURCES[metric]
        keys = ["cell", "estimator", *self.grid_columns]
        rows = []
        for key, grp in self.trials.groupby(keys, sort=False):
            ok = grp[grp["status"] == "ok"]
            s = mcse_summary(ok[col].to_numpy())
            rows.append({**dict(zip(keys, key)), "metric": metric, **s})
        return pd.DataFrame(rows).rename(columns={"n": "n_trials"})

    # ------------------------------------------------------------------ IO
    def save(self, out: str | Path) -> Path:
        """Write ``trials.parquet``, ``pairs.parquet``, ``summary.parquet``/``.csv`` and ``manifest.json``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        meta = json.dumps(self.provenance, default=str)
        tables = [("trials", self.trials), ("pairs", self.pairs), ("summary", self.summary())]
        if self.timings is not None:
            tables.append(("timings", self.timings))
        if self.data_stats is not None:
            tables.append(("data_stats", self.data_stats))
        files = {}
        for name, df in tables:
            df = df.copy()
            df.attrs["rfkit"] = meta
            files[f"{name}.parquet"] = atomic_parquet(df, out / f"{name}.parquet")
        self.summary().to_csv(out / "summary.csv", index=False)
        theory = self.compare_theory()
        if not theory.empty:
            theory.to_csv(out / "theory.csv", index=False)
        write_result_manifest(out, self.provenance, files)  # last: with checksums of the tables
        self.out = out
        return out

    @classmethod
    def load(cls, path: str | Path) -> StudyResult:
        """Read a result folder written by :func:`rfkit.study.run` or :meth:`save`.

        The folder is verified first (:func:`rfkit.study.verify_run`): a missing, truncated or
        altered table or part raises :class:`~rfkit.exceptions.StudyError` naming it.
        """
        p = Path(path)
        prov = verify_result_folder(p)
        design = Design(**prov["design"], source=str(p / "manifest.json"))
        timings = pd.read_parquet(p / "timings.parquet") if (p / "timings.parquet").exists() else None
        stats = pd.read_parquet(p / "data_stats.parquet") if (p / "data_stats.parquet").exists() else None
        return cls(
            design=design,
            trials=pd.read_parquet(p / "trials.parquet"),
            pairs=pd.read_parquet(p / "pairs.parquet"),
            provenance=prov,
            out=p,
            timings=timings,
            data_stats=stats,
        )
