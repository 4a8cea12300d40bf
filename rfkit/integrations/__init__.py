"""Bridges between rfkit and other libraries, above the core.

:mod:`rfkit.integrations.transformers` captures the queries, keys and values of a Hugging Face
``transformers`` model in rfkit's layout and routes its attention through an rfkit estimator.
Each bridge imports its library when it is used: ``import rfkit`` (and ``import
rfkit.integrations``) imports none of torch or transformers, and nothing in the core imports a
bridge (an import-linter layers contract in ``pyproject.toml`` keeps it so).
"""

from __future__ import annotations

__all__: list[str] = []
