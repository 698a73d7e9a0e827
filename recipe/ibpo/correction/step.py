"""Steps B-C of Alg. 1 (paper App. E.2) on one step's main generation, while the rollout replicas still serve
π_θ: ``ibpo.pipeline.correction_step`` (plan the corrections, generate them, judge them, shape Δ, φ and the token
masks, Eq. 14-19; the toy loop runs the same function) with the trainer's rollout as its generation. The step's
correction metrics, the optional lookup-proxy replay and the corrections' dump ride along. Called by
``RayIBPOTrainer._after_generation``; each phase has its verl timer (``ibpo_plan``, ``ibpo_gen``,
``ibpo_shape``, ``ibpo_lookup_proxy``)."""

from __future__ import annotations

from typing import Callable

from omegaconf import DictConfig
from verl import DataProto
from verl.utils.debug import marked_timer

from ibpo.options import IBPOConfig
from ibpo.pipeline import CorrectionRequest, Generated, correction_step
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.correction.rollout import proxy_params
from recipe.ibpo.step_metrics import correction_metrics


def run_correction_pass(gen_batch: DataProto, gen_output: DataProto, cfg: IBPOConfig, *, global_step: int,
                        tokenizer, generate: Callable[[DataProto], DataProto], config: DictConfig, metrics: dict,
                        timing_raw: dict) -> corr.CorrectionPass:
    """The correction pass of this step's main generation (``ibpo.pipeline.correction_step``, the toy loop's too;
    ``generate``: the trainer's rollout on driver-built prompts; ``config``: the run's config, for the response
    length, the speculation settings and ``trainer.rollout_data_dir``); its metrics go to ``metrics``."""
    response_length = int(config.actor_rollout_ref.rollout.get("response_length") or config.data.max_response_length)
    with marked_timer("ibpo_plan", timing_raw):
        scores, ids = corr.main_rows(gen_batch, gen_output, global_step)
    bounds = None

    def generate_corrections(requests: list[CorrectionRequest]) -> Generated[DataProto]:
        nonlocal bounds
        corr_batch = corr.build_correction_gen_batch(gen_batch, requests)
        # per-correction max_tokens = ceil(c·|y|) + closing tokens (ibpo.correction_max_tokens_factor)
        bounds = corr.attach_length_bound(corr_batch, requests, ids, cfg, response_length)
        output = generate(corr_batch)
        correction_scores, correction_ids = corr.read_corrections(requests, output)
        return Generated(correction_scores.numpy(), correction_ids, output)

    step = correction_step(list(gen_batch.non_tensor_batch["uid"]),
                           [corr.messages_of(p) for p in gen_batch.non_tensor_batch["raw_prompt"]], ids,
                           scores.numpy(), cfg, global_step, generate_corrections,
                           lambda t: tokenizer.decode(t, skip_special_tokens=True),
                           lambda text: tokenizer.encode(text, add_special_tokens=False),
                           phase=lambda name: marked_timer(f"ibpo_{name}", timing_raw))
    result = corr.CorrectionPass.of(step, scores)
    correction_ids = step.generated.ids if step.generated else []
    metrics.update(correction_metrics(result, cfg, bounds, correction_ids, response_length))
    if cfg.lookup_proxy_interval and global_step % cfg.lookup_proxy_interval == 0:
        with marked_timer("ibpo_lookup_proxy", timing_raw):  # host-side replay of vLLM's ngram proposer
            metrics.update(corr.lookup_metrics(result.correction_output, proxy_params(config)))
    dump_dir = (config.get("trainer", None) or {}).get("rollout_data_dir", None)
    if dump_dir and step.requests:  # the step's corrections, with verl's own rollout dumps
        corr.dump_corrections(dump_dir, global_step, step.requests, result.correction_output, ids,
                              step.correction_right, step.outcome.correction_rewrite)
    return result
