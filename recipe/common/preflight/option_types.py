"""Option values against their declared types, in the pre-flight: a method's option block (``<method>:``)
against its dataclass, a reward keyword against the function's annotation. The rule itself is the
method-neutral :mod:`option_types`; this module raises it as a :class:`SetupError`."""

from __future__ import annotations

from typing import Any, Mapping

from option_types import first_mistyped, is_interpolation, matches, type_name
from recipe.common.preflight.errors import SetupError


def check_option_types(block: Mapping[str, Any], cls: type, prefix: str) -> None:
    """Raise :class:`SetupError` naming ``prefix.option``, its value and the expected type when a value of
    an option block (``<method>:``) does not have the dataclass field's declared type
    (``<method>.<option>=abc``), instead of a ``TypeError`` traceback from a comparison in the dataclass."""
    wrong = first_mistyped(block, cls)
    if wrong is not None:
        raise SetupError(wrong.message(prefix))


__all__ = ["check_option_types", "is_interpolation", "matches", "type_name"]
