"""What one IBPO step cost, read off its batches: the tokens of each generation, the rows it generated and
trained on (``compute_accounting.flops.StepWork``: main, joint-training and padding rows, the correction
generation, the gradient probe's rows), and the running totals that curves against compute are drawn on
(checkpointed with the run's IBPO state, ``recipe.ibpo.run_state``)."""

from __future__ import annotations

from verl import DataProto

from compute_accounting.flops import ModelShape, StepFlops, StepWork, step_flops
from recipe.ibpo.correction.batch import IBPORows


# running total (a field of the checkpointed ``compute_totals``) -> its metric; every name says it is a running total
# (the state file keeps its field names: checkpoints written before resume as they were)
TOTAL_METRICS = {"total_tokens": "ibpo/compute/total_tokens", "total_flops": "ibpo/compute/total_flops",
                 "generated_tokens": "ibpo/compute/total_generated_tokens"}


def generation_tokens(output: DataProto | None) -> tuple[float, float]:
    """(prompt tokens prefilled, tokens generated) of a ``generate_sequences`` output (0, 0 for None)."""
    if output is None or len(output) == 0:
        return 0.0, 0.0
    generated = float(output.batch["response_mask"].sum())
    return float(output.batch["attention_mask"].sum()) - generated, generated


def step_work(batch: DataProto, rows: IBPORows, correction_output: DataProto | None, *, grad_probe: list[int],
              ppo_epochs: int, gradient_checkpointing: bool, old_log_prob_forward: bool,
              reference_forward: bool) -> StepWork:
    """The rows one IBPO step processed (valid-token lengths per row), read from the training batch at the end
    of the step: main rows (generated, then trained), joint-training correction rows (trained, so they cost an
    old-log-prob, optional reference and update pass each), no-op padding rows, and the correction generation
    (``correction_output``; None: no pass ran)."""
    lengths = batch.batch["attention_mask"].sum(-1)
    main = lengths[~rows.is_correction & ~rows.is_padding].tolist()
    return StepWork(
        main_gen=main,
        correction_gen=[] if correction_output is None else correction_output.batch["attention_mask"].sum(-1).tolist(),
        train_main=main, train_joint=lengths[rows.is_correction].tolist(), train_padding=lengths[rows.is_padding].tolist(),
        backward_phases={"grad_probe": list(grad_probe)},  # the gradient probe's rows (logged even when empty)
        ppo_epochs=ppo_epochs,
        gradient_checkpointing=gradient_checkpointing,
        old_log_prob_forward=old_log_prob_forward,
        reference_forward=reference_forward,
    )


def compute_metrics(work: StepWork, shape: ModelShape, metrics: dict, totals: dict[str, float]) -> StepFlops:
    """The step's FLOPs per phase (``compute_accounting.flops.step_flops``, returned) and tokens (from the
    generation metrics already in ``metrics``), added to the running ``totals`` (in place) and logged with them."""
    flops = step_flops(work, shape)
    generated = metrics.get("ibpo/main_gen_tokens", 0.0) + metrics.get("ibpo/correction_gen_tokens", 0.0)
    prompt_tokens = metrics.get("ibpo/main_prompt_tokens", 0.0) + metrics.get("ibpo/correction_prompt_tokens", 0.0)
    totals["generated_tokens"] += generated
    totals["total_tokens"] += generated + prompt_tokens
    totals["total_flops"] += flops.total
    metrics.update({TOTAL_METRICS[k]: v for k, v in totals.items()})
    metrics.update(flops.as_metrics("ibpo/compute/step_flops/"))
    metrics["ibpo/compute/step_flops"] = flops.total
    return flops
