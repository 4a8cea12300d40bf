"""Log-axis tick labels in plain text with Unicode superscripts (no mathtext to parse)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["unicode_power", "plain_log_ticks", "plain_number_ticks", "plain_number"]

_SUPERSCRIPT = str.maketrans("0123456789-.", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻·")
_MATH_POWER = re.compile(r"^\$\\mathdefault\{(?:([0-9.]+)\\times)?([0-9.e]+)\^\{(-?[0-9]+)\}\}\$$")


def unicode_power(label: str) -> str:
    r"""A tick label of matplotlib's log formatter (mathtext ``$\mathdefault{10^{-3}}$``) as plain
    text with Unicode superscripts (``10⁻³``, ``1.5×2¹``); any other label unchanged.

    Mathtext labels are parsed by pyparsing for every figure, size and resolution: a tenth of a
    second per log-scaled figure. DejaVu Sans draws the superscript digits.

    >>> unicode_power(r"$\mathdefault{10^{-3}}$"), unicode_power(r"$\mathdefault{1.5\times2^{1}}$"), unicode_power("7")
    ('10⁻³', '1.5×2¹', '7')
    """
    m = _MATH_POWER.match(label)
    if m is None:
        return label
    mant, base, exp = m.groups()
    return f"{mant + '×' if mant else ''}{base}{exp.translate(_SUPERSCRIPT)}"


def plain_log_ticks(ax: Any) -> None:
    """Tick labels of the log-scaled axes of ``ax`` in plain text (:func:`unicode_power`), no mathtext."""
    from matplotlib.ticker import FuncFormatter, LogFormatter

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() != "log":
            continue
        for which in ("major", "minor"):
            fmt = axis.get_major_formatter() if which == "major" else axis.get_minor_formatter()
            if isinstance(fmt, LogFormatter):
                plain = FuncFormatter(lambda x, pos, f=fmt: unicode_power(f(x, pos)))
                plain.set_locs = fmt.set_locs  # type: ignore[method-assign]  # the thresholds of LogFormatter
                (axis.set_major_formatter if which == "major" else axis.set_minor_formatter)(plain)


def plain_number(value: float) -> str:
    """A tick value as a plain number: ``0.1``, ``1``, ``6``, ``128`` (``1e-05`` below 10⁻⁴).

    >>> plain_number(0.1), plain_number(6.0), plain_number(128.0), plain_number(2e-5)
    ('0.1', '6', '128', '2e-05')
    """
    return f"{value:g}"


def plain_number_ticks(ax: Any) -> None:
    """Tick labels of the log-scaled axes of ``ax`` as plain numbers (:func:`plain_number`), no powers.

    The ticks labelled stay those the axis' formatter labels (a log axis labels some minor ticks
    when it spans less than a decade or two); only their text changes: ``6``, not ``6×10⁰``.
    """
    from matplotlib.ticker import FuncFormatter

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() != "log":
            continue
        for which in ("major", "minor"):
            fmt = axis.get_major_formatter() if which == "major" else axis.get_minor_formatter()
            plain = FuncFormatter(lambda x, pos, f=fmt: plain_number(x) if f(x, pos) else "")
            plain.set_locs = fmt.set_locs  # type: ignore[method-assign]  # the formatter's label thresholds
            (axis.set_major_formatter if which == "major" else axis.set_minor_formatter)(plain)
