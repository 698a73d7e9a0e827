"""verl glue for counterfactual importance weighting: masked-copy batches and token weights on DataProto.

The math lives in :mod:`counterfactual.importance`; this module only moves verl's tensors in and out of it.
How the trainer uses it (``RayCounterfactualTrainer.apply_counterfactual_weights``,
recipe/counterfactual/counterfactual_trainer.py), after ``old_log_probs`` are in ``batch``::

    cfg = CounterfactualConfig.from_mapping(...)
    signal = rows_with_signal(batch, key="token_level_scores")        # skip groups with equal rewards
    plan = plan_counterfactuals(batch, cfg, make_decode_fn(tokenizer), signal)
    log_probs = torch.empty(0, batch.batch["responses"].shape[1])
    if plan.num_copies:                                                # one extra forward row per span
        masked = build_masked_copies(batch, plan, tokenizer.pad_token_id)
        log_probs = compute_masked_log_probs(self.actor_rollout_wg, masked, dp_size * log_prob_micro_batch)
    weights, metrics = counterfactual_token_weights(batch, plan, cfg, batch.batch["old_log_probs"], log_probs)
    batch.batch["advantages"] = batch.batch["advantages"] * weights    # (bs, response_length), after compute_advantage

Row layout (verl's): ``input_ids = cat(prompts, responses)``, prompts left-padded, responses
right-padded; a response's valid tokens are those with ``attention_mask == 1`` after the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from counterfactual.importance import (
    CounterfactualConfig,
    DecodeFn,
    ResponseSegmentation,
    answer_log_prob,
    group_has_signal,
    mask_span,
    response_weights,
    segment_response,
    span_drops,
)
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor
from verl.utils import tensordict_utils as tu
from verl.utils.model import compute_position_id_with_mask
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

TENSOR_KEYS = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask")
# Per-row inputs the actor's forward may read besides the tensors (VLM inputs; empty dicts for text).
CARRIED_NON_TENSOR_KEYS = ("multi_modal_inputs",)


def make_decode_fn(tokenizer: Any) -> DecodeFn:
    """``ids -> text`` keeping special tokens and spacing, so character offsets match the token ids."""

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    return decode


def _require_keys(batch: DataProto, keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if batch.batch is None or k not in batch.batch.keys()]
    if missing:
        present = sorted(batch.batch.keys()) if batch.batch is not None else []
        raise KeyError(f"{where}: the DataProto lacks tensor key(s) {missing}; it has {present}")


def response_lengths(batch: DataProto) -> torch.Tensor:
    """Valid response tokens per row: the attention mask over the response part (right padding)."""
    _require_keys(batch, ("prompts", "attention_mask"), "response_lengths")
    prompt_len = batch.batch["prompts"].shape[1]
    return batch.batch["attention_mask"][:, prompt_len:].sum(-1).long()


def sequence_values(batch: DataProto, key: str) -> torch.Tensor:
    """One number per row to compare within a group: the sum of a ``(bs, T)`` score tensor, the masked
    mean of ``advantages`` (constant per row for GRPO), or a ``(bs,)`` tensor as it is."""
    _require_keys(batch, (key,), "sequence_values")
    values = batch.batch[key].double()
    if values.dim() == 1:
        return values
    if key == "advantages":
        mask = batch.batch["response_mask"].double()
        return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return values.sum(-1)


def rows_with_signal(
    batch: DataProto, key: str = "token_level_scores", group_key: str = "uid", atol: float = 0.0
) -> np.ndarray:
    """Per row: its group (same ``non_tensor_batch[group_key]``) has unequal ``key`` values, so weights matter."""
    if group_key not in batch.non_tensor_batch:
        raise KeyError(f"rows_with_signal: non_tensor_batch lacks the group key '{group_key}'")
    return group_has_signal(batch.non_tensor_batch[group_key], sequence_values(batch, key), atol=atol)


@dataclass(frozen=True)
class CounterfactualPlan:
    """What to measure for a batch: per-row segmentations and the (row, span) of every masked copy.

    ``segmentations[i]`` is None for rows that keep uniform weight without being segmented (``vanilla``
    mode, or a group without learning signal). Copies are listed row by row, spans in order.
    """

    segmentations: tuple[ResponseSegmentation | None, ...]
    copy_rows: np.ndarray  # (num_copies,) int64: source row of each masked copy
    copy_spans: np.ndarray  # (num_copies,) int64: index of the masked span in that row's segmentation

    @property
    def num_copies(self) -> int:
        return int(self.copy_rows.shape[0])


def plan_counterfactuals(
    batch: DataProto,
    config: CounterfactualConfig,
    decode: DecodeFn,
    signal: np.ndarray | None = None,
) -> CounterfactualPlan:
    """Segment every row with signal and list one masked copy per span (none for random/vanilla).

    ``signal`` (bool per row, e.g. from :func:`rows_with_signal`) defaults to all rows.
    """
    _require_keys(batch, ("prompts", "responses", "attention_mask"), "plan_counterfactuals")
    bs = batch.batch["responses"].shape[0]
    signal = np.ones(bs, dtype=bool) if signal is None else np.asarray(signal, dtype=bool)
    if signal.shape != (bs,):
        raise ValueError(f"plan_counterfactuals: signal has shape {signal.shape}, the batch has {bs} rows")
    lengths = response_lengths(batch).tolist()
    responses = batch.batch["responses"]
    segmentations: list[ResponseSegmentation | None] = []
    copy_rows: list[int] = []
    copy_spans: list[int] = []
    for row in range(bs):
        if config.mode == "vanilla" or not signal[row]:
            segmentations.append(None)
            continue
        ids = responses[row, : lengths[row]].tolist()
        seg = segment_response(ids, config, decode=decode)
        segmentations.append(seg)
        if config.needs_forward_passes and seg.measurable:
            copy_rows.extend([row] * len(seg.spans))
            copy_spans.extend(range(len(seg.spans)))
    return CounterfactualPlan(
        segmentations=tuple(segmentations),
        copy_rows=np.asarray(copy_rows, dtype=np.int64),
        copy_spans=np.asarray(copy_spans, dtype=np.int64),
    )


def build_masked_copies(batch: DataProto, plan: CounterfactualPlan, mask_token_id: int) -> DataProto:
    """The masked-copy batch for the actor's ``compute_log_prob``: one row per planned (row, span).

    Each copy is its source row with the span's response tokens replaced by ``mask_token_id`` in both
    ``responses`` and ``input_ids``; ``prompts``, ``attention_mask`` and ``response_mask`` are the source's
    and ``position_ids`` are recomputed from the attention mask (so positions are unchanged). ``meta_info``
    is the source's (temperature included) with ``global_token_num`` recomputed for the new rows.
    """
    if plan.num_copies == 0:
        raise ValueError("build_masked_copies: the plan has no masked copies; skip the forward pass instead")
    if mask_token_id is None:
        raise ValueError("build_masked_copies: mask_token_id is None (the tokenizer has no pad token)")
    _require_keys(batch, TENSOR_KEYS, "build_masked_copies")
    carried = [k for k in CARRIED_NON_TENSOR_KEYS if k in batch.non_tensor_batch]
    copies = batch.select(batch_keys=list(TENSOR_KEYS), non_tensor_batch_keys=carried).select_idxs(plan.copy_rows)
    prompt_len = batch.batch["prompts"].shape[1]
    responses = copies.batch["responses"].clone()
    for j, (row, span_index) in enumerate(zip(plan.copy_rows.tolist(), plan.copy_spans.tolist(), strict=True)):
        seg = plan.segmentations[row]
        responses[j] = mask_span(responses[j], seg.spans[span_index], mask_token_id)
    input_ids = copies.batch["input_ids"].clone()
    input_ids[:, prompt_len:] = responses
    attention_mask = copies.batch["attention_mask"]
    copies.batch["responses"] = responses
    copies.batch["input_ids"] = input_ids
    if copies.batch["position_ids"].dim() == 2:
        copies.batch["position_ids"] = compute_position_id_with_mask(attention_mask)
    # (bs, k, seq) rope indices (Qwen2-VL) cannot be rebuilt from the mask; the source rows' are kept.
    copies.meta_info = dict(batch.meta_info)
    copies.meta_info["global_token_num"] = attention_mask.sum(-1).tolist()
    return copies


def compute_masked_log_probs(actor_rollout_wg: Any, masked: DataProto, size_divisor: int) -> torch.Tensor:
    """Response log-probs ``(len(masked), response_length)`` of the masked copies from verl's actor.

    Mirrors ``RayPPOTrainer._compute_old_log_prob`` (no entropy, no loss): pads to ``size_divisor``
    (the actor's data-parallel size), converts to verl's no-padding TensorDict, calls
    ``actor_rollout_wg.compute_log_prob`` and slices the response back out.
    """
    padded, pad_size = pad_dataproto_to_divisor(masked, size_divisor)
    padded.meta_info["global_token_num"] = padded.batch["attention_mask"].sum(-1).tolist()
    batch_td = left_right_2_no_padding(padded.to_tensordict())
    tu.assign_non_tensor(batch_td, calculate_entropy=False, compute_loss=False)
    output = actor_rollout_wg.compute_log_prob(batch_td)
    log_probs = no_padding_2_padding(tu.get(output, "log_probs"), batch_td).float()
    return log_probs[: len(padded) - pad_size] if pad_size else log_probs


def counterfactual_token_weights(
    batch: DataProto,
    plan: CounterfactualPlan,
    config: CounterfactualConfig,
    full_log_probs: torch.Tensor,
    masked_log_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token weights ``(bs, response_length)`` (1.0 on padding and on unweighted rows) and metrics.

    ``full_log_probs``: the batch's own response log-probs (``old_log_probs``); ``masked_log_probs``:
    ``(plan.num_copies, response_length)`` from :func:`compute_masked_log_probs`, in plan order.
    Mean-1 rescaling (if on) averages over ``response_mask``.
    """
    _require_keys(batch, ("responses", "response_mask"), "counterfactual_token_weights")
    bs, resp_len = batch.batch["responses"].shape
    if tuple(full_log_probs.shape) != (bs, resp_len):
        raise ValueError(
            f"counterfactual_token_weights: full_log_probs has shape {tuple(full_log_probs.shape)}, "
            f"expected {(bs, resp_len)}"
        )
    if tuple(masked_log_probs.shape) != (plan.num_copies, resp_len):
        raise ValueError(
            f"counterfactual_token_weights: masked_log_probs has shape {tuple(masked_log_probs.shape)}, "
            f"expected {(plan.num_copies, resp_len)} (one row per masked copy)"
        )
    if len(plan.segmentations) != bs:
        raise ValueError(
            f"counterfactual_token_weights: the plan covers {len(plan.segmentations)} rows, the batch has {bs}"
        )
    response_mask = batch.batch["response_mask"]
    weights = torch.ones(bs, resp_len, dtype=torch.float64)
    first_copy = {}
    for j, row in enumerate(plan.copy_rows.tolist()):
        first_copy.setdefault(row, j)
    span_weight_sums = {"arithmetic": [0.0, 0], "sentence": [0.0, 0]}
    all_drops: list[float] = []
    weighted_rows = spans_total = segmented_rows = no_answer_rows = 0
    for row, seg in enumerate(plan.segmentations):
        if seg is None:
            continue
        segmented_rows += 1
        spans_total += len(seg.spans)
        no_answer_rows += int(not seg.has_answer)
        if not seg.measurable:
            continue
        drops = None
        if config.needs_forward_passes:
            start = first_copy[row]
            masked = masked_log_probs[start : start + len(seg.spans), : seg.num_tokens]
            full = answer_log_prob(full_log_probs[row, : seg.num_tokens], seg)
            drops = span_drops(full, answer_log_prob(masked, seg))
            all_drops.extend(drops.tolist())
        row_weights = response_weights(seg, config, drops, generator, response_mask[row, : seg.num_tokens])
        weights[row, : seg.num_tokens] = row_weights
        weighted_rows += 1
        for span in seg.spans:
            acc = span_weight_sums[span.kind]
            acc[0] += float(row_weights[span.start : span.end].sum())
            acc[1] += span.length
    metrics = _weight_metrics(weighted_rows, segmented_rows, no_answer_rows, spans_total, plan.num_copies,
                              all_drops, span_weight_sums)
    valid = response_mask.bool()
    if valid.any():
        metrics["counterfactual/weight_max"] = float(weights[valid].max())
        metrics["counterfactual/weight_min"] = float(weights[valid].min())
    return weights.float(), metrics


def _weight_metrics(weighted_rows: int, segmented_rows: int, no_answer_rows: int, spans_total: int, copies: int,
                    drops: list[float], span_weight_sums: dict[str, list]) -> dict[str, float]:
    """The step's ``counterfactual/*`` counts, and its rates and means (docs/method_counterfactual.md, "Metrics").
    A rate or mean over an empty set (no segmented response, no measured span, no token in a span of that kind) is
    left out of the step's metrics, not logged as 0: a mean weight of 0 or a distractor share of 0 would read as
    a measurement. The counts are their denominators."""
    metrics = {
        "counterfactual/weighted_responses": float(weighted_rows),
        "counterfactual/segmented_responses": float(segmented_rows),
        "counterfactual/masked_copies": float(copies),
    }
    if segmented_rows:
        metrics["counterfactual/no_answer_share"] = no_answer_rows / segmented_rows
        metrics["counterfactual/spans_per_response"] = spans_total / segmented_rows
    if drops:
        metrics["counterfactual/distractor_share"] = float(np.mean(np.asarray(drops) < 0))
        metrics["counterfactual/drop_mean"] = float(np.mean(drops))
    for kind, (total, tokens) in span_weight_sums.items():
        if tokens:
            metrics[f"counterfactual/weight_{kind}_mean"] = total / tokens
    return metrics


__all__ = [
    "make_decode_fn",
    "response_lengths",
    "sequence_values",
    "rows_with_signal",
    "CounterfactualPlan",
    "plan_counterfactuals",
    "build_masked_copies",
    "compute_masked_log_probs",
    "counterfactual_token_weights",
]
