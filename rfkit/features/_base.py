r"""The feature-map base class: hyperparameters, ``fit`` and the ways to draw.

A :class:`FeatureMap` is a frozen specification; ``sample`` draws its random part and
returns a :class:`~rfkit.features.FeatureDraw` (:mod:`rfkit.features._draw`), which holds
the scaled-feature numerics. Maps of your own draw through the public hook
:meth:`FeatureMap.sample_one` and are batched by :mod:`rfkit.features._stacked`.
"""

from __future__ import annotations

import abc
import dataclasses
import warnings
from typing import Any

import numpy as np

from .._validation import check_int
from ..exceptions import NotFittedError, RFKitDeprecationWarning, ShapeError
from ..projections import sample_projection_on
from ._draw import FeatureDraw, Features
from ._repr import map_repr
from ._stacked import sample_with_hook, stack_draws, streams_with_hook

# Features and FeatureDraw are defined in ._draw and re-exported here (their historical home).
__all__ = ["Features", "FeatureMap", "FeatureDraw"]


class FeatureMap(abc.ABC):
    """Base class of rfkit's frozen feature-map specifications.

    Subclasses are frozen dataclasses whose fields are the hyperparameters;
    ``sample`` draws the random part and returns a :class:`FeatureDraw`.

    A map of your own (see the "Bring your own estimator" page of the docs) implements
    :meth:`feature_dim` and the extension hook :meth:`sample_one` (one draw, every random
    number from the Generator ``rng`` it is given), and returns a :class:`FeatureDraw` subclass that
    implements ``_log_features``. ``sample(dim, n_draws=T)`` and :meth:`sample_streams` then
    work without more code: ``T`` single draws, each from its own stream, stacked along a
    leading axis (:class:`rfkit.features.StackedDraw`). Override :meth:`_sample_many` for a
    vectorised batch. :func:`rfkit.features.check_feature_map` checks the protocol; studies
    and :func:`rfkit.theory.check` run it on every map, rfkit's own included.
    """

    #: True when estimates are strictly positive for every input (PRF family).
    is_positive: bool = True
    #: True for random maps; deterministic maps ignore ``rng``.
    is_random: bool = True
    #: True when the map's directions are exactly
    #: ``rfkit.projections.sample_projection_streams(self.projection, self.n_features, dim, rngs)``:
    #: maps with this flag and equal (projection, n_features, dim) get identical directions from
    #: identical streams, so a study draws them once per chunk of trials and shares them.
    shares_projection: bool = False
    #: True when the map's draws accept directions that live on a device
    #: (:meth:`projection_on` and :meth:`from_projection` with an array of another library):
    #: a study with ``draws = "backend"`` draws them there. Other maps draw with NumPy.
    device_draws: bool = False

    def __repr__(self) -> str:
        """The map with its parameters; array parameters (a fitted ``A``, say) by shape and dtype only."""
        if not dataclasses.is_dataclass(self):  # a map of your own that is not a dataclass
            return object.__repr__(self)
        return map_repr(self)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        legacy = cls.__dict__.get("_sample_one")
        if legacy is None or "sample_one" in cls.__dict__:
            return
        # A map written against the private hook ``_sample_one(dim, rng)``: it keeps working for
        # one release through this adapter, and its author is told the public name once, here.
        warnings.warn(
            f"{cls.__qualname__} defines the feature-map hook _sample_one(dim, rng), which is "
            "deprecated and will stop being called in the next release; rename it to the public "
            "hook sample_one(self, dim, *, rng) (the same body; rng becomes keyword-only).",
            RFKitDeprecationWarning,
            stacklevel=3,  # this frame, ABCMeta.__new__, then the class statement
        )

        def sample_one(self: FeatureMap, dim: int, *, rng: Any) -> FeatureDraw:
            return self._sample_one(dim, rng)  # type: ignore[attr-defined, no-any-return]

        sample_one.__doc__ = FeatureMap.sample_one.__doc__
        sample_one.__qualname__ = f"{cls.__qualname__}.sample_one"
        cls.sample_one = sample_one  # type: ignore[method-assign]

    @property
    def name(self) -> str:
        """Short name of the estimator family."""
        return type(self).__name__

    @abc.abstractmethod
    def feature_dim(self, dim: int) -> int:
        """Number of feature columns ``D`` for inputs of dimension ``dim``."""

    def fit(self, queries: Any, keys: Any) -> FeatureMap:
        """Resolve data-adaptive parameters from a query/key sample.

        Returns a new specification with every parameter concrete (maps without
        adaptive parameters return ``self``).
        """
        return self

    #: Parameters that :meth:`fit` resolves from data when they are None (OPRF's ``A``, ...).
    _fitted_params: tuple[str, ...] = ()

    @property
    def needs_data(self) -> bool:
        """True if some parameter is a rule that must be resolved with :meth:`fit`."""
        return any(getattr(self, p) is None for p in self._fitted_params)

    def sample(
        self,
        dim: int | None = None,
        *,
        rng: Any = None,
        n_draws: int | None = None,
        data: tuple[Any, Any] | None = None,
    ) -> FeatureDraw:
        """Draw the random part of the feature map.

        Parameters
        ----------
        dim : int, optional
            Input dimension ``d``; inferred from ``data`` when omitted.
        rng : {None, int, SeedSequence, Generator}, optional
            When ``rng`` is None, a new Generator is created using entropy from the
            operating system. Types other than Generator are passed to
            :func:`numpy.random.default_rng`. Pass an int for reproducible output
            across calls; a Generator passed twice gives different draws.
        n_draws : int, optional
            Number ``T`` of independent draws made at once. Every output of the
            draw then has a leading axis of length ``T``, so Monte Carlo trials
            vectorise.
        data : (queries, keys), optional
            Sample used to resolve data-adaptive parameters (``A="mean"``,
            OPRF's ``A=None``) through :meth:`fit`.

        Returns
        -------
        FeatureDraw
        """
        spec: FeatureMap = self
        if data is not None:
            q, k = data
            spec = self.fit(q, k)
            if dim is None:
                dim = int(q.shape[-1] if hasattr(q, "shape") else np.shape(q)[-1])
        if spec.needs_data:
            spec._raise_needs_data()
        if dim is None:
            raise ShapeError(f"{self.name}.sample() needs `dim` (or `data` to infer it from).")
        d = check_int(dim, "dim", f"{self.name}.sample", low=1)
        T = None if n_draws is None else check_int(n_draws, "n_draws", f"{self.name}.sample", low=1)
        return spec._sample(d, rng=rng, n_draws=T)

    def sample_streams(self, dim: int, rngs: Any, *, data: tuple[Any, Any] | None = None) -> FeatureDraw:
        """Draw ``T = len(rngs)`` independent feature sets, draw ``t`` using only ``rngs[t]``.

        The result behaves like ``sample(dim, n_draws=T)`` (leading axis ``T`` on every
        output) but draw ``t`` depends only on its own stream, so a Monte Carlo trial's
        numbers do not depend on how trials are chunked or distributed over workers.

        Parameters
        ----------
        dim : int
            Input dimension.
        rngs : sequence of {int, SeedSequence, Generator}
            One random stream per draw.
        data : (queries, keys), optional
            Resolves data-adaptive parameters as in :meth:`sample`.
        """
        spec: FeatureMap = self.fit(*data) if data is not None else self
        if spec.needs_data:
            spec._raise_needs_data()
        d = check_int(dim, "dim", f"{self.name}.sample_streams", low=1)
        streams = list(rngs)
        if not streams:
            raise ShapeError(f"{self.name}.sample_streams() needs at least one stream in `rngs`.")
        if spec._uses_sample_hook():
            return streams_with_hook(spec, d, streams)
        if not spec.is_random:
            return spec._from_projection(d, len(streams), None)
        return spec._from_projection(d, len(streams), spec._projection_streams(d, streams))

    def _raise_needs_data(self) -> None:
        """Raise :class:`~rfkit.exceptions.NotFittedError` naming what :meth:`fit` resolves."""
        missing = [p for p in self._fitted_params if getattr(self, p) is None]
        names = " and ".join(missing) or "its parameters"
        raise NotFittedError(
            f"{self.name}({', '.join(f'{p}=None' for p in missing)}) resolves {names} from data: "
            f"call .fit(Q, K), pass data=(Q, K) to sample(), or give {names} explicitly."
        )

    def _sample(self, dim: int, *, rng: Any, n_draws: int | None) -> FeatureDraw:
        """Draw for a validated dimension."""
        if self._uses_sample_hook():
            return sample_with_hook(self, dim, rng, n_draws)
        W = self._projection(dim, rng=rng, n_draws=n_draws) if self.is_random else None
        return self._from_projection(dim, n_draws, W)

    # ---------------------------------------------------------------- draws from given directions
    def projection_streams(self, dim: int, rngs: list[Any]) -> np.ndarray:
        """Random directions of one draw per stream, stacked with shape ``(T, m, d)``.

        Draw ``t`` uses ``rngs[t]`` alone. Together with :meth:`from_projection` this lets a
        harness draw directions once and build the features of several maps (or several
        chunks of trials) around them. Built-in random maps only; maps drawing through the
        :meth:`sample_one` hook raise :class:`NotImplementedError`.
        """
        return self._projection_streams(dim, rngs)

    def projection_on(self, dim: int, n_draws: int | None, gen: Any) -> Any:
        """Random directions drawn on a device by the library's own generator, ``(T, m, d)``.

        ``gen`` is a :class:`~rfkit._backend_random.BackendGenerator`; the directions have the
        distribution of :meth:`projection_streams`'s (statistically equivalent, other numbers) and
        stay on ``gen``'s device, for :meth:`from_projection`. Maps with ``device_draws``
        only; others raise :class:`NotImplementedError`.
        """
        if not self.device_draws:
            raise NotImplementedError(
                f"{self.name} draws its directions with NumPy only (device_draws is False)."
            )
        return sample_projection_on(
            self.projection,  # type: ignore[attr-defined]
            self.n_features,  # type: ignore[attr-defined]
            dim,
            gen,
            n_draws=n_draws,
        )

    def from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        """The draw of this map around given directions ``W`` (``None`` for deterministic maps).

        ``W`` has shape ``(m, d)`` for one draw or ``(n_draws, m, d)`` for a stack, as returned
        by :meth:`projection_streams`.

        Raises
        ------
        NotFittedError
            A data-dependent map whose parameters are not fitted yet (call :meth:`fit`).
        """
        if self.needs_data:
            self._raise_needs_data()
        return self._from_projection(dim, n_draws, W)

    # ---------------------------------------------------------------- extension hooks
    def sample_one(self, dim: int, *, rng: Any) -> FeatureDraw:
        """One draw for inputs of dimension ``dim``: the extension hook of a map of your own.

        Override this in a map of your own (with :meth:`feature_dim`); :meth:`sample`,
        :meth:`sample_streams`, batches of draws and studies then work without more code.
        rfkit calls it with a validated ``dim`` and a :class:`numpy.random.Generator`; a batch
        of ``T`` draws is ``T`` calls, each with its own independent stream, stacked
        (:class:`rfkit.features.StackedDraw`) unless :meth:`_sample_many` is overridden.

        On a map that does not override it (rfkit's built-in maps, which draw through
        ``_projection``/``_from_projection``) it is ``sample(dim, rng=rng)``.

        Parameters
        ----------
        dim : int
            Input dimension ``d`` (validated, >= 1, when rfkit calls the hook).
        rng : numpy.random.Generator
            The only source of randomness of the draw: take every random number from it, never
            from the global ``np.random`` functions or state kept between draws, so that the
            same stream gives the same draw. Keyword-only, as ``rng`` everywhere in rfkit.

        Returns
        -------
        FeatureDraw
            A single draw (``n_draws=None``) with ``dim`` equal to the argument.

        Notes
        -----
        Maps that define the private ``_sample_one(dim, rng)`` instead still work for one
        release; defining such a class emits :class:`~rfkit.exceptions.RFKitDeprecationWarning`.
        """
        return self.sample(dim, rng=rng)

    def _sample_many(self, dim: int, rngs: list[np.random.Generator]) -> FeatureDraw:
        """Optional extension hook: ``len(rngs)`` draws at once, draw ``t`` from ``rngs[t]`` only.

        Returns a :class:`FeatureDraw` with ``n_draws=len(rngs)`` whose outputs have that
        leading axis. The default stacks :meth:`sample_one` draws
        (:class:`rfkit.features.StackedDraw`); override it for speed. Draw ``t`` must depend on
        ``rngs[t]`` alone, so that a study's numbers do not depend on how trials are chunked.
        """
        return stack_draws(self, dim, rngs)

    def _uses_sample_hook(self) -> bool:
        """True for maps that implement the extension hook :meth:`sample_one`."""
        return type(self).sample_one is not FeatureMap.sample_one

    def _projection(self, dim: int, *, rng: Any, n_draws: int | None) -> np.ndarray:
        """The random directions of one (or ``n_draws``) draws (built-in random maps)."""
        raise NotImplementedError(self._no_draw_message())

    def _projection_streams(self, dim: int, rngs: list[Any]) -> np.ndarray:
        """Directions of one draw per stream, stacked (T, m, d)."""
        return np.stack([self._projection(dim, rng=r, n_draws=None) for r in rngs])

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        """Build the draw object around given directions (built-in maps)."""
        raise NotImplementedError(self._no_draw_message())

    def _no_draw_message(self) -> str:
        return (
            f"{self.name} implements neither the extension hook sample_one(dim, *, rng) nor "
            "_projection/_from_projection: it cannot draw features"
        )
