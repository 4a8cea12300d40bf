"""Study results: tidy trial and pair tables, MCSE-aware summaries, theory comparison, Parquet IO."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import InvalidParameterError
from ._atomic import Record, atomic_csv, atomic_parquet, atomic_text, ensure_dir
from ._design import Design
from ._dropin_design import dropin_cost_columns
from ._manifest import write_result_manifest
from ._mcse import mcse_summary
from ._metric_sources import metric_column, metric_ddof
from ._records import records
from ._tables import summarize
from ._verify import verify_result_folder
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


@dataclasses.dataclass
class StudyResult:
    """Everything a study produced.

    Parameters
    ----------
    design : Design
        The design that was run.
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
    In a notebook a result displays itself (``_repr_html_``: the theory-vs-simulation line that
    ``rfkit run`` prints, the design, the provenance line,
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

        Failed trials are excluded and counted in ``n_failed``; non-finite trial values are kept
        and counted in ``n_nonfinite``, and ``status`` says why a row is not ``"ok"``
        (:func:`~rfkit.study._tables.summarize`).
        """
        key = (id(self.trials), self.trials.shape, tuple(self.design.metrics), float(confidence))
        cached = self.__dict__.get("_summary_cache")
        if cached is None or cached[0] != key:  # computed once per table: the report asks several times
            costs = dropin_cost_columns() if self.design.kind == "drop-in" else None
            table = summarize(
                self.trials, ["cell", "estimator", *self.grid_columns], self.design.metrics, confidence, costs
            )
            cached = self.__dict__["_summary_cache"] = (key, table)
        return cached[1].copy()  # a copy: a caller's edits never reach the next call

    def compare_theory(self) -> pd.DataFrame:
        """Measured vs closed-form values of each metric with a closed form, with MCSE and ``z``.

        The metrics are those whose record has a ``theory`` (:class:`MetricRecord`: rfkit's
        ``mse`` and ``rel_mse``, and any registered metric with one), in registration order, each
        measured in this result (in the summary, or its column in the trials); the prediction
        of a cell is the mean over its pairs of ``theory(pairs)`` (``mse``: the closed-form MSE
        ``theory_mse``; ``rel_mse``: ``theory_mse / K^2``). ``z = (measured - predicted) / mcse``;
        rows only for estimators with a closed form.
        """
        summ = self.summary()
        keys = ["cell", "estimator", *self.grid_columns]
        if "theory_mse" not in self.pairs or self.pairs["theory_mse"].isna().all():
            return pd.DataFrame()
        rows = []
        for rec in records("metric"):  # registration order: rfkit's mse and rel_mse first
            metric = rec.name
            meas = summ[summ["metric"] == metric]
            if rec.theory is None or (meas.empty and rec.column not in self.trials.columns):
                continue
            if meas.empty:
                meas = self._metric_from_trials(metric)
            pcol = "predicted_"  # the per-pair prediction, averaged over each cell's pairs
            per_pair = self.pairs[keys].assign(**{pcol: np.asarray(rec.theory(self.pairs), dtype=float)})
            pred = per_pair.groupby(keys, sort=False)[[pcol]].mean().reset_index()
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
                        "z": (r["estimate"] - r[pcol]) / r["mcse"] if 0 < r["mcse"] < np.inf else np.nan,
                        "n_trials": r["n_trials"],
                    }
                )
        return pd.DataFrame(rows)

    def _metric_from_trials(self, metric: str) -> pd.DataFrame:
        col = metric_column(metric)
        keys = ["cell", "estimator", *self.grid_columns]
        rows = []
        for key, grp in self.trials.groupby(keys, sort=False):
            ok = grp[grp["status"] == "ok"]
            s = mcse_summary(ok[col].to_numpy())
            rows.append({**dict(zip(keys, key)), "metric": metric, **s})
        return pd.DataFrame(rows).rename(columns={"n": "n_trials"})

    # ------------------------------------------------------------------ figures and notebooks
    def figure_names(self) -> list[str]:
        """Names of the figures this result draws: each figure kind's name, then its figures' file names.

        The kinds its study declares come first, then the other registered kinds that apply (see
        :func:`rfkit.plots.register_figure`); every name is one :meth:`plot` accepts.
        """
        return _presentation().figure_names(self)

    def plot(self, name: str | None = None, *, ax: Any = None, **kwargs: Any) -> Any:
        """Draw one figure of the study from its tables; returns the Axes drawn on.

        Parameters
        ----------
        name : str, optional
            A figure kind (``"mse_vs_features"``, ``"kernel_scatter"``, ``"error_vs_degree"``,
            ``"mse_vs_samples"``, ``"cost_vs_samples"``, ``"head_heatmap"``, ``"coverage"``,
            ``"boxplots"``, or one registered with :func:`rfkit.plots.register_figure`: its first
            figure, e.g. the MSE one of ``mse_vs_features``) or the name of one figure of a kind
            that draws several, the kind's name and a suffix, as ``rfkit run`` saves it
            (``"mse_vs_features_rel_mse"``, ``"boxplots_max_rel_err"``); any name
            :meth:`figure_names` lists. The old kind names ``"cost"`` and ``"dropin_kl_vs_budget"``
            are accepted with a deprecation warning. Default: the first
            figure the study declares. The figures are those of the report (:mod:`rfkit.report`, drawn with
            :mod:`rfkit.plots`) from ``summary()``, ``compare_theory()`` and the saved tables;
            nothing is recomputed.
        ax : matplotlib.axes.Axes or sequence of Axes, optional
            The axes to draw into: one Axes for a figure of one panel, a sequence (or array) of
            Axes, one per panel in panel order, for a figure of several. The figure is yours: it
            gets no caption line. None: a new paper-sized figure, captioned as in the report.
        **kwargs
            Passed to :func:`rfkit.report.plot_result`: ``size`` (``"one-column"`` or
            ``"two-column"``) for a new figure.

        Returns
        -------
        matplotlib.axes.Axes or ndarray of matplotlib.axes.Axes
            What was drawn on, as every ``rfkit.plots.plot_*`` function returns it: the Axes of a
            figure of one panel, the 1-D array of the panels' Axes of a figure of several (the
            given ones where ``ax`` is given). The Figure is ``.figure`` of any of them.

        Raises
        ------
        InvalidParameterError
            For a name that is not a figure of this result (the message lists those that are), or
            ``ax`` that is not one Axes per panel (the message says how many the figure needs).
        """
        return _presentation().plot_result(self, name, ax=ax, **kwargs)

    def _repr_html_(self) -> str:
        """Notebook display: the theory verdict, the design, the provenance, the summary table, the first figure."""
        return _presentation().result_html(self)

    # ------------------------------------------------------------------ IO
    def save(self, out: str | Path, *, keep: dict[str, Record] | None = None) -> Path:
        """Write ``trials.parquet``, ``pairs.parquet``, ``summary.parquet``/``.csv`` and ``manifest.json``.

        Every file is written atomically (temporary file, fsync, rename) and listed with its size
        and SHA-256 in ``manifest.json``, written last. ``keep``: records of earlier outputs
        (figures, report) that stay listed. A write that fails (disk full, permission denied, a
        folder in the way) raises :class:`~rfkit.study._atomic.OutputWriteError` naming the path.
        """
        out = ensure_dir(Path(out))
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
        files["summary.csv"] = atomic_csv(self.summary(), out / "summary.csv")
        theory = self.compare_theory()
        if not theory.empty:
            files["theory.csv"] = atomic_csv(theory, out / "theory.csv")
        # last: with the checksums of the tables
        write_result_manifest(out, self.provenance, files, keep=keep or {})
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


def _presentation() -> ModuleType:
    """:mod:`rfkit.report`, which draws and displays results, loaded when a result is drawn or shown."""
    from .. import (
        report,
    )  # lazy: presentation sits above computation; only drawing or showing a result needs it

    return report


def load(out: str | Path) -> StudyResult:
    """Reopen a finished study from its output folder (``rfkit run --out`` or ``run(out=...)``).

    Same as :meth:`StudyResult.load`: the folder is verified (sizes and SHA-256 of every table)
    and a damaged one raises :class:`~rfkit.exceptions.StudyError` naming the file.

    Parameters
    ----------
    out : str or path
        The run folder.

    Returns
    -------
    StudyResult
        The study's tables, design and provenance.
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
    strict: bool = True,
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
        Default: paired exactly when the two runs used the same seed (entropy and spawn key) and
        the same number of trials. ``paired=False`` on same-seed runs uses the independent
        formula anyway, which overstates the MCSE of positively correlated runs (``|z|`` errs
        small).
    strict : bool, default=True
        ``False`` compares two runs that differ in backend, device or number of trials (for
        instance a NumPy run against a torch run on the GPU, or a quick run against a full one)
        instead of refusing; every such difference is listed in ``attrs["differences"]``.
        Same-seed runs with different trial counts are then compared as independent runs (a
        conservative MCSE, since their first trials share random numbers).

    Returns
    -------
    DataFrame
        One row per (estimator, grid point, metric): ``estimate_a``, ``mcse_a``, ``estimate_b``,
        ``mcse_b``, ``diff``, ``rel_diff`` (``diff / |estimate_a|``), ``mcse``, ``z``,
        ``flagged`` and ``paired``. ``attrs["z"]`` holds the threshold and
        ``attrs["differences"]`` what differs between the runs besides the numbers (backend,
        device, trials): a list of ``{"what", "a", "b"}`` records, empty when nothing does
        (``pd.DataFrame(m.attrs["differences"])`` shows it as a table).

    Raises
    ------
    InvalidParameterError
        If the designs differ (naming the first key that differs), ``z`` is not > 0, the runs share
        a seed but not the number of trials, ``paired=True`` for runs with different seeds, or
        runs with different seeds on data drawn from the seed.
    """
    ra = a if isinstance(a, StudyResult) else load(a)
    rb = b if isinstance(b, StudyResult) else load(b)
    if isinstance(z, bool) or not isinstance(z, (int, float)) or not np.isfinite(z) or z <= 0:
        raise InvalidParameterError(f"The `z` parameter of compare must be a number > 0. Got {z!r} instead.")
    if not isinstance(strict, bool):
        raise InvalidParameterError(
            f"The `strict` parameter of compare must be True or False. Got {strict!r} instead."
        )
    da, db = ra.design.to_dict(), rb.design.to_dict()
    differences = _differences(ra, rb)
    for key in sorted(set(da) | set(db)):
        if key in _NOT_COMPARED or (not strict and key in _LOOSE):
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
    if same_streams and ra.design.trials != rb.design.trials and not strict:
        if paired:
            raise InvalidParameterError(
                f"compare(paired=True) needs runs with the same number of trials; got {ra.design.trials} and "
                f"{rb.design.trials}. Leave `paired` unset (strict=False compares them as independent)."
            )
        paired = False
    elif same_streams and ra.design.trials != rb.design.trials:
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
    m.attrs["differences"] = differences
    return m


#: what ``compare(strict=False)`` lets differ (and lists) besides the numbers
_LOOSE = ("backend", "device")


def _differences(ra: StudyResult, rb: StudyResult) -> list[dict[str, Any]]:
    """Backend, device and trial count of two runs where they differ: one row (what, a, b) each."""
    pa, pb = ra.provenance, rb.provenance
    rows = []
    for what, va, vb in (
        ("backend", pa.get("backend", ra.design.backend), pb.get("backend", rb.design.backend)),
        ("device", pa.get("device", ra.design.device), pb.get("device", rb.design.device)),
        ("trials", ra.design.trials, rb.design.trials),
    ):
        if str(va) != str(vb):
            rows.append({"what": what, "a": va, "b": vb})
    return rows


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
        if grp is None:
            continue
        try:
            col = metric_column(row.metric)
        except KeyError:  # not a per-trial mean
            continue
        dv = (grp[f"{col}_b"] - grp[f"{col}_a"]).to_numpy(dtype=float)
        if dv.size > 1 and np.isfinite(dv).all():  # a non-finite difference: no MCSE, never a filtered one
            se = float(dv.std(ddof=1) / np.sqrt(dv.size))
            ddof = metric_ddof(row.metric)
            if ddof and dv.size > ddof:  # summary() scales the metric by n / (n - ddof)
                se *= dv.size / (dv.size - ddof)
            out[i] = se
    return out
