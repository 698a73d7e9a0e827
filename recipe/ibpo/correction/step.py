"""Steps B-C of Alg. 1 (paper App. E.2) on one step's main generation, while the rollout replicas still serve
π_θ: plan the corrections (references, correction prompts), generate them through the trainer's rollout,
read their scores, and shape (Δ, φ, token masks: ``ibpo.pipeline.shape_batch``, Eq. 14-19). The step's
correction metrics, the optional lookup-proxy replay and the corrections' dump ride along. Called by
``RayIBPOTrainer._after_generation``; each phase has its verl timer (``ibpo_plan``, ``ibpo_gen``,
``ibpo_shape``, ``ibpo_lookup_proxy``)."""

from __future__ import annotations

from typing import Callable

from omegaconf import DictConfig
from verl import DataProto
from verl.utils.debug import marked_timer

from ibpo.options import IBPOConfig
from ibpo.pipeline import shape_batch
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.correction.rollout import proxy_params
from recipe.ibpo.step_metrics import correction_metrics


def run_correction_pass(gen_batch: DataProto, gen_output: DataProto, cfg: IBPOConfig, *, global_step: int,
                        tokenizer, generate: Callable[[DataProto], DataProto], config: DictConfig, metrics: dict,
                        timing_raw: dict) -> corr.CorrectionPass:
    """The correction pass of this step's main generation (``generate``: the trainer's rollout on driver-built
    prompts; ``config``: the run's config, for the response length, the speculation settings and
    ``trainer.rollout_data_dir``); its metrics go to ``metrics``."""
    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    with marked_timer("ibpo_plan", timing_raw):
        requests, scores, ids, is_correct = corr.plan(gen_batch, gen_output, decode, cfg, global_step, encode)
    response_length = int(config.actor_rollout_ref.rollout.get("response_length") or config.data.max_response_length)
    correction_output, bounds = None, None
    if requests:
        with marked_timer("ibpo_gen", timing_raw, color="purple"):
            corr_batch = corr.build_correction_gen_batch(gen_batch, requests)
            # per-correction max_tokens = ceil(c·|y|) + closing tokens (ibpo.correction_max_tokens_factor)
            bounds = corr.attach_length_bound(corr_batch, requests, ids, cfg, response_length)
            correction_output = generate(corr_batch)
    with marked_timer("ibpo_shape", timing_raw):
        correction_scores, correction_ids = corr.read_corrections(requests, correction_output)
        correction_right = (correction_scores >= cfg.correct_threshold).tolist()
        outcome = shape_batch(requests, correction_ids, correction_right, ids, is_correct, cfg)
    result = corr.CorrectionPass(requests, outcome, correction_output, correction_scores, scores)
    metrics.update(correction_metrics(result, cfg, bounds, correction_ids, response_length))
    if cfg.lookup_proxy_interval and global_step % cfg.lookup_proxy_interval == 0:
        with marked_timer("ibpo_lookup_proxy", timing_raw):  # host-side replay of vLLM's ngram proposer
            metrics.update(corr.lookup_metrics(correction_output, proxy_params(config)))
    dump_dir = (config.get("trainer", None) or {}).get("rollout_data_dir", None)
    if dump_dir and requests:  # the step's corrections, with verl's own rollout dumps
        corr.dump_corrections(dump_dir, global_step, requests, correction_output, ids, correction_right,
                              outcome.correction_rewrite)
    return result
