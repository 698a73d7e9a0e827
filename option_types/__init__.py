"""An option value against its declared type: one rule for every option block (``ibpo.options.IBPOConfig``,
``counterfactual.importance.CounterfactualConfig``, ``compute_accounting.budget.ComputeBudgetConfig``), for the
pre-flight that reads them from the YAML (``recipe.common.preflight.option_types``) and for a reward function's
keywords. Pure Python: no verl, no method.

The rule: a bool is neither a number nor a string (YAML's ``"false"`` must not pass as true, ``True`` is not a
count); an integer is a float, a float is not an int; ``tuple[str, ...]`` takes a list or tuple of strings, not
a bare string (``"####"`` would read as four one-character items); numpy numbers count as the numbers they
hold.
"""

from __future__ import annotations

import dataclasses
import numbers
import types
import typing
from typing import Any, Mapping, NamedTuple


def type_name(annotation: Any) -> str:
    """``float``, ``bool``, ``float | None``, ``a list of str`` (a ``tuple[str, ...]`` field from a YAML list)."""
    if typing.get_origin(annotation) in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"a list of {type_name(args[0])}" if args else "a list"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    return "None" if annotation is type(None) else getattr(annotation, "__name__", None) or str(annotation)


def matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` has the declared type ``annotation`` (module docstring); other annotations match anything."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if annotation is int:
        return isinstance(value, numbers.Integral)
    if annotation is float:
        return isinstance(value, numbers.Real)
    if annotation is str:
        return isinstance(value, str)
    if origin in (tuple, list):
        item = args[0] if args else Any
        return isinstance(value, (list, tuple)) and (item is Any or all(matches(v, item) for v in value))
    return True


def is_interpolation(value: Any) -> bool:
    """An unresolved ``${...}`` value: its type is checked once resolved."""
    return isinstance(value, str) and "${" in value


class Mistyped(NamedTuple):
    """The first option of a block whose value does not have its declared type."""

    name: str
    value: Any
    annotation: Any
    default: Any

    def message(self, prefix: str) -> str:
        """``prefix.name=value has type T; expected E (default D)``: the one wording every block uses."""
        return (f"{prefix}.{self.name}={self.value!r} has type {type(self.value).__name__}; expected "
                f"{type_name(self.annotation)} (default {self.default!r})")


def first_mistyped(values: Mapping[str, Any], cls: type) -> Mistyped | None:
    """The first entry of ``values`` (option name -> value; unknown names and unresolved interpolations are left
    to their own checks) whose value does not match the declared type of ``cls``'s field of that name."""
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        annotation = hints.get(name)
        if annotation is None or is_interpolation(value) or matches(value, annotation):
            continue
        return Mistyped(name, value, annotation, getattr(cls, name, None))  # a dataclass keeps its defaults here
    return None


def mistyped_field(instance: Any) -> Mistyped | None:
    """:func:`first_mistyped` over a dataclass instance's own fields (for its ``__post_init__``)."""
    return first_mistyped({f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)}, type(instance))


__all__ = ["Mistyped", "first_mistyped", "is_interpolation", "matches", "mistyped_field", "type_name"]
