import pandas as pd
import pytest

from rfkit.exceptions import InvalidParameterError
from rfkit.tables import format_mcse, summary_table, to_latex, to_markdown


@pytest.mark.parametrize(
    "est, se, expected",
    [
        (0.012345, 0.00021, "0.01235 ± 0.00021"),
        (1.23456, 0.0341, "1.235 ± 0.034"),
        (123456.0, 789.0, "(1.2346 ± 0.0079)e5"),
        (1.234e-5, 3.2e-7, "(1.234 ± 0.032)e-5"),
        (2.0, 0.0, "2"),
        (float("nan"), 0.1, "n/a"),
    ],
)
def test_format_mcse(est, se, expected):
    assert format_mcse(est, se) == expected


def test_latex_math_mode():
    assert format_mcse(0.5, 0.0312, latex=True) == r"$0.500 \pm 0.031$"
    assert format_mcse(1.234e-5, 3.2e-7, latex=True) == r"$(1.234 \pm 0.032) \times 10^{-5}$"


def test_summary_table_markdown_latex():
    s = pd.DataFrame(
        {
            "estimator": ["a", "a", "b_1", "b_1"],
            "n_features": [8, 16, 8, 16],
            "metric": "mse",
            "estimate": [0.1, 0.05, 0.2, 0.1],
            "mcse": [0.01, 0.005, 0.02, 0.01],
        }
    )
    t = summary_table(s, "mse")
    assert list(t.columns) == ["estimator", "n_features=8", "n_features=16"]
    md = to_markdown(t)
    assert md.splitlines()[0] == "| estimator | n_features=8 | n_features=16 |" and "0.100 ± 0.010" in md
    tex = to_latex(summary_table(s, "mse", latex=True), caption="MSE", label="tab:mse")
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"b\_1" in tex and r"$0.100 \pm 0.010$" in tex
    assert r"\caption{MSE}" in tex and r"\label{tab:mse}" in tex
    with pytest.raises(InvalidParameterError, match="no rows for metric 'bias'"):
        summary_table(s, "bias")


def test_latex_escaping_is_one_pass():
    from rfkit.tables import _tex_escape

    assert (
        _tex_escape(r"E[(K_hat - K)^2] {x} 5% \ $") == r"E[(K\_hat - K)\^{}2] \{x\} 5\% \textbackslash{} \$"
    )


NASTY = ["a|b", "x_1_", "_em_", "50%", "R&D", "$x$", "back\\slash", "two\nlines", "*star*", "`code`", "<b>"]


def _summary_of(labels):
    return pd.DataFrame(
        {
            "estimator": labels,
            "n_features": 8,
            "metric": "mse",
            "estimate": [0.1] * len(labels),
            "mcse": [0.01] * len(labels),
        }
    )


def test_markdown_escapes_user_text():
    from rfkit.tables import md_escape

    md = to_markdown(summary_table(_summary_of(NASTY), "mse"))
    lines = md.splitlines()
    assert len(lines) == 2 + len(NASTY)  # a newline in a label does not break the table
    for line in lines:
        # every row has exactly the table's bars: those of labels are escaped
        assert line.replace("\\|", "").count("|") == 3
    assert "a\\|b" in md and "\\_em\\_" in md and "x_1\\_" in md and "\\$x\\$" in md
    assert "back\\\\slash" in md and "two lines" in md and "\\*star\\*" in md and "\\`code\\`" in md
    assert "\\<b\\>" in md
    assert (
        md_escape("plain words, n_features=8 and 0.100 ± 0.010")
        == "plain words, n_features=8 and 0.100 ± 0.010"
    )


def test_latex_escapes_user_text_and_keeps_numbers():
    tex = to_latex(
        summary_table(_summary_of(NASTY), "mse", latex=True), caption="50% & more", label="tab:a b"
    )
    assert r"a|b" in tex and r"x\_1\_" in tex and r"50\%" in tex and r"R\&D" in tex and r"\$x\$" in tex
    assert r"back\textbackslash{}slash" in tex and "two lines" in tex
    assert tex.count(r"$0.100 \pm 0.010$") == len(NASTY)  # the numbers stay in math mode
    assert r"\caption{50\% \& more}" in tex and r"\label{tab:a-b}" in tex
    rows = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(rows) == len(NASTY)  # one line a row: a newline in a label does not break the table
    assert all(r.replace(r"\&", "").count("&") == 1 for r in rows)  # the labels' & are escaped


def test_a_label_in_dollars_is_not_math():
    """Only what format_mcse writes is kept as LaTeX: a label ``$1$`` is text."""
    t = pd.DataFrame({"estimator": ["$\\alpha$", "$1$"], "value": [r"$0.5 \pm 0.1$", "x"]})
    tex = to_latex(t)
    assert r"\$\textbackslash{}alpha\$" in tex and r"$0.5 \pm 0.1$" in tex


