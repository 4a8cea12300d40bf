"""Paper style: sizes for single/double columns, colour-blind-safe palette, fixed estimator colours."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "paper_style",
    "estimator_colors",
    "estimator_markers",
    "dodged",
    "save_figure",
    "COLUMN_WIDTH",
    "DOUBLE_WIDTH",
]

COLUMN_WIDTH = 3.4  # inches, one column of a two-column paper
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
    """
    labels = list(dict.fromkeys(labels))
    return {lab: _MARKERS[i % len(_MARKERS)] for i, lab in enumerate(labels)}


def dodged(x: Any, index: int, count: int, *, log: bool, width: float | None = None) -> Any:
    """``x`` shifted sideways for series ``index`` of ``count``, so coinciding points stay visible.

    The shifts spread evenly over ``width``: on a log2 axis a fraction of an octave (``x`` is
    multiplied by ``2**shift``; default 0.2), on a linear axis a fraction of the smallest gap
    between distinct ``x`` values (default 0.1). A single series is not moved.
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


@contextlib.contextmanager
def paper_style(width: str = "single") -> Iterator[dict[str, Any]]:
    """Matplotlib rc settings for paper figures; yields ``{"figsize": (w, h)}``."""
    import matplotlib as mpl

    w = COLUMN_WIDTH if width == "single" else DOUBLE_WIDTH
    rc: dict[str, Any] = {
        "font.size": 8,
        "axes.titlesize": 8,
        "axes.labelsize": 8,
        "legend.fontsize": 7,
        "xtick.labelsize": 7,
        "ytick.labelsize": 7,
        "lines.linewidth": 1.2,
        "lines.markersize": 3.5,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "savefig.bbox": "tight",
        "savefig.dpi": 200,
        "pdf.fonttype": 42,
    }
    with mpl.rc_context(rc):  # type: ignore[arg-type]
        yield {"figsize": (w, w * 0.75)}


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file (unique per process and thread), fsync, rename.

    A reader never sees a half-written figure; on failure the temporary file is removed and the
    ``OSError`` raised.
    """
    import os
    import threading

    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.rfkit-tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        if tmp.exists():
            tmp.unlink()
        raise


def save_figure(fig: Any, path: str | Path) -> list[Path]:
    """Save ``fig`` as vector PDF and PNG next to each other, each atomically; returns the two paths."""
    import io

    p = Path(path)
    if p.suffix.lower() in (".pdf", ".png", ".svg"):
        p = p.with_suffix("")
    p.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for ext in (".pdf", ".png"):
        q = p.with_name(p.name + ext)  # not with_suffix: stems may hold dots (``set-norm-0.5``)
        buf = io.BytesIO()
        fig.savefig(buf, format=ext[1:], bbox_inches="tight", dpi=200)
        _write_atomically(q, buf.getvalue())
        out.append(q)
    return out


def log_interval(estimate: Any, mcse: Any, z: float = 2.0) -> tuple[Any, Any]:
    """``estimate * exp(-+ z * mcse / estimate)``: the z-MCSE interval of the log (delta method).

    Used for error bars on log axes, where ``estimate -+ z * mcse`` can be <= 0.
    """
    import numpy as np

    est = np.asarray(estimate, dtype=float)
    rel = np.divide(np.asarray(mcse, dtype=float), est, out=np.zeros_like(est), where=est > 0)
    rel = np.nan_to_num(rel)
    return est * np.exp(-z * rel), est * np.exp(z * rel)
