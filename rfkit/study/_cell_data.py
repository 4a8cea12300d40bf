"""The data of a study cell, from its data source's record and the stream of its data setting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._backend import backend_for
from ._records import data_source_record

if TYPE_CHECKING:
    from ._design import Design

__all__ = ["DATA_NAMESPACE", "bind_source", "cell_data", "cell_is_causal", "study_backend", "data_stats"]

#: First spawn-key word of the data streams; trial streams use (cell, trial).
DATA_NAMESPACE = 2**32 - 1


def cell_data(
    design: Design, cell: dict[str, Any], entropy: int, spawn_key: tuple[int, ...]
) -> tuple[np.ndarray, ...]:
    """Paired queries and keys (n_pairs, d) of a cell, or (Q, K, V) for a sequence source.

    Drawn by the source's factory from the stream ``SeedSequence(entropy, spawn_key=spawn_key +
    (DATA_NAMESPACE, data_key))``, where ``data_key`` indexes the cell's data setting: cells
    sharing data parameters share data.
    """
    p = design.data_params(cell)
    ss = np.random.SeedSequence(entropy, spawn_key=tuple(spawn_key) + (DATA_NAMESPACE, design.data_key(cell)))
    gen = np.random.default_rng(ss)
    record = data_source_record(p.pop("source"))
    p.pop("dataset", None)  # only selects the data stream (via data_key)
    return tuple(record.factory(p, gen))


def bind_source(design: Design) -> Design:
    """``design`` with its ``[data]`` table bound by its source's ``bind`` hook (itself without one).

    Called once when a run is planned: what the hook adds (a model's checksum, its causality)
    enters the design hash, so a resume against other data is refused like one with another design.
    """
    bind = data_source_record(design.data["source"]).bind
    if bind is None:
        return design
    data = dict(bind(dict(design.data)))
    if data == dict(design.data):
        return design
    d = design.to_dict()
    d["data"] = data
    return type(design)(**d, source=design.source)


def cell_is_causal(design: Design, cell: dict[str, Any]) -> bool:
    """True for a cell whose data asks for causal attention (real decoder data, ``causal = true``)."""
    return data_source_record(design.data["source"]).is_causal(design.data_params(cell))


def data_stats(design: Design, Q: Any, K: Any, causal: bool) -> Any:
    """Statistics of a cell's data (the source's ``describe``), or None for a source without one."""
    describe = data_source_record(design.data["source"]).describe
    return None if describe is None else describe(Q, K, causal)


def study_backend(design: Design) -> Any:
    """The array backend a design's estimates run on (NumPy unless ``backend``/``device`` say otherwise).

    Raises
    ------
    BackendNotInstalledError
        If the design's library (PyTorch, CuPy) is not installed.
    """
    return backend_for(design.backend, design.device)
