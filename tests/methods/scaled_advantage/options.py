"""The ``scaled_advantage:`` option block (pure: no verl)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping


@dataclass(frozen=True)
class ScaledAdvantageConfig:
    factor: float = field(default=0.5, metadata={"doc": "every advantage is multiplied by this (> 0)"})

    def __post_init__(self):
        if not self.factor > 0:
            raise ValueError(f"scaled_advantage.factor={self.factor!r} must be > 0")

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> "ScaledAdvantageConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown scaled_advantage option(s) {unknown}; known: {sorted(known)}")
        return cls(**options)
