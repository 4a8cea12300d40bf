"""Bad-input table: the statistics of a study (MCSEs, intervals, formatting, non-finite trials, tables).

``CASES`` must raise a named rfkit error naming the argument and the value; ``RESULT_CASES`` are
unlucky but legal inputs whose result must be correct or flagged: trial values that overflow,
cells where every trial is non-finite, proportions at 0 and n, tiny and huge errors to format,
user text in tables.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from bad_input_kit import Bad, Good, _design

import rfkit.study as st
from rfkit.exceptions import InvalidParameterError
from rfkit.study._mcse import format_mcse, mcse_summary
from rfkit.study._tables import ranking_table, summarize
from rfkit.tables import summary_table, summary_values, to_latex, to_markdown

#: a study summary of one metric over two grid axes (``dim`` and ``n_features``)
_SUMMARY = pd.DataFrame(
    {
        "cell": [0, 1, 2, 3] * 2,
        "estimator": ["a"] * 4 + ["b"] * 4,
        "dim": [4, 4, 8, 8] * 2,
        "n_features": [8, 16, 8, 16] * 2,
        "metric": "mse",
        "estimate": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
        "mcse": 0.01,
        "n_trials": 10,
        "n_nonfinite": 0,
        "status": "ok",
    }
)


def _run_with_metric(compute: Any) -> Any:
    """Run the small design with a metric of one's own whose ``compute`` is given (then unregister it)."""
    from rfkit.study import _records

    st.register_metric(st.MetricRecord("own", ("kernel",), "own", compute=compute))
    try:
        return st.run(_design(metrics=["own"]))
    finally:
        _records._REGISTRIES["metric"].pop("own", None)


