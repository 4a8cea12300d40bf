"""Non-finite trial values are counted and flagged, never silently dropped from the statistics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rfkit.study as st
from rfkit.study._mcse import format_mcse, mcse_summary


def overflow_design(norm: float, trials: int = 20, **over) -> st.Design:
    kw = dict(
        name="overflow",
        estimators=[{"map": "Trig"}, {"map": "Positive"}],
        grid={"n_features": [8]},
        data={"source": "pairs", "n_pairs": 4, "dim": 3, "norm_x": norm, "norm_y": norm},
        trials=trials,
        seed=1,
    )
    kw.update(over)
    return st.Design(**kw)


def test_mcse_summary_counts_nonfinite_values():
    s = mcse_summary(np.array([1, 2, np.nan, np.inf, 3.0]))
    assert s["n"] == 5 and s["n_nonfinite"] == 2 and s["nonfinite"]
    assert np.isnan(s["estimate"])  # computed on all five values, not on the finite three
    s = mcse_summary(np.array([1.0, 2.0, np.inf]))
    assert s["estimate"] == np.inf and s["n_nonfinite"] == 1 and np.isnan(s["mcse"])
    s = mcse_summary(np.array([1.0, 2.0, 3.0, 4.0]))
    assert s["n_nonfinite"] == 0 and not s["nonfinite"] and s["estimate"] == 2.5


def test_all_trials_overflow_is_flagged_not_ok():
    res = st.run(overflow_design(30))
    s = res.summary()
    trig = s[(s.estimator == "Trig") & (s.metric == "mse")].iloc[0]
    assert trig["n_trials"] == 20 and trig["n_failed"] == 0 and trig["n_nonfinite"] == 20
    assert trig["status"] == "nonfinite"
    assert not np.isfinite(trig["estimate"])


def test_finite_cells_are_ok_and_unchanged():
    res = st.run(overflow_design(0.5))
    s = res.summary()
    assert (s["status"] == "ok").all() and (s["n_nonfinite"] == 0).all()
    raw = res.trials[(res.trials.estimator == "Trig")]["sq_err"].to_numpy()
    row = s[(s.estimator == "Trig") & (s.metric == "mse")].iloc[0]
    assert row["estimate"] == raw.mean() and row["mcse"] == raw.std(ddof=1) / np.sqrt(raw.size)


def test_summary_columns_follow_the_old_ones():
    s = st.run(overflow_design(0.5, trials=4)).summary()
    cols = list(s.columns)
    assert cols[cols.index("n_trials") :] == ["n_trials", "n_failed", "n_nonfinite", "status"]


def test_report_on_all_nonfinite_cell(tmp_path):
    from rfkit.report import write_report

    d = overflow_design(30, trials=6, outputs={"figures": ["mse_vs_features"], "tables": ["ranking"]})
    res = st.run(d, out=tmp_path / "o")
    report = write_report(res, tmp_path / "o").read_text()
    assert "non-finite" in report
    assert "6 of 6 non-finite" in report
    saved = pd.read_csv(tmp_path / "o" / "summary.csv")
    assert "n_nonfinite" in saved and "status" in saved


def attention_trig_design(**over) -> st.Design:
    kw = dict(
        name="att",
        kind="attention",
        estimators=[
            {"label": "trig", "estimator": "RFA", "map": "Trig"},
            {"label": "positive", "estimator": "RFA", "map": "Positive"},
        ],
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
    kw.update(over)
    return st.Design(**kw)


def test_attention_nan_rows_are_counted_not_nanmeaned():
    res = st.run(attention_trig_design())
    t = res.trials
    assert "n_nan_rows" in t
    trig = t[t.estimator == "trig"]
    bad = trig["n_nan_rows"] > 0
    assert bad.any(), "the design should give NaN rows for Trig RFA"
    assert trig.loc[bad, "sq_err"].isna().all()  # the error of the other rows is not the trial's error
    s = res.summary()
    row = s[(s.estimator == "trig") & (s.metric == "mse")].iloc[0]
    assert row["n_nan_rows"] == int(trig["n_nan_rows"].sum())
    assert row["status"] != "ok" and row["n_nonfinite"] == int(bad.sum())


@pytest.mark.parametrize(
    "est, se, expected",
    [
        (4e-6, 1.055e-4, "(0.0 ± 1.1)e-4"),  # the exponent of the larger one, the error
        (4e-6, 1.055e-3, "0.0000 ± 0.0011"),
        (-3e-7, 2.4e-5, "(0.0 ± 2.4)e-5"),  # a rounded zero has no sign
        (float("inf"), float("nan"), "inf"),
        (float("-inf"), float("nan"), "-inf"),
    ],
)
def test_format_exponent_from_the_error(est, se, expected):
    assert format_mcse(est, se) == expected


def test_huge_finite_errors_get_a_finite_mcse_and_a_z(tmp_path):
    """At norm 14 the trig squared errors (about 1e170) are finite but their squares overflow: the
    MCSE, computed on scaled values, is finite, so z tests the closed form."""
    from rfkit.report import write_report

    d = overflow_design(14, estimators=[{"map": "Trig"}], outputs={"figures": ["mse_vs_features"]})
    res = st.run(d, out=tmp_path / "o")
    row = res.summary().query("metric == 'mse'").iloc[0]
    assert row["status"] == "ok" and 0 < row["mcse"] < np.inf
    t = res.compare_theory()
    assert np.isfinite(t["z"]).all()
    text = write_report(res, tmp_path / "o").read_text()
    assert "have no z-score" not in text


def test_nonfinite_measurement_gives_no_z_and_the_report_says_so():
    """A measured MSE that is inf (MCSE NaN) has no z-score, and the theory section says how many."""
    from rfkit.report._markdown import _theory_section

    t = pd.DataFrame(
        {
            "estimator": ["Trig", "Positive"],
            "n_features": [8, 8],
            "metric": "mse",
            "predicted": [1e200, 0.5],
            "measured": [np.inf, 0.49],
            "mcse": [np.nan, 0.01],
            "z": [np.nan, -1.0],
            "n_trials": 20,
        }
    )
    text = "\n".join(_theory_section(t, ["n_features"]))
    assert "1 have no z-score" in text and "1 of the 1 unflagged ones within 5 MCSE" in text


def test_all_nonfinite_cell_with_theory_report(tmp_path):
    from rfkit.report import write_report

    d = overflow_design(19, estimators=[{"map": "Trig"}], outputs={"figures": ["mse_vs_features"]})
    res = st.run(d, out=tmp_path / "o")
    text = write_report(res, tmp_path / "o").read_text()
    assert "## Non-finite and failed trials" in text and "20 of 20 non-finite" in text


def test_console_counts_rows_that_are_not_ok(tmp_path, capsys):
    from rfkit.cli import main

    study = tmp_path / "ov.toml"
    study.write_text(
        'name = "ov"\ntrials = 5\nseed = 1\n[data]\nsource = "pairs"\nn_pairs = 3\ndim = 3\nnorm_x = 30\n'
        'norm_y = 30\n[grid]\nn_features = [8]\n[[estimators]]\nmap = "Trig"\n'
    )
    assert main(["run", str(study), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "summary rows are not ok (nonfinite:" in out and "non-finite trial values" in out


def test_proportions_get_wilson_intervals():
    s = mcse_summary(np.ones(40), proportion=True)
    assert s["ci_low"] == pytest.approx(0.9124, abs=1e-4) and s["ci_high"] == 1.0
    s = mcse_summary(np.zeros(40), proportion=True)
    assert s["ci_low"] == 0.0 and s["ci_high"] == pytest.approx(0.0876, abs=1e-4)
    s = mcse_summary(np.r_[np.ones(30), np.zeros(10)], proportion=True)
    assert s["estimate"] == 0.75 and 0.59 < s["ci_low"] < 0.61 and 0.85 < s["ci_high"] < 0.87
    s = mcse_summary(np.ones(40))  # a mean that is not a proportion keeps its t interval
    assert s["ci_low"] == s["ci_high"] == 1.0


def concentration_design(trials: int) -> st.Design:
    return st.Design(
        name="c",
        kind="concentration",
        estimators=[{"map": "HCEXP", "A": "identity"}],
        grid={"p": [0.9], "n_pairs": [4], "n_features": [16]},
        data={"source": "gaussian", "dim": 3, "mean_q": 0.1, "cov_q": 0.01, "mean_k": 0.0, "cov_k": 0.01},
        trials=trials,
        seed=2,
    )


def test_concentration_coverage_uses_wilson():
    d = concentration_design(12)
    s = st.run(d).summary()
    row = s[s.metric == "coverage"].iloc[0]
    k = round(row["estimate"] * 12)
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(k, 12, alpha=0.05, method="wilson")
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((lo, hi))
    assert 0 <= row["ci_low"] <= row["estimate"] <= row["ci_high"] <= 1


def test_ratio_to_reference_counts_nonfinite_heads(tmp_path):
    from rfkit.report._sections import ratio_section

    s = pd.DataFrame(
        {
            "cell": [0, 0, 1, 1, 2, 2],
            "head": [0, 0, 1, 1, 2, 2],
            "estimator": ["ref", "x"] * 3,
            "metric": "mse",
            "estimate": [1.0, 0.5, 1.0, np.inf, 1.0, 2.0],
            "mcse": 0.1,
        }
    )
    text = "\n".join(ratio_section(s, None, ["head"], "ref", tmp_path))
    assert "| x | 1.25 | 0.5 - 2 | 1 of 2 | 1 |" in text  # the infinite head is counted, not dropped


def test_a_nan_error_is_no_coverage_outcome(monkeypatch):
    """NaN <= bound is False: without care a NaN error would count as a data set the bound misses."""
    import rfkit.study._eval_concentration as ev

    monkeypatch.setattr(
        ev.theory,
        "relative_mse",
        lambda fm, X, Y: np.full(np.broadcast_shapes(np.shape(X)[:-1], np.shape(Y)[:-1]), np.nan),
    )
    d = concentration_design(5)
    s = st.run(d).summary()
    row = s[s.metric == "coverage"].iloc[0]
    assert row["n_nonfinite"] == 5 and row["status"] == "nonfinite" and np.isnan(row["estimate"])


def test_attention_tables_of_finite_outputs_equal_the_nan_aware_reductions(monkeypatch):
    """Cells whose outputs are all finite take the plain branch of the one table function (each
    moment once, no masked copies): the tables are bit for bit those of its masked branch with the
    NaN-aware reductions."""
    import rfkit.study._eval_attention as ea

    d = attention_trig_design(
        estimators=[
            {"label": "positive", "estimator": "RFA", "map": "Positive"},
            {"label": "snis", "estimator": "SNIS", "proposal": "chunk-mean"},
            {"label": "ra", "estimator": "RA"},
        ],
        trials=7,
    )
    finite_calls = []
    real = ea._error_tables

    def spy(outs, *a, **kw):
        finite_calls.append(bool(np.isfinite(outs).all()))
        return real(outs, *a, **kw)

    monkeypatch.setattr(ea, "_error_tables", spy)
    plain = st.run(d)
    assert finite_calls == [True] * 3  # every estimator's outputs were finite: the plain branch
    used = []
    monkeypatch.setattr(ea, "_error_tables", lambda *a: real(*a, masked=True))
    monkeypatch.setattr(
        ea, "_reductions", lambda all_finite: used.append(all_finite) or (np.nanmean, np.nanmax, np.nanvar)
    )
    nan_aware = st.run(d)
    assert used and all(used)  # the masked branch ran, with the NaN-aware reductions
    pd.testing.assert_frame_equal(plain.trials, nan_aware.trials, check_exact=True)
    pd.testing.assert_frame_equal(plain.summary(), nan_aware.summary(), check_exact=True)
    pd.testing.assert_frame_equal(plain.pairs, nan_aware.pairs, check_exact=True)


@pytest.mark.parametrize("trials", [1, 2, 5])
def test_plain_error_tables_equal_the_masked_branch_bit_for_bit(trials):
    """The plain branch's shared moments (one pass for the deviations, one square of the errors)
    give the masked branch's numbers bit for bit, one trial (no variance) included."""
    import rfkit.study._eval_attention as ea

    rng = np.random.default_rng(11)
    outs = rng.standard_normal((trials, 40, 3)) * np.array([1e-3, 1.0, 1e3])
    exact = rng.standard_normal((40, 3))
    status, nonpos = np.full(trials, "ok"), np.zeros(trials)
    a_trials, a_queries = ea._error_tables(outs.copy(), status, nonpos, exact)
    b_trials, b_queries = ea._error_tables(outs.copy(), status, nonpos, exact, masked=True)
    for a, b in ((a_trials, b_trials), (a_queries, b_queries)):
        assert list(a) == list(b)
        for key in a:
            x, y = np.asarray(a[key]), np.asarray(b[key])
            assert x.dtype == y.dtype, key
            if x.dtype.kind == "f":
                assert np.array_equal(x.view(np.uint64), y.view(np.uint64)), key
            else:
                assert np.array_equal(x, y), key


def test_a_repeated_estimators_tables_are_its_first_ones_and_a_near_repeat_is_not():
    """Outputs equal bit for bit to an earlier estimator's reuse its error tables; outputs that agree
    on the fingerprint (statuses, first values) but differ later are computed on their own."""
    import rfkit.study._eval_attention as ea

    rng = np.random.default_rng(5)
    outs = rng.standard_normal((3, 4, 50, 2))
    outs[1] = outs[0]
    outs[2] = outs[0]
    outs[2, -1, -1, -1] += 1e-12  # the same fingerprint, other numbers
    status = np.full((3, 4), "ok")
    nonpos = np.zeros((3, 4))
    seen: dict = {}
    assert ea._repeat_of(0, outs, status, nonpos, seen) is None
    assert ea._repeat_of(1, outs, status, nonpos, seen) == 0
    assert ea._repeat_of(2, outs, status, nonpos, seen) is None
    other = status.copy()
    other[1, 0] = "error:ValueError"  # the same outputs, another status
    seen = {}
    assert ea._repeat_of(0, outs, other, nonpos, seen) is None
    assert ea._repeat_of(1, outs, other, nonpos, seen) is None
