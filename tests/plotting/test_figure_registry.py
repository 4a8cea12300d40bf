"""The figure registry: one record per figure kind, one name everywhere, built-ins registered like a user's.

A figure record says which results it applies to, how to prepare its tidy frame, how to draw it
and its caption. Its name is the one a design declares in ``[outputs] figures``, that
``figure_names()`` lists, that ``plot()`` takes and that names the file of a figure drawn alone.
"""

from __future__ import annotations

import re
import sys
import textwrap
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import rfkit.plots as rkp  # noqa: E402
import rfkit.report as rp  # noqa: E402
import rfkit.study as st  # noqa: E402
from rfkit.exceptions import InvalidParameterError, RFKitDeprecationWarning  # noqa: E402
from rfkit.plots import FigureRecord, register_figure  # noqa: E402
from rfkit.plots._registry import unregister_figure  # noqa: E402


def _kernel_design(**over) -> st.Design:
    kw = dict(
        name="tiny-kernel",
        trials=3,
        seed=5,
        data={"source": "pairs", "n_pairs": 3, "dim": 3},
        grid={"n_features": [2, 4]},
        estimators=[{"map": "Positive"}, {"map": "Trig"}],
        metrics=["mse", "rel_mse"],
        outputs={"figures": ["mse_vs_features"]},
    )
    kw.update(over)
    return st.Design(**kw)


def _attention_design(**over) -> st.Design:
    kw = dict(
        name="tiny-attention",
        kind="attention",
        trials=2,
        seed=11,
        data={"source": "sequence", "n_tokens": 16, "dim": 4, "d_v": 2},
        grid={"samples": [4, 8]},
        estimators=[{"label": "ra", "estimator": "RA"}],
        metrics=["mse"],
        outputs={"figures": ["mse_vs_samples", "cost_vs_samples"]},
    )
    kw.update(over)
    return st.Design(**kw)


# ----------------------------------------------------------------------------- the built-in records
def test_every_builtin_kind_is_a_registered_record():
    """The names a design is checked against are exactly the records rfkit registers, in drawing order."""
    builtin = [r.name for r in rkp.figure_records() if r.name in st.FIGURE_KINDS]
    assert builtin == list(st.FIGURE_KINDS)
    assert rp.FIGURE_KINDS == st.FIGURE_KINDS
    for name in st.FIGURE_KINDS:
        assert rkp.figure_record(name).name == name


def test_the_cost_figure_has_one_name():
    """The figure the report saves as cost_vs_samples is declared, listed and drawn under that name."""
    assert "cost_vs_samples" in st.FIGURE_KINDS and "cost" not in st.FIGURE_KINDS
    res = st.run(_attention_design(), rng=0)
    names = res.figure_names()
    assert names[:2] == ["mse_vs_samples", "cost_vs_samples"]  # the declared figures first
    fig = res.plot("cost_vs_samples").figure
    assert "seconds" in fig.axes[0].get_ylabel()
    plt.close("all")


def test_the_old_cost_name_works_for_a_release_with_a_warning(tmp_path):
    """A study file naming the old kind `cost` still loads and draws, warned towards `cost_vs_samples`."""
    with pytest.warns(RFKitDeprecationWarning, match="cost_vs_samples"):
        design = _attention_design(outputs={"figures": ["cost"]})
    assert design.hash() == _attention_design().hash()  # figures are not part of the design's identity
    with pytest.warns(RFKitDeprecationWarning, match="cost_vs_samples"):
        record = rkp.figure_record("cost")
    assert record.name == "cost_vs_samples"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RFKitDeprecationWarning)
        res = st.run(design, rng=0, out=tmp_path / "run")
        report = rp.write_report(res, tmp_path / "run").read_text()
    assert "](figures/cost_vs_samples.png)" in report and "(`cost_vs_samples`): " in report


