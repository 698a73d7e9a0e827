"""Command-line options checked when they are parsed (``argparse`` types), the same idea as this package's rule
for option blocks: a value out of range is a one-line ``argparse`` error naming the option
(``argument --pairs: must be an integer >= 1, got '0'``) before any work, not a ``ZeroDivisionError`` after
it, a table of zeros, or a plan in which a NaN budget never runs out. Used by every tool in ``scripts/``."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
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


def output_folder(text: str) -> Path:
    """An ``argparse`` type: a folder to write into, existing or not, but not a file nor below one (the tool
    would otherwise fail with ``NotADirectoryError`` after its work began)."""
    path = Path(text).expanduser()
    for where in (path, *path.absolute().parents):
        if where.exists():
            if not where.is_dir():
                raise argparse.ArgumentTypeError(f"{where} is a file, not a folder")
            break
    return path


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)
positive_float = float_in(0.0, low_open=True)
nonnegative_float = float_in(0.0)
finite_float = float_in()
probability = float_in(0.0, 1.0)


def given_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The ``dest`` of every option ``argv`` gives explicitly (a default is not given; an abbreviation such as
    ``--budget-s`` is resolved as ``parser`` resolves it): ``argv`` parsed again by a copy of ``parser`` whose
    defaults are all ``argparse.SUPPRESS``, a subcommand's parser's too (``evaluate.py run``). Call it after
    ``parser.parse_args(argv)`` succeeded."""
    import copy

    def suppress_defaults(p: argparse.ArgumentParser) -> None:
        for action in p._actions:
            action.default = argparse.SUPPRESS
            if isinstance(action, argparse._SubParsersAction):
                for sub in set(action.choices.values()):  # aliases share one parser
                    sub._defaults.clear()  # set_defaults(func=...) is no option given
                    suppress_defaults(sub)

    quiet = copy.deepcopy(parser)
    suppress_defaults(quiet)
    return set(vars(quiet.parse_args(argv)))


def refuse_unused(parser: argparse.ArgumentParser, argv: list[str] | None, unused: dict[str, str], mode: str,
                  why: str) -> None:
    """``parser.error`` naming every option of ``unused`` (``{dest: "--option"}``) that ``argv`` gives although
    ``mode`` does not use it (``why``), instead of accepting it and doing nothing with it."""
    given = sorted(flag for dest, flag in unused.items() if dest in given_options(parser, argv))
    if given:
        parser.error(f"{', '.join(given)}: not used with {mode} ({why}); drop {'it' if len(given) == 1 else 'them'}")
