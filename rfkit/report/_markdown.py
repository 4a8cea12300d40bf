"""The Markdown report of a finished study: ``report.md`` with its figures and LaTeX tables.

Figures and tables are drawn from the saved tables (``summary.parquet``, ``theory.csv``, ...):
compute, save, then present. Every file written here (figures, ``report.md``, LaTeX tables, CSV
tables) is written atomically and added with its size and SHA-256 to the folder's
``manifest.json``, so :func:`rfkit.study.verify_run` and a resumed run detect a damaged one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..study.outputs import Record, atomic_text, ensure_dir, file_record, record_outputs
from ..study.summaries import HEAVY_TAIL_RATIO, heavy_tailed, metric_words
from ..tables import format_mcse, md_escape, summary_table, summary_values, to_latex
from ._dropin import DROPIN_CSV, dropin_section
from ._figures import declared_kinds, study_figures
from ._parallel_figures import MIN_PARALLEL, FiguresInWorkers, figure_names_to_draw, save_report_figure
from ._sections import (
    COST_WORDS,
    finite_rows,
    hard_heads,
    md_table,
    nonfinite_section,
    ranking_section,
    ratio_section,
    slopes_section,
)
from ._shown import estimator_names, shown_estimators

if TYPE_CHECKING:
    from ..study import StudyResult

__all__ = ["write_report", "provenance_line", "metric_description"]

#: attention designs measure the error of the attention *output* against exact softmax attention
_ATTENTION_METRICS = {
    "mse": "mean over queries and value dimensions of E[(A_hat - A)^2], the squared error of the "
    "estimated attention output A_hat against exact softmax attention A",
    "bias": "mean over queries and value dimensions of E[A_hat - A] (signed: errors of opposite sign cancel)",
    "variance": "mean over queries and value dimensions of Var[A_hat] (divisor T-1)",
}


def metric_description(metric: str, kind: str) -> str:
    """What a summary metric measures, in words fit for this kind of design (kernel or attention).

    Parameters
    ----------
    metric : str
        The summary metric's name.
    kind : str
        The design kind (``"kernel"``, ``"attention"``, ...).

    Returns
    -------
    str
        The description.
    """
    if kind == "attention" and metric in _ATTENTION_METRICS:
        return _ATTENTION_METRICS[metric]
    return metric_words(metric)


def provenance_line(result: StudyResult) -> str:
    """One line: trials, cells, seed entropy, design hash, the work units' time, executor, versions.

    Parameters
    ----------
    result : StudyResult
        A study result.

    Returns
    -------
    str
        The line.
    """
    d, prov = result.design, result.provenance
    machine = prov.get("machine", {})
    versions = prov.get("versions", {})
    return (
        f"Trials per cell: {d.trials}; cells: {prov.get('cells', len(d.cells()))} "
        f"({prov.get('cells_resumed', 0)} resumed); seed entropy {prov.get('entropy')}; design hash "
        f"`{prov.get('design_hash', d.hash())}`; work units {float(prov.get('seconds', float('nan'))):.1f} s "
        "(this run's computation only; start-up, writing the tables, this report and its figures not included) on "
        f"{machine.get('cpus', '?')} CPUs with executor `{prov.get('executor', '?')}`; "
        f"backend {prov.get('backend', 'numpy')}"
        + (
            f" on {prov['device_name']}"
            if prov.get("backend", "numpy") != "numpy" and prov.get("device_name")
            else ""
        )
        + (
            "; random directions drawn by the backend's own generator on its device (draws = backend"
            + (
                f"; NumPy draws for {', '.join(map(str, prov['numpy_draws']))}"
                if prov.get("numpy_draws")
                else ""
            )
            + ")"
            if prov.get("draws") == "backend"
            else ""
        )
        + f"; rfkit {versions.get('rfkit', '?')}, numpy {versions.get('numpy', '?')}."
    )


def _record_written(out: Path, files: dict[str, Record], names: list[str]) -> None:
    """Add the records of CSV tables the report sections wrote (``ranking_*.csv``, ...) to ``files``."""
    for name in names:
        for f in sorted(out.glob(name)):
            if f.is_file():
                files[f.name] = file_record(f)


def write_report(result: StudyResult, out: str | Path, *, workers: int = 1) -> Path:
    """Write ``report.md`` (+ figures) for a saved study; returns the report path.

    Figures are drawn from the saved ``summary.parquet`` / ``theory.csv`` (compute -> save -> plot);
    with ``workers > 1`` and at least three figures, in that many worker processes, one figure each
    (the same files and records as drawn here), while this process writes the text and tables.

    Parameters
    ----------
    result : StudyResult
        A study result. (saved: its tables are read from ``out``).
    out : str or path
        The run folder the report and figures are written to.
    workers : int, default=1
        Processes drawing the figures.

    Returns
    -------
    pathlib.Path
        The path of ``report.md``.
    """
    out = Path(out)
    summary = pd.read_parquet(out / "summary.parquet")
    theory_path = out / "theory.csv"
    theory = pd.read_csv(theory_path) if theory_path.exists() else pd.DataFrame()
    d = result.design
    lines = [f"# {md_escape(d.name)}", "", d.description.strip(), ""]
    lines += [provenance_line(result), ""]
    quick = d.source.endswith("[quick]")
    profile = getattr(d, "applied_profile", None)
    if profile and not quick:
        lines += [
            f"**Profile `{md_escape(profile)}`**: the design's `[profiles.{md_escape(profile)}]` overrides.",
            "",
        ]
    if quick:
        lines += [
            "**Quick profile**: the design's `[quick]` overrides (fewer trials, a smaller grid, less "
            "data) for a smoke run. The numbers below are not the study's result, and where the "
            "description or the notes give sizes or numbers, they are those of the full profile "
            "(`rfkit run` without `--quick`).",
            "",
        ]

    def table(name: str) -> pd.DataFrame | None:
        path = out / f"{name}.parquet"
        return pd.read_parquet(path) if path.exists() else None

    drawn = finite_rows(summary)  # figures draw finite estimates; the others are listed below
    figures: list[Path] = []
    files: dict[str, Record] = {}  # every file written here: recorded in manifest.json at the end
    shown: dict[str, tuple[str, str]] = {}  # each figure's alt text and caption, by name
    names = figure_names_to_draw(d, out) if workers > 1 else []
    if len(names) >= MIN_PARALLEL:  # the workers draw while this process writes the text and tables
        with FiguresInWorkers(d, out, names, workers) as drawing:
            body = _body(result, summary, theory, out, files)
            figures, recs = drawing.result()
        files.update(recs)
        shown = drawing.shown
    else:
        for kind in declared_kinds(d):  # drawn in the figure registry's order
            figures += [
                save_report_figure(fig, out, name, files, shown)
                for name, fig in study_figures(kind, d, drawn, theory, table)
            ]
        body = _body(result, summary, theory, out, files)
    for i, f in enumerate(figures, 1):  # each with its alt text and, below it, its caption
        alt, cap = shown.get(f.stem, (f.stem, ""))
        lines += [f"![{md_escape(alt)}](figures/{f.name})", ""]
        lines += [f"*Figure {i}* (`{f.stem}`): {md_escape(cap)}" if cap else f"*Figure {i}* (`{f.stem}`)", ""]
    lines += body
    path = out / "report.md"
    files["report.md"] = atomic_text(path, "\n".join(lines))
    _record_written(out, files, ["ranking_*.csv", "mse_ratio_to_reference.csv", *DROPIN_CSV])
    record_outputs(out, files)  # listed with size and SHA-256 beside the tables
    return path


def _body(
    result: StudyResult, summary: pd.DataFrame, theory: pd.DataFrame, out: Path, files: dict[str, Record]
) -> list[str]:
    """The report below its figures: tables per metric, theory, rankings, notes, failures (and the
    LaTeX and CSV tables they write, recorded in ``files``)."""
    d = result.design
    grid_cols = list(d.grid)
    quick = d.source.endswith("[quick]")
    names = estimator_names(d)  # tables show display names, as the figures and the console do
    lines: list[str] = [_names_line(d, names), ""]
    if d.kind == "attention" and "samples" in grid_cols:
        lines += [
            "`samples` is each estimator's budget of random draws: the number of random features m for RFA, "
            "of samples for RA and SNIS, of proposals x samples per proposal for LARA.",
            "",
        ]
    for metric in d.metrics:
        s = summary[summary["metric"] == metric].copy()
        if s.empty:
            continue
        s["value"] = summary_values(s)
        other = [c for c in grid_cols if c != "n_features"]
        if "n_features" in grid_cols:
            piv = s.pivot_table(
                index=["estimator", *other], columns="n_features", values="value", aggfunc="first", sort=False
            )
            piv.columns = [f"m={c}" for c in piv.columns]
            table = piv.reset_index()
        else:
            table = _cost_text(s[["estimator", *grid_cols, *_cost_column(s), "value"]])
        lines += [
            f"## {metric}",
            "",
            f"{metric_description(metric, d.kind)} (estimate ± MCSE)."
            + (f" {COST_WORDS}" if _cost_column(s) else ""),
            "",
            md_table(table, names),
            "",
        ]
    if not theory.empty:
        lines += _theory_section(shown_estimators(theory[theory["metric"] == "mse"].copy(), names), grid_cols)
    if "ranking" in d.outputs.get("tables", []):
        chosen = d.outputs.get("ranking_metric")
        ranked: list[str | None] = [chosen] if chosen is None or isinstance(chosen, str) else list(chosen)
        for rank_by in ranked:
            lines += ranking_section(summary, grid_cols, out, rank_by, names)
    lines += slopes_section(summary, grid_cols, names)
    lines += _latex_tables(summary, out, d.metrics, grid_cols, d.kind, files)
    stats_path = out / "data_stats.parquet"
    if "ratio_to_reference" in d.outputs.get("tables", []) and d.outputs.get("reference"):
        stats = pd.read_parquet(stats_path) if stats_path.exists() else None
        lines += ratio_section(summary, stats, grid_cols, str(d.outputs["reference"]), out, names)
    if "hard_heads" in d.outputs.get("tables", []) and stats_path.exists():
        lines += hard_heads(summary, pd.read_parquet(stats_path), d.labels, names=names)
    if "dropin" in d.outputs.get("tables", []) and d.kind == "drop-in":
        lines += dropin_section(summary, d, out)
    notes = d.outputs.get("notes")
    if notes:
        lines += ["## Notes", ""]
        if quick:
            lines += ["*Written for the full profile: the numbers in this quick report differ.*", ""]
        lines += [notes.strip(), ""]
    failed = int((result.trials["status"] != "ok").sum())
    lines += [f"Failed trials: {failed}.", ""]
    lines += nonfinite_section(summary, grid_cols, names)
    return lines


def _names_line(design: Any, names: dict[str, str]) -> str:
    """The one line of the report that pairs each display name with its study label (the key of the
    CSV and Parquet tables and of ``result.summary()``)."""
    pairs = [f"{md_escape(names[lab])} (`{md_escape(lab)}`)" for lab in design.labels]
    return (
        "Estimators, by the display name the tables, figures and console lines show (study label, "
        "as in `summary.csv`): " + ", ".join(pairs) + "."
    )


def _cost_column(summary: pd.DataFrame) -> list[str]:
    """``["cost"]`` where the summary has costs per query (attention designs), else ``[]``."""
    return ["cost"] if "cost" in summary and summary["cost"].notna().any() else []


def _cost_text(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its cost column (if any) written to 4 significant digits."""
    if "cost" not in frame:
        return frame
    return frame.assign(cost=[f"{v:.4g}" for v in frame["cost"].to_numpy(dtype=float)])