def test_the_old_dropin_budget_name_is_the_kind_its_files_are_named_after():
    """``dropin_kl_vs_budget`` drew ``kl_vs_budget``, ``emb_cos_vs_budget``, ...: the kind is now
    ``dropin_damage_vs_budget`` (its files ``dropin_damage_vs_budget_kl``, ...), the old name warned."""
    assert "dropin_damage_vs_budget" in st.FIGURE_KINDS and "dropin_kl_vs_budget" not in st.FIGURE_KINDS
    with pytest.warns(RFKitDeprecationWarning, match="dropin_damage_vs_budget"):
        assert rkp.figure_record("dropin_kl_vs_budget").name == "dropin_damage_vs_budget"


def test_a_declared_kind_is_among_figure_names_even_when_it_draws_several_figures():
    """A kind that draws one figure per metric is listed by its own name too, and plot() takes it."""
    res = st.run(_kernel_design(metrics=["rel_mse"], outputs={"figures": ["mse_vs_features"]}), rng=0)
    names = res.figure_names()
    assert names[:2] == ["mse_vs_features", "mse_vs_features_rel_mse"]
    assert res.plot("mse_vs_features").get_ylabel() == res.plot("mse_vs_features_rel_mse").get_ylabel()
    plt.close("all")


def test_a_misspelt_figure_name_in_plot_is_answered_with_the_closest():
    """plot() refuses a name that is not a figure of the result, listing them and the closest one."""
    res = st.run(_kernel_design(metrics=["rel_mse"], outputs={"figures": ["mse_vs_features"]}), rng=0)
    with pytest.raises(
        InvalidParameterError, match=r"`name`.*mse_vs_featurez.*did you mean 'mse_vs_features'\?"
    ):
        res.plot("mse_vs_featurez")


# ----------------------------------------------------------------------------- registering
def _frame(inputs) -> pd.DataFrame:
    return inputs.summary[inputs.summary["metric"] == "mse"]


def _draw(frame: pd.DataFrame, ax) -> None:
    ax.plot(frame["n_features"], frame["estimate"], "o")


def test_a_taken_name_is_refused_unless_replaced_on_purpose():
    record = FigureRecord(name="registry_probe", prepare=_frame, draw=_draw, caption="probe")
    register_figure(record)
    try:
        with pytest.raises(InvalidParameterError, match="registry_probe.*replace=True"):
            register_figure(FigureRecord(name="registry_probe", prepare=_frame, draw=_draw))
        again = FigureRecord(name="registry_probe", prepare=_frame, draw=_draw, caption="again")
        assert register_figure(again, replace=True) is again
        assert rkp.figure_record("registry_probe").caption == "again"
        with pytest.raises(InvalidParameterError, match="mse_vs_features.*replace=True"):
            register_figure(FigureRecord(name="mse_vs_features", prepare=_frame, draw=_draw))
        with pytest.raises(InvalidParameterError, match="`cost`.*cost_vs_samples"):
            register_figure(FigureRecord(name="cost", prepare=_frame, draw=_draw))
    finally:
        unregister_figure("registry_probe")
    assert "registry_probe" not in st.figure_kinds()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "my figure", "prepare": _frame, "draw": _draw}, r"`name`.*letter.*'my figure'"),
        ({"name": "", "prepare": _frame, "draw": _draw}, r"`name`.*''"),
        ({"name": 3, "prepare": _frame, "draw": _draw}, r"`name`.*3"),
        ({"name": "f", "draw": _draw}, r"`prepare`.*callable.*None"),
        ({"name": "f", "prepare": _frame}, r"`draw`.*callable.*None"),
        ({"name": "f", "prepare": _frame, "draw": "not callable"}, r"`draw`.*'not callable'"),
        ({"name": "f", "prepare": _frame, "draw": _draw, "caption": 3}, r"`caption`.*3"),
        ({"name": "f", "prepare": _frame, "draw": _draw, "applies_to": "kernel"}, r"`applies_to`.*'kernel'"),
        ({"name": "f", "prepare": _frame, "draw": _draw, "applies_to": ("kernal",)}, r"`applies_to`.*kernal"),
        ({"name": "f", "figures": 3}, r"`figures`.*3"),
    ],
)
def test_a_bad_record_is_refused_naming_the_field(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        FigureRecord(**kwargs)


def test_register_refuses_what_is_not_a_record():
    with pytest.raises(InvalidParameterError, match="FigureRecord.*'mse_vs_features'"):
        register_figure("mse_vs_features")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="`name`.*mse_vs_features.*no_such_figure"):
        rkp.figure_record("no_such_figure")


