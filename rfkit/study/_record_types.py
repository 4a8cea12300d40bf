"""The plain records of a study: capabilities, feature maps, metrics, data sources and closed forms.

They hold data and functions only; the registries that hold them, and the records of attention
estimators (which look other records up), are in :mod:`rfkit.study._records`.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from .. import features
from .._params import check_int
from ..exceptions import InvalidParameterError
from ._plain import construct, decode, describe, parameters

__all__ = [
    "KINDS",
    "ATTENTION_KINDS",
    "Capabilities",
    "FeatureMapRecord",
    "MetricRecord",
    "DataSourceRecord",
    "ClosedFormRecord",
    "n_features_budget",
]

#: what a study estimates
KINDS = ("kernel", "attention", "concentration", "drop-in")
#: kinds whose ``[[estimators]]`` are attention estimators (``estimator = ...``), not feature maps
ATTENTION_KINDS = ("attention", "drop-in")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an estimator can do, as the harness and the docs read it.

    Parameters
    ----------
    causal : bool
        Attention estimators: takes ``causal=True`` (decoder attention).
    positive : bool
        Feature maps: every feature is positive (so are kernel estimates).
    closed_form : bool
        A closed-form MSE is registered (:class:`ClosedFormRecord`).
    batched : bool
        Draws many trials in one vectorised call (``sample_streams``, shared directions).
    data_dependent : bool
        Parameters may be fitted to the data (``fit``): the study fits them on each cell's data.
    """

    causal: bool = False
    positive: bool = False
    closed_form: bool = False
    batched: bool = False
    data_dependent: bool = False


@dataclasses.dataclass(frozen=True)
class MetricRecord:
    """A summary metric: the mean over trials (with its MCSE) of one per-trial column.

    Parameters
    ----------
    name : str
        Name in study files (``metrics = [...]``) and in ``summary()``.
    kinds : tuple of str
        Design kinds whose trial tables have the column (``"kernel"``, ``"attention"``,
        ``"concentration"``).
    column : str
        The per-trial column whose mean the metric is.
    better : {"lower", "higher", "zero"}
        Which values are better (``"zero"``: closest to zero, as a bias).
    default : bool, default=False
        Part of the metrics a design of that kind gets when it names none (rfkit's own; keep
        yours False, so designs that name no metrics keep their hash).
    per_trial : callable, optional
        Deprecated alias of ``compute`` (a DeprecationWarning; removed in the next release).
    display_name, description, reference : str
    compute : callable, optional
        Computes the metric's column, one value per trial (shape ``(trials,)``), in the designs
        that name it; rfkit's own metrics compute theirs the same way. It is called with the
        keyword arguments of its design kind that it accepts (all of them if it takes
        ``**kwargs``). Kernel designs: ``ratio`` (estimate/truth, ``(trials, pairs)``, NaN for
        failed trials), ``truth`` (the true kernel values, ``(pairs,)``) and ``ok`` (the trials
        that ran, ``(trials,)`` bool). Attention designs: ``output`` (``(trials, queries, d_v)``),
        ``exact`` (exact attention, ``(queries, d_v)``), ``ok`` and ``nonpositive_rows`` (rows
        with a non-positive normaliser per trial). Concentration designs: ``rms_max`` (the max
        over pairs of sqrt(MSE)/SM), ``realized_max`` (one draw's max relative error) and
        ``bound`` (the theorem's bound), each ``(trials,)``. None: the design's evaluation
        writes the column itself (drop-in designs), or the metric reads a column another
        metric computes.
    proportion : bool, default=False
        The column holds 0/1 outcomes (the coverage of a bound): the summary's interval is
        Wilson's score interval, not a t interval.
    ddof : int, default=0
        Delta degrees of freedom: the summary multiplies the estimate, its MCSE and its interval
        by n / (n - ddof) for n finished trials (where n > ddof). The variance (a mean squared
        deviation from the mean over trials) has ``ddof=1``.
    theory : callable, optional
        The metric's closed form, for a metric that is a mean over a cell's pairs:
        ``theory(pairs) -> per-pair predicted values`` from the kernel study's ``pairs`` table
        (its columns ``truth`` and ``theory_mse``, each pair's closed-form MSE from the map's
        :class:`ClosedFormRecord`). :meth:`StudyResult.compare_theory` compares the measured
        metric with their mean over each cell's pairs, for every metric whose record has one
        (rfkit's ``mse`` and ``rel_mse`` as yours). None: no closed form.
    """

    kind: ClassVar[str] = "metric"
    name: str
    kinds: tuple[str, ...]
    column: str
    better: str = "lower"
    default: bool = False
    per_trial: Callable[..., np.ndarray] | None = None
    display_name: str = ""
    description: str = ""
    reference: str = ""
    compute: Callable[..., np.ndarray] | None = None
    proportion: bool = False
    ddof: int = 0
    theory: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        owner = f"MetricRecord {self.name!r}"
        if self.per_trial is not None:
            if self.compute is not None:
                raise InvalidParameterError(
                    f"{owner}: `per_trial` is the deprecated name of `compute`; give one of them. "
                    f"Got both: per_trial={self.per_trial!r}, compute={self.compute!r}."
                )
            warnings.warn(
                f"{owner}: `per_trial` is deprecated and will be removed in the next release; "
                "pass the same function as `compute`.",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "compute", self.per_trial)
            object.__setattr__(self, "per_trial", None)
        if self.compute is not None and not callable(self.compute):
            raise InvalidParameterError(
                f"The `compute` parameter of {owner} must be a callable returning one value per trial, "
                f"or None. Got {self.compute!r} instead."
            )
        if self.theory is not None and not callable(self.theory):
            raise InvalidParameterError(
                f"The `theory` parameter of {owner} must be a callable pairs -> per-pair predicted values, "
                f"or None. Got {self.theory!r} instead."
            )
        if not isinstance(self.proportion, (bool, np.bool_)):
            raise InvalidParameterError(
                f"The `proportion` parameter of {owner} must be a bool. Got {self.proportion!r} instead."
            )
        object.__setattr__(self, "proportion", bool(self.proportion))
        object.__setattr__(self, "ddof", check_int(self.ddof, "ddof", owner, low=0))
        if self.better not in ("lower", "higher", "zero"):
            raise InvalidParameterError(
                f"MetricRecord {self.name!r}: `better` must be 'lower', 'higher' or 'zero'. Got {self.better!r} instead."
            )
        bad = [k for k in self.kinds if k not in KINDS]
        if not self.kinds or bad:
            raise InvalidParameterError(
                f"MetricRecord {self.name!r}: `kinds` must be a non-empty tuple from {list(KINDS)}. "
                f"Got {self.kinds!r} instead."
            )
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name)


