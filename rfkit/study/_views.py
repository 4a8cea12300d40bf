"""Live views of the study registries, under the names rfkit has always exported.

``FEATURE_MAPS``, ``METRICS``, ``METRICS_BY_KIND``, ``DATA_SOURCES`` (and the like) read the
registries of :mod:`rfkit.study._records` each time they are used, so a record registered later
(yours) appears in them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ._record_types import KINDS, ClosedFormRecord
from ._records import data_source_record, metric_record, records


def r_name(record: Any) -> str:
    """The registry key of a record (a closed form's is its map's name)."""
    return str(record.map if isinstance(record, ClosedFormRecord) else record.name)


__all__ = [
    "NameView",
    "FEATURE_MAPS",
    "ATTENTION_ESTIMATORS",
    "METRICS",
    "METRICS_BY_KIND",
    "DEFAULT_METRICS",
    "METRIC_SOURCES",
    "DATA_SOURCES",
    "SEQUENCE_SOURCES",
]


class NameView(Sequence[str]):
    """The names of the registered records of one kind, as a live tuple-like sequence."""

    def __init__(self, kind: str, select: Callable[[Any], bool] | None = None) -> None:
        self._kind, self._select = kind, select

    def _names(self) -> tuple[str, ...]:
        return tuple(r_name(r) for r in records(self._kind) if self._select is None or self._select(r))

    def __getitem__(self, i: Any) -> Any:
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:  # one read of the registry, not one per item
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, NameView)) else other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


class _MappingView(Mapping[str, Any]):
    def __init__(self, keys: Callable[[], Sequence[str]], value: Callable[[str], Any]) -> None:
        self._keys, self._value = keys, value

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return self._value(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:
        return repr(dict(self))


def _metrics_of(kind: str, default_only: bool = False) -> tuple[str, ...]:
    return tuple(m.name for m in records("metric") if kind in m.kinds and (m.default or not default_only))


#: every registered feature map, usable by bare name
FEATURE_MAPS = NameView("feature map")
#: every registered attention estimator, usable by bare name
ATTENTION_ESTIMATORS = NameView("attention estimator")
#: every registered metric
METRICS = NameView("metric")
#: the metrics of each design kind
METRICS_BY_KIND: Mapping[str, tuple[str, ...]] = _MappingView(lambda: KINDS, _metrics_of)
#: the metrics a design of each kind gets when it names none
DEFAULT_METRICS: Mapping[str, tuple[str, ...]] = _MappingView(
    lambda: KINDS, lambda k: _metrics_of(k, default_only=True)
)
#: summary metric -> (per-trial column, description)
METRIC_SOURCES: Mapping[str, tuple[str, str]] = _MappingView(
    lambda: tuple(METRICS), lambda m: (metric_record(m).column, metric_record(m).description)
)
#: data parameters per source (``dataset``, on every source, indexes independent data sets)
DATA_SOURCES: Mapping[str, frozenset[str]] = _MappingView(
    lambda: tuple(r.name for r in records("data source")), lambda s: data_source_record(s).params
)
#: data sources that give (Q, K, V) sequences (kind = "attention") rather than pairs
SEQUENCE_SOURCES = NameView("data source", lambda r: r.sequence)
