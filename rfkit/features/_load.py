"""Draws as data: :func:`load_draw` reads a draw written by ``draw.save`` (format: :mod:`._io`).

Apart from :mod:`._io` because it needs :class:`FeatureMap`, whose module imports the draws that
write themselves through :mod:`._io`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..exceptions import DrawFormatError
from ._base import FeatureMap
from ._draw import FeatureDraw
from ._io import FORMAT, FORMAT_VERSION, META, as_path

__all__ = ["load_draw"]


def _not_a_draw(path: Path, why: str) -> DrawFormatError:
    return DrawFormatError(
        f"{path} is not an rfkit draw (an .npz file written by draw.save(), format {FORMAT!r}): {why}."
    )


def _map_class(path: Path, name: Any) -> type[FeatureMap]:
    """The map class named ``"module:QualName"``: rfkit's modules are imported, others must be already."""
    if not isinstance(name, str) or name.count(":") != 1:
        raise _not_a_draw(path, f"the map class must be 'module:Class', got {name!r:.80}")
    module, qualname = name.split(":")
    obj: Any = None
    if module == "rfkit" or module.startswith("rfkit."):
        with contextlib.suppress(ImportError):
            obj = importlib.import_module(module)
    else:
        obj = sys.modules.get(module)
        if obj is None:
            raise DrawFormatError(
                f"{path}: the draw's map class {name} is defined in module {module!r}, which is not "
                "imported; import it before loading (load_draw imports rfkit's modules only)."
            )
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, FeatureMap)):
        raise _not_a_draw(path, f"the map class {name} is not an rk.features.FeatureMap")
    return obj


def _array(z: Any, path: Path, key: Any) -> np.ndarray:
    if not isinstance(key, str) or key not in z.files:
        raise _not_a_draw(path, f"the array {key!r:.80} named by its metadata is missing")
    return np.asarray(z[key])


def _count(path: Path, meta: dict[str, Any], key: str, *, optional: bool) -> int | None:
    v = meta.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise _not_a_draw(path, f"`{key}` must be an int >= 1, got {v!r:.80}")
    return v


def load_draw(path: str | os.PathLike[str]) -> FeatureDraw:
    """Read a draw written by :meth:`FeatureDraw.save <rfkit.features.FeatureDraw.save>`.

    The loaded draw equals the saved one bit for bit (features, kernel and pairwise estimates).
    The file is read with ``np.load(allow_pickle=False)``; the map's class is imported by name
    from rfkit (a map of your own: import its module first).

    Parameters
    ----------
    path : str or path-like
        The file.

    Returns
    -------
    FeatureDraw
        The draw, with its map (``draw.spec``), ``dim`` and ``n_draws``.

    Raises
    ------
    DrawFormatError
        The file is not an rfkit draw, or was written in another format version (the message
        names both versions).
    FileNotFoundError
        No file at ``path``.

    Examples
    --------
    >>> import os, tempfile, rfkit as rk
    >>> draw = rk.features.Positive(n_features=16).sample(dim=4, rng=0)
    >>> path = draw.save(os.path.join(tempfile.mkdtemp(), "prf.npz"))
    >>> rk.features.load_draw(path)
    ExpDraw(map=Positive(n_features=16, projection='iid'), dim=4, n_draws=None)
    """
    source = as_path(path, "load_draw")
    try:
        z = np.load(source, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise _not_a_draw(source, f"{type(exc).__name__}: {exc}") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise _not_a_draw(source, f"it holds a single array of shape {z.shape}")
    with z:
        return _read(z, source)


def _read(z: Any, path: Path) -> FeatureDraw:
    if META not in z.files:
        raise _not_a_draw(path, f"it has no {META!r} entry (entries: {', '.join(z.files) or 'none'})")
    raw = z[META]
    try:
        meta = json.loads(str(raw[()])) if raw.dtype.kind == "U" and raw.ndim == 0 else None
    except json.JSONDecodeError as exc:
        raise _not_a_draw(path, f"its metadata is not JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        shown = meta.get("format") if isinstance(meta, dict) else meta
        raise _not_a_draw(path, f"its metadata's format is {shown!r:.80}")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise DrawFormatError(
            f"{path} is an rfkit draw in format version {version!r} (written by rfkit "
            f"{meta.get('rfkit_version', '?')}), but this rfkit ({__version__}) reads format "
            f"version {FORMAT_VERSION} only; load it with the rfkit that wrote it."
        )
    spec_meta = meta.get("map")
    if not isinstance(spec_meta, dict) or not isinstance(spec_meta.get("params"), dict):
        raise _not_a_draw(path, "its metadata has no map with params")
    cls = _map_class(path, spec_meta.get("class"))
    params = {
        k: _array(z, path, v["array"]) if isinstance(v, dict) and "array" in v else v
        for k, v in spec_meta["params"].items()
    }
    dim = _count(path, meta, "dim", optional=False)
    n_draws = _count(path, meta, "n_draws", optional=True)
    W = None if meta.get("projection") is None else _array(z, path, meta["projection"])
    try:
        spec = cls(**params)
        draw = spec.from_projection(dim, n_draws, W)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - any refusal of the stored parameters
        raise DrawFormatError(
            f"{path}: {cls.__name__} refused the stored parameters and arrays ({type(exc).__name__}: {exc})."
        ) from exc
    if type(draw).__name__ != meta.get("draw"):
        raise DrawFormatError(
            f"{path}: the stored draw is a {meta.get('draw')!r:.80}, but {cls.__name__} now builds "
            f"a {type(draw).__name__} from it."
        )
    return draw
