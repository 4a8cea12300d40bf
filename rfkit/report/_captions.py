"""The caption line of a study figure: the study and every setting that is fixed in the figure.

A figure shows some axes of the design (its x axis, its panels, its series); everything else
(the data, the dimension, the norms, the trials, the grid axes with one value in the figure)
is fixed, and the caption names it, e.g. ``"performer-mse (quick profile): pairs data, d = 16,
‖x‖ = ‖y‖ = 0.5, 32 pairs, 400 trials per cell"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

__all__ = ["caption", "setting_text"]

#: how a setting reads in a caption ("{}" is the value)
_FORMATS = {
    "dim": "d = {}",
    "d_v": "d_v = {}",
    "n_pairs": "{} pairs",
    "n_tokens": "{} tokens",
    "n_clusters": "{} clusters",
    "n_texts": "{} texts",
    "max_len": "{} tokens per text",
    "norm": "‖x‖ = ‖y‖ = {}",
    "norm_x": "‖x‖ = {}",
    "norm_y": "‖y‖ = {}",
    "n_features": "m = {}",
    "feature_dim": "D = {}",
    "samples": "S = {}",
    "degree": "degree n = {}",
    "structure": "{} tokens",
    "regime": "{} regime",
    "dataset": "data set {}",
    "set": "set {}",
    "layer": "layer {}",
    "head": "head {}",
    "p": "p = {}",
    "scale": "logit scale {}",
    "mean_q": "query mean {}",
    "cov_q": "query variance {}",
    "mean_k": "key mean {}",
    "cov_k": "key variance {}",
}

#: data sources as a caption names them
_SOURCES = {
    "pairs": "random pairs on spheres",
    "hard": "hard data sets of Blackwelder (2024)",
    "gaussian": "Gaussian queries and keys",
    "sequence": "synthetic token sequences",
    "benchmark": "benchmark pairs",
    "minilm": "MiniLM / SmolLM2 attention heads",
    "passages": "SmolLM2-135M and all-MiniLM-L6-v2 on the built-in passages",
}

#: settings a caption leaves out (bookkeeping, or named by another setting)
_SKIP = {"source", "seed", "layers", "heads", "models", "one_layer", "model_sha256"}


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v)
    return str(v)


def setting_text(key: str, value: Any) -> str:
    """One setting as a caption names it.

    >>> setting_text("dim", 16), setting_text("causal", True)  # doctest: +NORMALIZE_WHITESPACE
    ('d = 16', 'decoder, causal attention')
    """
    if key == "causal":
        return "decoder, causal attention" if bool(value) else "encoder, bidirectional attention"
    return _FORMATS.get(key, key + " = {}").format(_value(value))


def caption(design: Any, rows: pd.DataFrame | None = None, shown: Iterable[str] = ()) -> str:
    """The caption of a figure of ``design`` drawn from ``rows``.

    Names the study (and its quick profile), the data source, the fixed data settings, every
    grid axis with one value in ``rows`` (or in the design) that is not ``shown`` (on the x
    axis, as panels or as series), and the number of trials per cell.
    """
    shown = set(shown) | {"estimator"}
    quick = str(getattr(design, "source", "")).endswith("[quick]")
    head = f"{design.name} (quick profile)" if quick else str(design.name)
    parts: list[str] = []
    data: Mapping[str, Any] = dict(design.data)
    src = data.get("source")
    if src is not None:
        parts.append(_SOURCES.get(str(src), f"{src} data"))
    fixed: dict[str, Any] = {}
    for key, val in data.items():
        if key not in _SKIP and key not in design.grid:
            fixed[key] = val
    for axis, vals in design.grid.items():
        if axis in shown:
            continue
        if rows is not None and axis in rows.columns:
            uniq = pd.unique(rows[axis])
            if len(uniq) == 1:
                fixed[axis] = uniq[0].item() if hasattr(uniq[0], "item") else uniq[0]
        elif len(vals) == 1:
            fixed[axis] = vals[0]
    if "norm_x" in fixed and fixed.get("norm_x") == fixed.get("norm_y"):
        fixed["norm"] = fixed.pop("norm_x")
        fixed.pop("norm_y")
    parts += [setting_text(k, v) for k, v in fixed.items()]
    parts.append(f"{design.trials} trials per cell")
    # no line break inside "d = 16": a no-break space around "=" (and after a leading number)
    parts = [p.replace(" = ", "\u00a0=\u00a0") for p in parts]
    return f"{head}: " + ", ".join(parts)
