"""Figures and names as a reader meets them: the report's figures with alt text and captions, one
name per estimator in the console, the report's tables, the figures and the notebook display, and
±2 MCSE bars that are either seen or said to hide behind their markers."""

from __future__ import annotations

import html
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

import rfkit.plots as rkp  # noqa: E402
import rfkit.report as rp  # noqa: E402
import rfkit.study as st  # noqa: E402
from rfkit.plots._mcse_bars import HIDDEN  # noqa: E402
from rfkit.study._builtin import builtin_study  # noqa: E402


@pytest.fixture(scope="module")
def performer(tmp_path_factory):
    """The built-in performer-mse study's quick profile, run into a folder (its report not yet written)."""
    out = tmp_path_factory.mktemp("performer") / "run"
    return st.run(builtin_study("performer-mse"), quick=True, out=out, progress=False)


def _figures_of(report: str) -> list[tuple[str, str, str]]:
    """(alt text, file stem, the caption paragraph below it) of every figure of a report."""
    found = re.findall(r"^!\[(.*)\]\(figures/([^)]+)\.png\)\n\n(.*)$", report, flags=re.M)
    return [(alt, stem, cap) for alt, stem, cap in found]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


@pytest.mark.parametrize("workers", [1, 2])
def test_report_figures_have_alt_text_and_their_captions(performer, workers):
    """Each figure of report.md has alt text saying what it shows and, below it, the caption line
    the figure draws (from the figure record's caption), whether drawn here or in workers."""
    report = rp.write_report(performer, performer.out, workers=workers).read_text(encoding="utf-8")
    figures = _figures_of(report)
    assert figures, report[:2000]
    for i, (alt, stem, cap) in enumerate(figures, 1):
        fig = performer.plot(stem).figure
        try:
            caption = " ".join(fig.get_suptitle().split())
            ylabel = " ".join(fig.axes[0].get_ylabel().split())
        finally:
            plt.close(fig)
        assert alt != stem and " against " in alt and _unescape(alt).startswith(ylabel), alt
        assert cap.startswith(f"*Figure {i}* (`{stem}`): "), cap
        assert _unescape(cap.split("): ", 1)[1]) == caption, (cap, caption)


def _label_pattern(label: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(label)}(?![\w-])")


def test_one_name_per_estimator_in_console_report_figure_and_notebook(performer):
    """The winners lines, the report's tables, the figure's legend and the notebook display name an
    estimator by its display name; its study label appears only where it is paired with it."""
    d = performer.design
    names = dict(zip(d.labels, rkp.display_names(d.estimators)))
    labels = [lab for lab, name in names.items() if lab != name]
    assert labels, "performer-mse's labels differ from its display names"
    # console: the closing lines
    lines = rp.winner_lines(performer)
    assert lines and any(name in lines[0] for name in names.values()), lines
    for line in lines:
        for lab in labels:
            assert not _label_pattern(lab).search(line), (lab, line)
    # report: every table row's first cell is a display name
    report = rp.write_report(performer, performer.out).read_text(encoding="utf-8")
    rows = [ln for ln in report.splitlines() if ln.startswith("| ") and not ln.startswith("| estimator")]
    first_cells = {_unescape(r.split(" | ")[0][2:].strip()) for r in rows if not r.startswith("|---")}
    shown = {c for c in first_cells if c in names.values()}
    assert shown == set(names.values()), first_cells
    assert not first_cells & set(labels), first_cells & set(labels)
    pairing = [ln for ln in report.splitlines() if ln.startswith("Estimators, by the display name")]
    assert len(pairing) == 1 and all(f"(`{lab}`)" in pairing[0] for lab in d.labels), pairing
    # figure: the legend's entries
    fig = performer.plot("mse_vs_features").figure
    try:
        legend = fig.axes[0].get_legend() or fig.legends[0]
        texts = [t.get_text() for t in legend.get_texts()]
        assert len(texts) == len(names), texts
        for text, name in zip(texts, names.values()):  # the name, then what the series fixes (", D = 2m")
            assert text == name or text.startswith(f"{name}, "), (text, name)
    finally:
        plt.close(fig)
    # notebook display: the summary table's rows
    page = performer._repr_html_()
    for lab, name in names.items():
        assert f">{html.escape(name)}</th>" in page, name
        if lab != name:
            assert f">{lab}</th>" not in page, lab


def _hidden_bars(fig) -> list[tuple[str, float, float]]:
    """(series, bar length, marker size) in pixels of every ±2 MCSE bar shorter than its marker, as
    drawn: vertical bars by their height, horizontal ones (``xerr``) by their width."""
    fig.canvas.draw()
    hidden = []
    for ax in fig.axes:
        for c in ax.containers:
            if not isinstance(c, ErrorbarContainer) or not (c.has_xerr or c.has_yerr):
                continue
            line, _caps, bars = c.lines
            marker = line.get_markersize() * fig.dpi / 72
            for coll in bars:
                for seg in coll.get_segments():
                    pts = ax.transData.transform(seg)
                    length = max(abs(pts[-1][0] - pts[0][0]), abs(pts[-1][1] - pts[0][1]))
                    if length < marker:
                        hidden.append((c.get_label(), length, marker))
    return hidden


@pytest.fixture(scope="module")
def quick_runs(performer):
    """Quick runs of built-in studies by name (performer-mse's is the module's), run when first asked."""
    runs = {"performer-mse": performer}

    def get(name):
        if name not in runs:
            runs[name] = st.run(builtin_study(name), quick=True, progress=False)
        return runs[name]

    return get


def _mcse_legend(fig):
    """The title of the legend that speaks of the ±2 MCSE bars (None where none does)."""
    for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        if leg is not None and "±2 MCSE" in leg.get_title().get_text():
            return " ".join(leg.get_title().get_text().split())
    return None


@pytest.mark.parametrize("size", ["two-column", "one-column"])
@pytest.mark.parametrize(
    ("study", "figure"),
    [
        ("performer-mse", "mse_vs_features"),
        ("concentration", "coverage"),
        ("attention-estimators", "mse_vs_samples"),
        ("drop-in", "dropin_damage_vs_budget_kl"),
        ("drop-in", "dropin_per_layer"),
        ("drop-in", "dropin_proxy"),
    ],
)
def test_mcse_bars_are_seen_or_said_to_hide_behind_their_markers(quick_runs, study, figure, size):
    """On built-in studies' figures every ±2 MCSE bar has its caps and is longer than its marker, or
    the legend says that a bar shorter than its marker is hidden by it."""
    drawn = quick_runs(study).plot(figure, size=size)
    fig = (drawn.flat[0] if hasattr(drawn, "flat") else drawn).figure
    try:
        title = _mcse_legend(fig)
        assert title is not None, "the legend says what the bars are"
        bars = [c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]
        caps = [(len(c.lines[1]), 2 * (c.has_xerr + c.has_yerr)) for c in bars]  # two per direction
        assert bars and all(n == want for n, want in caps), ("every bar has its two caps", caps)
        hidden = _hidden_bars(fig)
        if hidden:
            assert " ".join(HIDDEN.split()) in title, (title, hidden[:3])
    finally:
        plt.close(fig)
    if study == "concentration":  # coverage 1 in every trial: MCSE 0, no bar to see, and it says so
        assert hidden