@dataclasses.dataclass(frozen=True)
class DataSourceRecord:
    """A data source: where a cell's queries and keys (and values) come from.

    Parameters
    ----------
    name : str
        ``[data] source = "..."`` in study files.
    factory : callable
        ``factory(params, rng) -> (X, Y)`` paired rows (n, d) for a pair source, or
        ``(Q, K, V)`` for a sequence source; ``params`` are the cell's data parameters (without
        ``source`` and ``dataset``), ``rng`` a Generator on the cell's data stream.
    params : frozenset of str
        The parameters the source takes (``dataset``, which only selects the data stream, is
        added).
    sequence : bool, default=False
        Gives (Q, K, V) sequences (attention designs) rather than pairs (kernel designs).
    needs_dim : bool, default=True
        The data dimension ``dim`` must be given (False: it comes from the data, as for a model).
    model_dim : callable, optional
        ``model_dim(params) -> int``: the dimension of data whose ``dim`` is not given (used to
        size maps for a ``feature_dim`` budget).
    plural_axes : mapping, optional
        ``[data]`` keys that hold a list of an axis's values (``{"layers": "layer"}``): the
        design turns them into that grid axis, one cell per value.
    causal_key : str, optional
        The data parameter that makes cells causal (decoder attention): every estimator then
        gets ``causal = true`` and exact attention is causal.
    describe : callable, optional
        ``describe(Q, K, causal) -> DataFrame`` of data statistics, stored as ``data_stats``.
    probe : bool, default=True
        Check attention estimators on the first cell's data when the design is built (False
        for data that is expensive to load).
    kinds : tuple of str, default=()
        The design kinds the source serves; empty: attention designs for a sequence source,
        kernel and concentration designs for a pair source.
    description, reference : str
    bind : callable, optional
        ``bind(data) -> data``: the design's ``[data]`` table with what identifies the data added
        (a checksum of a model's files, the causality read from the model), applied once when a
        run is planned, so that the design hash, the provenance and a resume see which data the
        run used. None (the default): the table as written.
    dropin : callable, optional
        For a source of drop-in designs that brings its own model: ``dropin(params) -> (model,
        ids, mask)``, the model of a cell's data parameters (the attributes ``name``,
        ``n_layers``, ``head_dim``, ``causal``, ``max_positions`` and the methods ``run``,
        ``logits`` (a decoder) or ``embedding`` (an encoder) of :class:`rfkit.data.PretrainedModel`)
        and the cell's token ids and mask (texts, tokens). None: the built-in models
        (``data.models``) and the ``factory``'s texts.
    """

    kind: ClassVar[str] = "data source"
    name: str
    factory: Callable[..., tuple[Any, ...]]
    params: frozenset[str] = frozenset()
    sequence: bool = False
    needs_dim: bool = True
    model_dim: Callable[[Mapping[str, Any]], int] | None = None
    plural_axes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    causal_key: str | None = None
    describe: Callable[..., Any] | None = None
    probe: bool = True
    kinds: tuple[str, ...] = ()
    description: str = ""
    reference: str = ""
    bind: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    dropin: Callable[[Mapping[str, Any]], tuple[Any, Any, Any]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", frozenset(self.params) | {"dataset"})

    def is_causal(self, params: Mapping[str, Any]) -> bool:
        """True for a cell whose data parameters ask for causal attention."""
        return self.causal_key is not None and bool(params.get(self.causal_key, False))


@dataclasses.dataclass(frozen=True)
class ClosedFormRecord:
    """The closed-form MSE of a feature map, compared with simulation in kernel studies.

    Parameters
    ----------
    map : str
        The feature map's study name (a registered name, or ``"package.module:Class"``).
    mse : callable
        ``mse(fm, X, Y) -> ndarray``: the MSE of the map's kernel estimate for each pair of rows.
        Raise :class:`~rfkit.exceptions.InvalidParameterError` for settings without a closed
        form (the study then records NaN).
    description, reference : str
    """

    kind: ClassVar[str] = "closed form"
    map: str
    mse: Callable[[Any, np.ndarray, np.ndarray], np.ndarray]
    description: str = ""
    reference: str = ""


def n_features_budget(samples: int) -> dict[str, Any]:
    """A feature map's parameters for a budget of ``samples`` random samples: ``n_features``."""
    return {"n_features": int(samples)}


@dataclasses.dataclass(frozen=True)
class FeatureMapRecord:
    """A feature map a study can name.

    Parameters
    ----------
    name : str
        The bare name study files use (``map = "Positive"``).
    factory : type
        The :class:`~rfkit.features.FeatureMap` subclass; ``factory(**params)`` builds the map.
    display_name : str, optional
        Name in figures and tables (default: ``name``).
    from_budget : callable, default=:func:`n_features_budget`
        ``from_budget(samples) -> dict``: the map's parameters for a budget of ``samples``
        random samples (attention designs' ``samples`` axis, RFA's map).
    capabilities : Capabilities
    description, reference : str
    """

    kind: ClassVar[str] = "feature map"
    name: str
    factory: type
    display_name: str = ""
    from_budget: Callable[[int], dict[str, Any]] = n_features_budget
    capabilities: Capabilities = Capabilities()
    description: str = ""
    reference: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.factory, type) and issubclass(self.factory, features.FeatureMap)):
            raise InvalidParameterError(
                f"`map` = {self.name!r} must be a subclass of rk.features.FeatureMap (with feature_dim and "
                f"sample_one). Got {describe(self.factory)} instead."
            )
        if inspect.isabstract(self.factory):
            missing = sorted(getattr(self.factory, "__abstractmethods__", ()))
            raise InvalidParameterError(
                f"`map` = {self.name!r}: {self.factory.__qualname__} does not implement {missing} (the "
                "feature-map protocol needs feature_dim(dim) and sample_one(dim, *, rng)). Got an abstract "
                "class instead."
            )
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name.rsplit(":", 1)[-1])

    @property
    def params(self) -> frozenset[str] | None:
        """The map's parameters (its constructor's keywords; None: it takes any)."""
        p = parameters(self.factory)
        return None if p is None else frozenset(p)

    def validate(self, params: Mapping[str, Any]) -> None:
        """Refuse a parameter the map does not take, naming what it takes."""
        accepted = self.params
        for key, val in params.items():
            if accepted is not None and key not in accepted:
                raise InvalidParameterError(
                    f"{self.factory.__qualname__} has no parameter `{key}` (it takes {sorted(accepted)}). "
                    f"Got {key}={val!r}."
                )

    def build(self, params: Mapping[str, Any]) -> features.FeatureMap:
        """``factory(**params)``, after :meth:`validate` (nested objects decoded, lists for ``A`` as arrays)."""
        self.validate(params)
        kwargs: dict[str, Any] = {}
        for key, val in params.items():
            val = decode(val)
            if key == "A" and isinstance(val, list):
                val = np.asarray(val, dtype=float)
            kwargs[key] = val
        fm = construct(self.factory, kwargs)
        if not isinstance(fm, features.FeatureMap):  # pragma: no cover - a __new__ returning another type
            raise InvalidParameterError(
                f"{self.factory.__qualname__}(...) did not return a FeatureMap. Got {describe(fm)} instead."
            )
        return fm
