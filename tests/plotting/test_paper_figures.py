"""Every figure of every built-in study's quick profile is ready for a paper.

Each built-in study runs once per test session (its ``[quick]`` profile); every figure its
result draws is checked at both paper sizes: a caption naming the fixed settings, display
names (never a study label or an id such as ``positive-orthogonal``) in legends, tick labels
and panel titles, a distinct (colour, line style, marker) per series of one axes, labelled axes
(log axes say so), nothing outside the canvas, and PDFs with embedded TrueType fonts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

import rfkit.plots as rkp  # noqa: E402
import rfkit.report as rp  # noqa: E402
import rfkit.study as st  # noqa: E402
from rfkit.exceptions import ModelNotInstalledError  # noqa: E402
from rfkit.study._builtin import builtin_study_dirs  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _studies() -> list[Path]:
    seen: dict[str, Path] = {}
    for d in builtin_study_dirs():
        for p in sorted(d.glob("*.toml")):
            seen.setdefault(p.stem, p)
    return [seen[k] for k in sorted(seen)]


STUDIES = _studies()


def _profiles() -> list[tuple[Path, str]]:
    """(study, profile) of every named profile of the built-in studies: their quick forms are drawn too."""
    out = []
    for path in STUDIES:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        out += [(path, name) for name in raw.get("profiles", {})]
    return out


PROFILES = _profiles()
#: the runs whose figures are checked: each study's quick profile, and each named profile's (study:NAME)
RUNS = [p.stem for p in STUDIES] + [f"{p.stem}:{name}" for p, name in PROFILES]

#: an internal id: lower-case words joined by hyphens ("positive-orthogonal", "Positive-orthogonal-default")
ID_PATTERN = re.compile(r"^[A-Za-z][a-z0-9+]*(-[a-z0-9+]+)+$")


@pytest.fixture(scope="session")
def quick_results(tmp_path_factory):
    """One quick run per built-in study, shared by every test of the session."""
    out = tmp_path_factory.mktemp("quick-studies")
    results = {}
    for path in STUDIES:
        try:
            results[path.stem] = st.run(path, quick=True, out=out / path.stem, progress=False)
        except (
            ModelNotInstalledError
        ) as err:  # said, not silent: the test of that study skips with this reason
            results[path.stem] = err
    for path, name in PROFILES:
        key = f"{path.stem}:{name}"
        try:
            design = st.load_design(path, profile=f"{name}.quick")
            results[key] = st.run(design, out=out / f"{path.stem}-{name}", progress=False)
        except ModelNotInstalledError as err:
            results[key] = err
    return results


def _result(quick_results, name):
    res = quick_results[name]
    if isinstance(res, Exception):
        pytest.skip(f"study {name!r} needs model weights that are not installed: {res}")
    return res


def test_there_are_built_in_studies():
    assert len(STUDIES) >= 7, [p.stem for p in STUDIES]


def _series_styles(ax):
    """(colour, line style, marker) of each labelled series of an axes (error-bar groups and lines)."""
    styles = []
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer) and not str(c.get_label()).startswith("_"):
            line = c.lines[0]
            styles.append((to_hex(line.get_color()), line.get_linestyle(), line.get_marker()))
    for line in ax.get_lines():
        if not str(line.get_label()).startswith("_"):
            styles.append((to_hex(line.get_color()), line.get_linestyle(), line.get_marker()))
    return styles


def _legend_styles(legend):
    out = []
    for h in legend.legend_handles:
        line = h.lines[0] if isinstance(h, ErrorbarContainer) else h
        if hasattr(line, "get_marker"):
            out.append((to_hex(line.get_color()), line.get_linestyle(), line.get_marker()))
    return out


def _names_shown(fig):
    """Every piece of text naming an estimator: legend entries, tick labels, panel titles."""
    texts = []
    for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        if leg is not None:
            texts += [t.get_text() for t in leg.get_texts()]
    for ax in fig.axes:
        texts += [t.get_text() for t in ax.get_xticklabels()]
        texts += ax.get_title().split("\n")[:1]
    return [t for t in texts if t]


def _check_figure(name, fig, result, tmp_path, pdf=True):
    d = result.design
    labels = set(d.labels) - set(rkp.display_names(d.estimators))
    caption = " ".join(fig.get_suptitle().split())  # as one line, wherever it wraps
    # a caption with the fixed settings: the study, the trials, the dimension where it is fixed
    assert caption.startswith(d.name), (name, caption)
    assert f"{d.trials} trials per cell" in caption, (name, caption)
    if "dim" in d.data:
        assert f"d = {d.data['dim']}" in caption, (name, caption)
    # display names only
    for text in _names_shown(fig):
        assert text not in labels, (name, f"study label {text!r} shown instead of a display name")
        assert not ID_PATTERN.match(text), (name, f"id-like text {text!r}")
    # distinct styles per axes and per legend
    for ax in fig.axes:
        styles = _series_styles(ax)
        assert len(styles) == len(set(styles)), (name, ax.get_title(), styles)
    for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        if leg is not None:
            styles = _legend_styles(leg)
            assert len(styles) == len(set(styles)), (name, styles)
    # labelled axes; log axes say so
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    assert any(ax.get_ylabel() for ax in visible), name
    assert any(ax.get_xlabel() or any(t.get_text() for t in ax.get_xticklabels()) for ax in visible), name
    for ax in visible:
        for scale, label in ((ax.get_xscale(), ax.get_xlabel()), (ax.get_yscale(), ax.get_ylabel())):
            if scale == "log" and label:
                assert "log" in label, (name, label)
    # nothing outside the canvas (legends, caption and labels included)
    fig.canvas.draw()
    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    w, h = fig.get_size_inches()
    tol = 0.02
    assert tight.x0 >= -tol and tight.y0 >= -tol and tight.x1 <= w + tol and tight.y1 <= h + tol, (
        name,
        tight,
        (w, h),
    )
    if not pdf:
        return
    # PDF with embedded TrueType fonts (no Type 3)
    path, _png = rkp.save_figure(fig, tmp_path / name)
    data = path.read_bytes()
    assert b"/FontFile2" in data and b"/Type3" not in data, name


@pytest.mark.parametrize("size", ["two-column", "one-column"])
@pytest.mark.parametrize("study", RUNS)
def test_every_quick_figure_is_paper_ready(quick_results, study, size, tmp_path):
    result = _result(quick_results, study)
    summary, theory = result.summary(), result.compare_theory()
    tables = {
        "pairs": result.pairs,
        "timings": result.timings,
        "data_stats": result.data_stats,
        "trials": result.trials,
    }
    drawn = []
    for kind in rp.FIGURE_KINDS:
        for name, draw in rp.figure_plan(kind, result.design, summary, theory, tables.get):
            fig = draw(size)  # one at a time: study_figures draws them all
            try:
                assert fig.get_figwidth() == pytest.approx(rkp.PAPER_SIZES[size]), name
                _check_figure(
                    name, fig, result, tmp_path, pdf=size == "two-column"
                )  # fonts: one size is enough
            finally:
                plt.close(fig)
            drawn.append(name)
    declared = [k for k in result.design.outputs.get("figures", []) if k in rp.FIGURE_KINDS]
    assert drawn, f"study {study!r} draws no figure"
    kinds = [k for k in rp.FIGURE_KINDS if rp.figure_plan(k, result.design, summary, theory, tables.get)]
    assert set(result.figure_names()) == set(drawn) | set(kinds), (
        "figure_names: the kinds and the figures drawn"
    )
    assert set(declared) <= set(result.figure_names()), "a declared kind is listed by its own name"
    assert declared, study


@pytest.mark.parametrize("study", RUNS)
def test_one_name_per_figure(quick_results, study):
    """Each figure has one name, the same in the design, ``figure_names()``, ``plot(name)`` and its
    file: the kind's name, or the kind's name and ``_suffix`` for a kind drawing several."""
    result = _result(quick_results, study)
    kinds = [r.name for r in rkp.figure_records()]
    declared = [st.resolve_figure_kind(k, warn=False) for k in result.design.outputs.get("figures", [])]
    names = result.figure_names()

    def kind_of(name):
        return [k for k in kinds if name == k or name.startswith(f"{k}_")]

    assert all(kind_of(name) for name in names), names
    rp.write_report(result, result.out)  # as `rfkit run` does: the declared kinds' figures
    written = sorted(p.stem for p in (result.out / "figures").glob("*.png"))
    assert written == sorted(p.stem for p in (result.out / "figures").glob("*.pdf"))
    assert written and all(set(kind_of(stem)) & set(declared) for stem in written), (declared, written)
    assert set(written) <= set(names)  # every file is listed under its file name
    drawn = [n for n in names if set(kind_of(n)) & set(declared) and n not in declared]
    assert set(drawn) <= set(written)  # every declared figure listed is a file of that name
    for kind in declared:  # a kind's own name is listed and is its file's, or its figures' prefix
        assert kind in names and (kind in written or any(s.startswith(f"{kind}_") for s in written)), kind
    for name in names:
        result.plot(name)
        plt.close("all")


def test_figure_names_are_the_drawn_figures_in_order(quick_results):
    result = _result(quick_results, "performer-mse")
    assert result.figure_names() == ["mse_vs_features", "mse_vs_features_rel_mse", "kernel_scatter"]
    fig = result.plot("mse_vs_features_rel_mse").figure
    assert "relative MSE" in fig.axes[0].get_ylabel()
    plt.close(fig)


def test_set_paper_size_is_one_option(quick_results):
    result = _result(quick_results, "performer-mse")
    try:
        rkp.set_paper_size("one-column")
        fig = result.plot().figure
        assert fig.get_figwidth() == pytest.approx(3.5)
        plt.close(fig)
    finally:
        rkp.set_paper_size("two-column")
    fig = result.plot().figure
    assert fig.get_figwidth() == pytest.approx(7.0)
    plt.close(fig)
    with pytest.raises(ValueError, match="one-column"):
        rkp.set_paper_size("A4")


def test_make_figures_script_redraws_the_docs_images(tmp_path):
    """scripts/make_figures.py writes every image it lists (quick profiles here), each one the README or a docs page shows."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("make_figures", root / "scripts" / "make_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--out-dir", str(tmp_path), "--dpi", "60"]) == 0
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    shown = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    for image, *_ in mod.IMAGES:
        assert (tmp_path / image).stat().st_size > 0
        assert (root / "docs" / "images" / image).exists()
        # the README links docs/images/NAME; a docs page images/NAME, or shows it as a {figure}
        assert any(
            f in shown for f in (f"docs/images/{image}", f"(images/{image})", f"{{figure}} images/{image}")
        ), image


