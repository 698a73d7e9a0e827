"""RayIBPOTrainer: verl's legacy ``RayPPOTrainer`` with the IBPO correction pass (paper Alg. 1, App. E.2).

``fit`` is verl 0.9.1's ``RayPPOTrainer.fit`` (verl/trainer/ppo/ray_trainer.py:1405-1823), profiling,
checkpointing, validation, router-replay check and metrics included, with four insertions, each marked
``# IBPO`` (plus the optional gradient probe and counterfactual weights, each behind its own option):
  1. after the main ``generate_sequences`` and *before* ``sleep_replicas()`` (the replicas still hold π_θ):
     the correction pass -- references, correction prompts through the same rollout manager, scoring by
     the same reward function, alignment, rewrite filter, Δ and token masks;
  2. after the batch is assembled: optional joint training rows (App. E.2 (C)) and no-op padding;
  3. ``token_level_rewards = token_level_scores + λΔ`` (Eq. 15/27), then the ``ibpo`` estimator;
  4. ``advantages ·= m_t`` (Eq. 7/17) before the actor update, and the IBPO metrics.
ReMax is not supported (it needs a second sampled generation of its own). Validation never runs the
correction pass (``_validate`` is verl's own).
"""

from __future__ import annotations

import json
import os
import uuid
from pprint import pprint

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm import tqdm
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    compute_variance_proxy_metrics,
)
from verl.trainer.ppo.ray_trainer import (
    RayPPOTrainer,
    apply_kl_penalty,
    compute_advantage,
    compute_response_mask,
    compute_spec_decode_metrics,
)
from verl.trainer.ppo.reward import extract_reward
from verl.trainer.ppo.utils import Role
from verl.utils.checkpoint.checkpoint_manager import should_save_ckpt_esi
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics
from verl.utils.skip.skip_manager import SkipManager

from ibpo.config import IBPOConfig
from counterfactual.importance import CounterfactualConfig
from ibpo.diagnostics import LambdaSchedule, estimate_step_flops, theorem_stats
from recipe.ibpo import correction as corr
from counterfactual import batch as cf
from recipe.ibpo.setup_checks import (
    check_trainer_config,
    count_model_params,
    counterfactual_config_from,
    ibpo_config_from,
    model_max_positions,
)


def generation_tokens(output: DataProto | None) -> tuple[float, float]:
    """(prompt tokens prefilled, tokens generated) of a ``generate_sequences`` output (0, 0 for None)."""
    if output is None or len(output) == 0:
        return 0.0, 0.0
    generated = float(output.batch["response_mask"].sum())
    return float(output.batch["attention_mask"].sum()) - generated, generated


