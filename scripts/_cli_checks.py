"""Argument types for the command-line tools in scripts/: every numeric option is checked when it is parsed,
so a value out of range is a one-line ``argparse`` error naming the option (``argument --pairs: must be an
integer >= 1, got '0'``) before any work, not a ``ZeroDivisionError`` after it, a table of zeros, or a plan
in which a NaN budget never runs out.

Not a script: the scripts import it by path (``scripts/`` is not a package; verl ships a top-level
``scripts``). Also here: :func:`interval_text`, the one way the scripts print an interval, which says
``n = 1: no interval`` instead of printing a zero-width one over a single unit.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable


def int_at_least(low: int) -> Callable[[str], int]:
    """An ``argparse`` type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    parse.__name__ = f"int >= {low}"
    return parse


def float_in(low: float | None = None, high: float | None = None, low_open: bool = False,
             high_open: bool = False) -> Callable[[str], float]:
    """An ``argparse`` type: a finite number in the given range (NaN and inf are always refused: NaN passes
    every ``<`` test)."""
    if low is None and high is None:
        what = "a finite number"
    else:
        left = "-inf" if low is None else f"{low:g}"
        right = "inf" if high is None else f"{high:g}"
        what = (f"a finite number in {'(' if low_open or low is None else '['}{left}, {right}"
                f"{')' if high_open or high is None else ']'}")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        ok = math.isfinite(value)
        if ok and low is not None:
            ok = value > low if low_open else value >= low
        if ok and high is not None:
            ok = value < high if high_open else value <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    parse.__name__ = what
    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)
positive_float = float_in(0.0, low_open=True)
nonnegative_float = float_in(0.0)
finite_float = float_in()
probability = float_in(0.0, 1.0)


def interval_text(mean: float, low: float, high: float, n: int, fmt: str = "{:.3f}", unit: str = "seeds",
                  bounds: tuple[float, float] | None = None) -> str:
    """``mean [low, high]``, or the mean alone with why there is no interval: fewer than two independent
    units (``n = 1: no interval``), or no spread among them (``zero spread over n seeds: no interval``).
    ``bounds``: the range the quantity lives in (e.g. (0, 1) for an accuracy); an interval reaching outside it
    is cut to it and marked ``(clipped to [0, 1])``."""
    point = fmt.format(mean)
    if n < 2:
        return f"{point} (n = {n}: no interval)"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{point} (no interval)"
    if high - low <= 1e-12 * max(1.0, abs(mean)):
        return f"{point} (zero spread over {n} {unit}: no interval)"
    note = ""
    if bounds is not None and (low < bounds[0] or high > bounds[1]):
        low, high = max(low, bounds[0]), min(high, bounds[1])
        note = f" (clipped to [{bounds[0]:g}, {bounds[1]:g}])"
    return f"{point} [{fmt.format(low)}, {fmt.format(high)}]{note}"
