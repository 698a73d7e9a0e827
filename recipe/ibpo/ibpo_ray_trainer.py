"""RayIBPOTrainer: the IBPO correction pass (paper Alg. 1, App. E.2) in the hooks of verl's trainer.

The training loop is :class:`recipe.ibpo.trainer_base.HookedRayPPOTrainer` ``.fit``, verl 0.9.1's own
``RayPPOTrainer.fit`` plus one-line hook calls. IBPO fills four of them:
  1. ``_after_generation``: after the main ``generate_sequences`` and *before* ``sleep_replicas()`` (the
     replicas still hold π_θ): the correction pass -- references, correction prompts through the same
     rollout manager, scoring by the same reward function, alignment, rewrite filter, Δ and token masks
     (:meth:`RayIBPOTrainer.ibpo_correction_pass`, the numbers from ``ibpo.pipeline``);
  2. ``_extend_batch_before_balance``: optional joint training rows (App. E.2 (C)) and no-op padding;
  3. ``_shape_rewards``: ``token_level_rewards = token_level_scores + λΔ`` (Eq. 15/27), then verl calls the
     ``ibpo`` estimator;
  4. ``_after_advantage``: ``advantages ·= m_t`` (Eq. 7/17) before the actor update, the IBPO metrics and
     the optional gradient probe; ``_step_metrics``: the IBPO host time as a share of the step.
ReMax is not supported (it needs a second sampled generation of its own). Validation never runs the
correction pass (``_validate`` is verl's own).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.utils.debug import marked_timer

from ibpo.config import IBPOConfig
from ibpo.pipeline import shape_batch
from ibpo.variants import get_variant
from ibpo.diagnostics import LambdaSchedule, estimate_step_flops, theorem_stats
from recipe.ibpo import correction as corr
from recipe.ibpo.setup_checks import check_trainer_config, count_model_params, ibpo_config_from, model_max_positions
from recipe.ibpo.trainer_base import HookedRayPPOTrainer


def generation_tokens(output: DataProto | None) -> tuple[float, float]:
    """(prompt tokens prefilled, tokens generated) of a ``generate_sequences`` output (0, 0 for None)."""
    if output is None or len(output) == 0:
        return 0.0, 0.0
    generated = float(output.batch["response_mask"].sum())
    return float(output.batch["attention_mask"].sum()) - generated, generated


class RayIBPOTrainer(HookedRayPPOTrainer):
    """verl's PPO trainer with IBPO's counterfactual correction pass in every training step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        model_path = self.config.actor_rollout_ref.model.path
        self._init_ibpo_state(model_max_positions(model_path), count_model_params(model_path))

    def _init_ibpo_state(self, max_positions: int | None, num_model_params: int) -> None:
        """The validated ``ibpo:`` block, the start checks, the λ schedule and the compute counter."""
        self.ibpo: IBPOConfig = ibpo_config_from(self.config)
        check_trainer_config(self.config, self.ibpo, self.tokenizer, max_positions)
        self.lambda_schedule = LambdaSchedule(self.ibpo.lambda_schedule, self.ibpo.lam,
                                              self.ibpo.lambda_max_fraction, self.ibpo.lambda_max_momentum)
        self.num_model_params = num_model_params
        self.compute_totals = {"total_tokens": 0.0, "total_flops": 0.0, "generated_tokens": 0.0}
        self._step_correction: corr.CorrectionPass | None = None  # this step's correction pass
        self._step_lambda = self.ibpo.lam  # the λ this step shapes with
        self._main_gen_started = 0.0

    # ------------------------------------------------------------------ hooks of HookedRayPPOTrainer.fit
    def _before_generation(self, gen_batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        self._step_correction = None
        self._main_gen_started = time.perf_counter()

    def _after_generation(self, gen_batch: DataProto, gen_output: DataProto, metrics: dict,
                          timing_raw: dict) -> None:
        """IBPO (1): the correction pass, while the replicas still serve π_θ; Δ and m become batch keys."""
        timing_raw["ibpo_main_gen"] = time.perf_counter() - self._main_gen_started
        metrics["ibpo/main_prompt_tokens"], metrics["ibpo/main_gen_tokens"] = generation_tokens(gen_output)
        if self.ibpo.enable:
            self._step_correction = self.ibpo_correction_pass(gen_batch, gen_output, metrics, timing_raw)
            corr.attach_shaping(gen_output, self._step_correction)
        else:  # the GSPO baseline through the same loop: Δ = 0, m = 1
            corr.attach_no_shaping(gen_output)

    def _extend_batch_before_balance(self, batch: DataProto, metrics: dict) -> DataProto:
        """IBPO (2): joint training on the correction samples, then whole mini-batches (no-op padding)."""
        result = self._step_correction
        if result is not None and self.ibpo.joint_training and result.requests:
            batch = DataProto.concat([batch, corr.build_joint_rows(batch, result, self.ibpo)])
        batch, _ = corr.pad_to_multiple(batch, self._ibpo_batch_multiple())
        return batch

    def _shape_rewards(self, batch: DataProto, metrics: dict) -> None:
        """IBPO (3): r' = r + λΔ on the last response token (Eq. 15/27), on top of any KL penalty."""
        self._step_lambda = self.lambda_schedule.current()
        shaped = corr.shaped_token_rewards(batch, self._step_lambda)
        batch.batch["token_level_rewards"] = batch.batch["token_level_rewards"] + (
            shaped - batch.batch["token_level_scores"])

    def _after_advantage(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """IBPO (4): token mask after normalisation (Eq. 7/17; padding rows get 0), then the metrics."""
        corr.apply_token_mask(batch)
        self._ibpo_step_metrics(batch, self._step_correction, self._step_lambda, metrics, timing_raw)
        if self.ibpo.grad_probe_interval and self.global_steps % self.ibpo.grad_probe_interval == 0:
            with marked_timer("ibpo_grad_probe", timing_raw, color="purple"):
                self.probe_gradient_variance(batch, metrics)

    def _step_metrics(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """The IBPO-specific host work (planning, alignment, shaping) as a share of the whole step."""
        metrics["ibpo/time/host_share"] = metrics.get("ibpo/time/host_s", 0.0) / max(timing_raw["step"], 1e-9)

    # ------------------------------------------------------------------ IBPO steps B-C
    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _generate(self, gen_batch: DataProto) -> DataProto:
        """Generate on driver-built prompts with the main rollout manager (padded to the agent workers)."""
        num_workers = self.config.actor_rollout_ref.rollout.agent.num_workers
        padded, pad = pad_dataproto_to_divisor(gen_batch, num_workers)
        out = self.async_rollout_manager.generate_sequences(padded)
        out.meta_info.pop("timing", None)
        return unpad_dataproto(out, pad_size=pad)

    def ibpo_correction_pass(self, gen_batch: DataProto, gen_output: DataProto, metrics: dict,
                             timing_raw: dict) -> corr.CorrectionPass:
        """Steps B-C of Alg. 1 on this step's main generation (replicas must still be awake)."""
        cfg = self.ibpo
        with marked_timer("ibpo_plan", timing_raw):
            requests, scores, ids, is_correct = corr.plan(gen_batch, gen_output, self._decode, cfg,
                                                          self.global_steps)
        correction_output = None
        if requests:
            with marked_timer("ibpo_gen", timing_raw, color="purple"):
                correction_output = self._generate(corr.build_correction_gen_batch(gen_batch, requests))
        with marked_timer("ibpo_shape", timing_raw):  # Δ, φ, masks: ibpo.pipeline.shape_batch (Eq. 14-19)
            correction_scores, correction_ids = corr.read_corrections(requests, correction_output)
            outcome = shape_batch(requests, correction_ids, (correction_scores >= cfg.correct_threshold).tolist(),
                                  ids, is_correct, cfg)
        result = corr.CorrectionPass(requests, outcome, correction_output, correction_scores, scores)
        metrics.update({f"ibpo/{k}": v for k, v in result.outcome.metrics.items()})
        metrics["ibpo/no_wrong_responses"] = float(not requests)
        metrics["ibpo/all_corrections_failed"] = float(bool(requests) and not result.correction_scores.ge(
            cfg.correct_threshold).any().item())
        metrics["ibpo/correction_reward_mean"] = float(result.correction_scores.mean()) if requests else 0.0
        prompt_tokens, generated_tokens = generation_tokens(correction_output)
        metrics["ibpo/correction_prompt_tokens"] = prompt_tokens
        metrics["ibpo/correction_gen_tokens"] = generated_tokens
        return result

    def _ibpo_step_metrics(self, batch: DataProto, result: corr.CorrectionPass | None, lam: float,
                           metrics: dict, timing_raw: dict) -> None:
        """Theorem A.2 statistics, λ schedule update and the compute counter."""
        is_main = (batch.batch[corr.IS_CORRECTION_KEY] == 0) & (batch.batch[corr.IS_PADDING_KEY] == 0)
        main = batch.select_idxs(is_main.numpy())
        rewards = main.batch["token_level_scores"].sum(-1).double().numpy()
        y = (rewards >= self.ibpo.correct_threshold).astype(np.float64)
        phi = np.where(y > 0, 0.0, main.batch[corr.DELTA_KEY].double().numpy())
        if self.global_steps % self.ibpo.diagnostics_interval == 0 or self.ibpo.lambda_schedule == "theorem":
            stats = theorem_stats(y, phi, list(main.non_tensor_batch["uid"]), lam)
            self.lambda_schedule.update(stats)
            metrics.update({
                "ibpo/cov_y_phi": stats.cov_y_phi, "ibpo/C": stats.c, "ibpo/V_phi": stats.v_phi,
                "ibpo/lambda_max": stats.lambda_max, "ibpo/var_adv_gspo": stats.var_adv_gspo,
                "ibpo/var_adv_ibpo": stats.var_adv_ibpo,
            })
        metrics["ibpo/lambda"] = lam
        metrics["ibpo/raw_score_mean"] = float(rewards.mean()) if rewards.size else 0.0
        metrics["ibpo/shaped_reward_mean"] = float(main.batch["token_level_rewards"].sum(-1).mean())
        is_corr = batch.batch[corr.IS_CORRECTION_KEY] > 0
        metrics["ibpo/num_joint_rows"] = float(is_corr.sum())
        metrics["ibpo/num_padding_rows"] = float(batch.batch[corr.IS_PADDING_KEY].sum())
        not_padding = batch.batch[corr.IS_PADDING_KEY] == 0
        if get_variant(self.ibpo.variant).masks_tokens:  # measured on the training batch: the mask reached it
            valid = batch.batch["response_mask"].bool() & not_padding.unsqueeze(-1)
            metrics["ibpo/batch_token_mask_mean"] = float(batch.batch[corr.TOKEN_MASK_KEY][valid].mean())
        # compute counter, cumulative over steps: prefill and generated tokens of both generations (the
        # correction prompts carry x and the candidates), and the tokens trained on (padding rows excluded)
        generated = metrics.get("ibpo/main_gen_tokens", 0.0) + metrics.get("ibpo/correction_gen_tokens", 0.0)
        prompt_tokens = metrics.get("ibpo/main_prompt_tokens", 0.0) + metrics.get("ibpo/correction_prompt_tokens", 0.0)
        trained = float(batch.batch["attention_mask"][not_padding].sum())
        flops = estimate_step_flops(self.num_model_params, int(generated), int(prompt_tokens), int(trained),
                                    reference_policy=self.use_reference_policy)
        self.compute_totals["generated_tokens"] += generated
        self.compute_totals["total_tokens"] += generated + prompt_tokens
        self.compute_totals["total_flops"] += flops
        metrics.update({f"ibpo/compute/{k}": v for k, v in self.compute_totals.items()})
        metrics["ibpo/compute/step_flops"] = flops
        metrics["ibpo/time/main_gen_s"] = timing_raw.get("ibpo_main_gen", 0.0)
        metrics["ibpo/time/correction_gen_s"] = timing_raw.get("ibpo_gen", 0.0)
        metrics["ibpo/time/host_s"] = timing_raw.get("ibpo_plan", 0.0) + timing_raw.get("ibpo_shape", 0.0)

    def probe_gradient_variance(self, batch: DataProto, metrics: dict) -> None:
        """Per-sample policy-gradient variance on the main rows under GSPO advantages (group-normalised raw
        reward, no mask) and the IBPO advantages this step trains with, on the same samples (App. A)."""
        from ibpo.advantages import broadcast_advantages, group_normalized_advantages
        from analysis.grad_probe import total_variance
        from recipe.ibpo.workers import probe_input

        is_main = (batch.batch[corr.IS_CORRECTION_KEY] == 0) & (batch.batch[corr.IS_PADDING_KEY] == 0)
        rows = torch.nonzero(is_main).flatten()
        world = self.actor_rollout_wg.world_size
        rows = rows[: len(rows) - len(rows) % world]
        if len(rows) < 2 * world:
            return
        main = batch.select_idxs(rows.numpy())
        raw = main.batch["token_level_scores"].sum(-1)
        adv_gspo = broadcast_advantages(group_normalized_advantages(raw, list(main.non_tensor_batch["uid"])),
                                        main.batch["response_mask"])
        out = self.actor_rollout_wg.ibpo_grad_probe(probe_input(
            main, adv_gspo, main.batch["advantages"], self.ibpo.grad_probe_coordinates, self.ibpo.seed,
            self.ibpo.grad_probe_micro_batch_size))
        var_gspo, var_ibpo = total_variance(out["proj_baseline"]), total_variance(out["proj_candidate"])
        metrics["ibpo/grad_probe/var_gspo"] = var_gspo
        metrics["ibpo/grad_probe/var_ibpo"] = var_ibpo
        metrics["ibpo/grad_probe/ratio"] = var_ibpo / var_gspo if var_gspo > 0 else float("nan")
        metrics["ibpo/grad_probe/num_samples"] = float(len(rows))

    # ------------------------------------------------------------------ checkpoints
    IBPO_STATE_FILE = "ibpo_state.json"

    def _step_folder(self, loading: bool = False) -> str:
        """The checkpoint folder of the current step; when loading, the one verl resumed from
        (``trainer.resume_from_path`` in ``resume_mode=resume_path``), resolved as verl does."""
        trainer_cfg = self.config.trainer
        if loading and trainer_cfg.resume_mode == "resume_path":
            folder = trainer_cfg.resume_from_path
        else:
            folder = os.path.join(trainer_cfg.default_local_dir, f"global_step_{self.global_steps}")
        return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)

    def _save_checkpoint(self):
        """verl's checkpoint plus the IBPO state a resumed run needs: the running λ_max of the ``theorem``
        schedule and the cumulative compute counter (curves against compute must continue, not restart)."""
        super()._save_checkpoint()
        state = {"lambda_schedule": self.lambda_schedule.state_dict(), "compute_totals": self.compute_totals}
        with open(os.path.join(self._step_folder(), self.IBPO_STATE_FILE), "w") as f:
            json.dump(state, f)

    def _load_checkpoint(self):
        result = super()._load_checkpoint()
        if self.global_steps == 0:  # training from scratch
            return result
        path = os.path.join(self._step_folder(loading=True), self.IBPO_STATE_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"resuming at step {self.global_steps} but {path} is missing: without it the compute counter "
                f"would restart at 0 and the theorem λ schedule would forget its running λ_max. Resume from a "
                f"checkpoint written by the IBPO trainer.")
        with open(path) as f:
            state = json.load(f)
        self.lambda_schedule.load_state_dict(state["lambda_schedule"])
        self.compute_totals.update(state["compute_totals"])
        return result

    def _ibpo_batch_multiple(self) -> int:
        """Rows per actor mini-batch (ppo_mini_batch_size · n): the batch must split into whole mini-batches."""
        return int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size) * int(
            self.config.actor_rollout_ref.rollout.n)
