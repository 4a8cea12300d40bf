"""Figures from result tables only (never recomputing estimates).

Import explicitly (``import rfkit.plots``); ``import rfkit`` does not load matplotlib.
Figures are sized for a paper: ``set_paper_size("one-column")`` (3.5 in) or
``"two-column"`` (7 in, the default), or ``size=`` on one plot; each series has its own
colour, line style and marker (:func:`series_styles`); PDFs embed TrueType fonts.
Each plot has a pure ``prepare_*`` function returning the exact frame that is drawn, so
tests can check what a figure shows without rendering it.

Every ``plot_*`` function takes ``ax=``: one matplotlib Axes for a single-panel plot, a sequence
(or array) of Axes, one per panel in panel order, for a multi-panel one (the wrong number is
refused, saying how many it needs); given, it draws there and makes no figure. Every one returns
what it drew on: the Axes of a single-panel plot, the 1-D array of the panels' Axes of a
multi-panel one (``.figure`` is the Figure). ``StudyResult.plot`` follows the same rule.

The figure kinds a study draws are records in one registry (:class:`FigureRecord`,
:func:`register_figure`): what a kind applies to, how its tidy frame is prepared, drawn and
captioned, under one name (designs, ``StudyResult.figure_names()``, ``plot()``, the file).
"""

from ._box import plot_metric_boxplot, prepare_metric_boxplot
from ._cost import plot_mse_vs_cost, prepare_mse_vs_cost
from ._dropin import (
    DAMAGE_LABELS,
    plot_damage_vs_budget,
    plot_layer_damage,
    plot_proxy_vs_damage,
    prepare_damage_vs_budget,
    prepare_layer_damage,
    prepare_proxy_vs_damage,
)
from ._heatmap import plot_attention_matrices, plot_head_heatmap, prepare_head_heatmap
from ._lines import plot_metric_lines, prepare_metric_lines
from ._mse import plot_mse_vs_features, prepare_mse_vs_features
from ._names import display_name, display_names, figure_names, is_reference
from ._ratio import plot_ratio_to_reference, prepare_ratio_to_reference
from ._registry import (
    FigureInputs,
    FigurePlan,
    FigureRecord,
    figure_record,
    figure_records,
    register_figure,
    unregister_figure,
)
from ._scatter import plot_kernel_scatter, prepare_kernel_scatter
from ._slopes import fit_slopes
from ._style import (
    PAPER_SIZES,
    add_caption,
    dodged,
    estimator_colors,
    estimator_markers,
    label_axes,
    legend_for,
    paper_size,
    paper_style,
    save_figure,
    series_styles,
    set_paper_size,
)

__all__ = [
    "FigureRecord",
    "FigureInputs",
    "FigurePlan",
    "register_figure",
    "unregister_figure",
    "figure_record",
    "figure_records",
    "plot_mse_vs_features",
    "prepare_mse_vs_features",
    "plot_kernel_scatter",
    "prepare_kernel_scatter",
    "plot_metric_boxplot",
    "prepare_metric_boxplot",
    "fit_slopes",
    "plot_head_heatmap",
    "prepare_head_heatmap",
    "plot_attention_matrices",
    "plot_metric_lines",
    "prepare_metric_lines",
    "plot_ratio_to_reference",
    "prepare_ratio_to_reference",
    "plot_mse_vs_cost",
    "prepare_mse_vs_cost",
    "paper_style",
    "estimator_colors",
    "estimator_markers",
    "dodged",
    "save_figure",
    "set_paper_size",
    "PAPER_SIZES",
    "paper_size",
    "series_styles",
    "label_axes",
    "legend_for",
    "add_caption",
    "display_name",
    "display_names",
    "figure_names",
    "is_reference",
    "DAMAGE_LABELS",
    "plot_damage_vs_budget",
    "prepare_damage_vs_budget",
    "plot_layer_damage",
    "prepare_layer_damage",
    "plot_proxy_vs_damage",
    "prepare_proxy_vs_damage",
]
