"""Option values against their declared types: a method's option block (``<method>:``)
against its dataclass, a reward keyword against the function's annotation."""

from __future__ import annotations

import types
import typing
from typing import Any, Mapping

from recipe.common.preflight.errors import SetupError


def type_name(annotation: Any) -> str:
    """``float``, ``bool``, ``float | None``, ``a list of str`` (a ``tuple[str, ...]`` field from a YAML list)."""
    if typing.get_origin(annotation) in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"a list of {type_name(args[0])}" if args else "a list"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    return "None" if annotation is type(None) else getattr(annotation, "__name__", None) or str(annotation)


def matches(value: Any, annotation: Any) -> bool:
    """Whether an option value from the YAML / command line has the option's declared type (an int is a
    float; a bool is neither a number nor a string; a list of strings is a ``tuple[str, ...]``)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (tuple, list):
        item = args[0] if args else Any
        return isinstance(value, (list, tuple)) and (item is Any or all(matches(v, item) for v in value))
    return True


def is_interpolation(value: Any) -> bool:
    """An unresolved ``${...}`` value: its type is checked once resolved."""
    return isinstance(value, str) and "${" in value


def check_option_types(block: Mapping[str, Any], cls: type, prefix: str) -> None:
    """Raise :class:`SetupError` naming ``prefix.option``, its value and the expected type when a value of
    an option block (``<method>:``) does not have the dataclass field's declared type
    (``<method>.<option>=abc``), instead of a ``TypeError`` traceback from a comparison in the dataclass."""
    hints = typing.get_type_hints(cls)
    for name, value in block.items():
        annotation = hints.get(name)
        if is_interpolation(value):  # checked once resolved
            continue
        if annotation is not None and not matches(value, annotation):
            raise SetupError(f"{prefix}.{name}={value!r} has type {type(value).__name__}; expected "
                                 f"{type_name(annotation)} (default {getattr(cls, name, None)!r})")
