"""Profiles of a study design (``[quick]``, ``[profiles.NAME]``) and the grid points it leaves out (``exclude``).

A profile is a table of overrides of the study file's values (docs page *Studies*, section
"Profiles"): :func:`merge_overrides` applies one to a design's plain form, :func:`check_profiles`
checks the named profiles and the ``exclude`` entries when a design is built, and
:func:`matches` says whether a grid point is left out by an ``exclude`` entry.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidParameterError
from ._design_checks import check_file_name, design_error

if TYPE_CHECKING:
    from ._design import Design

__all__ = ["MERGED", "merge_overrides", "check_profiles", "matches", "unknown_profile"]

#: keys whose tables a profile merges key by key (the others it replaces as a whole)
MERGED = ("grid", "data", "outputs")
_err = design_error


def merge_overrides(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (a design's ``to_dict()``) with a profile's overrides applied.

    ``grid``, ``data`` and ``outputs`` are merged key by key; an axis the profile's grid sets
    leaves ``data`` (its fixed value), and a key the profile's ``data`` sets leaves the grid (its
    axis), so a value is never both fixed and an axis. Every other key replaces the file's.

    >>> merge_overrides({"data": {"source": "minilm", "max_len": 64}, "grid": {"causal": [False]}, "trials": 20},
    ...                 {"grid": {"max_len": [512]}, "trials": 5})
    {'data': {'source': 'minilm'}, 'grid': {'causal': [False], 'max_len': [512]}, 'trials': 5}
    """
    out = copy.deepcopy(base)
    over = copy.deepcopy(dict(overrides))
    grid_over, data_over = over.get("grid"), over.get("data")
    for key, val in over.items():
        if key in MERGED and isinstance(val, Mapping):
            out[key] = {**out.get(key, {}), **val}
        else:
            out[key] = val
    if isinstance(grid_over, Mapping) and isinstance(out.get("data"), dict):
        for axis in grid_over:
            if axis != "source" and not (isinstance(data_over, Mapping) and axis in data_over):
                out["data"].pop(axis, None)
    if isinstance(data_over, Mapping) and isinstance(out.get("grid"), dict):
        for key in data_over:
            if not (isinstance(grid_over, Mapping) and key in grid_over):
                out["grid"].pop(key, None)
    return out


def matches(cell: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    """True when ``cell`` has every axis value of an ``exclude`` entry (1 and 1.0 match; True and 1 do not).

    >>> matches({"causal": False, "max_len": 1024, "layer": 0}, {"causal": False, "max_len": 1024})
    True
    >>> matches({"causal": True, "max_len": 1024}, {"causal": False, "max_len": 1024})
    False
    """
    for axis, value in entry.items():
        if axis not in cell:
            return False
        got = cell[axis]
        if isinstance(got, bool) != isinstance(value, bool) or got != value:
            return False
    return True


def unknown_profile(source: str, study: str, name: Any, known: Iterable[str]) -> InvalidParameterError:
    """The error for a profile a design does not have, with the closest name (did you mean ...?)."""
    known = list(known)
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return InvalidParameterError(
        f"{source}: study {study!r} has no profile {name!r}{hint}; its profiles: "
        f"{known or 'none'} (a profile is a [profiles.NAME] table of the study file, or [quick])."
    )


def check_profiles(d: Design, top_keys: Iterable[str]) -> None:
    """``profiles`` (names and override keys), ``exclude`` (tables naming grid axes), ``applied_profile``."""
    src = d.source
    allowed = sorted(set(top_keys) - {"name", "profiles", "allow_large"})
    if not isinstance(d.profiles, Mapping):
        raise _err(src, "profiles", "must be a table of [profiles.NAME] tables", d.profiles)
    for name, over in d.profiles.items():
        check_file_name(name, src, f"profiles.{name}", spaces=False)
        if name == "quick":
            raise _err(src, "profiles.quick", "is the [quick] table: write it as [quick]", name)
        if not isinstance(over, Mapping):
            raise _err(src, f"profiles.{name}", "must be a table of overrides", over)
        for key, val in over.items():
            if key not in allowed:
                raise _err(
                    src,
                    f"profiles.{name}.{key}",
                    f"is not a key a profile overrides (allowed: {allowed})",
                    key,
                )
            if key in (*MERGED, "quick") and not isinstance(val, Mapping):
                raise _err(src, f"profiles.{name}.{key}", "must be a table", val)
    if d.applied_profile is not None and (not isinstance(d.applied_profile, str) or not d.applied_profile):
        raise _err(src, "applied_profile", "must be a profile name", d.applied_profile)
    if not isinstance(d.exclude, list):
        raise _err(src, "exclude", "must be a list of tables {axis = value, ...}", d.exclude)
    axes = set(d.grid) if isinstance(d.grid, Mapping) else set()
    for i, entry in enumerate(d.exclude):
        if not isinstance(entry, Mapping) or not entry:
            raise _err(src, f"exclude[{i}]", "must be a non-empty table {axis = value, ...}", entry)
        for axis, value in entry.items():
            if axis not in axes:
                raise _err(
                    src, f"exclude[{i}].{axis}", f"must name a grid axis (the grid has {sorted(axes)})", axis
                )
            if isinstance(value, (list, dict)):
                raise _err(src, f"exclude[{i}].{axis}", "must be one value of the axis (not a list)", value)
    grid_ok = isinstance(d.grid, Mapping) and all(isinstance(v, list) and v for v in d.grid.values())
    if d.exclude and grid_ok and not d.cells():
        raise _err(src, "exclude", "leaves out every cell of the grid", d.exclude)
