"""The shared base of the recipe's trainers: the pinned verl's ``RayPPOTrainer.fit`` with six hook calls.

``HookedRayPPOTrainer.fit`` is verl's ``fit`` **verbatim** (``recipe/common/upstream/RayPPOTrainer.fit.py.txt``,
entry ``RayPPOTrainer.fit`` of ``recipe/common/upstream/manifest.toml``) plus the one-line calls of
:data:`recipe.common.upstream.HOOK_CALLS`; tests/unit/test_trainer_upstream.py checks both (the installed verl
still has that text; our copy is it plus hook calls only). Every method's
work lives in a hook of a subclass:

- ``_before_generation``: before the main ``generate_sequences`` (IBPO: starts the step's state);
- ``_after_generation``: right after it, *before* ``sleep_replicas()`` while the replicas serve π_θ
  (IBPO: the correction pass);
- ``_extend_batch_before_balance``: the assembled batch, before ``_balance_batch`` reorders it (IBPO: joint
  rows, padding to whole mini-batches);
- ``_shape_rewards``: ``token_level_rewards`` is set, the advantage is not (IBPO: r' = r + λΔ);
- ``_after_advantage``: advantages are set, before the critic/actor update (IBPO: token mask, metrics,
  gradient probe; counterfactual weighting: the token weights);
- ``_step_metrics``: before ``logger.log`` (IBPO: host-time share). The base's own ``_step_metrics`` keeps
  the compute ledger of every method (``compute_accounting.budget``): an override calls it last.

The base also runs the ``compute_budget:`` block for every method (:meth:`HookedRayPPOTrainer._budget_step`):
the cumulative FLOPs, GPU-seconds and modelled GPU-seconds, the stop at the budget (by shortening
``total_training_steps`` so that verl's own last step, with its checkpoint, ends the run) and validation at
fixed fractions of the budget. A subclass that counts its step's FLOPs says so
(:attr:`HookedRayPPOTrainer.COUNTS_FLOPS`) and hands the step's cost to the ledger as a typed record
(:class:`StepCost` in :attr:`HookedRayPPOTrainer.step_cost`: its FLOPs, and its work priced by the GPU-time model,
:meth:`HookedRayPPOTrainer._model_gpu_seconds`, logged as ``compute/modelled_gpu_seconds/<phase>``); a trainer
that does not is priced as verl's plain step (every row generated once and trained on).

The hooks are no-ops here, so this class *is* verl's trainer. It names no method: an advantage estimator that
only one method's trainer may run is refused for every other method by the registry
(``recipe.common.methods.method_of``: in the pre-flight and again when the task runner picks the trainer), and
a method's own guards live in its trainer. ReMax's second (greedy) generation rows are in
``combined_gen_batch`` too; a method that cannot serve them rejects ReMax at start.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pprint import pprint

import numpy as np
import torch
from tqdm import tqdm
from verl import DataProto
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

from compute_accounting.flops import StepWork
from compute_accounting.gpu_time import GenerationWork, StepSeconds, step_seconds
from recipe.common.step_io import generation_work, read_state_file, require_finite_scores, write_json_atomically

# the step's modelled GPU seconds (``compute_accounting.gpu_time.StepSeconds.as_metrics``): the total under this
# name, each phase under ``<name>/<phase>``
MODELLED_SECONDS_METRIC = "compute/modelled_gpu_seconds"


@dataclass(frozen=True)
class StepCost:
    """One step's cost as a method's hook hands it to the compute ledger (:meth:`HookedRayPPOTrainer._budget_step`):
    its FLOPs (``compute_accounting.flops.step_flops``; None: the trainer counts none) and its modelled GPU seconds
    per phase (``compute_accounting.gpu_time.step_seconds``; None: the run has no cost model)."""

    flops: float | None = None
    modelled: StepSeconds | None = None


class HookedRayPPOTrainer(RayPPOTrainer):
    """verl's ``RayPPOTrainer`` whose ``fit`` calls six (no-op) hooks; subclasses put a method in them."""

    # Whether a subclass puts its step's FLOPs into :attr:`step_cost`; False: a FLOP budget is refused at start.
    COUNTS_FLOPS = False
    COMPUTE_LEDGER_FILE = "compute_budget_state.json"
    # this step's cost, set by a subclass's hook and taken by the compute ledger at the end of the step (None: the
    # trainer priced nothing of its own; the ledger prices verl's plain step)
    step_cost: StepCost | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_compute_budget()

    def _init_compute_budget(self) -> None:
        """The validated ``compute_budget:`` block, what prices the modelled GPU seconds, and an empty ledger
        (a resumed run restores it)."""
        from compute_accounting.budget import ComputeBudgetError, ComputeLedger
        from recipe.common.preflight.compute_budget import compute_budget_from, gpu_time_coefficients

        budget = compute_budget_from(self.config)
        self.gpu_time_coefficients = gpu_time_coefficients(self.config, budget)  # None: not modelled
        if budget.enabled and budget.unit == "flops" and not self.COUNTS_FLOPS:
            raise ComputeBudgetError(f"compute_budget.unit=flops but {type(self).__name__} counts no FLOPs; "
                                     "use compute_budget.unit=gpu_seconds")
        self.compute_ledger = ComputeLedger(budget, method=self.config.get("method"))  # a resume checks the method
        # this step's checkpoint folder, if it wrote one: every state file saved there is written again at the end
        # of the step, when the step's cost is known (the ledger here, a subclass's own state in its _step_metrics)
        self._saved_step_folder: str | None = None

    # ------------------------------------------------------------------ hooks (no-ops: verl's behaviour)
    def _before_generation(self, gen_batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """Before the main ``generate_sequences(gen_batch)`` (``gen_batch``: the prompts, repeated n times)."""

    def _after_generation(self, gen_batch: DataProto, gen_output: DataProto, metrics: dict,
                          timing_raw: dict) -> None:
        """After the main generation and **before** ``checkpoint_manager.sleep_replicas()``: the rollout
        replicas still serve the current policy, so a second generation can go through
        ``self.async_rollout_manager``. Keys added to ``gen_output.batch`` reach the training batch."""

    def _extend_batch_before_balance(self, batch: DataProto, metrics: dict) -> DataProto:
        """The assembled batch (prompts ∪ generation, in generation order) before ``_balance_batch``
        reorders it; return it with rows appended (every row must carry the batch's keys)."""
        return batch

    def _shape_rewards(self, batch: DataProto, metrics: dict) -> None:
        """``batch.batch["token_level_rewards"]`` is set (scores, minus the KL penalty if any); change it in
        place before the advantage estimator reads it. An override calls this first: it stops the run on a
        non-finite score before anything trains on it."""
        require_finite_scores(batch.batch["token_level_scores"].sum(dim=-1), batch.non_tensor_batch.get("data_source"),
                              f"step {self.global_steps}")

    def _after_advantage(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """``batch.batch["advantages"]`` is set (inside the ``adv`` timer); change it in place before the
        critic and actor updates."""

    def _step_metrics(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        """End of the step, before ``logger.log(metrics)``: add this step's metrics (``timing_raw["step"]``
        is final). The base keeps the compute ledger here; an override adds its metrics, then calls this."""
        self._budget_step(metrics, timing_raw, batch)

    # ------------------------------------------------------------------ the compute budget (every method)
    def _model_gpu_seconds(self, work: StepWork, main: GenerationWork, correction: GenerationWork | None,
                           metrics: dict) -> StepSeconds | None:
        """Price the step's work with the GPU-time model (``compute_accounting.gpu_time.step_seconds``, the
        coefficients of ``compute_budget.cost_model``), logged as ``compute/modelled_gpu_seconds/<phase>`` and
        their total; a hook returns it to the ledger in its :class:`StepCost`. None when the run has no cost model."""
        if self.gpu_time_coefficients is None:
            return None
        seconds = step_seconds(work, main, correction, self.gpu_time_coefficients)
        metrics.update(seconds.as_metrics(MODELLED_SECONDS_METRIC + "/"))
        return seconds

    def _training_passes(self) -> dict:
        """The run's training passes per step, as fields of ``compute_accounting.flops.StepWork``: actor epochs,
        gradient checkpointing, the old-log-prob forward (not under verl's rollout-correction bypass mode) and
        the reference forward."""
        rollout_corr = self.config.algorithm.get("rollout_correction", None)
        return {"ppo_epochs": int(self.config.actor_rollout_ref.actor.ppo_epochs),
                "gradient_checkpointing": bool(self.config.actor_rollout_ref.model.get(
                    "enable_gradient_checkpointing", False)),
                "old_log_prob_forward": not (rollout_corr and rollout_corr.get("bypass_mode", False)),
                "reference_forward": bool(self.use_reference_policy)}

    def _plain_step_work(self, batch: DataProto, **extra) -> StepWork:
        """verl's step over ``batch``: every row generated once and trained on with :meth:`_training_passes`
        (``extra``: more fields of ``compute_accounting.flops.StepWork``)."""
        rows = batch.batch["attention_mask"].sum(-1).tolist()
        return StepWork(main_gen=rows, train_main=rows, **self._training_passes(), **extra)

    def _budget_step(self, metrics: dict, timing_raw: dict, batch: DataProto | None = None) -> None:
        """Add the step to the compute ledger (its FLOPs and modelled GPU seconds from :attr:`step_cost`, its
        seconds times the run's GPUs), validate when the spend crossed a budget fraction or the run ends, and, when
        the next step would reach the budget, make it verl's last step (``compute_accounting.budget``: overshoot
        < one step)."""
        ledger = self.compute_ledger
        cost, self.step_cost = self.step_cost, None
        if cost is None and batch is not None:  # a trainer that prices nothing of its own
            cost = StepCost(modelled=self._model_gpu_seconds(self._plain_step_work(batch), generation_work(batch),
                                                             None, metrics))
        cost = cost or StepCost()
        modelled = cost.modelled.total if cost.modelled is not None else 0.0  # GPU seconds (the coefficients' GPUs)
        ledger.add_step(cost.flops or 0.0, float(timing_raw.get("step", 0.0)) * self.resource_pool_manager.get_n_gpus(),
                        modelled)
        budget = ledger.budget
        is_last_step = self.global_steps >= self.total_training_steps
        if budget.enabled and not is_last_step and ledger.next_step_is_last():
            print(f"[compute_budget] step {self.global_steps}: {ledger.spent():.4g} of {budget.limit:.4g} {budget.unit} "
                  f"spent, the last step cost {ledger.last_cost:.4g}: step {self.global_steps + 1} is the last", flush=True)
            self.total_training_steps = self.global_steps + 1
        if ledger.validation_due(is_last_step):
            with marked_timer("testing", timing_raw, color="green"):
                metrics.update(self._validate())
            metrics["compute_budget/validated"] = 1.0
        metrics.update(ledger.metrics())
        if budget.enabled and is_last_step:
            metrics["compute_budget/overshoot"] = ledger.spent() - budget.limit
            if ledger.spent() + ledger.last_cost < budget.limit:
                print(f"[compute_budget] trainer.total_training_steps={self.total_training_steps} ended the run at "
                      f"{ledger.spent():.4g} of {budget.limit:.4g} {budget.unit}: raise it to spend the budget", flush=True)
        if self._saved_step_folder is not None:  # this step saved a checkpoint: store the ledger with the step in it
            self._write_compute_ledger(self._saved_step_folder)
            self._saved_step_folder = None

    def _step_folder(self, loading: bool = False) -> str:
        """The checkpoint folder of the current step; when loading, the one verl resumed from
        (``trainer.resume_from_path`` in ``resume_mode=resume_path``), resolved as verl does."""
        trainer_cfg = self.config.trainer
        if loading and trainer_cfg.resume_mode == "resume_path":
            folder = trainer_cfg.resume_from_path
        else:
            folder = os.path.join(trainer_cfg.default_local_dir, f"global_step_{self.global_steps}")
        return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)

    def _resumed_state(self, file_name: str) -> tuple[str, dict | None]:
        """The path of the state file ``file_name`` in the checkpoint folder verl resumed from, and what it holds
        (None: there is no such file)."""
        path = os.path.join(self._step_folder(loading=True), file_name)
        if not os.path.exists(path):
            return path, None
        return path, read_state_file(path)

    def _write_compute_ledger(self, folder: str) -> None:
        write_json_atomically(os.path.join(folder, self.COMPUTE_LEDGER_FILE), self.compute_ledger.state_dict())

    def _save_checkpoint(self):
        """verl's checkpoint plus the compute ledger. verl saves inside the step, before its cost is known: the
        ledger is written now without this step and again, with it, at the end of the step."""
        super()._save_checkpoint()
        self._saved_step_folder = self._step_folder()
        self._write_compute_ledger(self._saved_step_folder)

    def _load_checkpoint(self):
        result = super()._load_checkpoint()
        if self.global_steps == 0:  # training from scratch
            return result
        path, ledger = self._resumed_state(self.COMPUTE_LEDGER_FILE)
        if ledger is not None:
            self.compute_ledger.load_state_dict(ledger, path)
        elif self.compute_ledger.budget.enabled:
            raise FileNotFoundError(f"resuming at step {self.global_steps} with compute_budget.limit set but {path} is "
                                    "missing: the budget would restart at 0. Resume from a checkpoint written by this "
                                    "recipe's trainer, or run without compute_budget.limit")
        return result

    # ------------------------------------------------------------------ the pinned verl's fit + the hook calls
    # Do not edit by hand: docs/upgrading_verl.md (python -m recipe.common.upstream check).
    def fit(self):
        """
        The training loop of PPO.
        The driver process only need to call the compute functions of the worker group through RPC
        to construct the PPO dataflow.
        The light-weight advantage computation is done on the driver process.
        """
        if self._dump_executor._shutdown:
            self._init_dump_executor()

        from omegaconf import OmegaConf

        from verl.utils.tracking import Tracking

        logger = Tracking(
            project_name=self.config.trainer.project_name,
            experiment_name=self.config.trainer.experiment_name,
            default_backend=self.config.trainer.logger,
            config=OmegaConf.to_container(self.config, resolve=True),
        )

        self.global_steps = 0

        # load checkpoint and update weights before doing anything
        self._load_checkpoint()
        self.checkpoint_manager.update_weights(self.global_steps)

        current_epoch = self.global_steps // len(self.train_dataloader)

        SkipManager.init(self.config)

        # perform validation before training
        # currently, we only support validation using the reward_function.
        if self.config.trainer.get("val_before_train", True):
            val_metrics = self._validate()
            assert val_metrics, f"{val_metrics=}"
            pprint(f"Initial validation metrics: {val_metrics}")
            logger.log(data=val_metrics, step=self.global_steps)
            if self.config.trainer.get("val_only", False):
                self._shutdown_dump_executor()
                return

        # add tqdm
        progress_bar = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress")

        # we start from step 1
        self.global_steps += 1
        last_val_metrics = None
        self.max_steps_duration = 0

        SkipManager.set_step(self.global_steps)

        prev_step_profile = False
        curr_step_profile = (
            self.global_steps in self.config.global_profiler.steps
            if self.config.global_profiler.steps is not None
            else False
        )
        next_step_profile = False

        for epoch in range(current_epoch, self.config.trainer.total_epochs):
            for batch_dict in self.train_dataloader:
                if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
                    self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=False)
                metrics = {}
                timing_raw = {}

                with marked_timer("start_profile", timing_raw):
                    self._start_profiling(
                        not prev_step_profile and curr_step_profile
                        if self.config.global_profiler.profile_continuous_steps
                        else curr_step_profile
                    )
                batch: DataProto = DataProto.from_single_dict(batch_dict)
                batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature

                # add uid to batch
                batch.non_tensor_batch["uid"] = np.array(
                    [str(uuid.uuid4()) for _ in range(len(batch.batch))], dtype=object
                )

                gen_batch = self._get_gen_batch(batch)

                # pass global_steps to trace
                gen_batch.meta_info["global_steps"] = self.global_steps
                rollout_n = self.config.actor_rollout_ref.rollout.n
                gen_batch_output = gen_batch.repeat(repeat_times=rollout_n, interleave=True)

                if self.config.algorithm.adv_estimator == AdvantageEstimator.REMAX:
                    # NOTE: REMAX needs one sampled rollout plus one greedy baseline per prompt.
                    # Keep them in a single agent-loop/vLLM request to avoid sending a second
                    # rollout after replicas have been put to sleep, which can leave async vLLM
                    # engines in an invalid state for multi-turn agent workloads.
                    gen_batch_output.non_tensor_batch["__do_sample__"] = np.ones(len(gen_batch_output), dtype=bool)
                    gen_baseline_batch = gen_batch.slice(0, None)
                    gen_baseline_batch.non_tensor_batch["__do_sample__"] = np.zeros(len(gen_baseline_batch), dtype=bool)
                    combined_gen_batch = DataProto.concat([gen_batch_output, gen_baseline_batch])
                    num_sampled_prompts = len(gen_batch_output)
                else:
                    combined_gen_batch = gen_batch_output
                    num_sampled_prompts = len(gen_batch_output)

                is_last_step = self.global_steps >= self.total_training_steps
                with marked_timer("step", timing_raw):
                    # generate a batch
                    with marked_timer("gen", timing_raw, color="red"):
                        if curr_step_profile:
                            self.llm_server_manager.start_profile()
                        self._before_generation(combined_gen_batch, metrics, timing_raw)
                        combined_gen_output = self.async_rollout_manager.generate_sequences(combined_gen_batch)
                        self._after_generation(combined_gen_batch, combined_gen_output, metrics, timing_raw)
                        self.checkpoint_manager.sleep_replicas()
                        if curr_step_profile:
                            self.llm_server_manager.stop_profile()

                        timing_raw.update(combined_gen_output.meta_info["timing"])
                        combined_gen_output.meta_info.pop("timing", None)

                    gen_batch_output = combined_gen_output.slice(0, num_sampled_prompts)
                    if "__do_sample__" in gen_batch_output.non_tensor_batch:
                        gen_batch_output.pop(non_tensor_batch_keys=["__do_sample__"])

                    if self.config.algorithm.adv_estimator == AdvantageEstimator.REMAX:
                        gen_baseline_output = combined_gen_output.slice(num_sampled_prompts, None)
                        if "__do_sample__" in gen_baseline_output.non_tensor_batch:
                            gen_baseline_output.pop(non_tensor_batch_keys=["__do_sample__"])

                        if self.use_rm and "rm_scores" not in gen_baseline_output.batch.keys():
                            baseline_reward = self._compute_reward_colocate(gen_baseline_output)
                            gen_baseline_output = gen_baseline_output.union(baseline_reward)

                        reward_baseline_tensor = gen_baseline_output.batch["rm_scores"].sum(dim=-1)
                        batch.batch["reward_baselines"] = reward_baseline_tensor

                        del gen_baseline_output
                    del combined_gen_batch, combined_gen_output
                    # repeat to align with repeated responses in rollout
                    batch = batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
                    batch = batch.union(gen_batch_output)

                    if "response_mask" not in batch.batch.keys():
                        batch.batch["response_mask"] = compute_response_mask(batch)
                    # Balance the number of valid tokens across DP ranks.
                    # NOTE: This usually changes the order of data in the `batch`,
                    # which won't affect the advantage calculation (since it's based on uid),
                    # but might affect the loss calculation (due to the change of mini-batching).
                    batch = self._extend_batch_before_balance(batch, metrics)
                    if self.config.trainer.balance_batch:
                        self._balance_batch(batch, metrics=metrics)

                    # compute global_valid tokens
                    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
                    # get images_seqlens
                    images_seqlens_all = []
                    for multi_modal_input in batch.non_tensor_batch["multi_modal_inputs"]:
                        if "image_grid_thw" not in multi_modal_input.keys():
                            continue
                        images_seqlens_all.extend(multi_modal_input["images_seqlens"].tolist())
                    batch.meta_info["images_seqlens"] = images_seqlens_all
                    with marked_timer("reward", timing_raw, color="yellow"):
                        # compute reward model score
                        if self.use_rm and "rm_scores" not in batch.batch.keys():
                            batch_reward = self._compute_reward_colocate(batch)
                            batch = batch.union(batch_reward)

                        # extract reward_tensor and reward_extra_infos_dict for training
                        reward_tensor, reward_extra_infos_dict = extract_reward(batch)

                    # Operating Mode Selection:
                    # - Bypass mode: Sets old_log_probs = rollout_log_probs (2 policies: π_rollout, π_θ)
                    # - Decoupled mode: Recomputes old_log_probs as proximal anchor (3 policies: π_rollout, π_old, π_θ)
                    #   Note: π_old computed once per data batch, serves as stable reference during mini-batch updates
                    rollout_corr_config = self.config.algorithm.get("rollout_correction", None)
                    bypass_recomputing_logprobs = rollout_corr_config and rollout_corr_config.get("bypass_mode", False)
                    if bypass_recomputing_logprobs:  # Use `rollout_log_probs`
                        from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode

                        apply_bypass_mode(
                            batch=batch,
                            rollout_corr_config=rollout_corr_config,
                            policy_loss_config=self.config.actor_rollout_ref.actor.policy_loss,
                        )
                    else:  # Recompute old_log_probs
                        with marked_timer("old_log_prob", timing_raw, color="blue"):
                            old_log_prob, old_log_prob_mfu = self._compute_old_log_prob(batch)
                            entropys = old_log_prob.batch["entropys"]
                            response_masks = batch.batch["response_mask"]
                            actor_config = self.config.actor_rollout_ref.actor
                            entropy_agg = agg_loss(
                                loss_mat=entropys,
                                loss_mask=response_masks,
                                loss_agg_mode=actor_config.loss_agg_mode,
                                loss_scale_factor=actor_config.loss_scale_factor,
                            )
                            old_log_prob_metrics = {
                                "actor/entropy": entropy_agg.detach().item(),
                                "perf/mfu/actor_infer": old_log_prob_mfu,
                            }
                            metrics.update(old_log_prob_metrics)
                            old_log_prob.batch.pop("entropys")
                            if "routed_experts" in batch.batch and "routed_experts" in old_log_prob.batch:
                                raise ValueError(
                                    "Detected conflicting router replay configuration: "
                                    "router_replay.mode='R2' and enable_rollout_routing_replay=True "
                                    "cannot be enabled simultaneously. "
                                    "The enable_rollout_routing_replay option is only used in R3 mode; "
                                    "it should not be set when using R2 mode."
                                )
                            batch = batch.union(old_log_prob)
                            if "rollout_log_probs" in batch.batch.keys():
                                # TODO: we may want to add diff of probs too.
                                from verl.utils.debug.metrics import calculate_debug_metrics

                                metrics.update(calculate_debug_metrics(batch))

                    assert "old_log_probs" in batch.batch, f'"old_log_prob" not in {batch.batch.keys()=}'
                    if self.use_reference_policy:
                        # compute reference log_prob
                        with marked_timer(str(Role.RefPolicy), timing_raw, color="olive"):
                            ref_log_prob = self._compute_ref_log_prob(batch)
                            batch = batch.union(ref_log_prob)

                    # compute values
                    if self.use_critic:
                        with marked_timer("values", timing_raw, color="cyan"):
                            values = self._compute_values(batch)
                            batch = batch.union(values)

                    with marked_timer("adv", timing_raw, color="brown"):
                        # we combine with rule-based rm
                        reward_extra_infos_dict: dict[str, list]
                        batch.batch["token_level_scores"] = reward_tensor

                        if reward_extra_infos_dict:
                            batch.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra_infos_dict.items()})

                        # compute rewards. apply_kl_penalty if available
                        if self.config.algorithm.use_kl_in_reward:
                            batch, kl_metrics = apply_kl_penalty(
                                batch, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=self.config.algorithm.kl_penalty
                            )
                            metrics.update(kl_metrics)
                        else:
                            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
                        self._shape_rewards(batch, metrics)

                        # Compute rollout correction: IS weights, rejection sampling, and metrics
                        # Only runs in decoupled mode (computes once per batch using stable π_old)
                        # In bypass mode, this is skipped - actor computes metrics from evolving π_θ vs π_rollout
                        if (
                            rollout_corr_config is not None
                            and "rollout_log_probs" in batch.batch
                            and not bypass_recomputing_logprobs  # Only in decoupled mode
                        ):
                            from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

                            # Compute IS weights, apply rejection sampling, compute metrics
                            batch, is_metrics = compute_rollout_correction_and_add_to_batch(batch, rollout_corr_config)
                            # IS and off-policy metrics already have rollout_corr/ prefix
                            metrics.update(is_metrics)

                        # compute advantages, executed on the driver process
                        norm_adv_by_std_in_grpo = self.config.algorithm.get(
                            "norm_adv_by_std_in_grpo", True
                        )  # GRPO adv normalization factor

                        batch = compute_advantage(
                            batch,
                            adv_estimator=self.config.algorithm.adv_estimator,
                            gamma=self.config.algorithm.gamma,
                            lam=self.config.algorithm.lam,
                            num_repeat=self.config.actor_rollout_ref.rollout.n,
                            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
                            config=self.config.algorithm,
                        )
                        self._after_advantage(batch, metrics, timing_raw)
                    # update critic
                    if self.use_critic:
                        with marked_timer("update_critic", timing_raw, color="pink"):
                            critic_output = self._update_critic(batch)
                        critic_output_metrics = reduce_metrics(critic_output.meta_info["metrics"])
                        metrics.update(critic_output_metrics)

                    # implement critic warmup
                    if self.config.trainer.critic_warmup > self.global_steps:
                        # Still in critic warmup, only update weights to wake up rollout replicas.
                        self.checkpoint_manager.update_weights(self.global_steps)
                    else:
                        # update actor
                        with marked_timer("update_actor", timing_raw, color="red"):
                            actor_output = self._update_actor(batch)

                        # Check if the ESI (Elastic Server Instance)/training plan is close to expiration.
                        esi_close_to_expiration = should_save_ckpt_esi(
                            max_steps_duration=self.max_steps_duration,
                            redundant_time=self.config.trainer.esi_redundant_time,
                        )
                        # Check if the conditions for saving a checkpoint are met.
                        # The conditions include a mandatory condition (1) and
                        # one of the following optional conditions (2/3/4):
                        # 1. The save frequency is set to a positive value.
                        # 2. It's the last training step.
                        # 3. The current step number is a multiple of the save frequency.
                        # 4. The ESI(Elastic Server Instance)/training plan is close to expiration.
                        if self.config.trainer.save_freq > 0 and (
                            is_last_step
                            or self.global_steps % self.config.trainer.save_freq == 0
                            or esi_close_to_expiration
                        ):
                            if esi_close_to_expiration:
                                print("Force saving checkpoint: ESI instance expiration approaching.")
                            with marked_timer("save_checkpoint", timing_raw, color="green"):
                                self._save_checkpoint()

                        # update weights from trainer to rollout
                        with marked_timer("update_weights", timing_raw, color="red"):
                            self.checkpoint_manager.update_weights(self.global_steps)

                        actor_output_metrics = reduce_metrics(actor_output.meta_info["metrics"])
                        metrics.update(actor_output_metrics)

                    # Log rollout generations if enabled
                    rollout_data_dir = self.config.trainer.get("rollout_data_dir", None)
                    if rollout_data_dir:
                        self._log_rollout_data(batch, reward_extra_infos_dict, timing_raw, rollout_data_dir)

                # validate
                if self.config.trainer.test_freq > 0 and (
                    is_last_step or self.global_steps % self.config.trainer.test_freq == 0
                ):
                    with marked_timer("testing", timing_raw, color="green"):
                        val_metrics: dict = self._validate()
                        if is_last_step:
                            last_val_metrics = val_metrics
                    metrics.update(val_metrics)

                with marked_timer("stop_profile", timing_raw):
                    next_step_profile = (
                        self.global_steps + 1 in self.config.global_profiler.steps
                        if self.config.global_profiler.steps is not None
                        else False
                    )
                    # Run the finish command (e.g. the trace upload) only once, on the last profiled
                    # step, so a command that uploads the whole save_path sends each trace once rather
                    # than re-uploading the accumulating directory every step. "Last" is the largest
                    # configured step, or the run's final step if it ends earlier on a profiled step.
                    profiled_steps = self.config.global_profiler.steps
                    run_finish_command = bool(
                        curr_step_profile
                        and profiled_steps
                        and (self.global_steps == max(profiled_steps) or is_last_step)
                    )
                    self._stop_profiling(
                        curr_step_profile and not next_step_profile
                        if self.config.global_profiler.profile_continuous_steps
                        else curr_step_profile,
                        run_command=run_finish_command,
                    )
                    prev_step_profile = curr_step_profile
                    curr_step_profile = next_step_profile

                steps_duration = timing_raw["step"]
                self.max_steps_duration = max(self.max_steps_duration, steps_duration)

                # training metrics
                metrics.update(
                    {
                        "training/global_step": self.global_steps,
                        "training/epoch": epoch,
                    }
                )
                # collect metrics
                metrics.update(compute_data_metrics(batch=batch, use_critic=self.use_critic))
                # GDPO per-component reward metrics
                gdpo_reward_keys = self.config.algorithm.get("gdpo_reward_keys", None)
                if gdpo_reward_keys and self.config.algorithm.adv_estimator in ("gdpo", AdvantageEstimator.GDPO):
                    for key in gdpo_reward_keys:
                        if key in batch.non_tensor_batch:
                            vals = np.asarray(batch.non_tensor_batch[key], dtype=np.float32)
                            metrics[f"gdpo/{key}/mean"] = float(np.mean(vals))
                            metrics[f"gdpo/{key}/std"] = float(np.std(vals))
                            metrics[f"gdpo/{key}/max"] = float(np.max(vals))
                            metrics[f"gdpo/{key}/min"] = float(np.min(vals))
                metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
                # TODO: implement actual tflpo and theoretical tflpo
                n_gpus = self.resource_pool_manager.get_n_gpus()
                metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
                # compute variance proxy metrics
                gradient_norm = metrics.get("actor/grad_norm", None)
                metrics.update(compute_variance_proxy_metrics(batch=batch, gradient_norm=gradient_norm))
                # Note: mismatch metrics (KL, PPL, etc.) are collected at line 1179 after advantage computation

                # Per-request spec decode metrics.
                metrics.update(
                    compute_spec_decode_metrics(
                        batch.non_tensor_batch.get("spec_num_draft_tokens", None),
                        batch.non_tensor_batch.get("spec_num_accepted_tokens", None),
                        batch.non_tensor_batch.get("spec_num_verify_steps", None),
                    )
                )

                # TODO: make a canonical logger that supports various backend
                self._step_metrics(batch, metrics, timing_raw)
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

                # this is experimental and may be changed/removed in the future
                # in favor of a general-purpose data buffer pool
                if hasattr(self.train_dataset, "on_batch_end"):
                    # The dataset may be changed after each training batch
                    self.train_dataset.on_batch_end(batch=batch)

        # Ensure dump executor is shut down when training loop ends without reaching is_last_step
        self._shutdown_dump_executor()
