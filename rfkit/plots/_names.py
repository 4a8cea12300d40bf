"""Display names of a study's estimators for legends and tick labels, never internal ids.

A study entry names a feature map and/or an attention estimator, a projection and a few
parameters; its display name is built from the registry records' ``display_name`` (the
maps' and estimators' own names), the projection's short name and the parameters that tell
entries apart, e.g. ``{"map": "Positive", "projection": "orthogonal"}`` -> ``"PRF (ORF)"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..exceptions import RFKitError
from ..study import attention_estimator_record, feature_map_record

__all__ = [
    "MAP_NAMES",
    "PROJECTION_NAMES",
    "REFERENCE_MARK",
    "display_name",
    "display_names",
    "figure_names",
    "is_reference",
]

#: short names of rfkit's feature maps in figures (where the record's display name is its bare name)
MAP_NAMES = {
    "Trig": "Trig",
    "Positive": "PRF",
    "Hyperbolic": "Hyperbolic PRF",
    "Taylor": "Taylor",
    "Limit": "limit (1 + x·y/n)ⁿ",
    "RandomMaclaurin": "Random Maclaurin",
}

#: short names of the projections (the random directions), shown in parentheses after the map
PROJECTION_NAMES = {
    "iid": "iid",
    "orthogonal": "ORF",
    "simplex": "simplex",
    "simplex-plus": "simplex+",
    "qmc": "QMC",
    "structured": "SORF",
}

#: study keys that set a budget or a data axis: never part of a name
_SKIP = {"label", "map", "estimator", "projection", "n_features", "samples", "n", "seed", "feature_map"}

#: parameter values with a readable form (key -> value -> text)
_VALUE_NAMES: dict[str, dict[Any, str]] = {
    "A": {"mean": "mean rule", "variance": "mean+variance rule", "identity": "A = I"},
    "weights": {"optimal": "optimal weights", "balance": "balance weights"},
    "proposal": {"chunk-mean": "chunk means"},
    "hyperbolic": {True: "hyperbolic", False: ""},
    "shared_across_heads": {False: "per head", True: ""},
    "variant": {"plain": "plain", "ratio": "ratio"},  # Hybrid's combinations
    "fit_pairs": {"causal": "causal fit", "sequence": "per-sequence fit", "all": ""},  # fitted maps
    "fit_on": {"remainder": "fit on remainder", "all": ""},  # Hybrid's fitted maps
    # Hybrid's keys by content and its remainder
    "scorer": {"oracle": "oracle top-k", "proxy": "proxy top-k", "quest": "Quest top-k", "lsh": "LSH top-k"},
    "remainder": {
        "features": "",
        "none": "no rest",
        "uniform": "uniform rest",
        "stratified": "stratified rest",
        "importance": "IS rest",
    },
}

#: short names of parameters in display names (Hybrid's support: window half-width, sink keys, LSH)
_KEY_NAMES = {"window": "w", "n_global": "sinks", "lsh_buckets": "LSH buckets"}

#: parameters shown only when needed to tell two entries apart
_SECONDARY = {"n_chunks", "samples_per_proposal", "block_size", "refresh", "n_hashes", "proposal_mix"}


def _takes_projection(name: str) -> bool:
    """Whether a feature map has random directions (a ``projection`` parameter)."""
    try:
        params = feature_map_record(name).params
    except (RFKitError, KeyError, ImportError, ValueError):
        return True
    return params is None or "projection" in params


def _record_name(kind: str, name: str) -> str:
    bare = name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    try:
        rec = feature_map_record(name) if kind == "map" else attention_estimator_record(name)
    except (RFKitError, KeyError, ImportError, ValueError):
        return bare
    shown = str(rec.display_name)
    if shown == rec.name and kind == "map":
        return MAP_NAMES.get(rec.name, shown)
    return shown


def _param_text(key: str, val: Any) -> str:
    if isinstance(val, str) and val.startswith("$"):
        return ""  # follows a grid axis: fixed within a figure's x axis
    names = _VALUE_NAMES.get(key, {})
    if isinstance(val, (str, bool)) and val in names:
        return names[val]
    key = _KEY_NAMES.get(key, key)
    if isinstance(val, (list, tuple)):
        nums = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in val)
        return f"{key} = diag({nums})" if key == "A" else f"{key} = ({nums})"
    if isinstance(val, float):
        return f"{key} = {val:g}".replace("-", "−")
    if isinstance(val, int) and not isinstance(val, bool):
        return f"{key} = {val}".replace("-", "−")
    return f"{key} = {val}"


def display_name(entry: Mapping[str, Any], *, secondary: bool = False) -> str:
    """The display name of one ``estimators`` entry of a study.

    Parameters
    ----------
    entry : mapping
        One ``estimators`` entry of a study (``map`` or ``estimator`` with its parameters).
    secondary : bool, default=False
        Name the secondary parameters too.

    Returns
    -------
    str
        The display name.

    Examples
    --------
    >>> display_name({"map": "Positive", "projection": "orthogonal"})
    'PRF (ORF)'
    >>> display_name({"estimator": "LARA", "weights": "balance"})
    'LARA (balance weights)'
    >>> display_name({"estimator": "Hybrid", "variant": "plain", "window": 16, "n_global": 4})
    'Hybrid (plain, w = 16, sinks = 4)'
    """
    parts: list[str] = []
    est = entry.get("estimator")
    head = _record_name("estimator", str(est)) if est is not None else ""
    mp = entry.get("map")
    if mp is not None:
        name = _record_name("map", str(mp))
        head = f"{head}, {name}" if head else name
    if not head:
        head = str(entry.get("label", "?"))
    proj = entry.get("projection")
    if mp is not None and _takes_projection(str(mp)):
        parts.append(PROJECTION_NAMES.get(str(proj), str(proj)) if proj is not None else "iid")
    for key, val in entry.items():
        if key in _SKIP or (key in _SECONDARY and not secondary):
            continue
        text = _param_text(key, val)
        if text:
            parts.append(text)
    if entry.get("n_features") == "match":
        parts.append("same dim.")
    return f"{head} ({', '.join(parts)})" if parts else head


def display_names(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """Display names of a study's entries, in order, made distinct.

    Entries whose names coincide get their secondary parameters too, and where that is not
    enough a number (``"PRF (iid) #2"``).

    Parameters
    ----------
    entries : iterable of mapping
        A study's ``estimators`` entries.

    Returns
    -------
    list of str
        The display names, in order, all distinct.

    Examples
    --------
    >>> display_names([{"map": "Trig"}, {"map": "Trig", "projection": "orthogonal"}])
    ['Trig (iid)', 'Trig (ORF)']
    """
    entries = list(entries)
    names = [display_name(e) for e in entries]
    for i, nm in enumerate(names):
        if names.count(nm) > 1:
            names[i] = display_name(entries[i], secondary=True)
    seen: dict[str, int] = {}
    out = []
    for nm in names:
        seen[nm] = seen.get(nm, 0) + 1
        out.append(nm if seen[nm] == 1 and names.count(nm) == 1 else f"{nm} #{seen[nm]}")
    return out


#: what a reference entry's name ends with in figures: drawn apart, never a competitor at the budget
REFERENCE_MARK = " (reference)"


def is_reference(entry: Mapping[str, Any]) -> bool:
    """Whether a study entry is a reference, not a competitor at its budget.

    Hybrid with ``scorer = "oracle"`` picks its top-k keys by every key's exact logit: it pays
    for all of them, far above the budget it is listed at, so figures draw it as a reference.

    Parameters
    ----------
    entry : mapping
        One ``estimators`` entry of a study.

    Returns
    -------
    bool
        True for a reference entry.

    Examples
    --------
    >>> is_reference({"estimator": "Hybrid", "scorer": "oracle"}), is_reference({"estimator": "RFA"})
    (True, False)
    """
    return entry.get("scorer") == "oracle"


def figure_names(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """The names figures show for a study's entries: references marked.

    :func:`display_names`, with :data:`REFERENCE_MARK` after each reference entry's name
    (:func:`is_reference`). Tables keep :func:`display_names`; the plots draw a name ending in the mark as a reference
    (grey, dashed, open markers, apart from the competitors).

    Parameters
    ----------
    entries : iterable of mapping
        A study's ``estimators`` entries.

    Returns
    -------
    list of str
        The names, in order, all distinct.

    Examples
    --------
    >>> figure_names([{"map": "Trig"}, {"estimator": "Hybrid", "scorer": "oracle"}])
    ['Trig (iid)', 'Hybrid (oracle top-k) (reference)']
    """
    entries = list(entries)
    names = display_names(entries)
    return [nm + REFERENCE_MARK if is_reference(e) else nm for nm, e in zip(names, entries)]