def _theory_section(t: pd.DataFrame, grid_cols: list[str]) -> list[str]:
    """Measured vs closed-form MSE; rows whose prediction far exceeds the measurement are flagged.

    With heavy-tailed squared errors (positive features at large ||x+y||, for instance) the MSE is
    carried by draws too rare to occur in the trials: the sample MSE falls far below the true one
    and its MCSE, estimated from the same trials, is far too small, so z is meaningless there.
    """
    n = len(t)
    if not n:
        return []
    heavy = heavy_tailed(t)
    no_z = ~np.isfinite(t["z"].to_numpy(dtype=float))  # a non-finite measurement or MCSE: no test
    # an approximate prediction outside its domain (the delta method: rfkit.theory.rfa_delta_method's
    # in_domain) is no number to read or test against
    inside = t["in_domain"].fillna(True).astype(bool).to_numpy() if "in_domain" in t else np.ones(n, bool)
    light = t[~heavy & ~no_z & inside]
    text = f"{n} (cell, estimator) comparisons of the measured MSE with its closed form (rfkit.theory, or the map's own mse)"
    if no_z.any():
        text += (
            f"; {int(no_z.sum())} have no z-score (the measured MSE or its MCSE is not finite: see "
            '"Non-finite and failed trials")'
        )
    if len(light):
        worst = light.loc[light["z"].abs().idxmax()]
        where = ", ".join(f"{c}={worst[c]}" for c in grid_cols if c in worst.index)
        text += (
            f"; {int((light['z'].abs() <= 5).sum())} of the {len(light)} unflagged ones within 5 MCSE; "
            f"largest unflagged |z| = {abs(worst['z']):.2f} ({md_escape(worst['estimator'])}, {md_escape(where)})."
        )
    else:
        text += "."
    out = ["## Theory vs simulation", "", text, ""]
    if heavy.any():
        out += [
            f"† {int(heavy.sum())} rows have a predicted MSE more than {HEAVY_TAIL_RATIO:g} times the "
            "measured one. That is what heavy-tailed squared errors do: most of the MSE comes from draws "
            "too rare to occur in these trials, so the sample MSE falls short of it and its MCSE (estimated "
            "from the same trials) is far too small. Their z-scores do not test the formula; more trials, "
            "or smaller norms, would.",
            "",
        ]

    def fmt_z(v: float, flag: bool) -> str:
        if not np.isfinite(v):
            return "n/a"
        body = f"{v:+.2f}" if abs(v) < 1e4 else f"{v:+.2e}"
        return body + (" †" if flag else "")

    if not inside.all():
        out += [
            f"{int((~inside).sum())} rows are predictions outside their theory's domain (the estimated "
            "normaliser's relative variance is above the delta method's bound): shown as \"out of domain\".",
            "",
        ]
    out += [
        md_table(
            t.assign(
                predicted=[f"{v:.4g}" if ok else "out of domain" for v, ok in zip(t["predicted"], inside)],
                measured=[format_mcse(a, b) for a, b in zip(t["measured"], t["mcse"])],
                z=[fmt_z(v, f) if ok else "n/a" for v, f, ok in zip(t["z"], heavy, inside)],
            )[["estimator", *grid_cols, "predicted", "measured", "z"]]
        ),
        "",
    ]
    return out


def _latex_tables(
    summary: pd.DataFrame,
    out: Path,
    metrics: list[str],
    grid_cols: list[str],
    kind: str,
    files: dict[str, Record] | None = None,
) -> list[str]:
    """One booktabs table per metric in ``tables/`` (estimate ± MCSE), written atomically and recorded."""
    tdir = ensure_dir(out / "tables")
    files = {} if files is None else files
    written = []
    for metric in metrics:
        if summary[summary["metric"] == metric].empty:
            continue
        other = [c for c in grid_cols if c != "n_features"]
        if "n_features" in grid_cols:
            t = summary_table(summary, metric, rows=["estimator", *other], columns="n_features", latex=True)
        else:
            rows = ["estimator", *grid_cols, *_cost_column(summary)]
            t = summary_table(_cost_text(summary), metric, rows=rows, columns=None, latex=True)
        files[f"tables/{metric}.tex"] = atomic_text(
            tdir / f"{metric}.tex",
            to_latex(t, caption=metric_description(metric, kind), label=f"tab:{metric}"),
        )
        written.append(f"tables/{metric}.tex")
    return [f"LaTeX (booktabs) tables: {', '.join(written)}.", ""] if written else []
