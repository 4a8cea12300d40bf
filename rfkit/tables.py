"""Summary tables with MCSE-aware rounding, exported to Markdown and LaTeX (booktabs).

Tables read study tables only (``StudyResult.summary()`` or its saved Parquet/CSV);
they never recompute estimates. Rounding follows ArviZ's ``round_to="auto"``: the MCSE is
shown to 2 significant figures and the estimate to the same decimal place (:func:`format_mcse`,
defined beside the MCSE itself in the study package).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from .study._mcse import format_mcse

__all__ = ["format_mcse", "summary_table", "to_markdown", "to_latex"]


def summary_table(
    summary: pd.DataFrame,
    metric: str,
    *,
    rows: Sequence[str] = ("estimator",),
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
    rows : sequence of str
        Columns forming the row index.
    columns : str or None
        Column spread across the table (``None``: one value column).
    latex : bool
        Format cells for LaTeX (math mode).
    """
    s = summary[summary["metric"] == metric].copy()
    if s.empty:
        raise KeyError(
            f"summary has no rows for metric {metric!r}; available: {sorted(summary['metric'].unique())}"
        )
    s["value"] = [format_mcse(e, m, latex=latex) for e, m in zip(s["estimate"], s["mcse"])]
    if columns is None:
        return s[[*rows, "value"]].reset_index(drop=True)
    piv = s.pivot_table(index=list(rows), columns=columns, values="value", aggfunc="first", sort=False)
    piv.columns = [f"{columns}={c}" for c in piv.columns]
    return piv.reset_index()


def to_markdown(table: pd.DataFrame) -> str:
    """GitHub-flavoured Markdown table (no extra dependency)."""
    cols = [str(c) for c in table.columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in table.itertuples(index=False):
        out.append("| " + " | ".join(str(v) for v in row) + " |")
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
    """Escape LaTeX's special characters (one pass, so replacements are not re-escaped)."""
    return text.translate(_TEX)


def to_latex(table: pd.DataFrame, *, caption: str | None = None, label: str | None = None) -> str:
    """A booktabs ``tabular`` (wrapped in ``table`` when a caption or label is given).

    Cells already in math mode (``$...$``) are kept; other text is escaped.
    """
    cols = list(table.columns)
    align = "l" * 1 + "r" * (len(cols) - 1)
    lines = [
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(_tex_escape(str(c)) for c in cols) + r" \\",
        r"\midrule",
    ]
    for row in table.itertuples(index=False):
        cells = [str(v) if str(v).startswith("$") else _tex_escape(str(v)) for v in row]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    body = "\n".join(lines)
    if caption is None and label is None:
        return body + "\n"
    wrapped = [r"\begin{table}[t]", r"\centering"]
    if caption:
        wrapped.append(rf"\caption{{{_tex_escape(caption)}}}")
    if label:
        wrapped.append(rf"\label{{{label}}}")
    wrapped += [body, r"\end{table}"]
    return "\n".join(wrapped) + "\n"
