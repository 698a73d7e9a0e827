"""λ, the shaping weight of r' = r + λΔ, step by step (``ibpo.lambda_schedule``): fixed, or kept inside
Theorem A.2's variance-reduction range by the step's statistics (:mod:`ibpo.diagnostics`)."""

from __future__ import annotations

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
        self.mode, self.lam, self.fraction, self.momentum = mode, float(lam), float(fraction), float(momentum)
        self.running_lambda_max: float | None = None

    def current(self) -> float:
        """λ to use this step."""
        if self.mode == "fixed" or self.running_lambda_max is None:
            return self.lam
        return min(self.lam, self.fraction * self.running_lambda_max)

    def update(self, stats: TheoremStats) -> None:
        """Fold this step's λ_max into the running estimate."""
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
