"""Figure records: what a figure kind applies to, how its tidy frame is prepared, drawn and captioned.

One :class:`FigureRecord` per figure kind, registered with :func:`register_figure`: rfkit's own
kinds (registered by :mod:`rfkit.report`, which draws them) exactly as a user's module does. The
record's name is the figure's one name: a study declares it in ``[outputs] figures``,
``StudyResult.figure_names()`` lists it, ``StudyResult.plot(name)`` draws it and the report saves
a kind that draws one figure as ``figures/NAME.pdf`` / ``.png``. Registering a record declares its
name to the study layer (:func:`rfkit.study.figure_kinds`), so designs naming it are accepted.

A record in its short form gives ``prepare`` (the inputs -> a tidy frame; None or empty: the
figure does not apply to this result), ``draw`` (the frame, a matplotlib Axes on a new paper-sized
figure) and ``caption``; ``applies_to`` names the design kinds it is for. A kind that draws
several figures (one per metric, or one per value of a grid axis) gives ``figures`` instead: the
inputs -> ``(file name, draw)`` pairs, ``draw(size)`` returning a captioned Figure.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from ..exceptions import InvalidParameterError
from ..study import FIGURE_ALIASES, KINDS, declare_figure_kind, forget_figure_kind, resolve_figure_kind

__all__ = [
    "FigureInputs",
    "FigureRecord",
    "FigurePlan",
    "register_figure",
    "unregister_figure",
    "figure_record",
    "figure_records",
]

#: ``(file name, draw)`` pairs: ``draw(size)`` draws that figure (``size``: paper size or None)
FigurePlan = list[tuple[str, Callable[[str | None], Any]]]


def describe(obj: Any) -> str:
    """A value as an error message shows it (its type and a short repr)."""
    return f"{type(obj).__name__} {obj!r:.80}"


def did_you_mean(name: Any, known: Any) -> str:
    """``" (did you mean 'x'?)"`` with the known name closest to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, [str(k) for k in known], n=1) if isinstance(name, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


#: a figure's name: a file stem and a TOML string on every system (letters, digits, underscores)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


@dataclasses.dataclass(frozen=True)
class FigureInputs:
    """What a figure is drawn from: a study's design and its saved tables (nothing is recomputed).

    Parameters
    ----------
    design : Design
        The study's design.
    summary : pandas.DataFrame
        ``StudyResult.summary()`` with finite estimates, the estimators shown by display name.
    theory : pandas.DataFrame
        ``StudyResult.compare_theory()`` (empty where there is no closed form), display names too.
    table : callable
        ``table(name)`` gives another saved table (``"pairs"``, ``"timings"``, ``"data_stats"``,
        ``"trials"``) or None.
    """

    design: Any
    summary: pd.DataFrame
    theory: pd.DataFrame
    table: Callable[[str], Any]


def _callable_or_none(value: Any, field: str, what: str) -> None:
    if value is not None and not callable(value):
        raise InvalidParameterError(
            f"The `{field}` parameter of FigureRecord must be a callable ({what}) or None. "
            f"Got {describe(value)} instead."
        )


@dataclasses.dataclass(frozen=True)
class FigureRecord:
    """One figure kind: its name, what it applies to, how its frame is prepared, drawn and captioned.

    Parameters
    ----------
    name : str
        The figure's one name (designs, ``figure_names()``, ``plot()``, the file): a letter, then
        letters, digits or underscores.
    prepare : callable, optional
        ``prepare(inputs)`` with a :class:`FigureInputs` -> the tidy frame drawn (a DataFrame);
        None or an empty frame: the figure does not apply to this result. Required unless
        ``figures`` is given.
    draw : callable, optional
        ``draw(frame, ax)``: draws the frame on ``ax``, a matplotlib Axes on a new figure of the
        paper size in force, inside :func:`rfkit.plots.paper_style` (or the Axes given to
        ``StudyResult.plot(name, ax=...)``); its return value is not used. Required unless
        ``figures`` is given.
    caption : str or callable, optional
        The figure's caption line: a text, or ``caption(design, frame)`` -> text; None: the study's
        caption, naming the study and every setting fixed in the frame (not in ``shown``).
    applies_to : tuple of str or callable, default=()
        The design kinds (``"kernel"``, ``"attention"``, ``"concentration"``, ``"drop-in"``) the
        figure is for, or ``applies_to(design)`` -> bool; empty: every design (``prepare`` may
        still return None).
    figures : callable, optional
        The full form, for a kind that draws several figures: ``figures(inputs)`` -> a list of
        ``(file name, draw)`` pairs, ``draw(size)`` returning the captioned matplotlib Figure.
        Given, it replaces ``prepare``, ``draw`` and ``caption``. A ``draw`` that also takes the
        keyword ``ax`` (``draw(size, *, ax=None)``: the Axes, or one per panel, to draw into,
        without a caption; it returns their Figure) lets ``StudyResult.plot(name, ax=...)`` draw
        the figure into a user's axes, as rfkit's own kinds do; one without it refuses ``ax``.
    shown : tuple of str, default=()
        Grid axes the figure shows (x axis, panels, series): the default caption leaves them out.
    description : str, default=""
        One line on what the figure shows.

    Raises
    ------
    InvalidParameterError
        For a field of the wrong type or value, naming the field and the value received.
    """

    name: str
    prepare: Callable[[FigureInputs], pd.DataFrame | None] | None = None
    draw: Callable[[pd.DataFrame, Any], Any] | None = None
    caption: str | Callable[[Any, pd.DataFrame], str] | None = None
    applies_to: tuple[str, ...] | Callable[[Any], bool] = ()
    figures: Callable[[FigureInputs], FigurePlan] | None = None
    shown: tuple[str, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidParameterError(
                "The `name` parameter of FigureRecord must be a figure name: a letter, then letters, "
                f"digits or underscores (it names the figure's file). Got {self.name!r} instead."
            )
        _callable_or_none(self.figures, "figures", "inputs -> (file name, draw) pairs")
        if self.figures is None:
            for field, what in (("prepare", "inputs -> tidy frame"), ("draw", "(frame, ax) -> None")):
                value = getattr(self, field)
                if not callable(value):
                    raise InvalidParameterError(
                        f"The `{field}` parameter of FigureRecord must be a callable ({what}) unless "
                        f"`figures` is given. Got {describe(value)} instead."
                    )
        else:
            _callable_or_none(self.prepare, "prepare", "inputs -> tidy frame")
            _callable_or_none(self.draw, "draw", "(frame, ax) -> None")
        if self.caption is not None and not (isinstance(self.caption, str) or callable(self.caption)):
            raise InvalidParameterError(
                "The `caption` parameter of FigureRecord must be a text, a callable "
                f"(design, frame) -> text, or None. Got {describe(self.caption)} instead."
            )
        kinds = self.applies_to
        if not callable(kinds):
            if not isinstance(kinds, (tuple, list)) or not all(isinstance(k, str) for k in kinds):
                raise InvalidParameterError(
                    "The `applies_to` parameter of FigureRecord must be a tuple of design kinds from "
                    f"{list(KINDS)} or a callable design -> bool. Got {describe(kinds)} instead."
                )
            unknown = [k for k in kinds if k not in KINDS]
            if unknown:
                raise InvalidParameterError(
                    f"The `applies_to` parameter of FigureRecord must name design kinds from {list(KINDS)}"
                    f"{did_you_mean(unknown[0], KINDS)}. Got {unknown[0]!r} instead."
                )
            object.__setattr__(self, "applies_to", tuple(kinds))
        if not isinstance(self.shown, (tuple, list)) or not all(isinstance(a, str) for a in self.shown):
            raise InvalidParameterError(
                f"The `shown` parameter of FigureRecord must be a tuple of grid axes. Got {describe(self.shown)} instead."
            )
        object.__setattr__(self, "shown", tuple(self.shown))

    def applies(self, design: Any) -> bool:
        """Whether the figure is for this design (``applies_to``); ``prepare`` may still find nothing.

        Parameters
        ----------
        design : Design
            A study's design.

        Returns
        -------
        bool
            True where ``applies_to`` allows the design.
        """
        if callable(self.applies_to):
            return bool(self.applies_to(design))
        return not self.applies_to or design.kind in self.applies_to

    def caption_text(self, design: Any, frame: pd.DataFrame) -> str | None:
        """The record's own caption for a frame (None: the study's caption is used).

        Parameters
        ----------
        design : Design
            The study's design.
        frame : pandas.DataFrame
            The frame drawn.

        Returns
        -------
        str or None
            The caption line.
        """
        if self.caption is None or isinstance(self.caption, str):
            return self.caption
        return str(self.caption(design, frame))


#: every registered figure record, in registration (drawing) order
_FIGURES: dict[str, FigureRecord] = {}


def register_figure(record: FigureRecord, *, replace: bool = False) -> FigureRecord:
    """Register a figure kind under ``record.name`` (an error if taken, unless ``replace=True``).

    rfkit registers its own kinds with this function too (in :mod:`rfkit.report`). The name is
    declared to the study layer, so a design may name it in ``[outputs] figures`` once the module
    registering it is imported (a study file's ``imports = ["mymodule"]``).

    Parameters
    ----------
    record : FigureRecord
        The record.
    replace : bool, default=False
        Replace a record registered under the same name, on purpose.

    Returns
    -------
    FigureRecord
        The record registered.

    Raises
    ------
    InvalidParameterError
        For an object that is not a :class:`FigureRecord`, a taken name without ``replace=True``,
        or an old name of a kind (:data:`rfkit.study._figure_kinds.FIGURE_ALIASES`).
    """
    if not isinstance(record, FigureRecord):
        raise InvalidParameterError(
            f"The `record` parameter of register_figure must be a FigureRecord. Got {describe(record)} instead."
        )
    name = record.name
    if name in FIGURE_ALIASES:
        raise InvalidParameterError(
            f"The figure name `{name}` is the old name of the kind {FIGURE_ALIASES[name]!r} (still accepted "
            f"in designs); choose another name for a figure of your own. Got {name!r}."
        )
    if name in _FIGURES and not replace:
        raise InvalidParameterError(
            f"a figure named {name!r} is already registered; pass replace=True to replace it on purpose."
        )
    _FIGURES[name] = record
    declare_figure_kind(name)
    return record


def unregister_figure(name: str) -> None:
    """Remove a registered figure kind (a user's: rfkit's own names stay declared to designs).

    Parameters
    ----------
    name : str
        The kind's name.
    """
    _FIGURES.pop(name, None)
    forget_figure_kind(name)


def figure_record(name: str) -> FigureRecord:
    """The registered record of a figure kind (an old name gives the new kind's, with a warning).

    Parameters
    ----------
    name : str
        The kind's name.

    Returns
    -------
    FigureRecord
        Its record.

    Raises
    ------
    InvalidParameterError
        For a name no record is registered under (the message names the closest one).
    """
    key = resolve_figure_kind(name) if isinstance(name, str) else None
    if key is None or key not in _FIGURES:
        raise InvalidParameterError(
            f"The `name` parameter must be a registered figure kind{did_you_mean(name, _FIGURES)} "
            f"(registered: {list(_FIGURES)}). Got {name!r} instead."
        )
    return _FIGURES[key]


def figure_records() -> list[FigureRecord]:
    """Every registered figure record, in drawing order (rfkit's own once :mod:`rfkit.report` is imported).

    Returns
    -------
    list of FigureRecord
        The records.
    """
    return list(_FIGURES.values())
