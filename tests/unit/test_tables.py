import pandas as pd
import pytest

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
    with pytest.raises(KeyError, match="no rows for metric 'bias'"):
        summary_table(s, "bias")


def test_latex_escaping_is_one_pass():
    from rfkit.tables import _tex_escape

    assert (
        _tex_escape(r"E[(K_hat - K)^2] {x} 5% \ $") == r"E[(K\_hat - K)\^{}2] \{x\} 5\% \textbackslash{} \$"
    )
