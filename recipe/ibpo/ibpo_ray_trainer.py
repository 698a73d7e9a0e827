"""RayIBPOTrainer: the IBPO correction pass (paper Alg. 1, App. E.2) in the hooks of verl's trainer.

The training loop is :class:`recipe.common.trainer_base.HookedRayPPOTrainer` ``.fit``, the pinned verl's own
``RayPPOTrainer.fit`` plus one-line hook calls. IBPO fills four of them:
  1. ``_after_generation``: after the main ``generate_sequences`` and *before* ``sleep_replicas()`` (the
     replicas still hold π_θ): the correction pass -- references, correction prompts through the same
     rollout manager, scoring by the same reward function, alignment, rewrite filter, Δ and token masks
     (:meth:`RayIBPOTrainer.ibpo_correction_pass`, the numbers from ``ibpo.pipeline``);
  2. ``_extend_batch_before_balance``: optional joint training rows (App. E.2 (C)) and no-op padding;
  3. ``_shape_rewards``: ``token_level_rewards = token_level_scores + λΔ`` (Eq. 15/27), then verl calls the
     ``ibpo`` estimator;
  4. ``_after_advantage``: ``advantages ·= m_t`` (Eq. 7/17) before the actor update, the IBPO metrics and
     the optional gradient probe; ``_step_metrics``: FLOPs and seconds per phase, running totals.
``_update_actor`` is verl's text with its changes marked ``# RECIPE`` (``recipe/common/upstream/manifest.toml``): the
rows of an optimizer update come from this step's plan (``ibpo.joint_minibatch``, ``ibpo/minibatch.py``).
ReMax is not supported (it needs a second sampled generation of its own). Validation never runs the
correction pass (``_validate`` is verl's own).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.distillation.losses import is_distillation_enabled
from verl.utils import tensordict_utils as tu
from verl.utils.debug import marked_timer
from verl.utils.py_functional import rename_dict
from verl.workers.utils.padding import left_right_2_no_padding

from ibpo.advantages import get_mask_sign, shapes_reward
from compute_accounting.flops import StepWork, phase_seconds, step_flops
from ibpo.diagnostics import theorem_stats, trained_advantage_variance
from ibpo.lambda_schedule import LambdaSchedule
from ibpo.mechanism import RewardDropAlarm, advantage_mechanism, sibling_overlap
from ibpo.minibatch import ActorMiniBatchPlan, actor_minibatch_plan, optimizer_updates_reported, row_multiple
from ibpo.options import IBPOConfig, option_changes, saved_options
from ibpo.pipeline import shape_batch
from ibpo.variants import get_variant
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.correction.rollout import SpecCounterReader, proxy_params, spec_counter_metrics, speculation_on
from recipe.common.methods import method_options
from recipe.common.preflight.model import configured_context_length, model_flop_shape
from recipe.ibpo.start_checks import check_trainer_config
from recipe.common.trainer_base import HookedRayPPOTrainer, generation_work, write_json_atomically


def generation_tokens(output: DataProto | None) -> tuple[float, float]:
    """(prompt tokens prefilled, tokens generated) of a ``generate_sequences`` output (0, 0 for None)."""
    if output is None or len(output) == 0:
        return 0.0, 0.0
    generated = float(output.batch["response_mask"].sum())
    return float(output.batch["attention_mask"].sum()) - generated, generated


def step_work(batch: DataProto, correction_output: DataProto | None, *, grad_probe: list[int], ppo_epochs: int,
              gradient_checkpointing: bool, old_log_prob_forward: bool, reference_forward: bool) -> StepWork:
    """The rows one IBPO step processed (``compute_accounting.flops.StepWork``, valid-token lengths per row), read from the
    training batch at the end of the step: main rows (generated, then trained), joint-training correction
    rows (``IS_CORRECTION_KEY``: trained, so they cost an old-log-prob, optional reference and update pass
    each), no-op padding rows, and the correction generation (``correction_output``; None: no pass ran)."""
    rows = batch.batch["attention_mask"].sum(-1)
    is_corr = batch.batch[corr.IS_CORRECTION_KEY] > 0
    is_pad = batch.batch[corr.IS_PADDING_KEY] > 0
    main = rows[~is_corr & ~is_pad].tolist()
    return StepWork(
        main_gen=main,
        correction_gen=[] if correction_output is None else correction_output.batch["attention_mask"].sum(-1).tolist(),
        train_main=main, train_joint=rows[is_corr].tolist(), train_padding=rows[is_pad].tolist(),
        counterfactual_forward=[],  # counterfactual weighting runs in its own trainer
        grad_probe=list(grad_probe),
        ppo_epochs=ppo_epochs,
        gradient_checkpointing=gradient_checkpointing,
        old_log_prob_forward=old_log_prob_forward,
        reference_forward=reference_forward,
    )


class IBPOResumeError(RuntimeError):
    """A resumed run's IBPO options differ from its checkpoint's (``ibpo.resume_allow_option_changes``)."""


class RayIBPOTrainer(HookedRayPPOTrainer):
    """verl's PPO trainer with IBPO's counterfactual correction pass in every training step."""

    STEP_FLOPS_METRIC = "ibpo/compute/step_flops"  # the compute budget's FLOPs (trainer_base)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        model_path = self.config.actor_rollout_ref.model.path
        # the same context the pre-flight checked (rope scaling and override_config included)
        self._init_ibpo_state(configured_context_length(self.config.actor_rollout_ref.model),
                              model_flop_shape(model_path))

    def _init_ibpo_state(self, model_context: int | None, model_shape) -> None:
        """The validated ``ibpo:`` block, the start checks, the λ schedule and the compute counter."""
        self.ibpo: IBPOConfig = method_options(self.config, "ibpo")
        # the checked config, with max_candidate_tokens = 0 resolved to the budget derived from the context
        self.ibpo = check_trainer_config(self.config, self.ibpo, self.tokenizer, model_context)
        self.lambda_schedule = LambdaSchedule(self.ibpo.lambda_schedule, self.ibpo.lam,
                                              self.ibpo.lambda_max_fraction, self.ibpo.lambda_max_momentum)
        self.model_shape = model_shape  # compute_accounting.flops.ModelShape: what the FLOP count needs of the model
        self.compute_totals = {"total_tokens": 0.0, "total_flops": 0.0, "generated_tokens": 0.0}
        self.time_totals = {"cumulative_step_s": 0.0}
        self._actor_plan: ActorMiniBatchPlan | None = None  # this step's actor mini-batch layout
        self._extra_forward_lengths: dict[str, list[int]] = {}  # this step's gradient-probe rows
        self._step_correction: corr.CorrectionPass | None = None  # this step's correction pass
        self._step_lambda = self.ibpo.lam  # the λ this step shapes with
        self._main_gen_started = 0.0
        self._reward_alarm = RewardDropAlarm()  # unlearning alarm (ibpo.mechanism); not checkpointed
        self._reward_alarm_reported = False
        self._spec_method = speculation_on(self.config)  # the rollout's speculative method, None: no speculation
        self._spec_reader: SpecCounterReader | None = None  # the rollout servers' vLLM counters, made at first use
        self._spec_read_error: str | None = None

    def _spec_counter_step(self):
        """What the rollout's vLLM engines counted since the last step (``SpecCounters``), None when unreadable
        (reported once per new reason). Servers are those of verl's ``LLMServerManager``."""
        if self._spec_method is None:
            return None
        if self._spec_reader is None:
            manager = getattr(self, "llm_server_manager", None)
            self._spec_reader = SpecCounterReader(list(getattr(manager, "server_addresses", None) or []))
        step = self._spec_reader.step()
        error = self._spec_reader.last_error
        if error is not None and error != self._spec_read_error:
            print(f"[ibpo] WARNING step {self.global_steps}: speculation ({self._spec_method!r}) counters unreadable "
                  f"({error}): rollout/spec_stats_reported=0, speculation on/off unknown for this step")
        self._spec_read_error = error
        return step

    def init_workers(self):
        """The ``ibpo`` estimator's guard: this trainer shapes the reward it normalises, so it announces itself
        (``recipe.verl_plugin.assert_registered`` marks the process; the estimator refuses a run no IBPO trainer
        started). Another method's trainer never gets here with ``algorithm.adv_estimator=ibpo``: the registry
        refuses it (``recipe.common.methods.method_of``)."""
        from recipe.verl_plugin import assert_registered

        if self.config.algorithm.adv_estimator == "ibpo":
            assert_registered()  # verl swallows entry-point failures at DEBUG: fail here, loudly
        super().init_workers()

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
        main_rows = len(batch)
        if result is not None and self.ibpo.joint_training and result.requests:
            batch = DataProto.concat([batch, corr.build_joint_rows(batch, result, self.ibpo)])
        self._actor_plan = self._plan_actor_minibatches(main_rows, len(batch) - main_rows)
        batch, _ = corr.pad_to_rows(batch, self._actor_plan.padded_rows)
        return batch

    def _shape_rewards(self, batch: DataProto, metrics: dict) -> None:
        """IBPO (3): r' = r + λΔ on the last response token (Eq. 15/27), on top of any KL penalty."""
        super()._shape_rewards(batch, metrics)
        self._step_lambda = self.lambda_schedule.current()
        if not shapes_reward(self.ibpo.shaping):  # ibpo.shaping=advantage: λΔ enters after normalisation
            return
        shaped = corr.shaped_token_rewards(batch, self._step_lambda)
        batch.batch["token_level_rewards"] = batch.batch["token_level_rewards"] + (
            shaped - batch.batch["token_level_scores"])

    def _after_advantage(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """IBPO (4): the shaping factor of ``ibpo.shaping`` and the token mask after normalisation (Eq. 7/17;
        padding rows get 0), then the metrics."""
        corr.apply_shaping_factor(batch, self._step_lambda, self.ibpo.shaping, self.ibpo.correct_threshold)
        self._mechanism_metrics(batch, metrics)  # the sequence advantages before the token mask
        corr.apply_token_mask(batch, get_mask_sign(self.ibpo.mask_sign))
        self._ibpo_step_metrics(batch, self._step_correction, self._step_lambda, metrics, timing_raw)
        if self.ibpo.grad_probe_interval and self.global_steps % self.ibpo.grad_probe_interval == 0:
            with marked_timer("ibpo_grad_probe", timing_raw, color="purple"):
                self.probe_gradient_variance(batch, metrics)
        # The step's work is fixed from here on (the update trains on this batch): count it now, before verl
        # may write this step's checkpoint, so a resumed run continues from totals that include this step.
        self._account_step_compute(batch, metrics)

    def _mechanism_metrics(self, batch: DataProto, metrics: dict) -> None:
        """``ibpo/mechanism/*`` (``ibpo.mechanism``) on the main rows, and the reward-drop alarm: a warning
        the first time the training reward has halved since the run's first steps."""
        rows = corr.main_rows(batch)
        main = batch.select_idxs(rows)
        scores = main.batch["token_level_scores"].sum(-1)
        is_correct = (scores >= self.ibpo.correct_threshold).tolist()
        uids = list(main.non_tensor_batch["uid"])
        out = advantage_mechanism(corr.sequence_advantages(main).numpy(), is_correct,
                                  main.batch[corr.DELTA_KEY].double().numpy(), uids)
        lengths = main.batch["response_mask"].sum(-1).long().tolist()
        responses = [ids[:n] for ids, n in zip(main.batch["responses"].tolist(), lengths)]
        out.update(sibling_overlap(responses, is_correct, uids))
        metrics.update({f"ibpo/mechanism/{k}": v for k, v in out.items()})
        fired = self._reward_alarm.update(float(scores.mean()) if len(scores) else 0.0)
        metrics["ibpo/alarm/reward_drop"] = float(fired)
        if fired and not self._reward_alarm_reported:
            self._reward_alarm_reported = True
            print(f"[ibpo] WARNING step {self.global_steps}: the training reward fell to "
                  f"{np.mean(self._reward_alarm.history[-self._reward_alarm.window:]):.3f} from "
                  f"{np.mean(self._reward_alarm.history[:self._reward_alarm.window]):.3f} in the first steps; share "
                  f"of positive advantage on wrong responses this step: "
                  f"{out.get('positive_adv_mass_on_wrong', 0.0):.2f}. With ibpo.shaping=reward a shaped wrong answer "
                  f"in a group with no right one gets a positive advantage; docs/method_ibpo.md, \"The mechanism\"",
                  flush=True)

    def _account_step_compute(self, batch: DataProto, metrics: dict) -> None:
        """The step's FLOPs per phase (``compute_accounting.flops.step_flops`` of :func:`step_work`) and tokens, added to the
        running totals that curves against compute are drawn on. Runs at the end of ``_after_advantage``: after
        it the batch trained on is final, and it is before ``_save_checkpoint``, which stores the totals."""
        result = self._step_correction
        rollout_corr = self.config.algorithm.get("rollout_correction", None)
        work = step_work(
            batch, None if result is None else result.correction_output,
            grad_probe=self._extra_forward_lengths.get("grad_probe", []),
            ppo_epochs=int(self.config.actor_rollout_ref.actor.ppo_epochs),
            gradient_checkpointing=bool(self.config.actor_rollout_ref.model.get("enable_gradient_checkpointing", False)),
            old_log_prob_forward=not (rollout_corr and rollout_corr.get("bypass_mode", False)),
            reference_forward=bool(self.use_reference_policy),
        )
        self._extra_forward_lengths = {}
        flops = step_flops(work, self.model_shape)
        self._model_gpu_seconds(work, generation_work(batch.select_idxs(corr.main_rows(batch))),
                                None if result is None or result.correction_output is None
                                else generation_work(result.correction_output), metrics)
        generated = metrics.get("ibpo/main_gen_tokens", 0.0) + metrics.get("ibpo/correction_gen_tokens", 0.0)
        prompt_tokens = metrics.get("ibpo/main_prompt_tokens", 0.0) + metrics.get("ibpo/correction_prompt_tokens", 0.0)
        self.compute_totals["generated_tokens"] += generated
        self.compute_totals["total_tokens"] += generated + prompt_tokens
        self.compute_totals["total_flops"] += flops.total
        metrics.update({f"ibpo/compute/{k}": v for k, v in self.compute_totals.items()})
        metrics.update(flops.as_metrics())
        metrics["ibpo/compute/step_flops"] = flops.total

    def _step_metrics(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """End of step: measured seconds per phase and the running time total (the compute totals were
        counted in ``_after_advantage``). If this step wrote a checkpoint, its IBPO state is written again
        now that the step's time is known."""
        metrics.update(phase_seconds(timing_raw))
        # accepted draft tokens per decode step, read from the rollout servers' own vLLM counters; when they
        # cannot be read, rollout/spec_stats_reported=0 says "unknown", never "no speed-up"
        metrics.update(spec_counter_metrics(self._spec_method is not None, self._spec_counter_step()))
        self.time_totals["cumulative_step_s"] += timing_raw.get("step", 0.0)
        metrics["ibpo/time/cumulative_step_s"] = self.time_totals["cumulative_step_s"]
        metrics["ibpo/time/host_share"] = metrics["ibpo/time/host_s"] / max(timing_raw.get("step", 0.0), 1e-9)
        if self._saved_step_folder is not None:  # the base clears it once the ledger is written again too
            self._write_ibpo_state(self._saved_step_folder)
        super()._step_metrics(batch, metrics, timing_raw)  # the compute ledger and budget (trainer_base)

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
        rollout_cfg = self.config.actor_rollout_ref.rollout
        response_length = int(rollout_cfg.get("response_length") or self.config.data.max_response_length)
        bounds = None
        if requests:
            with marked_timer("ibpo_gen", timing_raw, color="purple"):
                corr_batch = corr.build_correction_gen_batch(gen_batch, requests)
                # per-correction max_tokens = ceil(c·|y|) + closing tokens (ibpo.correction_max_tokens_factor)
                bounds = corr.attach_length_bound(corr_batch, requests, ids, cfg, response_length)
                correction_output = self._generate(corr_batch)
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
        metrics.update(corr.prefix_cache_metrics(correction_output))
        metrics.update(corr.length_bound_metrics(bounds, correction_ids, response_length))
        if cfg.lookup_proxy_interval and self.global_steps % cfg.lookup_proxy_interval == 0:
            with marked_timer("ibpo_lookup_proxy", timing_raw):  # host-side replay of vLLM's ngram proposer
                metrics.update(corr.lookup_metrics(correction_output, proxy_params(self.config)))
        dump_dir = (self.config.get("trainer", None) or {}).get("rollout_data_dir", None)
        if dump_dir and requests:  # the step's corrections, with verl's own rollout dumps
            corr.dump_corrections(dump_dir, self.global_steps, requests, correction_output, ids,
                                  (correction_scores >= cfg.correct_threshold).tolist(), outcome.correction_rewrite)
        return result

    def _ibpo_step_metrics(self, batch: DataProto, result: corr.CorrectionPass | None, lam: float,
                           metrics: dict, timing_raw: dict) -> None:
        """Theorem A.2 statistics, λ schedule update, and the variance of the advantages trained on."""
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
                "ibpo/lambda_max": stats.lambda_max, "ibpo/var_unnorm_adv_gspo": stats.var_unnorm_adv_gspo,
                "ibpo/var_unnorm_adv_ibpo": stats.var_unnorm_adv_ibpo,
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
        # the advantages the actor trains on (normalised, masked), main and joint rows
        trained = batch.select_idxs(not_padding.numpy())
        metrics["ibpo/var_trained_adv_seq"], metrics["ibpo/var_trained_adv_token"] = trained_advantage_variance(
            trained.batch["advantages"].numpy(), trained.batch["response_mask"].numpy())

    def probe_gradient_variance(self, batch: DataProto, metrics: dict) -> None:
        """Per-sample policy-gradient variance on the main rows, on the same samples (App. A), for two pairs of
        advantages: the trained ones (GSPO's group-normalised raw reward vs the IBPO advantages this step trains
        with: ``var_gspo``, ``var_ibpo``, ``ratio``) and Theorem A.2's own, un-normalised (r − mean_g vs
        r + λ_tΔ − mean_g, whatever ``ibpo.shaping``: ``theorem_var_gspo``, ``theorem_var_ibpo``,
        ``theorem_ratio``). The normalisation rescales each group, so the two ratios differ (docs/method_ibpo.md)."""
        from ibpo.advantages import broadcast_advantages, group_normalized_advantages
        from ibpo.diagnostics import total_variance, unnormalised_advantages
        from recipe.ibpo.workers import probe_input

        is_main = (batch.batch[corr.IS_CORRECTION_KEY] == 0) & (batch.batch[corr.IS_PADDING_KEY] == 0)
        rows = torch.nonzero(is_main).flatten()
        world = self.actor_rollout_wg.world_size
        rows = rows[: len(rows) - len(rows) % world]
        if len(rows) < 2 * world:
            return
        main = batch.select_idxs(rows.numpy())
        self._extra_forward_lengths["grad_probe"] = main.batch["attention_mask"].sum(-1).tolist()
        uids = list(main.non_tensor_batch["uid"])
        raw = main.batch["token_level_scores"].sum(-1).double()
        shaped = raw + self._step_lambda * main.batch[corr.DELTA_KEY].double()
        mask = main.batch["response_mask"]
        out = self.actor_rollout_wg.ibpo_grad_probe(probe_input(
            main, self.ibpo.grad_probe_coordinates, self.ibpo.seed, self.ibpo.grad_probe_micro_batch_size,
            baseline=broadcast_advantages(group_normalized_advantages(raw, uids), mask),
            candidate=main.batch["advantages"],
            theorem_baseline=broadcast_advantages(torch.as_tensor(unnormalised_advantages(raw.numpy(), uids)), mask),
            theorem_candidate=broadcast_advantages(torch.as_tensor(unnormalised_advantages(shaped.numpy(), uids)),
                                                   mask)))
        for prefix, base, cand in (("", "baseline", "candidate"), ("theorem_", "theorem_baseline", "theorem_candidate")):
            var_gspo, var_ibpo = total_variance(out[f"proj_{base}"]), total_variance(out[f"proj_{cand}"])
            metrics[f"ibpo/grad_probe/{prefix}var_gspo"] = var_gspo
            metrics[f"ibpo/grad_probe/{prefix}var_ibpo"] = var_ibpo
            metrics[f"ibpo/grad_probe/{prefix}ratio"] = var_ibpo / var_gspo if var_gspo > 0 else float("nan")
        metrics["ibpo/grad_probe/num_samples"] = float(len(rows))

    # ------------------------------------------------------------------ checkpoints
    IBPO_STATE_FILE = "ibpo_state.json"

    def _ibpo_state(self, step_seconds_so_far: float = 0.0) -> dict:
        return {"lambda_schedule": self.lambda_schedule.state_dict(), "compute_totals": dict(self.compute_totals),
                "time_totals": {"cumulative_step_s": self.time_totals["cumulative_step_s"] + step_seconds_so_far},
                "ibpo_options": saved_options(self.ibpo), "rollout_n": int(self.config.actor_rollout_ref.rollout.n)}

    def _restore_ibpo_state(self, state: dict, path: str) -> None:
        """Continue from a checkpoint's IBPO state; a resumed run whose ibpo options or group size G differ
        from the checkpoint's stops naming them (the shaped reward would change mid-run) unless
        ``ibpo.resume_allow_option_changes``. A state written before the options were stored is not compared."""
        changes = option_changes(state["ibpo_options"], self.ibpo) if "ibpo_options" in state else []
        saved_n, n = state.get("rollout_n"), int(self.config.actor_rollout_ref.rollout.n)
        if saved_n is not None and saved_n != n:
            changes.append(("actor_rollout_ref.rollout.n (G)", saved_n, n))
        if changes:
            listed = ", ".join(f"{name if '.' in name else 'ibpo.' + name}: {old!r} -> {new!r}"
                               for name, old, new in changes)
            if not self.ibpo.resume_allow_option_changes:
                raise IBPOResumeError(
                    f"resuming at step {self.global_steps} from {path} with changed options ({listed}): the shaped "
                    "reward would change mid-run. Resume with the checkpoint's options, start a new run "
                    "(trainer.resume_mode=disable), or set ibpo.resume_allow_option_changes=true")
            print(f"[ibpo] resuming at step {self.global_steps} with changed options: {listed}", flush=True)
        self.lambda_schedule.load_state_dict(state["lambda_schedule"])
        self.compute_totals.update(state["compute_totals"])
        self.time_totals.update(state.get("time_totals", {}))

    def _write_ibpo_state(self, folder: str, step_seconds_so_far: float = 0.0) -> None:
        """Write ``ibpo_state.json`` atomically (a crash mid-write leaves the previous file, never half)."""
        write_json_atomically(os.path.join(folder, self.IBPO_STATE_FILE), self._ibpo_state(step_seconds_so_far))

    def _save_checkpoint(self):
        """verl's checkpoint plus the IBPO state a resumed run needs: the running λ_max of the ``theorem``
        schedule and the cumulative compute and time counters (curves against compute must continue, not
        restart). verl saves after the actor update, inside the step: λ and the compute totals already
        include this step (``_after_advantage``); the time total gets the step's seconds so far, and the
        exact figure is written again at the end of the step (``_step_metrics``)."""
        super()._save_checkpoint()  # sets _saved_step_folder
        self._write_ibpo_state(self._saved_step_folder, time.perf_counter() - self._main_gen_started)

    def _load_checkpoint(self):
        result = super()._load_checkpoint()
        if self.global_steps == 0:  # training from scratch
            return result
        path, state = self._resumed_state(self.IBPO_STATE_FILE)
        if state is None:
            raise FileNotFoundError(
                f"resuming at step {self.global_steps} but {path} is missing: without it the compute counter "
                f"would restart at 0 and the theorem λ schedule would forget its running λ_max. Resume from a "
                f"checkpoint written by the IBPO trainer.")
        self._restore_ibpo_state(state, path)
        return result

    def _plan_actor_minibatches(self, main_rows: int, joint_rows: int) -> ActorMiniBatchPlan:
        """This step's actor mini-batch size and padded batch size (``ibpo.minibatch.actor_minibatch_plan``,
        mode ``ibpo.joint_minibatch``): whole micro-batches on every DP rank for the update, the old-log-prob
        and the reference forwards."""
        actor_rollout_ref = self.config.actor_rollout_ref
        n = int(actor_rollout_ref.rollout.n)

        def micro(section, dynamic_key: str, micro_key: str) -> int | None:
            return None if section.get(dynamic_key, False) else int(section.get(micro_key) or 1)

        multiple = row_multiple(
            int(self.actor_rollout_wg.world_size),
            micro(actor_rollout_ref.actor, "use_dynamic_bsz", "ppo_micro_batch_size_per_gpu"),
            micro(actor_rollout_ref.rollout, "log_prob_use_dynamic_bsz", "log_prob_micro_batch_size_per_gpu"),
            micro(actor_rollout_ref.ref, "log_prob_use_dynamic_bsz", "log_prob_micro_batch_size_per_gpu")
            if self.use_reference_policy else None,
        )
        return actor_minibatch_plan(main_rows, joint_rows, int(actor_rollout_ref.actor.ppo_mini_batch_size) * n,
                                    multiple, self.ibpo.joint_minibatch)

    def _update_actor(self, batch: DataProto) -> DataProto:
        """The pinned verl's ``RayPPOTrainer._update_actor``, copied as text (manifest entry
        ``RayPPOTrainer._update_actor`` in ``recipe/common/upstream/manifest.toml``), with two changes, every
        line of them marked ``# RECIPE`` (checked by tests/unit/test_trainer_upstream.py):

        1. the rows of one optimizer update (``mini_batch_size`` = ``global_batch_size``, which verl's
           ``train_mini_batch`` splits the batch by) come from this step's plan (``_plan_actor_minibatches``,
           ``ibpo.joint_minibatch``) instead of the fixed ``ppo_mini_batch_size · n`` (the two stored lines
           the manifest lists as ``replaced``);
        2. the metrics report the optimizer updates made and the rows per update."""
        rollout_config = self.config.actor_rollout_ref.rollout
        batch.meta_info["multi_turn"] = rollout_config.multi_turn.enable
        # TODO: Make "temperature" single source of truth from generation.
        batch.meta_info["temperature"] = rollout_config.temperature
        # update actor
        batch_td = batch.to_tensordict()
        # step 2: convert from padding to no-padding
        batch_td = left_right_2_no_padding(batch_td)
        calculate_entropy = self.config.actor_rollout_ref.actor.calculate_entropy or (
            self.config.actor_rollout_ref.actor.entropy_coeff != 0.0
        )
        distillation_use_topk = (
            self.distillation_config.distillation_loss.loss_settings.use_topk
            if is_distillation_enabled(self.config.get("distillation"))
            else False
        )
        distillation_only = False  # distillation_only flag means we can skip policy loss and reduce mem footprint
        if is_distillation_enabled(self.config.get("distillation")):
            distillation_loss_cfg = self.distillation_config.distillation_loss
            distillation_only = (
                distillation_use_topk
                and not distillation_loss_cfg.use_task_rewards
                and not distillation_loss_cfg.use_policy_gradient
            )
        # RECIPE: the rows of one optimizer update for this step (grown with the joint rows under `grow`)
        if self._actor_plan is None or len(batch) != self._actor_plan.padded_rows:  # RECIPE
            raise RuntimeError(f"actor update on {len(batch)} rows without this step's mini-batch plan "  # RECIPE
                               f"({self._actor_plan})")  # RECIPE
        ppo_mini_batch_size = self._actor_plan.mini_batch_rows  # RECIPE
        ppo_epochs = self.config.actor_rollout_ref.actor.ppo_epochs
        seed = self.config.actor_rollout_ref.actor.data_loader_seed
        shuffle = self.config.actor_rollout_ref.actor.shuffle
        tu.assign_non_tensor(
            batch_td,
            calculate_entropy=calculate_entropy,
            distillation_use_topk=distillation_use_topk,
            distillation_only=distillation_only,
            global_batch_size=ppo_mini_batch_size,
            mini_batch_size=ppo_mini_batch_size,
            epochs=ppo_epochs,
            seed=seed,
            dataloader_kwargs={"shuffle": shuffle},
            compute_loss=True,
        )
        actor_output = self.actor_rollout_wg.update_actor(batch_td)
        actor_output = tu.get(actor_output, "metrics")
        actor_output = rename_dict(actor_output, "actor/")
        # modify key name
        actor_output["perf/mfu/actor"] = actor_output.pop("actor/mfu")
        # RECIPE: optimizer updates the actor made, counted from its own output (one grad_norm each)
        actor_output["actor/num_optimizer_updates"] = optimizer_updates_reported(actor_output)  # RECIPE
        actor_output["actor/mini_batch_rows"] = self._actor_plan.mini_batch_rows  # RECIPE
        actor_output = DataProto.from_single_dict(data={}, meta_info={"metrics": actor_output})

        return actor_output
