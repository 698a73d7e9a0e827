"""The registry of IBPO shaping variants, one entry per variant (as verl's ``register_adv_est``).

A variant says three things, and nothing else in the project branches on its name:

- ``delta(unmodified_ratio, beta)``: Δ of a wrong response whose correction is right and not a full rewrite
  (every other response gets Δ = 0, App. C.2);
- ``masks_tokens``: whether a shaped response trains only on the tokens its correction changed,
  m_t = 1[t ∉ U] (Eq. 7/17); other responses keep m_t = 1;
- ``max_delta(beta)``: the largest Δ it can produce, for the start check λ·max Δ < 1 (Eq. 8).

Built in: ``binary`` (Δ = β, Eq. 14/19), ``ratio`` (Δ = |U|/T, Eq. 16), ``mask`` (Δ = β with the token
mask, Eq. 7/17). A new variant is one decorated function::

    @register_variant("half", max_delta=lambda beta: beta / 2)
    def half_delta(unmodified_ratio: float, beta: float) -> float:
        return beta / 2

after which ``ibpo.variant=half`` validates and flows through ``ibpo.pipeline.shape_batch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

DeltaFn = Callable[[float, float], float]


@dataclass(frozen=True)
class ShapingVariant:
    """One registered variant (see the module docstring)."""

    name: str
    delta: DeltaFn  # (unmodified_ratio |U|/T, beta) -> Δ of a successfully, locally corrected wrong response
    max_delta: Callable[[float], float]  # beta -> the largest Δ the variant can produce
    masks_tokens: bool  # shaped responses train only on the tokens the correction changed


_VARIANTS: dict[str, ShapingVariant] = {}


def register_variant(name: str, *, max_delta: Callable[[float], float], masks_tokens: bool = False,
                     replace: bool = False) -> Callable[[DeltaFn], DeltaFn]:
    """Decorator: register ``fn(unmodified_ratio, beta) -> Δ`` as the variant ``name``.

    Registering an existing name fails unless ``replace=True`` (a typo must not silently shadow a variant).
    """
    def decorator(fn: DeltaFn) -> DeltaFn:
        if name in _VARIANTS and not replace:
            raise ValueError(f"IBPO variant {name!r} is already registered ({_VARIANTS[name].delta.__qualname__})")
        _VARIANTS[name] = ShapingVariant(name, fn, max_delta, masks_tokens)
        return fn

    return decorator


def unregister_variant(name: str) -> None:
    """Remove a registered variant (tests that register a toy one clean up with this)."""
    _VARIANTS.pop(name, None)


def get_variant(name: str) -> ShapingVariant:
    """The registered variant ``name``; an unknown name raises ``ValueError`` listing the known ones."""
    try:
        return _VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown IBPO variant {name!r}; registered: {variant_names()}") from None


def variant_names() -> tuple[str, ...]:
    """Names of the registered variants, in registration order."""
    return tuple(_VARIANTS)


@register_variant("binary", max_delta=lambda beta: beta)
def binary_delta(unmodified_ratio: float, beta: float) -> float:
    """Eq. 14/19: Δ = β."""
    return float(beta)


@register_variant("ratio", max_delta=lambda beta: 1.0)
def ratio_delta(unmodified_ratio: float, beta: float) -> float:
    """Eq. 16: Δ = |U|/T, the share of the response the correction kept (<= 1)."""
    return float(unmodified_ratio)


@register_variant("mask", max_delta=lambda beta: beta, masks_tokens=True)
def mask_delta(unmodified_ratio: float, beta: float) -> float:
    """Eq. 7/17: Δ = β, and the gradient only on the tokens the correction changed."""
    return float(beta)
