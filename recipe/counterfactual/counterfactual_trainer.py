"""RayCounterfactualTrainer: counterfactual importance weighting (docs/method_counterfactual.md) in the hooks of verl's trainer.

The training loop is :class:`recipe.common.trainer_base.HookedRayPPOTrainer` ``.fit`` (the pinned verl's own, plus
one-line hook calls). This method fills one hook, ``_after_advantage``: token weights from the drop of the
answer's log-probability when a reasoning span is masked, multiplied into the advantages. It builds no
IBPO state, adds no batch rows and logs no ``ibpo/`` metric. It counts its step's FLOPs (main generation,
old-log-prob forward, actor update and the forward of the masked-copy batch: the masked copies and one unmasked
row per measured response, ``compute_accounting.flops.step_flops``) as
``counterfactual/compute/step_flops``, and prices it with the GPU-time model (``compute/modelled_gpu_seconds``),
which the shared compute budget reads (``recipe.common.trainer_base``). Selected by ``method: counterfactual``
(``recipe/counterfactual/config/counterfactual_trainer.yaml``).
"""

from __future__ import annotations

import torch
from verl import DataProto
from verl.utils.debug import marked_timer

from recipe.counterfactual import batch as cf
from counterfactual.importance import CounterfactualConfig
from compute_accounting.flops import step_flops
from recipe.common.methods import method_options
from recipe.common.preflight.model import model_flop_shape
from recipe.common.step_io import generation_work
from recipe.common.trainer_base import HookedRayPPOTrainer, StepCost

STEP_FLOPS_METRIC = "counterfactual/compute/step_flops"  # the step's FLOPs, as logged


class RayCounterfactualTrainer(HookedRayPPOTrainer):
    """verl's PPO trainer with counterfactual token weights on the normalised advantages."""

    COUNTS_FLOPS = True  # its step_cost carries the step's FLOPs (trainer_base)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.counterfactual: CounterfactualConfig = method_options(self.config, "counterfactual")
        self.model_shape = model_flop_shape(self.config.actor_rollout_ref.model.path)

    def _after_advantage(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        with marked_timer("counterfactual", timing_raw, color="purple"):
            self.apply_counterfactual_weights(batch, metrics, timing_raw)

    def apply_counterfactual_weights(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """Token weights from the answer log-prob drop when a reasoning span is masked, multiplied into the
        advantages. Extra no-grad forward passes go through the actor's own ``compute_log_prob``, in one call that
        also scores each measured response unmasked (the drops' log p(a | y)) in the micro-batch of its copies
        (``recipe.counterfactual.batch``: fixed micro-batches of the run's log-prob micro-batch rows, or of as many
        rows as its dynamic token budget holds); groups whose rewards are all equal (zero advantage) are skipped.
        Every row of that call, unmasked rows and fillers included, is counted as forward work."""
        cfg = self.counterfactual
        signal = cf.rows_with_signal(batch, key="token_level_scores")
        micro = None
        if cfg.needs_forward_passes:  # a micro-batch's rows: the copies' layout keeps each unit in one
            longest = int(batch.batch["attention_mask"].sum(-1).max()) if len(batch) else 1
            micro = cf.micro_batch_rows(self.config.actor_rollout_ref.rollout, longest)
        plan = cf.plan_counterfactuals(batch, cfg, cf.make_decode_fn(self.tokenizer), signal, micro)
        log_probs = torch.empty(0, batch.batch["responses"].shape[1])
        forward_rows = []  # valid tokens of each row the call runs: copies, unmasked rows, fillers, verl's padding
        if plan.num_copies:
            divisor = int(self.actor_rollout_wg.world_size) * micro  # every rank's rows: whole micro-batch slots
            with marked_timer("counterfactual_forward", timing_raw, color="purple"):
                masked = cf.build_masked_copies(batch, plan, self.tokenizer.pad_token_id)
                log_probs = cf.compute_masked_log_probs(self.actor_rollout_wg, masked, divisor, micro)
            forward_rows = cf.forward_row_lengths(masked, divisor)
        weights, cf_metrics = cf.counterfactual_token_weights(batch, plan, cfg, batch.batch["old_log_probs"], log_probs)
        batch.batch["advantages"] = batch.batch["advantages"] * weights.to(batch.batch["advantages"].dtype)
        metrics.update(cf_metrics)
        metrics["counterfactual/forward_s"] = timing_raw.get("counterfactual_forward", 0.0)
        work = self._plain_step_work(batch, forward_phases={"counterfactual_forward": forward_rows})
        flops = step_flops(work, self.model_shape).total
        metrics[STEP_FLOPS_METRIC] = flops
        self.step_cost = StepCost(flops, self._model_gpu_seconds(work, generation_work(batch), None, metrics))
