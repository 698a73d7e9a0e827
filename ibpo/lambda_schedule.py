"""λ, the shaping weight of r' = r + λΔ, step by step (``ibpo.lambda_schedule``): fixed, or kept inside
Theorem A.2's variance-reduction range by the step's statistics (:mod:`ibpo.diagnostics`)."""

from __future__ import annotations

import math
import numbers

from ibpo.diagnostics import TheoremStats


class LambdaSchedule:
    """λ per step: ``fixed`` returns the configured λ; ``theorem`` clips it to ``fraction`` × a running
    (EMA) estimate of λ_max = 2C/V_φ, so the shaping stays inside Theorem A.2's variance-reduction range.

    Steps where λ_max is undefined (no shaped response, V_φ = 0) leave the running estimate unchanged;
    before the first estimate the configured λ is used.
    """

    def __init__(self, mode: str, lam: float, fraction: float = 0.5, momentum: float = 0.9):
        if mode not in ("fixed", "theorem"):
            raise ValueError(f"lambda_schedule must be 'fixed' or 'theorem', got {mode!r}")
        for name, value, ok, allowed in (("lam", lam, lambda v: v >= 0.0, ">= 0"),
                                         ("lambda_max_fraction", fraction, lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
                                         ("lambda_max_momentum", momentum, lambda v: 0.0 <= v < 1.0, "in [0, 1)")):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                    or not ok(value):
                raise ValueError(f"ibpo.{name}={value!r} is out of range: must be a finite number {allowed}")
        self.mode, self.lam, self.fraction, self.momentum = mode, float(lam), float(fraction), float(momentum)
        self.running_lambda_max: float | None = None

    def current(self) -> float:
        """λ to use this step."""
        if self.mode == "fixed" or self.running_lambda_max is None:
            return self.lam
        return min(self.lam, self.fraction * self.running_lambda_max)

    def update(self, stats: TheoremStats) -> None:
        """Fold this step's λ_max into the running estimate; non-finite statistics raise (a NaN C fails
        ``C <= 0`` and would silently fold λ_max = 0 into the running estimate)."""
        if not all(math.isfinite(v) for v in (stats.c, stats.v_phi, stats.lambda_max)):
            raise ValueError(f"Theorem A.2 statistics must be finite; got C = {stats.c}, V_φ = {stats.v_phi}, "
                             f"λ_max = {stats.lambda_max}")
        if stats.v_phi <= 0.0 or stats.c <= 0.0:
            return
        if self.running_lambda_max is None:
            self.running_lambda_max = stats.lambda_max
        else:
            self.running_lambda_max = self.momentum * self.running_lambda_max + (1 - self.momentum) * stats.lambda_max

    def state_dict(self) -> dict:
        return {"running_lambda_max": self.running_lambda_max}

    def load_state_dict(self, state: dict) -> None:
        self.running_lambda_max = state.get("running_lambda_max")
