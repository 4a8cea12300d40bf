"""Figures from result tables only (never recomputing estimates).

Import explicitly (``import rfkit.plots``); ``import rfkit`` does not load matplotlib.
Each plot has a pure ``prepare_*`` function returning the exact frame that is drawn, so
tests can check what a figure shows without rendering it.
"""

from ._mse import plot_mse_vs_features, prepare_mse_vs_features
from ._style import estimator_colors, paper_style, save_figure

__all__ = [
    "plot_mse_vs_features",
    "prepare_mse_vs_features",
    "paper_style",
    "estimator_colors",
    "save_figure",
]
