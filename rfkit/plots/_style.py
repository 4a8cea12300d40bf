"""Paper style: one-/two-column sizes, colour-blind-safe colours with line styles and markers, captions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from ..exceptions import InvalidParameterError
from ._save import save_figure
from ._ticks import plain_log_ticks, unicode_power

__all__ = [
    "paper_style",
    "estimator_colors",
    "estimator_markers",
    "dodged",
    "save_figure",
    "COLUMN_WIDTH",
    "DOUBLE_WIDTH",
    "PAPER_SIZES",
    "set_paper_size",
    "paper_size",
    "series_styles",
    "axis_label",
    "label_axes",
    "plain_log_ticks",
    "unicode_power",
    "add_caption",
    "legend_for",
    "legend_below",
    "legend_rows",
    "legend_height",
    "wide_legend_height",
    "WIDE_LEGEND_MAX",
]

COLUMN_WIDTH = 3.5  # inches, one column of a two-column paper
DOUBLE_WIDTH = 7.0

# Okabe-Ito palette (colour-blind safe; yellow replaced by grey for legibility on white), fixed order
_PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999"]
#: more colours for figures with many estimators (Paul Tol's "muted" scheme, colour-blind safe)
_EXTRA = ["#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499"]
_FAMILY_ORDER = [
    "trig",
    "positive",
    "hyperbolic",
    "oprf",
    "cexp",
    "hcexp",
    "taylor",
    "limit",
    "rfa",
    "ra",
    "snis",
    "lara",
]


def estimator_colors(labels: Iterable[str]) -> dict[str, str]:
    """A stable colour per estimator label.

    The family (the label's prefix before the first '-') fixes the colour, so the same
    family has the same colour across figures; when several labels of one figure share a
    family, the later ones take the next colours not used by any family present.

    Parameters
    ----------
    labels : iterable of str
        The estimator labels of one figure, in order.

    Returns
    -------
    dict of str to str
        A colour per label.
    """
    labels = list(dict.fromkeys(labels))
    fams = [str(lab).split("-")[0].lower() for lab in labels]
    base = {f: _PALETTE[_FAMILY_ORDER.index(f) % len(_PALETTE)] for f in fams if f in _FAMILY_ORDER}
    used = set(base.values())
    spare = [c for c in _PALETTE + _EXTRA if c not in used]  # distinct for up to 17 estimators
    out: dict[str, str] = {}
    seen: set[str] = set()
    k = 0
    for lab, fam in zip(labels, fams):
        if fam in base and fam not in seen:
            out[lab] = base[fam]
            seen.add(fam)
        else:
            out[lab] = spare[k % len(spare)] if spare else _PALETTE[k % len(_PALETTE)]
            k += 1
    return out


#: filled markers that stay distinguishable at 3-4 pt, in the order estimators get them
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "*", "p"]


def estimator_markers(labels: Iterable[str]) -> dict[str, str]:
    """A distinct marker per estimator label of one figure (in order; cycles after 12).

    Together with :func:`estimator_colors` this keeps estimators apart even where their
    points coincide or two colours are hard to tell apart.

    Parameters
    ----------
    labels : iterable of str
        The estimator labels of one figure, in order.

    Returns
    -------
    dict of str to str
        A matplotlib marker per label.
    """
    labels = list(dict.fromkeys(labels))
    return {lab: _MARKERS[i % len(_MARKERS)] for i, lab in enumerate(labels)}


def dodged(x: Any, index: int, count: int, *, log: bool, width: float | None = None) -> Any:
    """Shift ``x`` sideways for series ``index`` of ``count``, so coinciding points stay visible.

    The shifts spread evenly over ``width``: on a log2 axis a fraction of an octave (``x`` is
    multiplied by ``2**shift``; default 0.2), on a linear axis a fraction of the smallest gap
    between distinct ``x`` values (default 0.1). A single series is not moved.

    Parameters
    ----------
    x : array_like
        The positions.
    index : int
        The series, in ``[0, count)``.
    count : int
        The number of series.
    log : bool
        Whether the axis is logarithmic (base 2).
    width : float, optional
        The total spread; None: 0.2 octave (log) or 0.1 of the smallest gap (linear).

    Returns
    -------
    ndarray
        The shifted positions.
    """
    import numpy as np

    xs = np.asarray(x, dtype=float)
    if count <= 1:
        return xs
    if width is None:
        width = 0.2 if log else 0.1
    shift = (index / (count - 1) - 0.5) * width
    if log:
        return xs * 2.0**shift
    gaps = np.diff(np.unique(xs))
    return xs + shift * (gaps.min() if gaps.size else 1.0)


#: figure widths in inches: one column of a two-column paper, and the full text width
PAPER_SIZES = {"one-column": 3.5, "two-column": DOUBLE_WIDTH}
_SIZE = {"current": "two-column"}


def set_paper_size(size: str) -> None:
    """Choose the width of every figure drawn afterwards: ``"one-column"`` (3.5 in) or ``"two-column"`` (7 in).

    The default is ``"two-column"``. Plot functions also take ``size=`` for one figure.

    Parameters
    ----------
    size : {"one-column", "two-column"}
        The width.

    Examples
    --------
    >>> set_paper_size("one-column"); paper_size()
    'one-column'
    >>> set_paper_size("two-column")
    """
    if size not in PAPER_SIZES:
        raise InvalidParameterError(
            f"The `size` parameter must be one of {sorted(PAPER_SIZES)}. Got {size!r} instead."
        )
    _SIZE["current"] = size


def paper_size(size: str | None = None) -> str:
    """The paper size in force: ``size`` when given (checked), else the one :func:`set_paper_size` chose.

    Parameters
    ----------
    size : {"one-column", "two-column"}, optional
        A size to check and return; None: the one in force.

    Returns
    -------
    str
        ``"one-column"`` or ``"two-column"``.
    """
    if size is None:
        return _SIZE["current"]
    if size not in PAPER_SIZES:
        raise InvalidParameterError(
            f"The `size` parameter must be one of {sorted(PAPER_SIZES)}. Got {size!r} instead."
        )
    return size


@contextlib.contextmanager
def paper_style(width: str | None = None) -> Iterator[dict[str, Any]]:
    """Matplotlib rc settings for paper figures, as a context manager.

    ``width`` is ``"one-column"`` / ``"two-column"`` (the older ``"single"`` / ``"double"`` too);
    default: :func:`paper_size`. Figures are drawn with constrained layout (legends and titles
    stay on the canvas) and PDFs embed TrueType fonts (``pdf.fonttype`` 42, no Type 3).

    Parameters
    ----------
    width : {"one-column", "two-column"}, optional
        The figure width (``"single"`` / ``"double"`` are accepted too); None: :func:`paper_size`.

    Yields
    ------
    dict
        ``{"figsize": (w, h), "size": name, "width": w}``, inches; the rc settings apply inside
        the ``with`` block.
    """
    import matplotlib as mpl
    from cycler import cycler

    size = paper_size({"single": "one-column", "double": "two-column"}.get(width or "", width))
    w = PAPER_SIZES[size]
    small = size == "one-column"
    rc: dict[str, Any] = {
        "font.size": 7 if small else 8,
        "axes.titlesize": 7 if small else 8,
        "axes.labelsize": 7 if small else 8,
        "legend.fontsize": 6 if small else 7,
        "legend.title_fontsize": 6 if small else 7,
        "xtick.labelsize": 6 if small else 7,
        "ytick.labelsize": 6 if small else 7,
        "figure.titlesize": 7 if small else 8,
        "lines.linewidth": 1.0 if small else 1.2,
        "lines.markersize": 3.0 if small else 3.5,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.prop_cycle": cycler(color=_PALETTE),
        "figure.constrained_layout.use": True,
        "savefig.bbox": "tight",
        "savefig.dpi": 200,
        "pdf.fonttype": 42,
        "ps.fonttype": 42,
    }
    with mpl.rc_context(rc):  # type: ignore[arg-type]
        yield {"figsize": (w, w * (0.75 if small else 0.45)), "size": size, "width": w}


#: line styles that stay apart in greyscale, in the order series get them (with colour and marker)
_LINESTYLES = ["-", "--", "-.", ":"]


def series_styles(labels: Iterable[str]) -> dict[str, dict[str, str]]:
    """Return a distinct colour, line style and marker for every series of one axes.

    Series ``i`` takes Okabe-Ito colour ``i mod 8``, line style ``(i + i div 8) mod 4`` (solid,
    dashed, dash-dot, dotted) and marker ``i mod 12``, so no two of the first 32 series share
    colour and line style, and in greyscale the markers and dashes still tell them apart.

    Parameters
    ----------
    labels : iterable of str
        The estimator labels of one figure, in order.

    Returns
    -------
    dict of str to dict
        ``{label: {"color": ..., "linestyle": ..., "marker": ...}}``.

    Examples
    --------
    >>> s = series_styles(["a", "b"]); s["a"]["marker"] != s["b"]["marker"]
    True
    """
    labels = list(dict.fromkeys(labels))
    return {
        lab: {
            "color": _PALETTE[i % len(_PALETTE)],
            "linestyle": _LINESTYLES[(i + i // len(_PALETTE)) % len(_LINESTYLES)],
            "marker": _MARKERS[i % len(_MARKERS)],
        }
        for i, lab in enumerate(labels)
    }


def axis_label(text: str, log: bool) -> str:
    """``text`` with " (log scale)" appended when the axis is logarithmic."""
    return f"{text} (log\u00a0scale)" if log and "log" not in text else text  # no break inside


def _wrapped(text: str, inches: float, points: float) -> str:
    """``text`` wrapped to lines of about ``inches`` at a font of ``points`` (about 0.6 em a character)."""
    import textwrap

    chars = max(12, int(inches * 72 / (0.6 * points)))
    return "\n".join(textwrap.wrap(text, chars)) if len(text) > chars else text


#: the tallest panel of a narrow (one-column) figure, in inches: the rest of its height is legend
NARROW_PANEL_MAX = 2.6


def label_axes(ax: Any, xlabel: str | None = None, ylabel: str | None = None) -> None:
    """Set the axis labels, saying "(log scale)" on a logarithmic axis, wrapped to the panel's size.

    Tick labels of log axes are plain text (:func:`plain_log_ticks`).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes.
    xlabel, ylabel : str, optional
        The labels; None leaves an axis unlabelled.
    """
    plain_log_ticks(ax)
    fig = ax.figure
    spec = ax.get_subplotspec()
    rows, cols = spec.get_gridspec().get_geometry() if spec is not None else (1, 1)
    if xlabel is not None:
        text = axis_label(xlabel, ax.get_xscale() == "log")
        ax.set_xlabel(_wrapped(text, 0.85 * fig.get_figwidth() / cols, ax.xaxis.label.get_size()))
    if ylabel is not None:
        text = axis_label(ylabel, ax.get_yscale() == "log")
        tall = fig.get_figheight() / rows
        if fig.get_figwidth() < 5:  # a narrow figure's height holds its legend below: panels <= 2.6 in
            tall = min(tall, NARROW_PANEL_MAX)
        ax.set_ylabel(_wrapped(text, 0.7 * tall, ax.yaxis.label.get_size()))


def add_caption(fig: Any, text: str) -> None:
    """A title line above the figure (wrapped to its width): the settings that are fixed in it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    text : str
        The caption.
    """
    import textwrap

    points = 7 if fig.get_figwidth() < 5 else 8  # as paper_style's figure titles
    chars = max(30, int(fig.get_figwidth() * 72 / (0.62 * points)))  # DejaVu Sans: about 0.55 em a char
    fig.suptitle("\n".join(textwrap.wrap(text, chars)), fontsize=points)


def legend_rows(labels: Iterable[Any], narrow: bool) -> int:
    """Rows of entries a legend of ``labels`` takes (below the panels on a narrow figure: two columns
    when every label is short, else one; beside them on a wide one: one column up to 12 entries)."""
    labels = [str(lab) for lab in labels]
    n = len(labels)
    if narrow:
        short = n > 1 and max(len(lab) for lab in labels) <= 24
        return -(-n // 2) if short else n
    return n if n <= 12 else -(-n // 2)


def legend_height(labels: Iterable[Any], title_lines: int = 0) -> float:
    """Inches a legend below the panels of a narrow figure takes (7 pt entries)."""
    return 0.125 * (legend_rows(labels, True) + title_lines) + 0.1


#: a wide figure with more legend entries than this puts its legend below the panels, in columns
WIDE_LEGEND_MAX = 12
#: columns of a legend below a wide figure's panels
WIDE_BELOW_COLUMNS = 3


def below_columns(labels: Iterable[Any], width: float) -> int:
    """Columns of a legend below the panels of a figure ``width`` inches wide: as many as the
    longest label allows (7 pt DejaVu Sans: about 0.052 in a character, plus the marker), at most
    :data:`WIDE_BELOW_COLUMNS`."""
    longest = max((len(str(lab)) for lab in labels), default=1)
    return max(1, min(WIDE_BELOW_COLUMNS, int((width - 0.2) // (0.052 * longest + 0.45))))


def wide_legend_height(labels: Iterable[Any], title_lines: int = 0, width: float = 7.0) -> float:
    """Inches a legend below the panels of a wide figure takes (7 pt entries, in columns)."""
    labels = list(labels)
    return 0.14 * (-(-len(labels) // below_columns(labels, width)) + title_lines) + 0.15


def legend_for(
    fig: Any, ax: Any, handles: Any = None, labels: Any = None, *, axes_legend: bool = False, **kw: Any
) -> Any:
    """A legend kept on the canvas: right of the axes on wide figures, below them on narrow ones.

    Constrained layout makes room for it. On a wide figure the legend belongs to ``ax`` (pass
    the top right panel), placed right of it and below the figure's caption; with more than
    :data:`WIDE_LEGEND_MAX` entries, or on a narrow figure, it is the figure's, below the panels
    (in :data:`WIDE_BELOW_COLUMNS` columns on a wide one: give the figure
    :func:`wide_legend_height` more height). ``axes_legend`` is accepted for compatibility.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    ax : matplotlib.axes.Axes
        The top right panel (the legend's owner on a wide figure).
    handles, labels : list, optional
        The legend entries; None: those of ``ax``.
    axes_legend : bool, default=False
        Accepted for compatibility; ignored.
    **kw
        Passed to :meth:`matplotlib.figure.Figure.legend` / :meth:`matplotlib.axes.Axes.legend`.

    Returns
    -------
    matplotlib.legend.Legend
        The legend.
    """
    del axes_legend
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    n = len(handles)
    narrow = fig.get_figwidth() < 5
    if not narrow and n > WIDE_LEGEND_MAX:
        kw.setdefault("frameon", False)
        kw.setdefault("fontsize", 7)
        kw.setdefault("title_fontsize", kw["fontsize"])
        ncol = below_columns(labels or [], fig.get_figwidth())
        return fig.legend(handles, labels, loc="outside lower center", ncol=ncol, **kw)
    kw.setdefault("frameon", False)
    kw.setdefault("fontsize", 6 if narrow else 7)
    kw.setdefault("title_fontsize", kw["fontsize"])
    if narrow:  # one column: below the panels, in two columns of short entries
        ncol = 2 if legend_rows(labels or [], True) < n else 1
        return fig.legend(handles, labels, loc="outside lower center", ncol=ncol, **kw)
    return ax.legend(
        handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), ncol=1 if n <= 12 else 2, **kw
    )


def legend_below(fig: Any, handles: Any, labels: Any, title: str | None = None) -> Any:
    """A legend of ``fig`` below its panels, in the most columns (up to 3) whose width fits the
    figure's, measured, not guessed; the figure is made taller by the legend's rows.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (constrained layout keeps the legend below its panels).
    handles, labels : list
        The legend entries.
    title : str, optional
        The legend's title (its lines count as rows).

    Returns
    -------
    matplotlib.legend.Legend
        The legend.
    """
    fontsize = 6 if fig.get_figwidth() < 5 else 7
    renderer = fig.canvas.get_renderer()
    for ncol in (3, 2, 1):  # the widest arrangement that fits
        legend = fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncol=ncol,
            frameon=False,
            fontsize=fontsize,
            title=title,
            title_fontsize=fontsize,
        )
        if ncol == 1 or legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            break
        legend.remove()
    rows = -(-len(labels) // ncol) + (title.count("\n") + 1 if title else 0)
    fig.set_figheight(fig.get_figheight() + 0.14 * rows + 0.1)
    return legend


def log_interval(estimate: Any, mcse: Any, z: float = 2.0) -> tuple[Any, Any]:
    """``estimate * exp(-+ z * mcse / estimate)``: the z-MCSE interval of the log (delta method).

    Used for error bars on log axes, where ``estimate -+ z * mcse`` can be <= 0.
    """
    import numpy as np

    est = np.asarray(estimate, dtype=float)
    rel = np.divide(np.asarray(mcse, dtype=float), est, out=np.zeros_like(est), where=est > 0)
    rel = np.nan_to_num(rel)
    return est * np.exp(-z * rel), est * np.exp(z * rel)