def test_one_format_for_non_finite_and_proportions():
    from rfkit.tables import summary_values

    s = pd.DataFrame(
        {
            "metric": ["coverage", "coverage", "mse", "mse"],
            "estimate": [1.0, 0.0, float("inf"), float("nan")],
            "mcse": [0.0, 0.0, float("nan"), float("nan")],
            "ci_low": [0.9124, 0.0, float("nan"), float("nan")],
            "ci_high": [1.0, 0.0876, float("nan"), float("nan")],
            "n_trials": [40, 40, 100, 100],
            "n_nonfinite": [0, 0, 99, 100],
        }
    )
    assert summary_values(s) == [
        "1 [0.912, 1]",
        "0 [0, 0.0876]",
        "inf (99 of 100 non-finite)",
        "n/a (100 of 100 non-finite)",
    ]
    tex = summary_values(s, latex=True)
    assert tex[2] == "inf (99 of 100 non-finite)"


def _two_axis_summary():
    """A study summary over two grid axes, ``dim`` and ``n_features`` (what ``StudyResult.summary()`` gives)."""
    return pd.DataFrame(
        {
            "cell": [0, 1, 2, 3] * 2,
            "estimator": ["a"] * 4 + ["b"] * 4,
            "dim": [4, 4, 8, 8] * 2,
            "n_features": [8, 16, 8, 16] * 2,
            "cost": [8.0, 16.0, 8.0, 16.0] * 2,
            "metric": "mse",
            "estimate": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
            "mcse": 0.01,
            "ci_low": 0.0,
            "ci_high": 1.0,
            "n_trials": 10,
            "n_failed": 0,
            "n_nonfinite": 0,
            "status": "ok",
        }
    )


def test_summary_table_keeps_every_grid_axis():
    """A grid axis left out of ``rows`` is added to them: no cell of the summary is dropped."""
    s = _two_axis_summary()
    t = summary_table(s, "mse", rows=("estimator",))
    assert list(t.columns) == ["estimator", "dim", "n_features=8", "n_features=16"]
    assert t[["estimator", "dim"]].values.tolist() == [["a", 4], ["a", 8], ["b", 4], ["b", 8]]
    cells = t[["n_features=8", "n_features=16"]].to_numpy().ravel().tolist()
    assert cells == [f"{v:.3f} ± 0.010" for v in s["estimate"]]  # all eight, each once
    # the axes named are kept in the order given; an axis that does not vary is not added
    t = summary_table(s[s["dim"] == 8], "mse")
    assert list(t.columns) == ["estimator", "n_features=8", "n_features=16"] and len(t) == 2
    t = summary_table(s, "mse", rows=["dim", "estimator"], columns="n_features")
    assert list(t.columns) == ["dim", "estimator", "n_features=8", "n_features=16"] and len(t) == 4


def test_summary_table_one_value_column_keeps_every_grid_axis():
    s = _two_axis_summary()
    t = summary_table(s, "mse", rows="estimator", columns=None)
    assert list(t.columns) == ["estimator", "dim", "n_features", "value"] and len(t) == 8
    t = summary_table(s, "mse", columns="dim")
    assert list(t.columns) == ["estimator", "n_features", "dim=4", "dim=8"] and len(t) == 4


def test_summary_table_missing_cells_stay_empty_and_nan_axes_stay():
    """A cell missing from the summary is an empty table cell; a NaN axis value keeps its row."""
    s = _two_axis_summary().iloc[1:]
    t = summary_table(s, "mse")
    assert len(t) == 4 and t.loc[0, "n_features=8"] == ""
    s = _two_axis_summary().astype({"dim": float})
    s.loc[s["dim"] == 8, "dim"] = float("nan")
    t = summary_table(s, "mse")
    assert len(t) == 4 and t[["n_features=8", "n_features=16"]].ne("").all().all()


def test_summary_table_empty_metric_rows_are_refused():
    s = _two_axis_summary()
    with pytest.raises(InvalidParameterError, match=r"`metric`.*'bias'.*\['mse'\]"):
        summary_table(s, "bias")
    with pytest.raises(InvalidParameterError, match=r"`summary`.*\['metric', 'estimate', 'mcse'\]"):
        summary_table(pd.DataFrame(), "mse")


def test_markdown_and_latex_of_an_empty_table():
    t = pd.DataFrame({"estimator": [], "value": []})
    assert to_markdown(t) == "| estimator | value |\n|---|---|\n"
    tex = to_latex(t)
    assert "estimator & value \\\\\n\\midrule\n\\bottomrule" in tex
