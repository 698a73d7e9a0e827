"""IBPO's per-step metrics, each family a function (or, where it keeps state across steps, a small class) the
trainer's hooks call: the correction pass's own (``ibpo/*`` of ``ibpo.pipeline.shape_batch``, lengths, caching),
the mechanism (``ibpo/mechanism/*`` and the reward-drop alarm, ``ibpo.mechanism``), Theorem A.2's statistics
with the λ schedule's update and the variance of the advantages trained on (``ibpo.diagnostics``), and the
speculation counters the rollout servers report. The numbers are the pure package's; this module reads
them off verl's batches."""

from __future__ import annotations

from typing import Mapping

import numpy as np
from verl import DataProto

from ibpo.diagnostics import theorem_stats, trained_advantage_variance
from ibpo.lambda_schedule import LambdaSchedule
from ibpo.mechanism import RewardDropAlarm, advantage_mechanism, localised_coverage, sibling_overlap
from ibpo.options import IBPOConfig
from ibpo.variants import get_variant
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.correction.spec_counters import SpecCounterReader, spec_counter_metrics
from recipe.ibpo.step_compute import generation_tokens


# IBPO's measured phases: metric phase name -> verl / trainer ``marked_timer`` names whose seconds it sums
TIMED_PHASES: dict[str, tuple[str, ...]] = {
    "gen": ("gen",),  # the whole generation block: main generation + correction pass
    "main_gen": ("ibpo_main_gen",),
    "correction_gen": ("ibpo_gen",),
    "host": ("ibpo_plan", "ibpo_shape"),  # IBPO's own host work: plan, align, shape
    "lookup_proxy": ("ibpo_lookup_proxy",),  # diagnostic replay of the ngram proposer (lookup_proxy_interval), not method work
    "reward": ("reward",),
    "old_log_prob": ("old_log_prob",),
    "ref_log_prob": ("ref",),
    "adv": ("adv",),
    "grad_probe": ("ibpo_grad_probe",),
    "counterfactual": ("counterfactual",),
    "update_actor": ("update_actor",),
    "update_weights": ("update_weights",),
    "save_checkpoint": ("save_checkpoint",),
    "testing": ("testing",),
    "step": ("step",),
}


def phase_seconds(timing_raw: Mapping[str, float]) -> dict[str, float]:
    """Measured seconds per phase of one step from verl's ``timing_raw`` (``marked_timer``), as
    ``ibpo/time/<phase>_s``; a phase that did not run this step is 0."""
    return {f"ibpo/time/{phase}_s": float(sum(timing_raw.get(name, 0.0) for name in names))
            for phase, names in TIMED_PHASES.items()}


def correction_metrics(result: corr.CorrectionPass, cfg: IBPOConfig, bounds: np.ndarray | None,
                       correction_ids: list[list[int]], response_length: int) -> dict[str, float]:
    """The correction pass's metrics: the pipeline's (``ibpo/<name>``), whether any response was wrong and any
    correction right, the corrections' mean reward, tokens, prefix caching and the length bound."""
    requests = result.requests
    metrics = {f"ibpo/{k}": v for k, v in result.outcome.metrics.items()}
    metrics["ibpo/no_wrong_responses"] = float(not requests)
    metrics["ibpo/all_corrections_failed"] = float(bool(requests) and not result.correction_scores.ge(
        cfg.correct_threshold).any().item())
    if requests:  # a mean over no correction is left out, not logged as 0 (docs/metrics.md)
        metrics["ibpo/correction_reward_mean"] = float(result.correction_scores.mean())
    metrics["ibpo/correction_prompt_tokens"], metrics["ibpo/correction_gen_tokens"] = generation_tokens(
        result.correction_output)
    metrics.update(corr.prefix_cache_metrics(result.correction_output))
    metrics.update(corr.length_bound_metrics(bounds, correction_ids, response_length))
    return metrics


class MechanismMetrics:
    """``ibpo/mechanism/*`` (``ibpo.mechanism``) on the main rows, and the reward-drop alarm: a warning the first
    time the training reward has halved since the run's first steps (the alarm is not checkpointed)."""

    def __init__(self) -> None:
        self.alarm = RewardDropAlarm()
        self.reported = False

    def step(self, batch: DataProto, rows: corr.IBPORows, correct_threshold: float, global_step: int) -> dict:
        """The metrics of this step's batch (sequence advantages before the token mask)."""
        main = batch.select_idxs(rows.main)
        scores = main.batch["token_level_scores"].sum(-1)
        is_correct = (scores >= correct_threshold).tolist()
        uids = list(main.non_tensor_batch["uid"])
        out = advantage_mechanism(corr.sequence_advantages(main).numpy(), is_correct,
                                  rows.main_delta().double().numpy(), uids)
        lengths = main.batch["response_mask"].sum(-1).long().tolist()
        responses = [ids[:n] for ids, n in zip(main.batch["responses"].tolist(), lengths)]
        out.update(sibling_overlap(responses, is_correct, uids))
        metrics = {f"ibpo/mechanism/{k}": v for k, v in out.items()}
        fired = self.alarm.update(float(scores.mean()) if len(scores) else 0.0)
        metrics["ibpo/alarm/reward_drop"] = float(fired)
        if fired and not self.reported:
            self.reported = True
            self._warn(global_step, out.get("positive_adv_mass_on_wrong", 0.0))
        return metrics

    def _warn(self, global_step: int, positive_on_wrong: float) -> None:
        history, window = self.alarm.history, self.alarm.window
        print(f"[ibpo] WARNING step {global_step}: the training reward fell to {np.mean(history[-window:]):.3f} "
              f"from {np.mean(history[:window]):.3f} in the first steps; share of positive advantage on wrong "
              f"responses this step: {positive_on_wrong:.2f}. With ibpo.shaping=reward a shaped wrong answer in a "
              "group with no right one gets a positive advantage; docs/method_ibpo.md, \"The mechanism\"",
              flush=True)


