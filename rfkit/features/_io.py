"""Draws as data: a draw written to an ``.npz`` file with JSON metadata (read back by ``_load``).

A random map's draw is a function of the map, the input dimension ``d``, the number of draws
``T`` and one array ``W``: ``spec.from_projection(d, T, W)`` rebuilds it (the directions of PRF,
trig, CEXP, ...; RandomMaclaurin's sampled rows, TensorSketch's hashes; nothing for Taylor and
Limit). The file holds exactly that:

* ``metadata``: a JSON string (a 0-d unicode array): ``format`` (``"rfkit.draw"``),
  ``format_version``, ``rfkit_version``, ``map`` (``class`` as ``"module:Class"`` and
  ``params``, the map's fields; an array field is ``{"array": "map.<name>"}``), ``dim``,
  ``n_draws``, ``draw`` (the draw's class name, checked on loading) and ``projection`` (the
  name of ``W``'s entry, or null);
* ``projection``: ``W``; ``map.<name>``: the map's array parameters (a fitted ``A``, ``G``, ...).

Everything is read with ``np.load(allow_pickle=False)``: no pickle, no code in the file. The file
is written to a temporary file in the same folder and renamed into place (``os.replace``), so a
reader never sees half a draw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import numbers
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._backend import to_numpy
from .._version import __version__
from ..exceptions import InvalidParameterError

if TYPE_CHECKING:
    from ._base import FeatureMap
    from ._draw import FeatureDraw

__all__ = ["save_draw", "as_path", "FORMAT", "FORMAT_VERSION", "META"]

#: the ``format`` entry of every draw file
FORMAT = "rfkit.draw"
#: the version of the draw file format this rfkit writes and reads
FORMAT_VERSION = 1
META = "metadata"
_SOURCE = "projection"
_PREFIX = "map."


def as_path(path: Any, owner: str) -> Path:
    try:
        return Path(os.fspath(path))
    except TypeError:
        raise InvalidParameterError(
            f"The `path` parameter of {owner} must be a str or path-like. "
            f"Got {type(path).__name__} {path!r:.80} instead."
        ) from None


def _class_path(cls: type) -> str:
    """``"rfkit.features:Positive"`` for a public map of rfkit, else ``"module:QualName"``."""
    features = sys.modules.get("rfkit.features")  # imported: the draw's class lives in it
    if getattr(features, cls.__name__, None) is cls:
        return f"rfkit.features:{cls.__name__}"
    return f"{cls.__module__}:{cls.__qualname__}"


def _params(spec: FeatureMap, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The map's fields as JSON values; array fields go to ``arrays`` under ``map.<name>``."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(spec):  # type: ignore[arg-type]
        if not f.init:
            continue
        v = getattr(spec, f.name)
        if isinstance(v, np.generic):
            v = v.item()
        if v is None or isinstance(v, bool | str | float):
            out[f.name] = v
        elif isinstance(v, numbers.Integral):
            out[f.name] = int(v)
        elif hasattr(v, "shape") and hasattr(v, "dtype"):
            arrays[_PREFIX + f.name] = np.ascontiguousarray(to_numpy(v))
            out[f.name] = {"array": _PREFIX + f.name}
        else:
            raise InvalidParameterError(
                f"draw.save(): the `{f.name}` parameter of {spec.name} must be None, a bool, int, "
                f"float, str or an array to be saved. Got {type(v).__name__} {v!r:.80} instead."
            )
    return out


def save_draw(draw: FeatureDraw, path: str | os.PathLike[str]) -> Path:
    """Write ``draw`` to ``path`` (arrays in an ``.npz`` file, JSON metadata), atomically.

    Parameters
    ----------
    draw : FeatureDraw
        A draw of a map that draws through ``_projection``/``_from_projection`` (every map of
        :mod:`rfkit.features`; data-dependent maps after fitting).
    path : str or path-like
        The file to write; an existing file is replaced.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    InvalidParameterError
        A draw rfkit cannot rebuild from arrays (maps of your own drawing through the
        ``sample_one`` hook), a map that is not a dataclass, or a parameter that is neither a
        JSON scalar nor an array.
    """
    target = as_path(path, "draw.save")
    spec = draw.spec
    if spec._uses_sample_hook() or not dataclasses.is_dataclass(spec):
        raise InvalidParameterError(
            f"draw.save(): {type(draw).__name__} of {spec.name} cannot be written as data: only "
            "draws that the map rebuilds from one array (spec.from_projection(dim, n_draws, W), "
            "every map of rk.features) can; a map drawing through the sample_one hook holds "
            "state of its own. Keep the map and the seed instead (spec.sample(dim, rng=seed) "
            f"gives the same draw again). Got a draw of {type(spec).__name__}."
        )
    arrays: dict[str, np.ndarray] = {}
    params = _params(spec, arrays)
    source: str | None = None
    if spec.is_random:
        W = getattr(draw, draw._saved_source, None)
        if W is None:
            raise InvalidParameterError(
                f"draw.save(): {type(draw).__name__} has no `{draw._saved_source}` array (its "
                "_saved_source) to rebuild it from."
            )
        arrays[_SOURCE] = to_numpy(W)
        source = _SOURCE
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "rfkit_version": __version__,
        "map": {"class": _class_path(type(spec)), "params": params},
        "dim": int(draw.dim),
        "n_draws": None if draw.n_draws is None else int(draw.n_draws),
        "draw": type(draw).__name__,
        "projection": source,
    }
    arrays[META] = np.array(json.dumps(meta))
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{threading.get_ident()}.rfkit-tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)  # a file object: no ".npz" appended, the name is the caller's
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return target