# ----------------------------------------------------------------------------- as a user would
_USER_MODULE = '''
"""A figure of my own: the spread of the estimates against the feature count, in one file."""

import pandas as pd

from rfkit.plots import FigureRecord, register_figure

DRAWN = []  # the figures drawn, so a test can read their captions after the report closed them


def prepare(inputs):
    """The tidy frame: the MSE rows of the summary."""
    rows = inputs.summary[inputs.summary["metric"] == "mse"]
    return rows[["estimator", "n_features", "estimate"]].reset_index(drop=True)


def draw(frame, ax):
    for name, rows in frame.groupby("estimator", sort=False):
        ax.plot(rows["n_features"], rows["estimate"], marker="o", label=name)
    ax.set_xlabel("m")
    ax.set_ylabel("my MSE")
    DRAWN.append(ax.figure)


def caption(design, frame):
    return f"my spread figure of {design.name}: {len(frame)} points"


register_figure(
    FigureRecord(
        name="my_spread",
        applies_to=("kernel",),
        prepare=prepare,
        draw=draw,
        caption=caption,
        description="MSE against the feature count, drawn by a plug-in",
    )
)
'''


@pytest.fixture
def user_figure_module(tmp_path, monkeypatch):
    """A module of the user's on sys.path that registers a figure kind; unregistered afterwards."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "my_rfkit_figures.py").write_text(textwrap.dedent(_USER_MODULE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    yield "my_rfkit_figures"
    sys.modules.pop("my_rfkit_figures", None)
    unregister_figure("my_spread")


def test_a_figure_kind_of_your_own_in_one_file(user_figure_module, tmp_path):
    """A study names the plug-in's figure; the report draws it with its caption, and the result lists and plots it."""
    study = tmp_path / "my-study.toml"
    study.write_text(
        textwrap.dedent(
            f"""
            name = "my-study"
            kind = "kernel"
            trials = 3
            seed = 5
            imports = ["{user_figure_module}"]
            metrics = ["mse"]
            estimators = [{{ map = "Positive" }}, {{ map = "Trig" }}]

            [data]
            source = "pairs"
            n_pairs = 3
            dim = 3

            [grid]
            n_features = [2, 4]

            [outputs]
            figures = ["my_spread", "mse_vs_features"]
            """
        ),
        encoding="utf-8",
    )
    design = st.load_design(study)
    assert "my_spread" in st.figure_kinds()
    res = st.run(design, rng=0, out=tmp_path / "run")
    report = rp.write_report(res, tmp_path / "run").read_text()
    module = sys.modules[user_figure_module]
    assert (tmp_path / "run" / "figures" / "my_spread.png").is_file()
    assert (tmp_path / "run" / "figures" / "my_spread.pdf").is_file()
    assert "](figures/my_spread.png)" in report and "](figures/mse_vs_features.png)" in report
    assert re.search(
        r"\*Figure \d\* \(`my_spread`\): my spread figure of my-study: 4 points\n", report
    )  # caption
    assert "my spread figure of my-study: 4 points" in module.DRAWN[-1]._suptitle.get_text()

    assert res.figure_names()[:2] == ["my_spread", "mse_vs_features"]  # the declared order
    fig = res.plot("my_spread").figure
    assert fig.axes[0].get_ylabel() == "my MSE"
    assert fig._suptitle.get_text() == "my spread figure of my-study: 4 points"
    plt.close("all")


def test_a_figure_of_your_own_applies_only_where_it_says(user_figure_module):
    """A record for kernel results is not among an attention result's figures, nor drawn for it."""
    __import__(user_figure_module)
    res = st.run(_attention_design(), rng=0)
    assert "my_spread" not in res.figure_names()
    with pytest.raises(InvalidParameterError, match="my_spread"):
        res.plot("my_spread")
