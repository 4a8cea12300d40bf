"""Summary tables with MCSE-aware rounding, exported to Markdown and LaTeX (booktabs).

Tables read study tables only (``StudyResult.summary()`` or its saved Parquet/CSV);
they never recompute estimates. Rounding follows ArviZ's ``round_to="auto"``: the MCSE is
shown to 2 significant figures and the estimate to the same decimal place (:func:`format_mcse`,
defined beside the MCSE itself in the study package and public in :mod:`rfkit.study.summaries`).
A row with non-finite trial values says how many (``inf (99 of 100 non-finite)``); a proportion
(the coverage of a bound) is followed by its Wilson interval (``1 [0.912, 1]``).

Text that comes from the user (labels, estimator and study names) is escaped in both formats:
Markdown's table and emphasis characters (:func:`md_escape`) and LaTeX's special characters;
line breaks become spaces.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .exceptions import InvalidParameterError
from .study.summaries import format_interval, format_mcse, metric_is_proportion

__all__ = [
    "format_mcse",
    "format_interval",
    "summary_values",
    "summary_table",
    "to_markdown",
    "to_latex",
    "md_escape",
]


#: columns of a study summary that hold statistics of a row, not the settings it was measured at
#: (``cell`` numbers the grid points, which the grid axes name; ``cost`` follows from them)
_NOT_AXES = frozenset(
    {
        "cell",
        "cost",
        "metric",
        "estimate",
        "mcse",
        "ci_low",
        "ci_high",
        "n",
        "n_trials",
        "n_failed",
        "n_nonfinite",
        "n_nan_rows",
        "nonfinite",
        "overflow",
        "status",
        "value",
    }
)


def _check_frame(frame: object, name: str, func: str, required: Sequence[str] = ()) -> pd.DataFrame:
    """``frame`` if it is a DataFrame with the ``required`` columns, else InvalidParameterError naming ``name``."""
    if not isinstance(frame, pd.DataFrame):
        raise InvalidParameterError(
            f"The `{name}` parameter of {func} must be a pandas DataFrame. Got {type(frame).__name__} instead."
        )
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InvalidParameterError(
            f"The `{name}` parameter of {func} must be a study summary with the columns {list(required)}; "
            f"it lacks {missing}. Got a DataFrame with the columns {list(frame.columns)} instead."
        )
    return frame


def _check_columns(frame: pd.DataFrame, names: list[str], name: str) -> None:
    unknown = [c for c in names if c not in frame.columns]
    if unknown:
        raise InvalidParameterError(
            f"The `{name}` parameter of summary_table must name columns of the summary "
            f"({list(frame.columns)}). Got {unknown[0]!r} instead."
        )


def summary_values(summary: pd.DataFrame, *, latex: bool = False) -> list[str]:
    """The display text of each summary row.

    That is ``estimate ± MCSE`` (:func:`format_mcse`), the count of non-finite trial values where
    there are any, and the Wilson interval of a proportion.

    Parameters
    ----------
    summary : pandas.DataFrame
        A summary table (``StudyResult.summary()``) with the columns ``estimate`` and ``mcse``
        (and, where present, ``metric``, ``ci_low``, ``ci_high``, ``n_trials``, ``n_nonfinite``).
    latex : bool, default=False
        Write LaTeX math instead of plain text.

    Returns
    -------
    list of str
        One text per row, in order.

    Examples
    --------
    >>> s = pd.DataFrame({"metric": ["coverage", "mse"], "estimate": [1.0, np.inf], "mcse": [0.0, np.nan],
    ...                   "ci_low": [0.9124, np.nan], "ci_high": [1.0, np.nan], "n_trials": [40, 40],
    ...                   "n_nonfinite": [0, 39]})
    >>> summary_values(s)
    ['1 [0.912, 1]', 'inf (39 of 40 non-finite)']
    """
    summary = _check_frame(summary, "summary", "summary_values", ("estimate", "mcse"))
    out = []
    for r in summary.to_dict("records"):
        n_bad = r.get("n_nonfinite", 0)
        n_bad = int(n_bad) if np.isfinite(n_bad) else 0
        n = r.get("n_trials")
        text = format_mcse(
            r["estimate"], r["mcse"], latex=latex, n_nonfinite=n_bad, n=None if n is None else int(n)
        )
        if "ci_low" in r and metric_is_proportion(str(r.get("metric", ""))) and not n_bad:
            text += " " + format_interval(r["ci_low"], r["ci_high"])
        out.append(text)
    return out


def summary_table(
    summary: pd.DataFrame,
    metric: str,
    *,
    rows: str | Sequence[str] = ("estimator",),
    columns: str | None = "n_features",
    latex: bool = False,
) -> pd.DataFrame:
    """Pivot one metric of a study summary into a display table of ``estimate ± MCSE`` strings.

    Parameters
    ----------
    summary : DataFrame
        Tidy summary (columns ``metric``, ``estimate``, ``mcse`` and the design columns).
    metric : str
        Which metric to show.
    rows : str or sequence of str
        Columns forming the row index. Every grid axis that varies among the metric's rows and
        is neither here nor ``columns`` is added after them, so no cell of the summary is left
        out (``rows=("estimator",)`` on a summary over ``dim`` and ``n_features`` gives the rows
        ``estimator, dim``). The grid axes are the summary's columns other than ``cell``,
        ``cost`` and the statistics (``metric``, ``estimate``, ``mcse``, ``ci_low``,
        ``ci_high``, ``n_trials``, ``n_failed``, ``n_nonfinite``, ``n_nan_rows``, ``status``).
    columns : str or None
        Column spread across the table (``None``: one value column).
    latex : bool
        Format cells for LaTeX (math mode).

    Returns
    -------
    DataFrame
        One row per combination of the row columns, strings in the value columns; a cell the
        summary does not have is the empty string.

    Raises
    ------
    InvalidParameterError
        If ``summary`` is not a DataFrame with the columns ``metric``, ``estimate`` and ``mcse``,
        has no rows for ``metric``, ``rows`` or ``columns`` name a column it does not have, or
        two of its rows share every setting (a summary concatenated with itself).
    """
    summary = _check_frame(summary, "summary", "summary_table", ("metric", "estimate", "mcse"))
    rows = [rows] if isinstance(rows, str) else list(rows)
    _check_columns(summary, rows, "rows")
    if columns is not None:
        _check_columns(summary, [columns], "columns")
    s = summary[summary["metric"] == metric].copy()
    if s.empty:
        raise InvalidParameterError(
            f"The `metric` parameter of summary_table must be a metric of the summary, but the summary has "
            f"no rows for metric {metric!r}; available: {sorted(map(str, summary['metric'].unique()))}."
        )
    named = {*rows, columns}
    axes = [c for c in s.columns if c not in _NOT_AXES and c not in named and s[c].nunique(dropna=False) > 1]
    keys = [*rows, *axes] + ([] if columns is None else [columns])
    _check_unique(s, keys, metric)
    s["value"] = summary_values(s, latex=latex)
    if columns is None:
        return s[[*rows, *axes, "value"]].reset_index(drop=True)
    index = [*rows, *axes]
    piv = s.set_index([*index, columns])["value"].unstack(columns, fill_value="", sort=False)
    piv.columns = [f"{columns}={c}" for c in piv.columns]
    return piv.reset_index()


def _check_unique(s: pd.DataFrame, keys: list[str], metric: str) -> None:
    """Refuse rows of ``metric`` that share every setting: a table cell would have to drop one of them."""
    dup = s.duplicated(subset=keys, keep=False) if keys else pd.Series(len(s) > 1, index=s.index)
    if dup.any():
        first = s.loc[dup, keys].iloc[0].tolist() if keys else []
        shared = ", ".join(f"{k}={v!r}" for k, v in zip(keys, first)) or "no settings"
        raise InvalidParameterError(
            f"The `summary` parameter of summary_table must have one row per setting of metric {metric!r}, "
            f"so that no table cell drops a value; {int(dup.sum())} rows share {shared} "
            f"(columns compared: {keys}). Got a summary with repeated rows instead "
            "(concatenated runs? add the column that tells them apart to `rows`)."
        )


#: Markdown's active characters; ``_`` inside a word (``n_features``) is not emphasis and stays
_MD_SPECIAL = re.compile(r"([\\`*|<>\[\]$~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def md_escape(text: object) -> str:
    r"""Text written into Markdown as itself.

    Table bars, emphasis, code, HTML, links and math are escaped, line breaks become spaces.

    Parameters
    ----------
    text : object
        The text (anything else is converted with ``str``).

    Returns
    -------
    str
        The escaped text.

    Examples
    --------
    >>> print(md_escape("a|b_c*d _x_ $x$ \\ `e`\nf"))
    a\|b_c\*d \_x\_ \$x\$ \\ \`e\` f
    """
    return _MD_SPECIAL.sub(r"\\\1", _LINE_BREAK.sub(" ", str(text)))


def _check_table(table: object, func: str) -> pd.DataFrame:
    """``table`` if it is a DataFrame with at least one column, else InvalidParameterError naming ``table``."""
    frame = _check_frame(table, "table", func)
    if frame.shape[1] == 0:
        raise InvalidParameterError(
            f"The `table` parameter of {func} must have at least one column. Got a DataFrame with "
            f"0 columns and {len(frame)} rows instead."
        )
    return frame


def to_markdown(table: pd.DataFrame) -> str:
    """GitHub-flavoured Markdown table (no extra dependency); every cell and header is escaped (:func:`md_escape`).

    Parameters
    ----------
    table : pandas.DataFrame
        The table (its index is not written).

    Returns
    -------
    str
        The Markdown text, ending with a line break.
    """
    table = _check_table(table, "to_markdown")
    cols = [md_escape(c) for c in table.columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in table.itertuples(index=False):
        out.append("| " + " | ".join(md_escape(v) for v in row) + " |")
    return "\n".join(out) + "\n"


_TEX = str.maketrans(
    {
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "_": r"\_",
        "#": r"\#",
        "^": r"\^{}",
        "~": r"\~{}",
        "$": r"\$",
        "{": r"\{",
        "}": r"\}",
    }
)


def _tex_escape(text: str) -> str:
    """Escape LaTeX's special characters (one pass, so replacements are not re-escaped); line breaks as spaces."""
    return _LINE_BREAK.sub(" ", text).translate(_TEX)


#: the LaTeX that :func:`format_mcse` writes (kept as is); any other cell is text and escaped
_MCSE_TEX = re.compile(
    r"^\$\(?-?[0-9.e+-]+ \\pm (?:[0-9.]+|\\infty)\)?(?: \\times 10\^\{-?[0-9]+\})?\$"
    r"(?: \([0-9]+ of [0-9?]+ non-finite\))?(?: \[[0-9.e+-]+, [0-9.e+-]+\])?$"
)


def _tex_cell(value: object) -> str:
    text = str(value)
    return text if _MCSE_TEX.match(text) else _tex_escape(text)


def to_latex(table: pd.DataFrame, *, caption: str | None = None, label: str | None = None) -> str:
    """A booktabs ``tabular`` (wrapped in ``table`` when a caption or label is given).

    Cells written by :func:`format_mcse` (``$0.100 \\pm 0.010$``) are kept; every other cell,
    header, the caption and the label are escaped (a label ``$x$`` is shown as ``$x$``).

    Parameters
    ----------
    table : pandas.DataFrame
        The table (its index is not written); the first column is left-aligned, the others
        right-aligned.
    caption : str, optional
        The ``\\caption`` of the ``table`` environment.
    label : str, optional
        The ``\\label`` of the ``table`` environment.

    Returns
    -------
    str
        The LaTeX text, ending with a line break.
    """
    table = _check_table(table, "to_latex")
    cols = list(table.columns)
    align = "l" * 1 + "r" * (len(cols) - 1)
    lines = [
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(_tex_escape(str(c)) for c in cols) + r" \\",
        r"\midrule",
    ]
    for row in table.itertuples(index=False):
        cells = [_tex_cell(v) for v in row]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    body = "\n".join(lines)
    if caption is None and label is None:
        return body + "\n"
    wrapped = [r"\begin{table}[t]", r"\centering"]
    if caption:
        wrapped.append(rf"\caption{{{_tex_escape(caption)}}}")
    if label:
        wrapped.append(rf"\label{{{re.sub(r'[^A-Za-z0-9:._-]', '-', label)}}}")
    wrapped += [body, r"\end{table}"]
    return "\n".join(wrapped) + "\n"
