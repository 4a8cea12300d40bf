"""Metric records carry their behaviour: the per-trial column (``compute``), proportion and ddof.

The summary asks a metric's record whether it is a proportion (a Wilson interval) and which
``ddof`` corrects it (the estimate, MCSE and interval times n / (n - ddof)); it never matches a
metric's name. rfkit's own metrics register the same way, and a metric of your own is one file
plus its registration.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

import rfkit.study as st
from rfkit.exceptions import InvalidParameterError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_registries():
    """Records registered or replaced by a test are gone afterwards."""
    from rfkit.study import _records

    for kind in _records._REGISTRIES:  # records registered on first use (rfkit.integrations) are kept
        st.records(kind)
    saved = {k: dict(v) for k, v in _records._REGISTRIES.items()}
    yield
    for k, v in saved.items():
        _records._REGISTRIES[k].clear()
        _records._REGISTRIES[k].update(v)


def _kernel_design(metrics: list[str], **over):
    kw = dict(
        name="metrics",
        estimators=[{"label": "positive", "map": "Positive"}, {"label": "trig", "map": "Trig"}],
        grid={"n_features": [4, 16]},
        data={"source": "gaussian", "n_pairs": 6, "dim": 3, "scale_q": 0.4, "scale_k": 0.4},
        trials=40,
        chunk_trials=40,
        seed=2026112801,
        metrics=metrics,
    )
    kw.update(over)
    return st.Design(**kw)


# ----------------------------------------------------------------------------- the record's fields
def test_proportion_and_ddof_are_declared_fields():
    rec = st.MetricRecord("m", ("kernel",), "sq_err", proportion=True, ddof=1)
    assert rec.proportion is True and rec.ddof == 1
    plain = st.MetricRecord("m", ("kernel",), "sq_err")
    assert plain.proportion is False and plain.ddof == 0 and plain.compute is None


def test_per_trial_is_a_deprecated_alias_of_compute():
    def f(*, ratio, truth):
        return ratio.mean(axis=1)

    with pytest.warns(DeprecationWarning, match="`compute`"):
        rec = st.MetricRecord("m", ("kernel",), "m", per_trial=f)
    assert rec.compute is f
    with pytest.raises(InvalidParameterError, match="`per_trial`.*`compute`"):
        st.MetricRecord("m", ("kernel",), "m", per_trial=f, compute=lambda **k: 0)


def test_builtin_metrics_declare_what_the_summary_needs():
    """rfkit's metrics say it in their records: the variance's ddof, the proportions, how to compute."""
    recs = {r.name: r for r in st.records("metric")}
    assert recs["variance"].ddof == 1
    assert {n for n, r in recs.items() if r.ddof} == {"variance"}
    assert {n for n, r in recs.items() if r.proportion} == {"coverage", "realized_exceeds"}
    for name, r in recs.items():  # every kernel, attention and concentration metric computes its column
        if set(r.kinds) & {"kernel", "attention", "concentration"}:
            assert callable(r.compute), name


# ----------------------------------------------------------------------------- the summary asks the record
def test_the_variance_correction_comes_from_the_record_not_the_name(restore_registries):
    design = _kernel_design(["variance"])
    before = st.run(design, rng=0).summary()
    st.register_metric(
        st.MetricRecord(
            "variance", ("kernel", "attention"), "sq_dev", compute=st.metric_record("variance").compute
        ),
        replace=True,
    )
    after = st.run(design, rng=0).summary()  # same trials, ddof 0: no correction
    n = after["n_trials"].to_numpy()
    for col in ("estimate", "mcse", "ci_low", "ci_high"):
        np.testing.assert_allclose(before[col], after[col] * n / (n - 1), rtol=1e-14)
    assert (before["estimate"] > after["estimate"]).all()


def test_a_metric_on_a_builtin_column_with_ddof_is_corrected(restore_registries):
    st.register_metric(st.MetricRecord("sq_dev_raw", ("kernel",), "sq_dev"))
    st.register_metric(st.MetricRecord("sq_dev_ddof2", ("kernel",), "sq_dev", ddof=2))
    s = st.run(_kernel_design(["sq_dev_raw", "sq_dev_ddof2"]), rng=1).summary()
    raw, two = s[s.metric == "sq_dev_raw"], s[s.metric == "sq_dev_ddof2"]
    n = raw["n_trials"].to_numpy()
    np.testing.assert_allclose(two["estimate"], raw["estimate"].to_numpy() * n / (n - 2), rtol=1e-14)


def test_proportion_comes_from_the_record(restore_registries):
    """A 0/1 column gets Wilson's interval when its record says proportion, a t interval otherwise."""
    st.register_metric(st.MetricRecord("covered_t", ("concentration",), "covered"))
    design = st.Design(
        name="conc",
        kind="concentration",
        estimators=[{"map": "HCEXP"}],
        grid={"p": [0.5, 0.9], "n_features": [16]},
        data={
            "source": "gaussian",
            "dim": 3,
            "n_pairs": 4,
            "mean_q": 0.1,
            "cov_q": 0.01,
            "mean_k": -0.1,
            "cov_k": 0.02,
        },
        trials=30,
        seed=2026112802,
        metrics=["coverage", "covered_t"],
    )
    res = st.run(design, rng=0)
    s = res.summary()
    wil, t = s[s.metric == "coverage"], s[s.metric == "covered_t"]
    k = res.trials.groupby("cell", sort=False)["covered"].sum().to_numpy().astype(int)
    lo, hi = proportion_confint(k, wil["n_trials"].to_numpy(), alpha=0.05, method="wilson")
    np.testing.assert_allclose(wil["ci_low"], lo, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(wil["ci_high"], hi, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(t["estimate"].to_numpy(), wil["estimate"].to_numpy())
    assert not np.allclose(t["ci_low"].to_numpy(), lo)  # the same column as a mean: a t interval


# ----------------------------------------------------------------------------- one file plus its registration
PROPORTION_MODULE = '''
"""A metric of your own: the share of trials whose every pair is within 50 % of exp(x.y)."""
import numpy as np

import rfkit.study as st


def all_within_half(*, ratio, truth):
    """Per trial: 1 if every pair's estimate is within 50 % of the truth, else 0."""
    return (np.abs(ratio - 1.0) <= 0.5).all(axis=1).astype(float)


st.register_metric(
    st.MetricRecord(
        "all_within_half",
        kinds=("kernel",),
        column="all_within_half",
        compute=all_within_half,
        proportion=True,
        better="higher",
        description="share of trials where every pair's estimate is within 50 % of the truth",
    )
)
'''

DDOF_MODULE = '''
"""A metric of your own: the variance over trials of each pair's estimate, averaged over pairs."""
import rfkit.study as st


def spread(*, ratio, truth):
    """Per trial: the mean over pairs of the squared deviation from the mean over trials."""
    est = ratio * truth
    return ((est - est.mean(axis=0)) ** 2).mean(axis=1)


st.register_metric(
    st.MetricRecord(
        "spread", kinds=("kernel",), column="spread", compute=spread, ddof=1, description="mean over pairs of Var[K_hat]"
    )
)
'''


@pytest.fixture
def user_modules(tmp_path, monkeypatch, restore_registries):
    """The two example modules importable here and in worker processes."""
    for name, code in {"my_proportion": PROPORTION_MODULE, "my_spread": DDOF_MODULE}.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    yield tmp_path
    for name in ("my_proportion", "my_spread"):
        sys.modules.pop(name, None)


def test_a_proportion_of_your_own_gets_wilson_intervals(user_modules):
    design = _kernel_design(
        ["rel_mse", "all_within_half"], imports=["my_proportion"], trials=60, chunk_trials=25
    )
    res = st.run(design, rng=3)
    t = res.trials
    assert set(np.unique(t["all_within_half"])) <= {0.0, 1.0}
    rel = np.sqrt(t["rel_sq_err"])  # the column agrees with rfkit's own: all within 50 % => rms <= 50 %
    assert (rel[t["all_within_half"] == 1.0] <= 0.5).all()
    s = res.summary()
    mine = s[s.metric == "all_within_half"].reset_index(drop=True)
    assert len(mine) == 4 and (mine["status"] == "ok").all()
    k = t.groupby(["cell", "estimator"], sort=False)["all_within_half"].sum().to_numpy()
    n = mine["n_trials"].to_numpy()
    assert (n == 60).all()
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    np.testing.assert_allclose(mine["estimate"], k / n, rtol=1e-15)
    np.testing.assert_allclose(mine["ci_low"], lo, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(mine["ci_high"], hi, rtol=1e-12, atol=1e-15)
    assert 0 < k.min() or (mine["ci_low"] == 0).any()  # a Wilson interval stays in [0, 1]
    assert ((mine["ci_low"] >= 0) & (mine["ci_high"] <= 1)).all()


def test_a_metric_of_your_own_with_ddof_is_the_unbiased_variance(user_modules):
    design = _kernel_design(["spread"], imports=["my_spread"], trials=50, chunk_trials=20)
    serial = st.run(design, rng=5)
    procs = st.run(design, rng=5, executor="processes", workers=2)  # workers import the module too
    s = serial.summary()
    import pandas as pd

    pd.testing.assert_frame_equal(s, procs.summary(), check_exact=True)
    # with ddof=1 the summary is the mean over pairs of each pair's unbiased variance over trials,
    # computed independently in the pairs table (numpy's var with ddof=1)
    var = serial.pairs.groupby(["cell", "estimator"], sort=False)["var_est"].mean().to_numpy()
    np.testing.assert_allclose(s["estimate"], var, rtol=1e-12)
    builtin = st.run(_kernel_design(["variance"], trials=50, chunk_trials=20), rng=5).summary()
    np.testing.assert_allclose(s["estimate"], builtin["estimate"], rtol=1e-12)


def test_paired_comparison_scales_by_the_records_ddof(restore_registries):
    """compare(paired): the MCSE of the difference carries the same n / (n - ddof) as the summary."""
    design = _kernel_design(["variance"])
    a, b = st.run(design, rng=0), st.run(design, rng=0)  # paired: the same trials, then b's values moved
    b.trials["sq_dev"] *= 1.0 + 0.1 * np.random.default_rng(7).standard_normal(len(b.trials))
    with_ddof = st.compare(a, b, strict=False, paired=True)
    st.register_metric(
        st.MetricRecord(
            "variance", ("kernel", "attention"), "sq_dev", compute=st.metric_record("variance").compute
        ),
        replace=True,
    )
    without = st.compare(a, b, strict=False, paired=True)
    n = np.full(len(without), 40.0)
    ok = without["mcse"].to_numpy() > 0
    assert ok.any()
    np.testing.assert_allclose(
        with_ddof["mcse"].to_numpy()[ok], without["mcse"].to_numpy()[ok] * (n / (n - 1))[ok], rtol=1e-14
    )


# ----------------------------------------------------------------------------- the theory comparison asks the record
CLOSED_FORM_MODULE = '''
"""A metric of your own with a closed form: the squared error relative to the kernel, E[(K_hat - K)^2] / K."""
import numpy as np

import rfkit.study as st


def sq_err_over_k(*, ratio, truth):
    """Per trial: the mean over pairs of (K_hat - K)^2 / K."""
    return ((ratio - 1.0) ** 2 * truth).mean(axis=1)


def predicted(pairs):
    """Per pair: the closed-form MSE over the kernel value."""
    return pairs["theory_mse"] / pairs["truth"]


st.register_metric(
    st.MetricRecord(
        "sq_err_over_k",
        kinds=("kernel",),
        column="sq_err_over_k",
        compute=sq_err_over_k,
        theory=predicted,
        description="mean over pairs of E[(K_hat - K)^2] / K",
    )
)
'''


def test_builtin_metrics_with_a_closed_form_say_so_in_their_records():
    recs = {r.name: r for r in st.records("metric")}
    assert {n for n, r in recs.items() if r.theory is not None} == {"mse", "rel_mse"}
    with pytest.raises(InvalidParameterError, match="`theory`.*callable"):
        st.MetricRecord("m", ("kernel",), "sq_err", theory="theory_mse")


def test_compare_theory_takes_its_metrics_from_the_records(restore_registries):
    """Without a ``theory`` on the record of ``mse``, compare_theory has no MSE rows."""
    res = st.run(_kernel_design(["mse", "rel_mse"]), rng=0)
    assert list(dict.fromkeys(res.compare_theory()["metric"])) == ["mse", "rel_mse"]
    st.register_metric(dataclasses.replace(st.metric_record("mse"), theory=None), replace=True)
    assert list(dict.fromkeys(res.compare_theory()["metric"])) == ["rel_mse"]


def test_a_metric_of_your_own_with_a_closed_form_joins_the_theory_comparison(
    tmp_path, monkeypatch, restore_registries
):
    (tmp_path / "my_closed_form.py").write_text(textwrap.dedent(CLOSED_FORM_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        design = _kernel_design(["mse", "sq_err_over_k"], imports=["my_closed_form"])
        res = st.run(design, rng=2)
        cmp = res.compare_theory()
        assert list(dict.fromkeys(cmp["metric"])) == ["mse", "rel_mse", "sq_err_over_k"]
        mine = cmp[cmp["metric"] == "sq_err_over_k"].reset_index(drop=True)
        assert len(mine) == 4  # 2 estimators x 2 feature counts, both with rfkit's closed form
        pairs = res.pairs.assign(p=res.pairs["theory_mse"] / res.pairs["truth"])
        expect = pairs.groupby(["cell", "estimator"], sort=False)["p"].mean().to_numpy()
        np.testing.assert_allclose(mine["predicted"], expect, rtol=1e-14)
        s = res.summary().query("metric == 'sq_err_over_k'").reset_index(drop=True)
        np.testing.assert_array_equal(mine["measured"], s["estimate"])
        assert (mine["z"].abs() <= 5).all(), mine[["estimator", "n_features", "z"]]  # the 5-MCSE rule
        # registered but not measured by a design: no column in its trials, so no row
        other = st.run(_kernel_design(["mse"], imports=["my_closed_form"]), rng=2).compare_theory()
        assert "sq_err_over_k" not in set(other["metric"])
    finally:
        sys.modules.pop("my_closed_form", None)