def test_docs_figures_show_text_at_8_pt_or_more():
    """A ``{figure}`` of a docs page with a ``:width:`` in px shows its smallest text at 8 pt or more:
    its width in CSS inches over the width it was drawn at (the PNG's pixels over its dpi), times
    the smallest font of its paper size (one-column figures of the docs' small images)."""
    from PIL import Image

    root = Path(__file__).resolve().parents[2]
    with rkp.paper_style("one-column"):
        smallest = min(
            matplotlib.rcParams[k]
            for k in ("font.size", "legend.fontsize", "xtick.labelsize", "ytick.labelsize")
        )
    found = []
    for page in sorted((root / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for image, width in re.findall(r"```\{figure\} (images/\S+)\n(?::\w+:.*\n)*?:width: (\d+)px", text):
            with Image.open(root / "docs" / image) as png:
                drawn_inches = png.size[0] / png.info["dpi"][0]
            assert smallest * (int(width) / 96) / drawn_inches >= 8 - 0.05, (page.name, image, width)
            found.append(image)
    assert {"images/performer-mse-small.png", "images/attention-estimators-small.png"} <= set(found), found


def _smallest_text(fig):
    """The smallest font size (pt) of the visible, non-empty text a figure draws."""
    from matplotlib.text import Text

    sizes = []

    def walk(artist):
        if artist.get_visible():
            if isinstance(artist, Text) and artist.get_text().strip():
                sizes.append(artist.get_fontsize())
            for child in artist.get_children():
                walk(child)

    walk(fig)
    return min(sizes)


@pytest.mark.parametrize("study", RUNS)
def test_notebook_display_shows_every_text_at_8_pt_or_more(quick_results, study):
    """The figure of a result's HTML display is embedded at a width where its smallest text is at
    least 8 pt (1 pt = 4/3 CSS px): ``<img width>`` in CSS px against the PNG's width in pixels at
    its dpi, times the smallest font the figure draws; with alt text and the figure's caption."""
    import base64
    import html as html_lib
    import io

    from PIL import Image

    result = _result(quick_results, study)
    page = result._repr_html_()
    img = re.search(r'<img alt="([^"]+)" width="(\d+)"[^>]*src="data:image/png;base64,([^"]+)"', page)
    if not result.design.outputs.get("figures"):
        assert img is None
        return
    assert img is not None, page[-500:]
    png = Image.open(io.BytesIO(base64.b64decode(img.group(3))))
    dpi = png.info["dpi"][0]
    drawn_inches = png.size[0] / dpi  # the width the figure was drawn at (its tight box)
    shown_inches = int(img.group(2)) / 96  # the CSS width, in CSS inches
    name = re.search(r"result\.plot\('([^']+)'\)", page).group(1)
    drawn = result.plot(name)  # the same figure, drawn again: its Axes, or an array of its panels
    fig = (drawn.flat[0] if hasattr(drawn, "flat") else drawn).figure
    try:
        smallest = _smallest_text(fig)
        caption = " ".join(fig.get_suptitle().split())
    finally:
        plt.close(fig)
    assert smallest * shown_inches / drawn_inches >= 8 - 0.05, (study, smallest, shown_inches, drawn_inches)
    alt = html_lib.unescape(img.group(1))
    assert alt != name and len(alt) > 10, alt
    assert f"<figcaption><small>{html_lib.escape(caption)}</small></figcaption>" in page, caption