# ----------------------------------------------------------------------------- named errors
CASES = [
    Bad(
        "mcse_summary.confidence-above-1",
        lambda t: mcse_summary([1.0, 2.0], 1.5),
        InvalidParameterError,
        "confidence",
        "1.5",
    ),
    Bad(
        "mcse_summary.confidence-0",
        lambda t: mcse_summary([1.0, 2.0], 0),
        InvalidParameterError,
        "confidence",
        "0",
    ),
    Bad(
        "mcse_summary.confidence-nan",
        lambda t: mcse_summary([1.0, 2.0], math.nan),
        InvalidParameterError,
        "confidence",
        "nan",
    ),
    Bad(
        "mcse_summary.confidence-str",
        lambda t: mcse_summary([1.0], "0.95"),
        InvalidParameterError,
        "confidence",
        "'0.95'",
    ),
    Bad(
        "mcse_summary.complex",
        lambda t: mcse_summary(np.array([1 + 1j, 2])),
        InvalidParameterError,
        "values",
        "complex128",
    ),
    Bad("mcse_summary.strings", lambda t: mcse_summary(["a", "b"]), InvalidParameterError, "values", "<U1"),
    Bad(
        "mcse_summary.2d", lambda t: mcse_summary(np.ones((3, 2))), InvalidParameterError, "values", "(3, 2)"
    ),
    Bad("format_mcse.negative-mcse", lambda t: format_mcse(1.0, -0.1), InvalidParameterError, "mcse", "-0.1"),
    Bad(
        "format_mcse.str-estimate",
        lambda t: format_mcse("1.0", 0.1),
        InvalidParameterError,
        "estimate",
        "'1.0'",
    ),
    Bad("format_mcse.complex-mcse", lambda t: format_mcse(1.0, 0.1j), InvalidParameterError, "mcse", "0.1j"),
    Bad(
        "summary_table.empty-frame",
        lambda t: summary_table(pd.DataFrame(), "mse"),
        InvalidParameterError,
        "`summary`",
        "['metric', 'estimate', 'mcse']",
    ),
    Bad(
        "summary_table.no-mcse-column",
        lambda t: summary_table(_SUMMARY.drop(columns="mcse"), "mse"),
        InvalidParameterError,
        "`summary`",
        "['mcse']",
    ),
    Bad(
        "summary_table.not-a-frame",
        lambda t: summary_table([{"metric": "mse"}], "mse"),
        InvalidParameterError,
        "`summary`",
        "list",
    ),
    Bad(
        "summary_table.unknown-metric",
        lambda t: summary_table(_SUMMARY, "bias"),
        InvalidParameterError,
        "`metric`",
        "'bias'",
    ),
    Bad(
        "summary_table.unknown-row-column",
        lambda t: summary_table(_SUMMARY, "mse", rows=("estimator", "seed")),
        InvalidParameterError,
        "`rows`",
        "'seed'",
    ),
    Bad(
        "summary_table.unknown-spread-column",
        lambda t: summary_table(_SUMMARY, "mse", columns="features"),
        InvalidParameterError,
        "`columns`",
        "'features'",
    ),
    Bad(
        "summary_table.repeated-rows",
        lambda t: summary_table(pd.concat([_SUMMARY, _SUMMARY]), "mse"),
        InvalidParameterError,
        "`summary`",
        "estimator='a'",
    ),
    Bad(
        "summary_values.no-estimate-column",
        lambda t: summary_values(pd.DataFrame({"metric": ["mse"], "mcse": [0.1]})),
        InvalidParameterError,
        "`summary`",
        "['estimate']",
    ),
    Bad("to_markdown.not-a-frame", lambda t: to_markdown([1, 2]), InvalidParameterError, "`table`", "list"),
    Bad(
        "to_markdown.no-columns",
        lambda t: to_markdown(pd.DataFrame()),
        InvalidParameterError,
        "`table`",
        "0 columns",
    ),
    Bad(
        "to_latex.no-columns",
        lambda t: to_latex(pd.DataFrame()),
        InvalidParameterError,
        "`table`",
        "0 columns",
    ),
    Bad(
        "StudyResult.summary.confidence-1",
        lambda t: st.run(_design()).summary(confidence=1.0),
        InvalidParameterError,
        "confidence",
        "1.0",
    ),
    Bad(
        "MetricRecord.proportion-str",
        lambda t: st.MetricRecord("m", ("kernel",), "sq_err", proportion="yes"),  # type: ignore[arg-type]
        InvalidParameterError,
        "`proportion`",
        "'yes'",
    ),
    Bad(
        "MetricRecord.proportion-int",
        lambda t: st.MetricRecord("m", ("kernel",), "sq_err", proportion=1),  # type: ignore[arg-type]
        InvalidParameterError,
        "`proportion`",
        "1",
    ),
    Bad(
        "MetricRecord.ddof-negative",
        lambda t: st.MetricRecord("m", ("kernel",), "sq_err", ddof=-1),
        InvalidParameterError,
        "`ddof`",
        "-1",
    ),
    Bad(
        "MetricRecord.ddof-float",
        lambda t: st.MetricRecord("m", ("kernel",), "sq_err", ddof=1.5),  # type: ignore[arg-type]
        InvalidParameterError,
        "`ddof`",
        "1.5",
    ),
    Bad(
        "MetricRecord.ddof-bool",
        lambda t: st.MetricRecord("m", ("kernel",), "sq_err", ddof=True),
        InvalidParameterError,
        "`ddof`",
        "True",
    ),
    Bad(
        "MetricRecord.compute-not-callable",
        lambda t: st.MetricRecord("m", ("kernel",), "m", compute="sq_err"),  # type: ignore[arg-type]
        InvalidParameterError,
        "`compute`",
        "'sq_err'",
    ),
    Bad(
        "MetricRecord.compute-wrong-shape",
        lambda t: _run_with_metric(lambda *, ratio, truth: ratio),
        InvalidParameterError,
        "`compute`",
        "(4, 3)",
    ),
]


