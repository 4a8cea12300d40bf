"""Imported once by the fork server that figure workers fork from: the plotting libraries.

Importing this module selects matplotlib's Agg backend and imports pyplot, the PNG and PDF
backends and rfkit's figure code, so that each worker forked from the server draws at once
instead of spending a third of a second on imports. It is meant for that server only
(:data:`rfkit.report._parallel_figures.PRELOAD`); the calling process never imports it, and
so never pays for matplotlib when its figures are drawn by workers.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.backends.backend_agg  # noqa: E402
import matplotlib.backends.backend_pdf  # noqa: E402
import matplotlib.pyplot  # noqa: E402, F401

from . import _parallel_figures  # noqa: E402, F401
