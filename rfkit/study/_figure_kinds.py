"""The figure kinds a study may declare in ``[outputs] figures = [...]``: names only, no drawing.

The names live here, in the study layer, so that a design is checked against them when it is
built (a misspelt kind is refused with the closest name) without importing the presentation
layer. Each name is that of one figure record (:class:`rfkit.plots.FigureRecord`), which says
what the figure applies to, how it is prepared, drawn and captioned; registering a record
(:func:`rfkit.plots.register_figure`, rfkit's own as a user's) declares its name here. The
built-in names are listed below as well, so that a design naming them is checked before the
presentation layer is loaded; ``rfkit.report`` registers their records, in this order.

**One name per figure.** A kind's name is the figure's one name: in designs, in
``StudyResult.figure_names()``, in ``StudyResult.plot(name)`` and in the file under ``figures/``.
A kind that draws one figure saves it as ``figures/KIND.pdf`` / ``.png``. A kind that draws one
figure per metric or per grid setting names each ``KIND_SUFFIX``: the metric drawn (left out
for the metric the kind is named after: ``mse_vs_features`` is the MSE figure and
``mse_vs_features_rel_mse`` the relative-MSE one), then ``_axis-value`` for each grid axis that
varies between its figures (``head_heatmap_model-smollm2``); ``coverage`` draws ``coverage`` and
``coverage_tightness``. ``figure_names()`` lists each kind's name, then the names of its figures
where they differ; ``plot(KIND)`` draws the kind's first figure and ``plot(KIND_SUFFIX)`` that
figure, so every name ``figure_names()`` lists is a file the report writes or a kind's name.
"""

from __future__ import annotations

import warnings

from ..exceptions import RFKitDeprecationWarning

__all__ = [
    "FIGURE_KINDS",
    "DROPIN_FIGURE_KINDS",
    "FIGURE_ALIASES",
    "declare_figure_kind",
    "forget_figure_kind",
    "figure_kinds",
    "resolve_figure_kind",
]

#: the figure kinds of drop-in designs (drawn by ``rfkit.report``'s drop-in section)
DROPIN_FIGURE_KINDS = ("dropin_damage_vs_budget", "dropin_per_layer", "dropin_proxy")

#: rfkit's own figure kinds, in the order they are drawn (their records: ``rfkit.report``)
FIGURE_KINDS = (
    "mse_vs_features",
    "kernel_scatter",
    "error_vs_degree",
    "mse_vs_samples",
    "cost_vs_samples",
    "head_heatmap",
    "coverage",
    "boxplots",
    "ratio_to_reference",
    "mse_vs_cost",
    *DROPIN_FIGURE_KINDS,
)

#: old names of figure kinds, accepted with an :class:`~rfkit.exceptions.RFKitDeprecationWarning`
#: for one release (study files may name them): old name -> the kind's name now
FIGURE_ALIASES = {"cost": "cost_vs_samples", "dropin_kl_vs_budget": "dropin_damage_vs_budget"}

#: every declared kind (rfkit's own first, then those registered since), in drawing order
_DECLARED: dict[str, None] = dict.fromkeys(FIGURE_KINDS)


def declare_figure_kind(name: str) -> None:
    """Declare a figure kind a design may name (called by :func:`rfkit.plots.register_figure`).

    Parameters
    ----------
    name : str
        The kind's name (checked by :class:`rfkit.plots.FigureRecord`).
    """
    _DECLARED.setdefault(name, None)


def forget_figure_kind(name: str) -> None:
    """Withdraw a kind declared by :func:`declare_figure_kind` (rfkit's own kinds stay).

    Parameters
    ----------
    name : str
        The kind's name.
    """
    if name not in FIGURE_KINDS:
        _DECLARED.pop(name, None)


def figure_kinds() -> tuple[str, ...]:
    """The figure kinds a design may declare now: rfkit's own, then those registered, in drawing order.

    Returns
    -------
    tuple of str
        The names.

    Examples
    --------
    >>> figure_kinds()[:2]
    ('mse_vs_features', 'kernel_scatter')
    """
    return tuple(_DECLARED)


def resolve_figure_kind(name: str, *, warn: bool = True) -> str:
    """The name a figure kind has now: ``name`` itself, or the new name of an old one (warned).

    Parameters
    ----------
    name : str
        A figure kind as a design or a caller names it.
    warn : bool, default=True
        Warn (:class:`~rfkit.exceptions.RFKitDeprecationWarning`) when ``name`` is an old name.

    Returns
    -------
    str
        The kind's name (unchecked when ``name`` is neither a kind nor an old name).

    Examples
    --------
    >>> resolve_figure_kind("mse_vs_features")
    'mse_vs_features'
    >>> resolve_figure_kind("cost", warn=False)
    'cost_vs_samples'
    """
    new = FIGURE_ALIASES.get(name)
    if new is None or name in _DECLARED:
        return name
    if warn:
        warnings.warn(
            f"the figure kind {name!r} is now named {new!r} (its files under figures/ are named after it); "
            f"the old name is accepted until the next release: write {new!r} in `[outputs] figures`.",
            RFKitDeprecationWarning,
            stacklevel=3,
        )
    return new
