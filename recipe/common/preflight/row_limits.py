"""The longest row of each phase against every per-GPU token limit verl enforces on it, before Ray
(``compute_accounting.row_lengths``: the arithmetic and what verl does). A method's start check builds its rows
(IBPO: with its correction prompts and joint-training rows; the counterfactual method: with its masked copies)
and calls :func:`check_row_limits`; the recipe configs' ``${row_tokens_per_gpu:...}`` default
(:func:`row_tokens_per_gpu`) sizes the limits so that they fit by construction.

The served context (``rollout.max_model_len``, the model's own) is checked where the rows are made:
``recipe.common.preflight.model.check_context_length`` (a main row) and IBPO's start check (``rollout.prompt_length
+ response_length``, which bounds every row above); :func:`row_table` prints each row beside it.
``rollout.max_num_batched_tokens`` bounds no row: vLLM prefills a longer prompt in chunks
(``enable_chunked_prefill``, verl's default), and without chunking verl raises it to ``max_model_len`` itself
(``vllm_async_server.py``)."""

from __future__ import annotations

from typing import NamedTuple

from omegaconf import DictConfig

from compute_accounting.row_lengths import PhaseRow, longest_trained, phase_rows, row_limit_shortfall, tokens_per_gpu
from recipe.common.preflight.errors import SetupError


class RowLimit(NamedTuple):
    """One dynamically micro-batched pass: its per-GPU token limit (``option`` = ``per_gpu``) and Ulysses size."""

    option: str
    per_gpu: int
    sp_size: int
    what: str


def ulysses_size(worker: DictConfig) -> int:
    """The sequence-parallel size verl's engine uses for ``worker`` (actor or ref): its own
    ``ulysses_sequence_parallel_size`` when above 1 (verl copies it into ``fsdp_config``), else ``fsdp_config``'s."""
    own = int(worker.get("ulysses_sequence_parallel_size") or 1)
    return own if own > 1 else int((worker.get("fsdp_config") or {}).get("ulysses_sequence_parallel_size") or 1)


def row_limits(config: DictConfig) -> list[RowLimit]:
    """The token limits of the run's dynamically micro-batched passes (``use_dynamic_bsz``; fixed micro-batches
    have none): the actor update, the old log-prob pass and, when the run has a reference policy, its pass."""
    arr = config.actor_rollout_ref
    actor_sp = ulysses_size(arr.actor)
    limits = []
    if arr.actor.get("use_dynamic_bsz", False):
        limits.append(RowLimit("actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
                               int(arr.actor.ppo_max_token_len_per_gpu), actor_sp, "the actor update"))
    if arr.rollout.get("log_prob_use_dynamic_bsz", False):
        limits.append(RowLimit("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
                               int(arr.rollout.log_prob_max_token_len_per_gpu), actor_sp, "the old log-prob pass"))
    uses_ref = config.algorithm.get("use_kl_in_reward", False) or arr.actor.get("use_kl_loss", False)
    if uses_ref and arr.ref.get("log_prob_use_dynamic_bsz", False):
        limits.append(RowLimit("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
                               int(arr.ref.log_prob_max_token_len_per_gpu), ulysses_size(arr.ref),
                               "the reference log-prob pass"))
    return limits


def remove_padding(config: DictConfig) -> bool:
    return bool(config.actor_rollout_ref.model.get("use_remove_padding", False))


def check_row_limits(config: DictConfig, rows: tuple[PhaseRow, ...]) -> None:
    """Refuse, in one line naming both options, both numbers and the fix, a limit below the longest trained row:
    verl's micro-batcher would stop the run at the first such row (``max_token_len >= max_seq_len``)."""
    nested = remove_padding(config)
    row = longest_trained(rows, nested)
    for limit in row_limits(config):
        if row_limit_shortfall(limit.per_gpu, limit.sp_size, row, nested):
            need = -(-row.measured(nested) // limit.sp_size)
            raise SetupError(
                f"{limit.option}={limit.per_gpu} (x ulysses_sequence_parallel_size {limit.sp_size} = "
                f"{limit.per_gpu * limit.sp_size} tokens) is below the longest {row.phase} row, "
                f"{row.measured(nested)} tokens ({row.measured_origin(nested)}): verl's micro-batcher stops "
                f"{limit.what} at the first such row (seqlen_balancing.rearrange_micro_batches: max_token_len >= "
                f"max_seq_len). Set {limit.option} >= {need}, or drop the override (the recipe's default "
                f"fits by construction), or lower the lengths that make the row")


def row_table(config: DictConfig, rows: tuple[PhaseRow, ...], context: int | None) -> str:
    """One line per phase: its longest row (content, padded width) beside the limits it must fit."""
    nested = remove_padding(config)
    served = config.actor_rollout_ref.rollout.get("max_model_len") or context
    limits = "; ".join(f"{limit.option.rsplit('.', 1)[-1]} {limit.per_gpu} x sp {limit.sp_size}"
                       for limit in row_limits(config)) or "fixed micro-batches (no token limit)"
    lines = [f"longest rows (tokens; padded width) vs limits: served context {served}; {limits}"]
    for row in rows:
        lines.append(f"  {row.phase}: {row.tokens}; width {row.width}"
                     + (f" (micro-batcher measures {row.measured(nested)})" if row.trained else ""))
    return "\n".join(lines)


def observed_rows_line(config: DictConfig, longest: dict[str, int]) -> str:
    """One line for a step: the longest row of each phase it made (``longest``: phase -> tokens) beside the
    micro-batch token limits (per GPU x sp) they had to fit."""
    rows = ", ".join(f"{phase} {tokens}" for phase, tokens in longest.items())
    limits = ", ".join(f"{limit.option.rsplit('.', 1)[-1]} {limit.per_gpu * limit.sp_size}"
                       for limit in row_limits(config))
    return f"longest rows this step (tokens): {rows}; micro-batch limits x sp: {limits or 'none (fixed micro-batches)'}"


def row_tokens_per_gpu(rows_per_micro_batch: int, max_prompt: int, response_length: int, prompt_length: int,
                       trains_corrections: bool, use_remove_padding: bool, sp_size: int | None) -> int:
    """The config-time default of a per-GPU token limit (``${row_tokens_per_gpu:...}`` in the recipe configs):
    :func:`compute_accounting.row_lengths.tokens_per_gpu` over the run's rows, a correction prompt taken at
    ``rollout.prompt_length`` (what the agent loop caps it at) when the method trains on its corrections."""
    rows = phase_rows(max_prompt, response_length, prompt_length,
                      correction_prompt=prompt_length if trains_corrections else None,
                      joint_training=bool(trains_corrections))
    nested = bool(use_remove_padding)
    longest = longest_trained(rows, nested).measured(nested)
    return tokens_per_gpu(rows_per_micro_batch, rows[0].measured(nested), longest, int(sp_size or 1))


def register_row_resolver() -> None:
    """Register ``${row_tokens_per_gpu:...}`` with OmegaConf; idempotent."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("row_tokens_per_gpu", row_tokens_per_gpu, replace=True)
