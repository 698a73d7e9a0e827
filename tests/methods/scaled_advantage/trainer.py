"""verl's trainer (through the launcher's hooked fit) with the advantages scaled in the one hook it fills."""

from __future__ import annotations

from verl import DataProto

from recipe.common.methods import method_options
from recipe.common.trainer_base import HookedRayPPOTrainer


class RayScaledAdvantageTrainer(HookedRayPPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaled = method_options(self.config, "scaled_advantage")

    def _after_advantage(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        before = batch.batch["advantages"].abs().sum().item()
        batch.batch["advantages"] = batch.batch["advantages"] * self.scaled.factor
        metrics["scaled_advantage/factor"] = self.scaled.factor
        metrics["scaled_advantage/abs_sum_before"] = before
        metrics["scaled_advantage/abs_sum_after"] = batch.batch["advantages"].abs().sum().item()
