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
from ._views import METRIC_SOURCES  # summary metric -> (per-trial column, description), live

__all__ = [
    "StudyResult",
    "mcse_summary",
    "load",
    "compare",
    "COMPARE_Z",
    "METRIC_SOURCES",
    "atomic_parquet",
    "atomic_text",
]

#: default |z| above which :func:`compare` flags a difference (the project's 5-MCSE rule)
COMPARE_Z = 5.0


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

    Notes
    -----
    In a notebook a result displays itself (``_repr_html_``: the design, the provenance line,
    the summary table with MCSEs and the study's first figure); :meth:`plot` draws any figure
    of the study, :func:`rfkit.study.load` reopens a run folder and :func:`rfkit.study.compare`
    lines up two runs of the same design.
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

    # ------------------------------------------------------------------ figures and notebooks
    def _figure_tables(self) -> tuple[pd.DataFrame, pd.DataFrame, Any]:
        extra = {"pairs": self.pairs, "timings": self.timings, "data_stats": self.data_stats}
        return self.summary(), self.compare_theory(), extra.get

    def figure_names(self) -> list[str]:
        """Figure kinds this result can draw: those its study declares, then any other that applies."""
        from ._report import FIGURE_KINDS

        declared = [k for k in self.design.outputs.get("figures", []) if k in FIGURE_KINDS]
        return declared + [k for k in FIGURE_KINDS if k not in declared and self._applies(k)]

    def _applies(self, kind: str) -> bool:
        grid = set(self.grid_columns)
        need = {
            "mse_vs_features": "n_features" in grid,
            "kernel_scatter": self.design.kind == "kernel",
            "error_vs_degree": "degree" in grid,
            "mse_vs_samples": "samples" in grid,
            "cost": self.timings is not None,
            "head_heatmap": {"layer", "head"} <= grid,
            "coverage": "p" in grid,
            "boxplots": "dataset" in grid,
        }
        return bool(need.get(kind, False))

    def plot(self, name: str | None = None) -> Any:
        """Draw one figure of the study from its tables; returns the matplotlib ``Figure``.

        Parameters
        ----------
        name : str, optional
            A figure kind (``"mse_vs_features"``, ``"kernel_scatter"``, ``"error_vs_degree"``,
            ``"mse_vs_samples"``, ``"cost"``, ``"head_heatmap"``, ``"coverage"``, ``"boxplots"``:
            its first figure, e.g. the MSE one of ``mse_vs_features``) or the name of one figure
            as saved by ``rfkit run`` (``"rel_mse_vs_features"``). Default: the first figure the
            study declares. The figures are those of the report (:mod:`rfkit.plots`), drawn from
            ``summary()``, ``compare_theory()`` and the saved tables; nothing is recomputed.

        Raises
        ------
        InvalidParameterError
            For a name that is not a figure of this result (the message lists those that are).
        """
        from ..exceptions import InvalidParameterError
        from ._report import FIGURE_KINDS, study_figures

        names = self.figure_names()
        if name is None:
            if not names:
                raise InvalidParameterError(
                    f"study {self.design.name!r} has no figure to draw (its grid fits none of {list(FIGURE_KINDS)})."
                )
            name = names[0]
        kinds = [name] if name in FIGURE_KINDS else names
        summary, theory, table = self._figure_tables()
        chosen = None
        made: list[Any] = []
        for kind in kinds:
            figs = study_figures(kind, self.design, summary, theory, table) if self._applies(kind) else []
            made += [f for _, f in figs]
            for stem, fig in figs:
                if chosen is None and (stem == name or kind == name):
                    chosen = fig
            if chosen is not None:
                break
        _close([f for f in made if f is not chosen])
        if chosen is None:
            available = sorted(
                {stem for k in names for stem, _ in _named(self, k, summary, theory, table)} | set(names)
            )
            raise InvalidParameterError(
                f"The `name` parameter of StudyResult.plot must be a figure of study {self.design.name!r}: "
                f"one of {available}. Got {name!r} instead."
            )
        return chosen

    def _repr_html_(self) -> str:
        """Notebook display: the design, the provenance line, the summary table and the first figure."""
        import html

        from ..tables import format_mcse
        from ._report import provenance_line

        d = self.design
        esc = html.escape
        desc = d.description.strip().split("\n\n")[0].replace("\n", " ")
        ests = []
        for est in d.estimators:
            what = est.get("map", est.get("estimator"))
            ests.append(f"<code>{esc(d._label(est))}</code> ({esc(str(what))})")
        grid = "; ".join(f"{esc(k)} = {esc(str(v))}" for k, v in d.grid.items())
        data = ", ".join(f"{esc(k)}={esc(str(v))}" for k, v in d.data.items())
        prov = esc(provenance_line(self)).replace("`", "")
        summ = self.summary()
        keys = ["estimator", *self.grid_columns]
        summ = summ.assign(value=[format_mcse(e, m) for e, m in zip(summ["estimate"], summ["mcse"])])
        table = summ.pivot_table(index=keys, columns="metric", values="value", aggfunc="first", sort=False)
        table = table[[m for m in d.metrics if m in table.columns]]
        table.columns.name = None
        n_rows = len(table)
        shown = table.head(40).to_html(border=0)
        more = (
            f"<p><small>{n_rows - 40} more rows: <code>result.summary()</code></small></p>"
            if n_rows > 40
            else ""
        )
        failed = int((self.trials["status"] != "ok").sum())
        parts = [
            '<div class="rfkit-study-result">',
            f"<h4>rfkit study <code>{esc(d.name)}</code> ({esc(d.kind)}, {d.trials} trials per cell, "
            f"{len(d.cells())} cells)</h4>",
            f"<p>{esc(desc)}</p>" if desc else "",
            f"<p><b>Estimators</b>: {', '.join(ests)}<br><b>Grid</b>: {grid}<br><b>Data</b>: {data}</p>",
            f"<p><small>{prov}" + (f" Failed trials: {failed}." if failed else "") + "</small></p>",
            "<p><b>Summary</b> (estimate ± MCSE; <code>result.summary()</code>):</p>",
            shown,
            more,
            _first_figure_html(self),
            "</div>",
        ]
        return "\n".join(p for p in parts if p)

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
        altered table or part raises :class:`~rfkit.exceptions.StudyError` naming it. The design
        is taken as recorded (it was validated when the study ran), so a result whose maps are
        your own reopens without importing their module.
        """
        p = Path(path)
        prov = verify_result_folder(p)
        design = Design.trusted(prov["design"])
        object.__setattr__(design, "source", str(p / "manifest.json"))
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


def _close(figs: list[Any]) -> None:
    if not figs:
        return
    import matplotlib.pyplot as plt

    for f in figs:
        plt.close(f)


def _named(result: StudyResult, kind: str, summary: Any, theory: Any, table: Any) -> list[tuple[str, Any]]:
    """Names of one kind's figures (drawn and closed again), for error messages."""
    from ._report import study_figures

    figs = study_figures(kind, result.design, summary, theory, table) if result._applies(kind) else []
    _close([f for _, f in figs])
    return figs


def _first_figure_html(result: StudyResult) -> str:
    """The study's first figure as an inline PNG (empty when there is none or matplotlib is missing)."""
    import base64
    import io

    declared = [k for k in result.design.outputs.get("figures", []) if result._applies(k)]
    if not declared:
        return ""
    try:
        fig = result.plot(declared[0])
    except ImportError:  # pragma: no cover - matplotlib is an optional dependency
        return "<p><small>(install matplotlib to see the figures)</small></p>"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    _close([fig])
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (
        f'<p><img alt="{declared[0]}" src="data:image/png;base64,{data}"/><br><small>'
        f"<code>result.plot({declared[0]!r})</code>; all figures: <code>result.figure_names()</code></small></p>"
    )


def load(out: str | Path) -> StudyResult:
    """Reopen a finished study from its output folder (``rfkit run --out`` or ``run(out=...)``).

    Same as :meth:`StudyResult.load`: the folder is verified (sizes and SHA-256 of every table)
    and a damaged one raises :class:`~rfkit.exceptions.StudyError` naming the file.
    """
    return StudyResult.load(out)


_NOT_COMPARED = ("trials", "chunk_trials", "seed", "quick", "description", "outputs")
#: data sources whose data do not depend on the seed (real data)
_SEED_FREE_SOURCES = ("minilm",)


def compare(
    a: StudyResult | str | Path,
    b: StudyResult | str | Path,
    *,
    z: float = COMPARE_Z,
    paired: bool | None = None,
) -> pd.DataFrame:
    r"""Line up two runs of the same design: the difference of each metric, its MCSE and ``z``.

    For example the same study before and after a change to an estimator's code: every
    (estimator, grid point, metric) of ``a`` is matched with ``b``'s, ``diff = estimate_b -
    estimate_a``, ``z = diff / mcse`` and ``flagged`` marks ``|z| > z``.

    Runs with the same seed (the usual case: the design's ``seed``) see the same data and the same
    random numbers trial by trial, so the comparison is *paired*: ``mcse`` is the Monte Carlo
    standard error of the mean per-trial difference, which is far smaller than either run's
    MCSE when little changed (an unchanged estimator gives ``diff = 0`` exactly). Runs with
    different seeds are compared as independent (``mcse = sqrt(mcse_a^2 + mcse_b^2)``) only
    where the data do not depend on the seed (real data, ``source = "minilm"``): the synthetic
    sources draw their data from the seed, and a difference between two data sets is not
    Monte Carlo noise, so such a comparison is refused rather than mis-flagged.

    Parameters
    ----------
    a, b : StudyResult or path
        Two results (or output folders, reopened with :func:`load`) of the same design: equal
        estimators, grid, data, kind and metrics (chunking, description and outputs may differ;
        the number of trials too for independent runs).
    z : float, default=5
        Flag differences with ``|z|`` above this. With the default, a difference that is pure
        Monte Carlo noise is flagged with probability about 6e-7 per comparison (normal
        tails), so even thousands of (estimator, grid point, metric) rows rarely flag by
        chance; 3 shows smaller changes at about 0.3% false flags per row.
    paired : bool, optional
        Default: paired exactly when the two runs used the same seed (entropy and spawn key).
        ``paired=False`` on same-seed runs uses the independent formula anyway, which overstates
        the MCSE of positively correlated runs (``|z|`` errs small).

    Returns
    -------
    DataFrame
        One row per (estimator, grid point, metric): ``estimate_a``, ``mcse_a``, ``estimate_b``,
        ``mcse_b``, ``diff``, ``rel_diff`` (``diff / |estimate_a|``), ``mcse``, ``z``,
        ``flagged`` and ``paired``. ``attrs["z"]`` holds the threshold.

    Raises
    ------
    InvalidParameterError
        If the designs differ (naming the first key that differs), ``z`` is not > 0, the runs share
        a seed but not the number of trials, ``paired=True`` for runs with different seeds, or
        runs with different seeds on data drawn from the seed.
    """
    from ..exceptions import InvalidParameterError

    ra = a if isinstance(a, StudyResult) else load(a)
    rb = b if isinstance(b, StudyResult) else load(b)
    if isinstance(z, bool) or not isinstance(z, (int, float)) or not np.isfinite(z) or z <= 0:
        raise InvalidParameterError(f"The `z` parameter of compare must be a number > 0. Got {z!r} instead.")
    da, db = ra.design.to_dict(), rb.design.to_dict()
    for key in sorted(set(da) | set(db)):
        if key in _NOT_COMPARED:
            continue
        va = json.dumps(da.get(key), sort_keys=True, default=str)
        vb = json.dumps(db.get(key), sort_keys=True, default=str)
        if va != vb:
            raise InvalidParameterError(
                f"compare needs two runs of the same design; `{key}` differs: {va[:120]} vs {vb[:120]}."
            )
    ea, eb = ra.provenance.get("entropy"), rb.provenance.get("entropy")
    same_streams = str(ea) == str(eb) and list(ra.provenance.get("spawn_key", [])) == list(
        rb.provenance.get("spawn_key", [])
    )
    if same_streams and ra.design.trials != rb.design.trials:
        raise InvalidParameterError(
            "compare: the two runs used the same seed, so their first trials share random numbers, but "
            f"they have {ra.design.trials} and {rb.design.trials} trials; rerun one with the other's `trials`."
        )
    if paired is None:
        paired = same_streams
    elif paired and not same_streams:
        raise InvalidParameterError(
            "compare(paired=True) needs two runs with the same seed (entropy and spawn key), so that trial t "
            f"of both used the same data and random numbers. Got entropies {ea} and {eb}."
        )
    if not same_streams and ra.design.data.get("source") not in _SEED_FREE_SOURCES:
        raise InvalidParameterError(
            f"compare: the runs used different seeds (entropies {ea} and {eb}) and data source "
            f"{ra.design.data.get('source')!r} draws its data from the seed, so the two runs measured "
            "different data sets; that difference is not Monte Carlo noise and the MCSE does not cover it. "
            "Run both with the same seed (rk.study.run(..., rng=...)): the comparison is then paired."
        )
    keys = ["estimator", *ra.grid_columns]
    sa, sb = ra.summary(), rb.summary()
    cols = [*keys, "metric", "estimate", "mcse"]
    m = sa[cols].merge(sb[cols], on=[*keys, "metric"], suffixes=("_a", "_b"), how="left")  # a's row order
    m["diff"] = m["estimate_b"] - m["estimate_a"]
    with np.errstate(divide="ignore", invalid="ignore"):
        m["rel_diff"] = m["diff"] / m["estimate_a"].abs()
    m["mcse"] = np.hypot(m["mcse_a"], m["mcse_b"])
    if paired:
        m["mcse"] = _paired_mcse(ra, rb, m, keys)
    with np.errstate(divide="ignore", invalid="ignore"):
        zs = np.where((m["mcse"] == 0) & (m["diff"] == 0), 0.0, m["diff"] / m["mcse"])
    m["z"] = zs
    m["flagged"] = np.abs(m["z"].to_numpy()) > z
    m["paired"] = bool(paired)
    m.attrs["z"] = float(z)
    return m


def _paired_mcse(ra: StudyResult, rb: StudyResult, m: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """MCSE of the mean per-trial difference b - a (trials matched by cell and trial index)."""
    out = np.full(len(m), np.nan)
    ta, tb = ra.trials, rb.trials
    both = ta.merge(tb, on=[*keys, "cell", "trial"], suffixes=("_a", "_b"))
    ok = (both["status_a"] == "ok") & (both["status_b"] == "ok")
    both = both[ok]
    groups = {(k if isinstance(k, tuple) else (k,)): g for k, g in both.groupby(keys, sort=False)}
    for i, row in enumerate(m.itertuples(index=False)):
        grp = groups.get(tuple(getattr(row, k) for k in keys))
        if grp is None or row.metric not in METRIC_SOURCES:
            continue
        col, _ = METRIC_SOURCES[row.metric]
        dv = (grp[f"{col}_b"] - grp[f"{col}_a"]).to_numpy(dtype=float)
        dv = dv[np.isfinite(dv)]
        if dv.size > 1:
            se = float(dv.std(ddof=1) / np.sqrt(dv.size))
            if row.metric == "variance":  # summary() scales the variance by n / (n - 1)
                se *= dv.size / (dv.size - 1)
            out[i] = se
    return out
