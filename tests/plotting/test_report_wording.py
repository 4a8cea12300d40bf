"""What a reader of a report sees: metric wording per design kind, the quick-profile banner,
flagged heavy-tail z-scores, and estimators that stay visible when their points coincide."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import rfkit.plots as rkp  # noqa: E402
import rfkit.study as st  # noqa: E402
from rfkit.exceptions import InvalidParameterError  # noqa: E402
from rfkit.report import metric_description, write_report  # noqa: E402
from rfkit.report._markdown import _theory_section  # noqa: E402


def _attention_design(**over) -> st.Design:
    kw = dict(
        name="tiny-attention",
        kind="attention",
        trials=3,
        seed=11,
        data={"source": "sequence", "n_tokens": 16, "dim": 4, "d_v": 2},
        grid={"samples": [4, 8]},
        estimators=[
            {"label": "rfa-positive", "estimator": "RFA", "map": "Positive"},
            {"label": "ra", "estimator": "RA"},
        ],
        metrics=["mse", "bias", "variance"],
        quick={"trials": 2},
        outputs={"figures": ["mse_vs_samples"], "notes": "Full profile: 3 trials."},
    )
    kw.update(over)
    return st.Design(**kw)


def test_attention_reports_describe_output_errors(tmp_path):
    design = _attention_design()
    res = st.run(design, rng=1, out=tmp_path / "full")
    report = write_report(res, tmp_path / "full").read_text()
    assert "K_hat" not in report  # kernel wording would mislead here
    assert "E[(A_hat - A)^2], the squared error of the estimated attention output" in report
    assert "Var[A_hat]" in report and "E[A_hat - A]" in report
    assert "`samples` is each estimator's budget" in report
    assert "Quick profile" not in report and "Written for the full profile" not in report
    tex = (tmp_path / "full" / "tables" / "mse.tex").read_text()
    assert "A\\_hat" in tex and "K\\_hat" not in tex


def test_quick_reports_say_so_and_keep_kernel_wording_for_kernels(tmp_path):
    design = _attention_design().quick_profile()
    res = st.run(design, rng=1, out=tmp_path / "quick")
    report = write_report(res, tmp_path / "quick").read_text()
    assert "**Quick profile**" in report and "*Written for the full profile" in report
    assert metric_description("mse", "kernel") == "mean over pairs of E[(K_hat - K)^2]"
    assert metric_description("mse", "attention").startswith("mean over queries and value dimensions")
    assert metric_description("max_abs_err", "attention") == metric_description("max_abs_err", "kernel")


def test_theory_section_flags_predictions_far_above_measurements():
    t = pd.DataFrame(
        {
            "estimator": ["a", "b", "c"],
            "m": [8, 8, 8],
            "predicted": [1.0, 1e9, 0.5],
            "measured": [1.02, 1.2, 0.45],
            "mcse": [0.01, 0.1, 0.01],
            "z": [2.0, -1e10, -5.5],
        }
    )
    text = "\n".join(_theory_section(t, ["m"]))
    assert "1 of the 2 unflagged ones within 5 MCSE" in text
    assert "largest unflagged |z| = 5.50 (c, m=8)" in text
    assert "† 1 rows have a predicted MSE more than 3 times" in text
    assert "-1.00e+10 †" in text and "+2.00 |" in text


def test_coinciding_estimators_stay_visible():
    """Two estimators with identical values: different markers, and points shifted apart."""
    rows = []
    for lab in ("positive-orthogonal", "positive-structured", "trig"):
        for m in (8, 32, 128):
            rows.append(
                {"estimator": lab, "n_features": m, "metric": "mse", "estimate": 1.0 / m, "mcse": 0.01 / m}
            )
    summary = pd.DataFrame(rows)
    ax = rkp.plot_mse_vs_features(summary)
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    a, b = lines["positive-orthogonal"], lines["positive-structured"]
    assert a.get_marker() != b.get_marker()
    assert np.all(np.asarray(a.get_xdata()) != np.asarray(b.get_xdata()))
    np.testing.assert_array_equal(a.get_ydata(), b.get_ydata())
    # shifts are small: within a tenth of an octave of the true m
    for line in lines.values():
        assert np.all(np.abs(np.log2(np.asarray(line.get_xdata()) / np.array([8, 32, 128]))) <= 0.1 + 1e-12)
    plt.close("all")
    axes = rkp.plot_metric_lines(summary, "mse", "n_features", logx=True)
    markers = {c.get_label(): c.lines[0].get_marker() for c in axes[0].containers}
    assert len(set(markers.values())) == 3
    plt.close("all")
    assert rkp.dodged([1.0, 2.0], 0, 1, log=False).tolist() == [1.0, 2.0]  # one series: not moved
    np.testing.assert_allclose(rkp.dodged([1.0, 2.0], 0, 2, log=False), [0.95, 1.95])


def test_computation_does_not_load_presentation():
    """rfkit.study computes; rfkit.report, rfkit.plots and matplotlib load only when something is drawn."""
    import subprocess
    import sys

    code = (
        "import sys, rfkit.study\n"
        "print(sorted(m for m in ('rfkit.report', 'rfkit.plots', 'rfkit.tables', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plot_by_kind_or_saved_name(tmp_path):
    """StudyResult.plot draws through rfkit.report: a kind gives its first figure, a saved name that figure."""
    design = st.Design(
        name="tiny-kernel",
        trials=3,
        seed=5,
        data={"source": "pairs", "n_pairs": 3, "dim": 3},
        grid={"n_features": [2, 4]},
        estimators=[{"map": "Positive"}, {"map": "Trig"}],
        metrics=["mse", "rel_mse"],
        outputs={"figures": ["mse_vs_features"]},
    )
    res = st.run(design, rng=0)
    assert res.figure_names() == ["mse_vs_features", "mse_vs_features_rel_mse", "kernel_scatter"]
    first = res.plot()  # the Axes drawn on
    assert first.get_ylabel() != res.plot("mse_vs_features_rel_mse").get_ylabel()
    plt.close("all")
    html = res._repr_html_()
    assert "tiny-kernel" in html and "data:image/png;base64," in html
    with pytest.raises(InvalidParameterError, match="mse_vs_features_rel_mse"):
        res.plot("no_such_figure")


@pytest.mark.parametrize("label", ["a|b", "50%_R&D", "$x$ \\ y", "two\nlines"])
def test_user_labels_are_escaped_in_the_report_and_latex(tmp_path, label):
    """Labels are user text: a bar, an underscore, a percent, an ampersand, dollars, a backslash
    or a line break must not change the table they are written into."""
    from rfkit.exceptions import RFKitError

    try:
        design = _attention_design(
            estimators=[
                {"label": label, "estimator": "RFA", "map": "Positive"},
                {"label": "ra", "estimator": "RA"},
            ],
            outputs={},
        )
    except RFKitError:  # a label refused at the door is a correct answer too
        return
    res = st.run(design, rng=1, out=tmp_path / "o")
    report = write_report(res, tmp_path / "o").read_text()
    table = report.split("## mse")[1].split("## ")[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("|")]
    assert len(rows) == 2 + 4  # header, rule, two estimators x two sample sizes: one line each
    assert len({r.replace("\\|", "").count("|") for r in rows}) == 1  # same number of columns
    tex = (tmp_path / "o" / "tables" / "mse.tex").read_text()
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(body) == 4
    assert len({r.replace(r"\&", "").count("&") for r in body}) == 1
    assert all(r.replace(r"\$", "").count("$") % 2 == 0 for r in body)  # no stray math delimiter


def test_theory_section_prints_out_of_domain_instead_of_the_prediction():
    """A delta-method prediction flagged in_domain=False is not printed as a number, nor tested by z."""
    t = pd.DataFrame(
        {
            "estimator": ["hybrid", "hybrid"],
            "m": [32, 512],
            "predicted": [4.6e29, 0.0105],
            "measured": [0.011, 0.0104],
            "mcse": [0.001, 0.0002],
            "z": [-4.6e32, -0.5],
            "in_domain": [False, True],
        }
    )
    text = "\n".join(_theory_section(t, ["m"]))
    assert "out of domain" in text and "4.6e+29" not in text
    assert "| 0.0105 " in text and "1 rows are predictions outside their theory's domain" in text