def theorem_metrics(batch: DataProto, rows: corr.IBPORows, cfg: IBPOConfig, lam: float, global_step: int,
                    schedule: LambdaSchedule) -> dict[str, float]:
    """Theorem A.2's statistics on the main rows (every ``ibpo.diagnostics_interval`` steps, every step under the
    ``theorem`` λ schedule, which they update), the step's λ and rewards, the joint and padding rows, the token
    mask's mean, and the variance of the advantages the actor trains on (main and joint rows)."""
    main = batch.select_idxs(rows.main)
    rewards = main.batch["token_level_scores"].sum(-1).double().numpy()
    y = (rewards >= cfg.correct_threshold).astype(np.float64)
    phi = np.where(y > 0, 0.0, rows.main_delta().double().numpy())
    metrics = {}
    if global_step % cfg.diagnostics_interval == 0 or cfg.lambda_schedule == "theorem":
        stats = theorem_stats(y, phi, list(main.non_tensor_batch["uid"]), lam)
        schedule.update(stats)
        metrics.update({
            "ibpo/cov_y_phi": stats.cov_y_phi, "ibpo/C": stats.c, "ibpo/V_phi": stats.v_phi,
            "ibpo/lambda_max": stats.lambda_max, "ibpo/var_unnorm_adv_gspo": stats.var_unnorm_adv_gspo,
            "ibpo/var_unnorm_adv_ibpo": stats.var_unnorm_adv_ibpo,
        })
    metrics["ibpo/lambda"] = lam
    metrics["ibpo/raw_score_mean"] = float(rewards.mean()) if rewards.size else 0.0
    metrics["ibpo/shaped_reward_mean"] = float(main.batch["token_level_rewards"].sum(-1).mean())
    metrics["ibpo/num_joint_rows"] = float(rows.is_correction.sum())
    metrics["ibpo/num_padding_rows"] = float(rows.is_padding.sum())
    not_padding = ~rows.is_padding
    masks_tokens = get_variant(cfg.variant).masks_tokens
    if masks_tokens:  # measured on the training batch: the mask reached it
        valid = batch.batch["response_mask"].bool() & not_padding.unsqueeze(-1)
        metrics["ibpo/batch_token_mask_mean"] = float(rows.token_mask[valid].mean())
    # coverage: wrong main responses trained with localised credit (a token mask: a masking variant's shaped
    # rows) over wrong main responses; reward-level variants localise nothing (0)
    localised = (rows.main_delta().double().numpy() > 0) & masks_tokens
    metrics.update(localised_metrics(y > 0, localised))
    trained = batch.select_idxs(not_padding.numpy())
    metrics["ibpo/var_trained_adv_seq"], metrics["ibpo/var_trained_adv_token"] = trained_advantage_variance(
        trained.batch["advantages"].numpy(), trained.batch["response_mask"].numpy())
    return metrics


def localised_metrics(is_correct: np.ndarray, localised: np.ndarray) -> dict[str, float]:
    """``ibpo/localised/{wrong_rows,masked_rows,coverage}`` (``ibpo.mechanism.localised_coverage``); the coverage
    of a step with no wrong response (0 / 0, NaN in the pure function) is left out, not logged as NaN."""
    coverage = localised_coverage(is_correct, localised)
    return {f"ibpo/localised/{k}": v for k, v in coverage.items() if not (k == "coverage" and np.isnan(v))}


class SpeculationCounters:
    """What the rollout's vLLM engines counted of speculative decoding since the last step (accepted draft
    tokens per decode step), read from the servers' own counters; when they cannot be read,
    ``rollout/spec_stats_reported=0`` says "unknown", never "no speed-up" (a new reason is reported once)."""

    def __init__(self, method: str | None) -> None:
        self.method = method  # the rollout's speculative method, None: no speculation
        self.reader: SpecCounterReader | None = None  # made at first use (the servers exist by then)
        self.read_error: str | None = None

    def read(self, global_step: int, server_addresses) -> object | None:
        """This step's ``SpecCounters``, None when unreadable or without speculation."""
        if self.method is None:
            return None
        if self.reader is None:
            self.reader = SpecCounterReader(list(server_addresses or []))
        step = self.reader.step()
        error = self.reader.last_error
        if error is not None and error != self.read_error:
            print(f"[ibpo] WARNING step {global_step}: speculation ({self.method!r}) counters unreadable "
                  f"({error}): rollout/spec_stats_reported=0, speculation on/off unknown for this step")
        self.read_error = error
        return step

    def step_metrics(self, global_step: int, server_addresses) -> dict[str, float]:
        return spec_counter_metrics(self.method is not None, self.read(global_step, server_addresses))
