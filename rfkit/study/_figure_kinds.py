"""The figure kinds a study may declare in ``[outputs] figures = [...]``: names only, no drawing.

The names live here, in the study layer, so that a design is checked against them when it is
built (a misspelt kind is refused with the closest name) without importing the presentation
layer; :mod:`rfkit.report` draws exactly these kinds, in this order
(``rfkit.report.FIGURE_KINDS`` is this tuple). A kind names what is drawn; the files it writes
under ``figures/`` are named by the report (the kind ``cost`` draws ``cost_vs_samples``).
"""

from __future__ import annotations

__all__ = ["FIGURE_KINDS", "DROPIN_FIGURE_KINDS"]

#: the figure kinds of drop-in designs (drawn by ``rfkit.report``'s drop-in section)
DROPIN_FIGURE_KINDS = ("dropin_kl_vs_budget", "dropin_per_layer", "dropin_proxy")

#: figure kinds a study may declare in ``[outputs] figures = [...]``, in the order they are drawn
FIGURE_KINDS = (
    "mse_vs_features",
    "kernel_scatter",
    "error_vs_degree",
    "mse_vs_samples",
    "cost",
    "head_heatmap",
    "coverage",
    "boxplots",
    "ratio_to_reference",
    "mse_vs_cost",
    *DROPIN_FIGURE_KINDS,
)
