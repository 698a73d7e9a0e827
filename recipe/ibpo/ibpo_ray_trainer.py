"""RayIBPOTrainer: the IBPO correction pass (paper Alg. 1, App. E.2) in the hooks of verl's trainer.

The training loop is :class:`recipe.common.trainer_base.HookedRayPPOTrainer` ``.fit``, the pinned verl's own
``RayPPOTrainer.fit`` plus one-line hook calls. This module holds the hooks; each calls into a room of its own:
  1. ``_after_generation``: after the main ``generate_sequences`` and *before* ``sleep_replicas()`` (the
     replicas still hold π_θ): the correction pass (``recipe.ibpo.correction.step.run_correction_pass``:
     references, correction prompts through the same rollout manager, scoring by the same reward function,
     alignment, rewrite filter, Δ and token masks; the numbers from ``ibpo.pipeline``);
  2. ``_extend_batch_before_balance``: optional joint training rows (App. E.2 (C)) and no-op padding;
  3. ``_shape_rewards``: IBPO's per-row state read back once after verl's reorder into the step record
     (``recipe.ibpo.step_record.IBPOStep``), then ``token_level_rewards = token_level_scores + λΔ``
     (Eq. 15/27); verl then calls the ``ibpo`` estimator;
  4. ``_after_advantage``: ``advantages ·= m_t`` (Eq. 7/17) before the actor update, the metrics
     (``recipe.ibpo.step_metrics``: mechanism, Theorem A.2), the optional gradient probe and the step's compute
     (``recipe.ibpo.step_compute``); ``_step_metrics``: seconds per phase, speculation counters, running totals.
The checkpointed state (λ schedule, running totals) is ``recipe.ibpo.run_state.IBPORunState``.
``_update_actor`` is verl's text with its changes marked ``# RECIPE`` (``recipe/common/upstream/manifest.toml``): the
rows of an optimizer update come from this step's plan (``ibpo.joint_minibatch``, ``ibpo/minibatch.py``).
ReMax is not supported (it needs a second sampled generation of its own). Validation never runs the
correction pass (``_validate`` is verl's own).
"""

from __future__ import annotations

import time

import torch
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.distillation.losses import is_distillation_enabled
from verl.utils import tensordict_utils as tu
from verl.utils.debug import marked_timer
from verl.utils.py_functional import rename_dict
from verl.workers.utils.padding import left_right_2_no_padding

from ibpo.advantages import get_mask_sign, shapes_reward
from ibpo.lookup_decoding import ngram_params_from_speculative_config
from ibpo.minibatch import ActorMiniBatchPlan, actor_minibatch_plan, optimizer_updates_reported, row_multiples
from ibpo.options import IBPOConfig
from recipe.common.methods import method_options
from recipe.common.preflight.model import configured_context_length, model_flop_shape
from recipe.common.preflight.row_limits import observed_rows_line
from recipe.common.step_io import generation_work
from recipe.common.trainer_base import HookedRayPPOTrainer, StepCost
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.correction.rollout import speculation_on, speculative_config_of
from recipe.ibpo.correction.step import run_correction_pass
from recipe.ibpo.run_state import STATE_FILE, IBPORunState
from recipe.ibpo.start_checks import check_trainer_config
from recipe.ibpo.step_compute import compute_metrics, generation_tokens, step_work
from recipe.ibpo.step_metrics import MechanismMetrics, SpeculationCounters, phase_seconds, theorem_metrics
from recipe.ibpo.step_record import IBPOStep


