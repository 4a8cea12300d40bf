"""Batches of single draws: the fallback for maps that draw through the ``sample_one`` hook.

Without a vectorised ``_sample_many``, ``sample(dim, rng=g, n_draws=T)`` makes ``T`` single
draws from the independent child streams ``g.spawn(T)`` and ``sample_streams(dim, rngs)`` one
draw from each stream; :class:`StackedDraw` stacks their outputs along a leading axis, so
draw ``t`` depends on its own stream only (a study's numbers then do not depend on chunking
or workers). Protocol violations found on the way raise an
:class:`~rfkit.exceptions.InvalidParameterError` naming the class, what it lacks and what was
received (see :mod:`rfkit.features._protocol` for the full check).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._backend import get_backend
from .._random import check_rng
from ..exceptions import InvalidParameterError
from ._draw import FeatureDraw, Features

if TYPE_CHECKING:
    from ._base import FeatureMap

__all__ = [
    "StackedDraw",
    "sample_with_hook",
    "streams_with_hook",
    "stack_draws",
    "violation",
    "ProtocolViolation",
    "DOCS",
    "class_name",
]

DOCS = "see the docs page 'Bring your own estimator'"


def class_name(obj: Any) -> str:
    return type(obj).__qualname__


class ProtocolViolation(InvalidParameterError):
    """A map that does not follow the protocol (an InvalidParameterError; private marker class)."""


def violation(fm: Any, what: str, got: str) -> InvalidParameterError:
    return ProtocolViolation(
        f"{class_name(fm)} does not follow the rfkit feature-map protocol: {what}. Got {got} instead ({DOCS})."
    )


# ----------------------------------------------------------------------------- batching fallback
def _one(fm: FeatureMap, dim: int, gen: np.random.Generator) -> FeatureDraw:
    draw = fm.sample_one(dim, rng=gen)
    if not isinstance(draw, FeatureDraw):
        raise violation(
            fm,
            "sample_one(dim, *, rng) must return one rk.features.FeatureDraw",
            f"{type(draw).__name__} {draw!r:.80}",
        )
    if draw.n_draws is not None or draw.dim != dim:
        raise violation(
            fm,
            f"sample_one(dim={dim}, *, rng) must return a single draw for dim={dim} (n_draws=None)",
            f"a draw with dim={draw.dim}, n_draws={draw.n_draws}",
        )
    return draw


def stack_draws(fm: FeatureMap, dim: int, rngs: list[np.random.Generator]) -> FeatureDraw:
    """``len(rngs)`` single draws, draw ``t`` from ``rngs[t]``, stacked (the default ``_sample_many``)."""
    return StackedDraw(fm, dim, [_one(fm, dim, g) for g in rngs])


def _many(fm: FeatureMap, dim: int, gens: list[np.random.Generator]) -> FeatureDraw:
    draw = fm._sample_many(dim, gens)
    if not isinstance(draw, FeatureDraw) or draw.n_draws != len(gens) or draw.dim != dim:
        got = (
            f"a draw with dim={draw.dim}, n_draws={draw.n_draws}"
            if isinstance(draw, FeatureDraw)
            else f"{type(draw).__name__}"
        )
        raise violation(
            fm,
            f"_sample_many(dim={dim}, rngs) must return one FeatureDraw with n_draws=len(rngs)={len(gens)}",
            got,
        )
    return draw


def sample_with_hook(fm: FeatureMap, dim: int, rng: Any, n_draws: int | None) -> FeatureDraw:
    """``fm.sample`` for maps with the ``sample_one`` hook.

    One draw from ``rng``; or ``n_draws=T`` draws from the ``T`` independent child streams
    ``Generator.spawn(T)`` (so the same int seed gives the same batch, and a Generator passed
    twice gives new draws).
    """
    gen = check_rng(rng)
    if n_draws is None:
        return _one(fm, dim, gen)
    return _many(fm, dim, gen.spawn(n_draws))


def streams_with_hook(fm: FeatureMap, dim: int, rngs: list[Any]) -> FeatureDraw:
    """``fm.sample_streams`` for maps with the ``sample_one`` hook: draw ``t`` from ``rngs[t]`` only."""
    return _many(fm, dim, [check_rng(r, "rngs") for r in rngs])


class StackedDraw(FeatureDraw):
    """``T`` single draws of one map behaving as one batched draw (leading axis ``T`` on every output).

    The fallback for maps without a vectorised ``_sample_many``: each method evaluates the
    ``T`` draws one after another and stacks the results, so it is exact, and slower than a
    vectorised draw by the Python loop over draws.

    Parameters
    ----------
    spec : FeatureMap
        The map the draws come from.
    dim : int
        Input dimension.
    draws : list of FeatureDraw
        Single draws (``n_draws=None``), one per stream.
    """

    def __init__(self, spec: FeatureMap, dim: int, draws: list[FeatureDraw]) -> None:
        if not draws:
            raise InvalidParameterError(f"StackedDraw of {spec.name} needs at least one draw. Got none.")
        super().__init__(spec, dim, len(draws))
        self.draws = list(draws)

    @property
    def owner(self) -> str:
        return f"{self.spec.name} draws"

    def _features(self, X: Any, side: str) -> Features:
        xp = get_backend(("X", X)).xp
        fs = [d._features(X, side) for d in self.draws]
        for f in fs:
            if not isinstance(f, Features):
                raise violation(
                    self.spec,
                    f"the draw's {'queries' if side == 'query' else 'keys'} must be rk.features.Features"
                    "(values, log_scale)",
                    f"{type(f).__name__}",
                )
        return Features(
            values=xp.stack([f.values for f in fs]), log_scale=xp.stack([f.log_scale for f in fs])
        )

    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        xp = get_backend(("X", X)).xp
        parts = [d._log_features(X, side) for d in self.draws]
        logabs = xp.stack([la for _, la in parts])
        if all(s is None for s, _ in parts):
            return None, logabs
        return xp.stack([s if s is not None else xp.ones_like(la) for s, la in parts]), logabs

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        xp = get_backend(("X", X)).xp
        parts = [d._slog_pairwise(X, Y) for d in self.draws]
        return xp.stack([s for s, _ in parts]), xp.stack([la for _, la in parts])