class RayIBPOTrainer(RayPPOTrainer):
    """verl's PPO trainer with IBPO's counterfactual correction pass inserted into every training step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ibpo: IBPOConfig = ibpo_config_from(self.config)
        self.counterfactual: CounterfactualConfig | None = counterfactual_config_from(self.config)
        # the checked config, with max_candidate_tokens = 0 resolved to the budget derived from the context
        self.ibpo = check_trainer_config(self.config, self.ibpo, self.tokenizer,
                                         model_max_positions(self.config.actor_rollout_ref.model.path))
        self.lambda_schedule = LambdaSchedule(self.ibpo.lambda_schedule, self.ibpo.lam,
                                              self.ibpo.lambda_max_fraction, self.ibpo.lambda_max_momentum)
        self.num_model_params = count_model_params(self.config.actor_rollout_ref.model.path)
        self.compute_totals = {"total_tokens": 0.0, "total_flops": 0.0, "generated_tokens": 0.0}

    def init_workers(self):
        super().init_workers()
        from ibpo.verl_plugin import assert_registered

        # verl swallows entry-point failures at DEBUG: fail here, loudly, if `ibpo` is missing.
        if self.config.algorithm.adv_estimator == "ibpo":
            assert_registered()

    # ------------------------------------------------------------------ IBPO steps B-C
    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

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
                                                          self.global_steps, self._encode)
        correction_output = None
        if requests:
            with marked_timer("ibpo_gen", timing_raw, color="purple"):
                correction_output = self._generate(corr.build_correction_gen_batch(gen_batch, requests))
        with marked_timer("ibpo_shape", timing_raw):
            result = corr.finish(requests, scores, ids, is_correct, correction_output, cfg)
        metrics.update({f"ibpo/{k}": v for k, v in result.outcome.metrics.items()})
        metrics["ibpo/no_wrong_responses"] = float(not requests)
        metrics["ibpo/all_corrections_failed"] = float(bool(requests) and not result.correction_scores.ge(
            cfg.correct_threshold).any().item())
        metrics["ibpo/correction_reward_mean"] = float(result.correction_scores.mean()) if requests else 0.0
        prompt_tokens, generated_tokens = generation_tokens(correction_output)
        metrics["ibpo/correction_prompt_tokens"] = prompt_tokens
        metrics["ibpo/correction_gen_tokens"] = generated_tokens
        metrics.update(corr.prefix_cache_metrics(correction_output))
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
        if self.ibpo.variant == "mask":  # measured on the training batch: evidence the mask reached it
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

    def apply_counterfactual_weights(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """Second method (ciw_paper.md): token weights from the answer log-prob drop when a reasoning span is
        masked, multiplied into the advantages. Extra no-grad forward passes go through the actor's own
        ``compute_log_prob``; groups whose rewards are all equal (zero advantage) are skipped."""
        cfg = self.counterfactual
        signal = cf.rows_with_signal(batch, key="token_level_scores")
        plan = cf.plan_counterfactuals(batch, cfg, cf.make_decode_fn(self.tokenizer), signal)
        log_probs = torch.empty(0, batch.batch["responses"].shape[1])
        if plan.num_copies:
            with marked_timer("counterfactual_forward", timing_raw, color="purple"):
                masked = cf.build_masked_copies(batch, plan, self.tokenizer.pad_token_id)
                log_probs = cf.compute_masked_log_probs(self.actor_rollout_wg, masked, self._log_prob_batch_divisor())
        weights, cf_metrics = cf.counterfactual_token_weights(batch, plan, cfg, batch.batch["old_log_probs"], log_probs)
        batch.batch["advantages"] = batch.batch["advantages"] * weights.to(batch.batch["advantages"].dtype)
        metrics.update(cf_metrics)
        metrics["counterfactual/forward_s"] = timing_raw.get("counterfactual_forward", 0.0)
        metrics["counterfactual/extra_forward_rows"] = float(plan.num_copies)

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

    # ------------------------------------------------------------------ training loop
    def fit(self):  # noqa: C901 -- a copy of verl's fit with the IBPO blocks inserted
        """verl 0.9.1 ``RayPPOTrainer.fit`` with the IBPO correction pass (see module docstring)."""
        if self._dump_executor._shutdown:
            self._init_dump_executor()
        from verl.utils.tracking import Tracking

        logger = Tracking(
            project_name=self.config.trainer.project_name,
            experiment_name=self.config.trainer.experiment_name,
            default_backend=self.config.trainer.logger,
            config=OmegaConf.to_container(self.config, resolve=True),
        )
        self.global_steps = 0
        self._load_checkpoint()
        self.checkpoint_manager.update_weights(self.global_steps)
        current_epoch = self.global_steps // len(self.train_dataloader)
        SkipManager.init(self.config)

        if self.config.trainer.get("val_before_train", True):
            val_metrics = self._validate()
            assert val_metrics, f"{val_metrics=}"
            pprint(f"Initial validation metrics: {val_metrics}")
            logger.log(data=val_metrics, step=self.global_steps)
            if self.config.trainer.get("val_only", False):
                self._shutdown_dump_executor()
                return

        progress_bar = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress")
        self.global_steps += 1
        last_val_metrics = None
        self.max_steps_duration = 0
        SkipManager.set_step(self.global_steps)
        rollout_n = self.config.actor_rollout_ref.rollout.n
        profiler_steps = self.config.global_profiler.steps
        prev_step_profile = False
        curr_step_profile = self.global_steps in profiler_steps if profiler_steps is not None else False
        next_step_profile = False

        for epoch in range(current_epoch, self.config.trainer.total_epochs):
            for batch_dict in self.train_dataloader:
                if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
                    self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=False)
                metrics: dict = {}
                timing_raw: dict = {}
                with marked_timer("start_profile", timing_raw):
                    self._start_profiling(
                        not prev_step_profile and curr_step_profile
                        if self.config.global_profiler.profile_continuous_steps
                        else curr_step_profile
                    )
                batch: DataProto = DataProto.from_single_dict(batch_dict)
                batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
                batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch.batch))],
                                                         dtype=object)
                gen_batch = self._get_gen_batch(batch)
                gen_batch.meta_info["global_steps"] = self.global_steps
                gen_batch = gen_batch.repeat(repeat_times=rollout_n, interleave=True)
                is_last_step = self.global_steps >= self.total_training_steps
                ibpo_result = None
                with marked_timer("step", timing_raw):
                    with marked_timer("gen", timing_raw, color="red"):
                        if curr_step_profile:
                            self.llm_server_manager.start_profile()
                        with marked_timer("ibpo_main_gen", timing_raw):
                            gen_output = self.async_rollout_manager.generate_sequences(gen_batch)
                        metrics["ibpo/main_prompt_tokens"], metrics["ibpo/main_gen_tokens"] = generation_tokens(
                            gen_output)
                        timing_raw.update(gen_output.meta_info["timing"])
                        gen_output.meta_info.pop("timing", None)
                        # IBPO (1): the correction pass, while the replicas still serve π_θ.
                        if self.ibpo.enable:
                            ibpo_result = self.ibpo_correction_pass(gen_batch, gen_output, metrics, timing_raw)
                            corr.attach_shaping(gen_output, ibpo_result)
                        else:  # the GSPO baseline through the same loop: Δ = 0, m = 1
                            corr.attach_no_shaping(gen_output)
                        self.checkpoint_manager.sleep_replicas()
                        if curr_step_profile:
                            self.llm_server_manager.stop_profile()
                    del gen_batch
                    batch = batch.repeat(repeat_times=rollout_n, interleave=True)
                    batch = batch.union(gen_output)
                    if "response_mask" not in batch.batch.keys():
                        batch.batch["response_mask"] = compute_response_mask(batch)

                    # IBPO (2): joint training on the correction samples, then whole mini-batches.
                    if ibpo_result is not None and self.ibpo.joint_training and ibpo_result.requests:
                        batch = DataProto.concat([batch, corr.build_joint_rows(batch, ibpo_result, self.ibpo)])
                    batch, _ = corr.pad_to_multiple(batch, self._ibpo_batch_multiple())

                    if self.config.trainer.balance_batch:
                        self._balance_batch(batch, metrics=metrics)
                    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
                    images_seqlens_all = []
                    for multi_modal_input in batch.non_tensor_batch["multi_modal_inputs"]:
                        if "image_grid_thw" not in multi_modal_input.keys():
                            continue
                        images_seqlens_all.extend(multi_modal_input["images_seqlens"].tolist())
                    batch.meta_info["images_seqlens"] = images_seqlens_all
                    with marked_timer("reward", timing_raw, color="yellow"):
                        if self.use_rm and "rm_scores" not in batch.batch.keys():
                            batch = batch.union(self._compute_reward_colocate(batch))
                        reward_tensor, reward_extra_infos_dict = extract_reward(batch)

                    rollout_corr_config = self.config.algorithm.get("rollout_correction", None)
                    bypass_recomputing_logprobs = rollout_corr_config and rollout_corr_config.get("bypass_mode", False)
                    if bypass_recomputing_logprobs:
                        from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode

                        apply_bypass_mode(batch=batch, rollout_corr_config=rollout_corr_config,
                                          policy_loss_config=self.config.actor_rollout_ref.actor.policy_loss)
                    else:
                        with marked_timer("old_log_prob", timing_raw, color="blue"):
                            old_log_prob, old_log_prob_mfu = self._compute_old_log_prob(batch)
                            actor_config = self.config.actor_rollout_ref.actor
                            entropy_agg = agg_loss(loss_mat=old_log_prob.batch["entropys"],
                                                   loss_mask=batch.batch["response_mask"],
                                                   loss_agg_mode=actor_config.loss_agg_mode,
                                                   loss_scale_factor=actor_config.loss_scale_factor)
                            metrics.update({"actor/entropy": entropy_agg.detach().item(),
                                            "perf/mfu/actor_infer": old_log_prob_mfu})
                            old_log_prob.batch.pop("entropys")
                            if "routed_experts" in batch.batch and "routed_experts" in old_log_prob.batch:
                                raise ValueError(
                                    "Detected conflicting router replay configuration: router_replay.mode='R2' and "
                                    "enable_rollout_routing_replay=True cannot be enabled simultaneously. The "
                                    "enable_rollout_routing_replay option is only used in R3 mode; it should not be "
                                    "set when using R2 mode."
                                )
                            batch = batch.union(old_log_prob)
                            if "rollout_log_probs" in batch.batch.keys():
                                from verl.utils.debug.metrics import calculate_debug_metrics

                                metrics.update(calculate_debug_metrics(batch))
                    assert "old_log_probs" in batch.batch, f'"old_log_prob" not in {batch.batch.keys()=}'
                    if self.use_reference_policy:
                        with marked_timer(str(Role.RefPolicy), timing_raw, color="olive"):
                            batch = batch.union(self._compute_ref_log_prob(batch))
                    if self.use_critic:
                        with marked_timer("values", timing_raw, color="cyan"):
                            batch = batch.union(self._compute_values(batch))

                    with marked_timer("adv", timing_raw, color="brown"):
                        batch.batch["token_level_scores"] = reward_tensor
                        if reward_extra_infos_dict:
                            batch.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra_infos_dict.items()})
                        if self.config.algorithm.use_kl_in_reward:
                            batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=self.kl_ctrl_in_reward,
                                                                 kl_penalty=self.config.algorithm.kl_penalty)
                            metrics.update(kl_metrics)
                        else:
                            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
                        # IBPO (3): r' = r + λΔ on the last response token (Eq. 15/27).
                        lam = self.lambda_schedule.current()
                        shaped = corr.shaped_token_rewards(batch, lam)
                        batch.batch["token_level_rewards"] = batch.batch["token_level_rewards"] + (
                            shaped - batch.batch["token_level_scores"])
                        if (rollout_corr_config is not None and "rollout_log_probs" in batch.batch
                                and not bypass_recomputing_logprobs):
                            from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

                            batch, is_metrics = compute_rollout_correction_and_add_to_batch(batch, rollout_corr_config)
                            metrics.update(is_metrics)
                        batch = compute_advantage(
                            batch,
                            adv_estimator=self.config.algorithm.adv_estimator,
                            gamma=self.config.algorithm.gamma,
                            lam=self.config.algorithm.lam,
                            num_repeat=rollout_n,
                            norm_adv_by_std_in_grpo=self.config.algorithm.get("norm_adv_by_std_in_grpo", True),
                            config=self.config.algorithm,
                        )
                        # IBPO (4): token mask after normalisation (Eq. 7/17); padding rows get 0 here.
                        corr.apply_token_mask(batch)
                        self._ibpo_step_metrics(batch, ibpo_result, lam, metrics, timing_raw)
                    if self.ibpo.grad_probe_interval and self.global_steps % self.ibpo.grad_probe_interval == 0:
                        with marked_timer("ibpo_grad_probe", timing_raw, color="purple"):
                            self.probe_gradient_variance(batch, metrics)
                    # Counterfactual importance weights (second method), on the normalised advantages.
                    if self.counterfactual is not None:
                        with marked_timer("counterfactual", timing_raw, color="purple"):
                            self.apply_counterfactual_weights(batch, metrics, timing_raw)

                    if self.use_critic:
                        with marked_timer("update_critic", timing_raw, color="pink"):
                            critic_output = self._update_critic(batch)
                        metrics.update(reduce_metrics(critic_output.meta_info["metrics"]))

                    if self.config.trainer.critic_warmup > self.global_steps:
                        self.checkpoint_manager.update_weights(self.global_steps)
                    else:
                        with marked_timer("update_actor", timing_raw, color="red"):
                            actor_output = self._update_actor(batch)
                        esi_close_to_expiration = should_save_ckpt_esi(
                            max_steps_duration=self.max_steps_duration,
                            redundant_time=self.config.trainer.esi_redundant_time,
                        )
                        if self.config.trainer.save_freq > 0 and (
                            is_last_step or self.global_steps % self.config.trainer.save_freq == 0
                            or esi_close_to_expiration
                        ):
                            if esi_close_to_expiration:
                                print("Force saving checkpoint: ESI instance expiration approaching.")
                            with marked_timer("save_checkpoint", timing_raw, color="green"):
                                self._save_checkpoint()
                        with marked_timer("update_weights", timing_raw, color="red"):
                            self.checkpoint_manager.update_weights(self.global_steps)
                        metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))

                    rollout_data_dir = self.config.trainer.get("rollout_data_dir", None)
                    if rollout_data_dir:
                        self._log_rollout_data(batch, reward_extra_infos_dict, timing_raw, rollout_data_dir)

                if self.config.trainer.test_freq > 0 and (
                    is_last_step or self.global_steps % self.config.trainer.test_freq == 0
                ):
                    with marked_timer("testing", timing_raw, color="green"):
                        val_metrics: dict = self._validate()
                        if is_last_step:
                            last_val_metrics = val_metrics
                    metrics.update(val_metrics)

                with marked_timer("stop_profile", timing_raw):
                    next_step_profile = (self.global_steps + 1 in profiler_steps
                                         if profiler_steps is not None else False)
                    run_finish_command = bool(curr_step_profile and profiler_steps
                                              and (self.global_steps == max(profiler_steps) or is_last_step))
                    self._stop_profiling(
                        curr_step_profile and not next_step_profile
                        if self.config.global_profiler.profile_continuous_steps
                        else curr_step_profile,
                        run_command=run_finish_command,
                    )
                    prev_step_profile = curr_step_profile
                    curr_step_profile = next_step_profile
                self.max_steps_duration = max(self.max_steps_duration, timing_raw["step"])
                # the IBPO-specific host work (planning, alignment, shaping) as a share of the whole step
                metrics["ibpo/time/host_share"] = metrics.get("ibpo/time/host_s", 0.0) / max(timing_raw["step"], 1e-9)
                metrics.update({"training/global_step": self.global_steps, "training/epoch": epoch})
                metrics.update(compute_data_metrics(batch=batch, use_critic=self.use_critic))
                gdpo_reward_keys = self.config.algorithm.get("gdpo_reward_keys", None)
                if gdpo_reward_keys and self.config.algorithm.adv_estimator in ("gdpo", AdvantageEstimator.GDPO):
                    for key in gdpo_reward_keys:
                        if key in batch.non_tensor_batch:
                            vals = np.asarray(batch.non_tensor_batch[key], dtype=np.float32)
                            metrics.update({f"gdpo/{key}/mean": float(np.mean(vals)),
                                            f"gdpo/{key}/std": float(np.std(vals)),
                                            f"gdpo/{key}/max": float(np.max(vals)),
                                            f"gdpo/{key}/min": float(np.min(vals))})
                metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
                n_gpus = self.resource_pool_manager.get_n_gpus()
                metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
                metrics.update(compute_variance_proxy_metrics(batch=batch,
                                                              gradient_norm=metrics.get("actor/grad_norm", None)))
                metrics.update(compute_spec_decode_metrics(
                    batch.non_tensor_batch.get("spec_num_draft_tokens", None),
                    batch.non_tensor_batch.get("spec_num_accepted_tokens", None),
                    batch.non_tensor_batch.get("spec_num_verify_steps", None),
                ))
                logger.log(data=metrics, step=self.global_steps)
                progress_bar.update(1)
                self.global_steps += 1
                SkipManager.set_step(self.global_steps)
                if is_last_step:
                    if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
                        self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=True)
                    self._shutdown_dump_executor()
                    pprint(f"Final validation metrics: {last_val_metrics}")
                    progress_bar.close()
                    return
                if hasattr(self.train_dataset, "on_batch_end"):
                    self.train_dataset.on_batch_end(batch=batch)
        self._shutdown_dump_executor()

    def _log_prob_batch_divisor(self) -> int:
        """Rows a ``compute_log_prob`` call must be a multiple of: DP ranks × the per-GPU micro-batch
        (verl's engine asserts it unless dynamic batch sizes are on)."""
        rollout = self.config.actor_rollout_ref.rollout
        micro = 1 if rollout.get("log_prob_use_dynamic_bsz", False) else int(rollout.log_prob_micro_batch_size_per_gpu or 1)
        return int(self.actor_rollout_wg.world_size) * micro

    def _ibpo_batch_multiple(self) -> int:
        """Rows per actor mini-batch (ppo_mini_batch_size · n): the batch must split into whole mini-batches."""
        return int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size) * int(
            self.config.actor_rollout_ref.rollout.n)