class RayIBPOTrainer(HookedRayPPOTrainer):
    """verl's PPO trainer with IBPO's counterfactual correction pass in every training step."""

    COUNTS_FLOPS = True  # its step_cost carries the step's FLOPs (trainer_base)
    IBPO_STATE_FILE = STATE_FILE

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        model_path = self.config.actor_rollout_ref.model.path
        # the same context the pre-flight checked (rope scaling and override_config included)
        self._init_ibpo_state(configured_context_length(self.config.actor_rollout_ref.model),
                              model_flop_shape(model_path))

    def _init_ibpo_state(self, model_context: int | None, model_shape) -> None:
        """The validated ``ibpo:`` block through the start checks (with ``max_candidate_tokens = 0`` resolved to
        the budget derived from the context), the run's checkpointed state, the metric families that keep state
        across steps and an empty step record."""
        self.ibpo: IBPOConfig = check_trainer_config(self.config, method_options(self.config, "ibpo"),
                                                     self.tokenizer, model_context)
        self.run_state = IBPORunState(self.ibpo, int(self.config.actor_rollout_ref.rollout.n))
        self.model_shape = model_shape  # compute_accounting.flops.ModelShape: what the FLOP count needs of the model
        self._actor_plan: ActorMiniBatchPlan | None = None  # this step's actor mini-batch layout (_update_actor)
        self._step = IBPOStep(lam=self.ibpo.lam)  # this step's IBPO state, from hook to hook
        self._mechanism = MechanismMetrics()  # with the reward-drop alarm; not checkpointed
        self._speculation = SpeculationCounters(speculation_on(self.config))
        # the rollout's ngram proposer (None: no speculation, or a method the replay cannot reproduce): with it,
        # the modelled GPU seconds price each generation's decode as the speculative rollout ran it
        self._ngram = ngram_params_from_speculative_config(speculative_config_of(self.config))

    def init_workers(self):
        """The ``ibpo`` estimator's guard: this trainer shapes the reward it normalises, so it announces itself
        (``recipe.ibpo.verl_plugin.assert_registered`` marks the process; the estimator refuses a run no IBPO trainer
        started). Another method's trainer never gets here with ``algorithm.adv_estimator=ibpo``: the registry
        refuses it (``recipe.common.methods.method_of``)."""
        from recipe.ibpo.verl_plugin import assert_registered

        if self.config.algorithm.adv_estimator == "ibpo":
            assert_registered()  # verl swallows entry-point failures at DEBUG: fail here, loudly
        super().init_workers()

    # ------------------------------------------------------------------ hooks of HookedRayPPOTrainer.fit
    def _before_generation(self, gen_batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        self._step = IBPOStep(lam=self.ibpo.lam)

    def _after_generation(self, gen_batch: DataProto, gen_output: DataProto, metrics: dict,
                          timing_raw: dict) -> None:
        """IBPO (1): the correction pass, while the replicas still serve π_θ; Δ and m ride the batch (as keys)
        through verl's reorder."""
        timing_raw["ibpo_main_gen"] = time.perf_counter() - self._step.started
        metrics["ibpo/main_prompt_tokens"], metrics["ibpo/main_gen_tokens"] = generation_tokens(gen_output)
        if self.ibpo.enable:
            self._step.correction = run_correction_pass(
                gen_batch, gen_output, self.ibpo, global_step=self.global_steps, tokenizer=self.tokenizer,
                generate=self._generate, config=self.config, metrics=metrics, timing_raw=timing_raw)
            corr.attach_shaping(gen_output, self._step.correction)
        else:  # the GSPO baseline through the same loop: Δ = 0, m = 1
            corr.attach_no_shaping(gen_output)

    def _extend_batch_before_balance(self, batch: DataProto, metrics: dict) -> DataProto:
        """IBPO (2): joint training on the correction samples, then whole mini-batches (no-op padding)."""
        result = self._step.correction
        main_rows = len(batch)
        if result is not None and self.ibpo.joint_training and result.requests:
            batch = DataProto.concat([batch, corr.build_joint_rows(batch, result, self.ibpo)])
        lengths = batch.batch["attention_mask"].sum(-1).tolist()  # the rows verl's micro-batcher measures
        longest = {"main": max(lengths[:main_rows])}
        if len(lengths) > main_rows:
            longest["joint-training"] = max(lengths[main_rows:])
        metrics.update({f"ibpo/longest_{phase.replace('-', '_')}_row": float(n) for phase, n in longest.items()})
        print(f"[ibpo] step {self.global_steps}: {observed_rows_line(self.config, longest)}", flush=True)
        self._actor_plan = self._plan_actor_minibatches(main_rows, len(batch) - main_rows)
        batch, _ = corr.pad_to_rows(batch, self._actor_plan.padded_rows)
        return batch

    def _shape_rewards(self, batch: DataProto, metrics: dict) -> None:
        """IBPO (3): the per-row state read once, in the batch's final order, into the step record; then
        r' = r + λΔ on the last response token (Eq. 15/27), on top of any KL penalty."""
        super()._shape_rewards(batch, metrics)
        step = self._step
        step.rows = corr.IBPORows.of(batch)
        step.lam = self.run_state.lambda_schedule.current()
        if not shapes_reward(self.ibpo.shaping):  # ibpo.shaping=advantage: λΔ enters after normalisation
            return
        shaped = corr.shaped_token_rewards(batch, step.rows, step.lam)
        batch.batch["token_level_rewards"] = batch.batch["token_level_rewards"] + (
            shaped - batch.batch["token_level_scores"])

    def _after_advantage(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """IBPO (4): the shaping factor of ``ibpo.shaping`` and the token mask after normalisation (Eq. 7/17;
        padding rows get 0), then the metrics, the optional gradient probe and the step's compute."""
        cfg, step = self.ibpo, self._step
        rows = step.batch_rows()
        corr.apply_shaping_factor(batch, rows, step.lam, cfg.shaping, cfg.correct_threshold)
        # the mechanism reads the sequence advantages before the token mask
        metrics.update(self._mechanism.step(batch, rows, cfg.correct_threshold, self.global_steps))
        corr.apply_token_mask(batch, rows, get_mask_sign(cfg.mask_sign))
        metrics.update(theorem_metrics(batch, rows, cfg, step.lam, self.global_steps,
                                       self.run_state.lambda_schedule))
        if cfg.grad_probe_interval and self.global_steps % cfg.grad_probe_interval == 0:
            with marked_timer("ibpo_grad_probe", timing_raw, color="purple"):
                self.probe_gradient_variance(batch, metrics)
        # The step's work is fixed from here on (the update trains on this batch): count it now, before verl
        # may write this step's checkpoint, so a resumed run continues from totals that include this step.
        self._account_step_compute(batch, metrics)

    def _account_step_compute(self, batch: DataProto, metrics: dict) -> None:
        """The step's FLOPs per phase and tokens, added to the running totals (``recipe.ibpo.step_compute``),
        and its modelled GPU seconds (``compute_accounting.gpu_time``). Decode is priced as the rollout ran it:
        plain, or, when it speculates with ngram, the passes and drafts of vLLM's proposer replayed on each
        realised response (``corr.speculative_generation_work``; main and correction generations alike, as
        the servers speculate on every request). Other speculative methods are priced as plain decode."""
        step = self._step
        correction_output = None if step.correction is None else step.correction.correction_output
        if correction_output is not None and step.generation_padding:  # generated, then dropped: still work
            correction_output = DataProto.concat([correction_output, *step.generation_padding])
        work = step_work(batch, step.batch_rows(), correction_output, grad_probe=step.grad_probe_lengths,
                         **self._training_passes())
        flops = compute_metrics(work, self.model_shape, metrics, self.run_state.compute_totals)
        self.step_cost = StepCost(flops.total)
        if self.gpu_time_coefficients is None:  # no cost model: nothing to price (and no replay to pay for)
            return

        def decode_work(output: DataProto):
            return generation_work(output) if self._ngram is None else corr.speculative_generation_work(
                output, self._ngram)

        self.step_cost = StepCost(flops.total, self._model_gpu_seconds(
            work, decode_work(batch.select_idxs(step.rows.main)),
            None if correction_output is None else decode_work(correction_output), metrics))

    def _step_metrics(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """End of step: measured seconds per phase, the speculation counters and the running time total (the
        compute totals were counted in ``_after_advantage``). If this step wrote a checkpoint, its IBPO state is
        written again now that the step's time is known."""
        metrics.update(phase_seconds(timing_raw))
        servers = getattr(getattr(self, "llm_server_manager", None), "server_addresses", None)
        metrics.update(self._speculation.step_metrics(self.global_steps, servers))
        time_totals = self.run_state.time_totals
        time_totals["cumulative_step_s"] += timing_raw.get("step", 0.0)
        metrics["ibpo/time/cumulative_step_s"] = time_totals["cumulative_step_s"]
        metrics["ibpo/time/host_share"] = metrics["ibpo/time/host_s"] / max(timing_raw.get("step", 0.0), 1e-9)
        if self._saved_step_folder is not None:  # the base clears it once the ledger is written again too
            self.run_state.write(self._saved_step_folder)
        super()._step_metrics(batch, metrics, timing_raw)  # the compute ledger and budget (trainer_base)

    # ------------------------------------------------------------------ the correction pass's rollout
    def _generate(self, gen_batch: DataProto) -> DataProto:
        """Generate on driver-built prompts with the main rollout manager (padded to the agent workers). The
        padding requests are generated too: kept on the step record, so the step's compute counts them."""
        num_workers = self.config.actor_rollout_ref.rollout.agent.num_workers
        padded, pad = pad_dataproto_to_divisor(gen_batch, num_workers)
        out = self.async_rollout_manager.generate_sequences(padded)
        out.meta_info.pop("timing", None)
        if pad:
            self._step.generation_padding.append(out.select_idxs(list(range(len(out) - pad, len(out)))))
        return unpad_dataproto(out, pad_size=pad)

    def probe_gradient_variance(self, batch: DataProto, metrics: dict) -> None:
        """Per-sample policy-gradient variance on the main rows, on the same samples (App. A), for two pairs of
        advantages: the trained ones (GSPO's group-normalised raw reward vs the IBPO advantages this step trains
        with: ``var_gspo``, ``var_ibpo``, ``ratio``) and Theorem A.2's own, un-normalised (r − mean_g vs
        r + λ_tΔ − mean_g, whatever ``ibpo.shaping``: ``theorem_var_gspo``, ``theorem_var_ibpo``,
        ``theorem_ratio``). The normalisation rescales each group, so the two ratios differ (docs/method_ibpo.md)."""
        from ibpo.advantages import broadcast_advantages, group_normalized_advantages
        from ibpo.diagnostics import total_variance, unnormalised_advantages
        from recipe.ibpo.workers import probe_input

        step = self._step
        is_main = torch.as_tensor(step.batch_rows().main)
        rows = torch.nonzero(is_main).flatten()
        world = self.actor_rollout_wg.world_size
        rows = rows[: len(rows) - len(rows) % world]
        if len(rows) < 2 * world:
            return
        main = batch.select_idxs(rows.numpy())
        step.grad_probe_lengths = main.batch["attention_mask"].sum(-1).tolist()
        uids = list(main.non_tensor_batch["uid"])
        raw = main.batch["token_level_scores"].sum(-1).double()
        shaped = raw + step.lam * step.rows.delta[rows].double()
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
            if var_gspo > 0:  # a ratio over a zero variance (every GSPO advantage 0) is left out, not logged as NaN
                metrics[f"ibpo/grad_probe/{prefix}ratio"] = var_ibpo / var_gspo
        metrics["ibpo/grad_probe/num_samples"] = float(len(rows))

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self):
        """verl's checkpoint plus the IBPO state a resumed run needs (``recipe.ibpo.run_state``). verl saves
        after the actor update, inside the step: λ and the compute totals already include this step
        (``_after_advantage``); the time total gets the step's seconds so far, and the exact figure is written
        again at the end of the step (``_step_metrics``)."""
        super()._save_checkpoint()  # sets _saved_step_folder
        self.run_state.write(self._saved_step_folder, time.perf_counter() - self._step.started)

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
        self.run_state.load_state_dict(state, path, self.global_steps)
        return result

    def _plan_actor_minibatches(self, main_rows: int, joint_rows: int) -> ActorMiniBatchPlan:
        """This step's actor mini-batch size and padded batch size (``ibpo.minibatch.actor_minibatch_plan``,
        mode ``ibpo.joint_minibatch``): whole micro-batches on every DP rank for the update, the old-log-prob
        and the reference forwards."""
        actor_rollout_ref = self.config.actor_rollout_ref
        n = int(actor_rollout_ref.rollout.n)

        def micro(section, dynamic_key: str, micro_key: str) -> int | None:
            return None if section.get(dynamic_key, False) else int(section.get(micro_key) or 1)

        multiples = row_multiples(
            int(self.actor_rollout_wg.world_size),
            micro(actor_rollout_ref.actor, "use_dynamic_bsz", "ppo_micro_batch_size_per_gpu"),
            micro(actor_rollout_ref.rollout, "log_prob_use_dynamic_bsz", "log_prob_micro_batch_size_per_gpu"),
            micro(actor_rollout_ref.ref, "log_prob_use_dynamic_bsz", "log_prob_micro_batch_size_per_gpu")
            if self.use_reference_policy else None,
        )
        return actor_minibatch_plan(main_rows, joint_rows, int(actor_rollout_ref.actor.ppo_mini_batch_size) * n,
                                    multiples, self.ibpo.joint_minibatch)

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