# ----------------------------------------------------------------------------- correct or flagged
def _quiet(fn: Any) -> Any:
    """Run ``fn`` with every warning an error: a flagged result must not also warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


def _summary_row(values: list[float]) -> dict[str, Any]:
    return _quiet(lambda: mcse_summary(np.array(values, dtype=float)))


def _check_mixed(t: Path) -> None:
    s = _summary_row([1, 2, math.nan, math.inf, 3])
    assert math.isnan(s["estimate"]) and s["n"] == 5 and s["n_nonfinite"] == 2 and s["nonfinite"]


def _check_one_inf(t: Path) -> None:
    s = _summary_row([1, 2, math.inf])
    assert s["estimate"] == math.inf and math.isnan(s["mcse"]) and s["n_nonfinite"] == 1


def _check_all_nan(t: Path) -> None:
    s = _summary_row([math.nan] * 4)
    assert math.isnan(s["estimate"]) and s["n"] == 4 and s["n_nonfinite"] == 4


def _check_both_infs(t: Path) -> None:
    s = _summary_row([math.inf, -math.inf, 1.0])
    assert math.isnan(s["estimate"]) and s["n_nonfinite"] == 2


def _check_empty(t: Path) -> None:
    s = _summary_row([])
    assert s["n"] == 0 and math.isnan(s["estimate"]) and not s["nonfinite"]


def _check_single(t: Path) -> None:
    s = _summary_row([2.5])
    assert s["estimate"] == 2.5 and math.isnan(s["mcse"]) and s["n"] == 1


def _scaled_reference(values: list[float], scale: float) -> tuple[float, float]:
    """Mean and MCSE of ``values`` computed on ``values / scale`` (ordinary floats), then rescaled."""
    w = np.array(values) / scale
    return float(w.mean()) * scale, float(w.std(ddof=1) / np.sqrt(w.size)) * scale


def _check_squares_overflow(t: Path) -> None:
    """Finite values whose squares overflow: the MCSE is computed on scaled values, finite and right."""
    s = _summary_row([1e200, -1e200, 1e200])
    mean, se = _scaled_reference([1e200, -1e200, 1e200], 1e200)
    assert s["n_nonfinite"] == 0 and not s["overflow"]
    assert math.isclose(s["estimate"], mean, rel_tol=1e-14) and math.isclose(s["mcse"], se, rel_tol=1e-14)
    assert np.isfinite([s["ci_low"], s["ci_high"]]).all() and s["ci_low"] < mean < s["ci_high"]
    assert format_mcse(s["estimate"], s["mcse"]) == "(3.3 ± 6.7)e199"


def _check_sum_overflows(t: Path) -> None:
    """Values near the largest float: their sum overflows, their mean does not."""
    s = _summary_row([1e308, 1e308])
    assert s["estimate"] == 1e308 and s["mcse"] == 0.0 and s["n_nonfinite"] == 0 and not s["overflow"]
    assert s["ci_low"] == s["ci_high"] == 1e308
    v = [1.7e308, 1.1e308, 1.5e308, 0.9e308]
    s = _summary_row(v)
    mean, se = _scaled_reference(v, 1e308)
    assert math.isclose(s["estimate"], mean, rel_tol=1e-14) and math.isclose(s["mcse"], se, rel_tol=1e-14)
    # the upper bound, 1.3e308 + 3.18 * 1.8e307, is beyond the largest float: infinite and flagged
    assert s["overflow"] and s["ci_high"] == math.inf and 7e307 < s["ci_low"] < mean


def _check_interval_overflows(t: Path) -> None:
    """A bound beyond the largest float is infinite and flagged; the estimate and MCSE stay finite."""
    s = _summary_row([1.7e308, -1.7e308])
    assert s["estimate"] == 0.0 and math.isclose(s["mcse"], 1.7e308, rel_tol=1e-14)
    assert s["ci_low"] == -math.inf and s["ci_high"] == math.inf
    assert s["overflow"] and s["n_nonfinite"] == 0 and not s["nonfinite"]


def _check_subnormal_values(t: Path) -> None:
    """Values so small that their squares underflow: the MCSE is not rounded to zero."""
    v = [1e-310, 2e-310, 3e-310, 4e-310]
    s = _summary_row(v)
    mean, se = _scaled_reference(v, 1e-310)
    assert math.isclose(s["estimate"], mean, rel_tol=1e-9) and math.isclose(s["mcse"], se, rel_tol=1e-9)
    assert not s["overflow"]


def _wilson(values: np.ndarray) -> tuple[float, float]:
    s = _quiet(lambda: mcse_summary(values, proportion=True))
    return s["ci_low"], s["ci_high"]


def _check_all_covered(t: Path) -> None:
    lo, hi = _wilson(np.ones(40))
    assert abs(lo - 0.9124) < 1e-4 and hi == 1.0  # a t interval says [1, 1]


def _check_none_covered(t: Path) -> None:
    lo, hi = _wilson(np.zeros(40))
    assert lo == 0.0 and abs(hi - 0.0876) < 1e-4  # a t interval says [0, 0]


def _check_one_trial_proportion(t: Path) -> None:
    lo, hi = _wilson(np.ones(1))
    assert 0.2 < lo < 0.21 and hi == 1.0


def _check_not_a_proportion(t: Path) -> None:
    s = _quiet(lambda: mcse_summary(np.array([0.0, 0.5, 1.0, 1.0]), proportion=True))
    assert s["ci_low"] < 0.625 < s["ci_high"] and s["ci_high"] > 1  # not 0/1: a t interval, not Wilson's


def _fmt(expected: str, *args: Any, **kw: Any) -> Good:
    def check(t: Path) -> None:
        got = _quiet(lambda: format_mcse(*args, **kw))
        assert got == expected, got

    return Good(f"format_mcse.{expected}", check)


def _check_all_nonfinite_cell(t: Path) -> None:
    d = _design(
        estimators=[{"map": "Trig"}],
        data={"source": "pairs", "n_pairs": 3, "dim": 3, "norm_x": 30, "norm_y": 30},
        trials=5,
    )
    s = _quiet(lambda: st.run(d).summary())
    row = s[s.metric == "mse"].iloc[0]
    assert row["n_trials"] == 5 and row["n_nonfinite"] == 5 and row["n_failed"] == 0
    assert row["status"] == "nonfinite" and not np.isfinite(row["estimate"])


def _check_huge_errors_finite_mcse(t: Path) -> None:
    """Trig at norm 14: squared errors near 1e170, whose squares overflow; the MCSE is finite and right."""
    d = _design(
        estimators=[{"map": "Trig"}],
        data={"source": "pairs", "n_pairs": 4, "dim": 3, "norm_x": 14, "norm_y": 14},
        trials=20,
    )
    res = _quiet(lambda: st.run(d))
    row = res.summary().query("metric == 'mse'").iloc[0]
    raw = res.trials["sq_err"].to_numpy()
    big = float(raw.max())
    mean, se = _scaled_reference(list(raw), big)
    assert row["status"] == "ok" and 1e160 < big < 1e300
    assert math.isclose(row["estimate"], mean, rel_tol=1e-13) and math.isclose(row["mcse"], se, rel_tol=1e-13)
    assert np.isfinite(res.compare_theory()["z"]).all()  # a z-score against the closed form, not NaN


def _check_report_all_nonfinite(t: Path) -> None:
    from rfkit.report import write_report

    d = _design(
        estimators=[{"map": "Trig"}, {"map": "Positive"}],
        grid={"n_features": [4, 8]},
        data={"source": "pairs", "n_pairs": 3, "dim": 3, "norm_x": 30, "norm_y": 30},
        trials=4,
        outputs={"figures": ["mse_vs_features", "kernel_scatter"], "tables": ["ranking"]},
    )
    res = st.run(d, out=t / "o")
    text = write_report(res, t / "o").read_text()
    assert "## Non-finite and failed trials" in text and "4 of 4 non-finite" in text


def _check_attention_nan_rows(t: Path) -> None:
    d = st.Design(
        name="att",
        kind="attention",
        estimators=[{"label": "trig", "estimator": "RFA", "map": "Trig"}],
        grid={"samples": [4]},
        data={
            "source": "sequence",
            "n_tokens": 32,
            "dim": 4,
            "d_v": 2,
            "structure": "local",
            "n_clusters": 4,
        },
        trials=6,
        seed=3,
    )
    res = st.run(d)
    bad = res.trials["n_nan_rows"] > 0
    assert bad.any() and res.trials.loc[bad, "sq_err"].isna().all()
    row = res.summary().query("metric == 'mse'").iloc[0]
    assert row["n_nan_rows"] == res.trials["n_nan_rows"].sum() and "nan_rows" in row["status"]


def _trials_frame(values: list[float], statuses: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {"cell": 0, "estimator": "e", "status": statuses, "sq_err": values, "trial": range(len(values))}
    )


def _check_failed_and_nonfinite(t: Path) -> None:
    tr = _trials_frame([1.0, math.inf, math.nan, 2.0], ["ok", "ok", "error:ValueError", "ok"])
    row = _quiet(lambda: summarize(tr, ["cell", "estimator"], ["mse"])).iloc[0]
    assert row["n_trials"] == 3 and row["n_failed"] == 1 and row["n_nonfinite"] == 1
    assert row["status"] == "failed,nonfinite" and row["estimate"] == math.inf


def _check_all_failed(t: Path) -> None:
    tr = _trials_frame([math.nan] * 3, ["error:X"] * 3)
    row = _quiet(lambda: summarize(tr, ["cell", "estimator"], ["mse"])).iloc[0]
    assert row["n_trials"] == 0 and row["n_failed"] == 3 and row["status"] == "failed"


def _check_ranking_all_nan(t: Path) -> None:
    s = pd.DataFrame(
        {
            "estimator": ["a", "b", "a", "b"],
            "n_features": [4, 4, 8, 8],
            "metric": "rel_mse",
            "estimate": [math.nan, 0.5, math.nan, 0.25],
            "mcse": [math.nan, 0.05, math.nan, 0.02],
            "n_trials": 10,
            "n_nonfinite": [10, 0, 10, 0],
        }
    )
    (_, table) = _quiet(lambda: ranking_table(s, ["n_features"]))[0]
    assert list(table["estimator"]) == ["b", "a"]  # kept, ranked last
    assert table.iloc[1]["n_features=4"] == "n/a (10 of 10 non-finite)"


def _check_markdown_bar(t: Path) -> None:
    s = pd.DataFrame(
        {"estimator": ["a|b", "c\nd"], "n_features": 8, "metric": "mse", "estimate": 1.0, "mcse": 0.1}
    )
    lines = to_markdown(summary_table(s, "mse")).splitlines()
    assert len(lines) == 4 and all(ln.replace("\\|", "").count("|") == 3 for ln in lines)


def _check_latex_dollar_label(t: Path) -> None:
    s = pd.DataFrame(
        {"estimator": ["$1$", "50%&_"], "n_features": 8, "metric": "mse", "estimate": 1.0, "mcse": 0.1}
    )
    tex = to_latex(summary_table(s, "mse", latex=True))
    assert r"\$1\$" in tex and r"50\%\&\_" in tex and tex.count(r"$1.00 \pm 0.10$") == 2


def _check_values_proportion(t: Path) -> None:
    s = pd.DataFrame(
        {
            "metric": ["coverage", "coverage"],
            "estimate": [1.0, 0.0],
            "mcse": [0.0, 0.0],
            "ci_low": [0.9124, 0.0],
            "ci_high": [1.0, 0.0876],
            "n_trials": 40,
            "n_nonfinite": 0,
        }
    )
    assert summary_values(s) == ["1 [0.912, 1]", "0 [0, 0.0876]"]


def _check_finite_unchanged(t: Path) -> None:
    res = st.run(_design(trials=30))
    raw = res.trials["sq_err"].to_numpy()
    row = res.summary().query("metric == 'mse'").iloc[0]
    assert row["estimate"] == raw.mean() and row["mcse"] == raw.std(ddof=1) / np.sqrt(raw.size)
    assert row["status"] == "ok" and row["n_nonfinite"] == 0


RESULT_CASES = [
    Good("mcse_summary.nan-and-inf", _check_mixed),
    Good("mcse_summary.one-inf", _check_one_inf),
    Good("mcse_summary.all-nan", _check_all_nan),
    Good("mcse_summary.plus-and-minus-inf", _check_both_infs),
    Good("mcse_summary.empty", _check_empty),
    Good("mcse_summary.one-trial", _check_single),
    Good("mcse_summary.squares-overflow", _check_squares_overflow),
    Good("mcse_summary.sum-overflows", _check_sum_overflows),
    Good("mcse_summary.interval-overflows", _check_interval_overflows),
    Good("mcse_summary.subnormal-values", _check_subnormal_values),
    Good("mcse_summary.wilson-40-of-40", _check_all_covered),
    Good("mcse_summary.wilson-0-of-40", _check_none_covered),
    Good("mcse_summary.wilson-1-of-1", _check_one_trial_proportion),
    Good("mcse_summary.proportion-not-0-1", _check_not_a_proportion),
    _fmt("(0.0 ± 1.1)e-4", 4e-6, 1.055e-4),
    _fmt("0.0000 ± 0.0011", 4e-6, 1.055e-3),
    _fmt("(0.0 ± 2.4)e-5", -3e-7, 2.4e-5),
    _fmt("(1.000 ± 0.010)e300", 1e300, 1e298),
    _fmt("(5.0 ± 1.0)e-320", 5e-320, 1e-320),
    _fmt("1", 1.0, 1e-300),
    _fmt("inf", math.inf, math.nan),
    _fmt("-inf (3 of 7 non-finite)", -math.inf, math.nan, n_nonfinite=3, n=7),
    _fmt("n/a", math.nan, 0.1),
    _fmt("2 ± inf", 2.0, math.inf),
    _fmt("$(0.0 \\pm 1.1) \\times 10^{-4}$", 4e-6, 1.055e-4, latex=True),
    # a rounded zero has no sign, whatever the path that writes it
    _fmt("0", -0.0, 0.0),
    _fmt("0 ± inf", -0.0, math.inf),
    _fmt("0.00 ± 0.10", -1e-9, 0.1),
    # subnormal numbers: the mantissa is normalised and the power of ten is exact
    _fmt("(1.00 ± 0.10)e-320", 1e-320, 1e-321),
    # the smallest subnormal, written 5e-324, is 4.94e-324: rounded from its exact value like any float
    _fmt("(0.0 ± 4.9)e-324", 0.0, 5e-324),
    _fmt("(4.9 ± 4.9)e-324", 5e-324, 5e-324),
    _fmt("(-1.000 ± 0.030)e-310", -1e-310, 3e-312),
    _fmt("(0.0 ± 2.5)e-323", 0.0, 2.5e-323),
    _fmt("$(1.00 \\pm 0.10) \\times 10^{-320}$", 1e-320, 1e-321, latex=True),
    # rounding that carries into the next power of ten: still one digit before the point, MCSE to 2 digits
    _fmt("(1.000 ± 0.010)e-4", 9.9996e-5, 1e-6),
    _fmt("(1.00000000 ± 0.00000050)e4", 9999.99996, 0.005),
    _fmt("0.50 ± 0.10", 0.5, 0.0998),
    _fmt("(1.7977 ± 0.0018)e308", 1.7976931348623157e308, 1.8e305),
    Good("study.all-trials-overflow", _check_all_nonfinite_cell),
    Good("study.huge-errors-finite-mcse", _check_huge_errors_finite_mcse),
    Good("study.report-all-nonfinite", _check_report_all_nonfinite),
    Good("study.attention-nan-rows", _check_attention_nan_rows),
    Good("study.finite-results-unchanged", _check_finite_unchanged),
    Good("summarize.failed-and-nonfinite", _check_failed_and_nonfinite),
    Good("summarize.all-failed", _check_all_failed),
    Good("ranking_table.all-nan-estimator", _check_ranking_all_nan),
    Good("to_markdown.bar-and-newline-label", _check_markdown_bar),
    Good("to_latex.dollar-percent-label", _check_latex_dollar_label),
    Good("summary_values.proportion-0-and-n", _check_values_proportion),
]
RESULT_CASES.append(_fmt("$2 \\pm \\infty$", 2.0, math.inf, latex=True))


def _check_latex_inf_mcse_kept(t: Path) -> None:
    t2 = pd.DataFrame({"estimator": ["a"], "value": [format_mcse(3.3e199, math.inf, latex=True)]})
    assert r"$3.3e+199 \pm \infty$" in to_latex(t2)


RESULT_CASES.append(Good("to_latex.infinite-mcse-in-math", _check_latex_inf_mcse_kept))


def _check_compare_nonfinite(t: Path) -> None:
    d = _design(
        estimators=[{"map": "Trig"}],
        data={"source": "pairs", "n_pairs": 3, "dim": 3, "norm_x": 30, "norm_y": 30},
        trials=5,
    )
    res = st.run(d)
    m = _quiet(lambda: st.compare(res, res))
    row = m[m.metric == "mse"].iloc[0]
    assert math.isnan(row["mcse"]) and math.isnan(row["z"]) and not row["flagged"]


RESULT_CASES.append(Good("compare.nonfinite-no-mcse", _check_compare_nonfinite))
