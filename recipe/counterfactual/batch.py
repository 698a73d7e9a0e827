"""verl glue for counterfactual importance weighting: masked-copy batches and token weights on DataProto.

The math lives in :mod:`counterfactual.importance`; this module only moves verl's tensors in and out of it.
How the trainer uses it (``RayCounterfactualTrainer.apply_counterfactual_weights``,
recipe/counterfactual/counterfactual_trainer.py), after ``old_log_probs`` are in ``batch``::

    cfg = CounterfactualConfig.from_mapping(...)
    signal = rows_with_signal(batch, key="token_level_scores")        # skip groups with equal rewards
    plan = plan_counterfactuals(batch, cfg, make_decode_fn(tokenizer), signal)
    log_probs = torch.empty(0, batch.batch["responses"].shape[1])
    if plan.num_copies:                          # one row per span, plus one unmasked row per measured response
        masked = build_masked_copies(batch, plan, tokenizer.pad_token_id)
        log_probs = compute_masked_log_probs(self.actor_rollout_wg, masked, dp_size * log_prob_micro_batch)
    weights, metrics = counterfactual_token_weights(batch, plan, cfg, batch.batch["old_log_probs"], log_probs)
    batch.batch["advantages"] = batch.batch["advantages"] * weights    # (bs, response_length), after compute_advantage

Each drop_s = log p(a | y) - log p(a | y with s masked) [§importance] takes both log-probs from the same
forward micro-batch: the masked-copy batch holds, per measured response, an unmasked copy of the row (its unmasked
row) next to its masked copies. In bf16, with verl's padding removal, a row's log-probs depend slightly on the
micro-batch it is scored in (its GEMMs' shapes); taking log p(a | y) from another micro-batch, or from
``old_log_probs`` (another call over the whole training batch), would add that difference to every drop, and a span
without effect could read as a small positive or negative drop. ``old_log_probs`` is only compared with the
unmasked rows, as a metric.

One call is not one micro-batch: verl's actor (``engine/utils.py`` ``prepare_micro_batches``) cuts its rank's
rows into micro-batches, with ``use_dynamic_bsz`` by ``seqlen_balancing.rearrange_micro_batches``, which reorders
and scatters rows by token count (a response's unmasked row and its copies land apart), and otherwise into
contiguous chunks of ``micro_batch_size_per_gpu`` rows (a response straddling a boundary is split too). So the call
is laid out for fixed micro-batches of ``micro_batch_rows`` rows (:attr:`CounterfactualPlan.micro_batch_rows`;
:func:`compute_masked_log_probs` tells the actor to use them, whatever the run's ``log_prob_use_dynamic_bsz``): a
response is measured in units of its unmasked row and at most ``micro_batch_rows - 1`` masked copies, units are
packed whole into micro-batch slots, and a slot a unit does not fill is filled with a repeat of an unmasked row
(``FILLER``, forward work that is counted but not read).

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


UNMASKED = -1  # ``CounterfactualPlan.forward_spans`` of a measured response's unmasked row
FILLER = -2  # ``CounterfactualPlan.forward_spans`` of a row that fills a micro-batch slot (a repeated unmasked row)


@dataclass(frozen=True)
class CounterfactualPlan:
    """What to measure for a batch: per-row segmentations, the (row, span) of every masked copy, and the rows of
    the masked-copy batch that scores them.

    ``segmentations[i]`` is None for rows that keep uniform weight without being segmented (``vanilla``
    mode, or a group without learning signal). Copies are listed row by row, spans in order. A measured
    response (a row with masked copies) is also scored unmasked in the same micro-batch as its copies, so that its
    drops compare log-probs of one forward: the batch (``forward_rows``, ``forward_spans``) holds units of an
    unmasked row (span ``UNMASKED``) followed by masked copies of that row. Without ``micro_batch_rows`` there is
    one unit per measured response, in plan order. With it (the rows of one micro-batch of the actor's forward),
    a response's copies are cut into units of at most ``micro_batch_rows - 1`` copies, each with its own unmasked
    row, and the units are packed whole into slots of ``micro_batch_rows`` rows (first fit, longest first), each
    slot but the last filled up with ``FILLER`` rows (a repeat of the slot's first unmasked row): no unit crosses a
    micro-batch boundary (module docstring).
    """

    segmentations: tuple[ResponseSegmentation | None, ...]
    copy_rows: np.ndarray  # (num_copies,) int64: source row of each masked copy
    copy_spans: np.ndarray  # (num_copies,) int64: index of the masked span in that row's segmentation
    micro_batch_rows: int | None = None  # rows of one forward micro-batch (>= 2); None: no slot layout

    def __post_init__(self) -> None:
        m = self.micro_batch_rows
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 2):
            raise ValueError(f"CounterfactualPlan.micro_batch_rows={m!r} must be an integer >= 2: an unmasked row "
                             "and a masked copy must share a micro-batch")

    @property
    def num_copies(self) -> int:
        """Masked copies, i.e. measured spans (the unmasked rows not included)."""
        return int(self.copy_rows.shape[0])

    @property
    def measured_rows(self) -> np.ndarray:
        """``(num_measured,)`` int64: the measured responses' rows, in plan order; one unmasked row each."""
        return np.asarray(list(dict.fromkeys(self.copy_rows.tolist())), dtype=np.int64)

    @property
    def num_measured(self) -> int:
        return int(self.measured_rows.shape[0])

    @property
    def num_forward_rows(self) -> int:
        """Rows of the masked-copy batch: the masked copies, the unmasked rows (one per unit) and the fillers."""
        return int(self.forward_rows.shape[0])

    @property
    def num_unmasked_rows(self) -> int:
        """Unmasked rows of the masked-copy batch: one per unit (``num_measured`` without ``micro_batch_rows``)."""
        return int((self.forward_spans == UNMASKED).sum())

    @property
    def forward_rows(self) -> np.ndarray:
        """``(num_forward_rows,)`` int64: the source row of each row of the masked-copy batch."""
        return self._forward_layout()[0]

    @property
    def forward_spans(self) -> np.ndarray:
        """``(num_forward_rows,)`` int64: the span each row of the masked-copy batch masks (``UNMASKED``: none)."""
        return self._forward_layout()[1]

    def _forward_layout(self) -> tuple[np.ndarray, np.ndarray]:
        per_unit = None if self.micro_batch_rows is None else self.micro_batch_rows - 1
        units: list[list[tuple[int, int]]] = []  # (row, span) of each unit's rows
        for row in self.measured_rows.tolist():
            own = self.copy_spans[self.copy_rows == row].tolist()
            step = per_unit or len(own)
            units += [[(row, UNMASKED), *((row, k) for k in own[lo:lo + step])] for lo in range(0, len(own), step)]
        if self.micro_batch_rows is not None:
            units = [unit for slot in pack_units(units, self.micro_batch_rows) for unit in slot]
        rows = [row for unit in units for row, _ in unit]
        spans = [span for unit in units for _, span in unit]
        return np.asarray(rows, dtype=np.int64), np.asarray(spans, dtype=np.int64)


def pack_units(units: list[list[tuple[int, int]]], slot_rows: int) -> list[list[list[tuple[int, int]]]]:
    """``units`` (each at most ``slot_rows`` rows) packed whole into slots of ``slot_rows`` rows, first fit with the
    longest units first (stable among equals); every slot but the last is filled up with one ``FILLER`` unit of
    repeats of its first row's source row, so that slot k covers rows [k·slot_rows, (k+1)·slot_rows) exactly."""
    slots: list[list[list[tuple[int, int]]]] = []
    room: list[int] = []
    for unit in sorted(units, key=len, reverse=True):
        k = next((i for i, free in enumerate(room) if free >= len(unit)), None)
        if k is None:
            slots.append([])
            room.append(slot_rows)
            k = len(slots) - 1
        slots[k].append(unit)
        room[k] -= len(unit)
    for slot, free in zip(slots[:-1], room[:-1]):
        if free:
            slot.append([(slot[0][0][0], FILLER)] * free)
    return slots


def plan_counterfactuals(
    batch: DataProto,
    config: CounterfactualConfig,
    decode: DecodeFn,
    signal: np.ndarray | None = None,
    micro_batch_rows: int | None = None,
) -> CounterfactualPlan:
    """Segment every row with signal and list one masked copy per span (none for random/vanilla).

    ``signal`` (bool per row, e.g. from :func:`rows_with_signal`) defaults to all rows; ``micro_batch_rows``: the
    rows of one micro-batch of the forward that scores the copies (:class:`CounterfactualPlan`).
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
        micro_batch_rows=micro_batch_rows,
    )


def build_masked_copies(batch: DataProto, plan: CounterfactualPlan, mask_token_id: int) -> DataProto:
    """The masked-copy batch for the actor's ``compute_log_prob``: ``plan.num_forward_rows`` rows, in the order of
    ``plan.forward_rows``: per unit of a measured response, an unmasked copy of its row (its unmasked row, where
    :func:`counterfactual_token_weights` reads log p(a | y)), then one row per planned (row, span) of the unit;
    a ``FILLER`` row is an unmasked copy too (:class:`CounterfactualPlan`).

    Each masked copy is its source row with the span's response tokens replaced by ``mask_token_id`` in both
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
    rows, spans = plan.forward_rows, plan.forward_spans
    copies = batch.select(batch_keys=list(TENSOR_KEYS), non_tensor_batch_keys=carried).select_idxs(rows)
    prompt_len = batch.batch["prompts"].shape[1]
    responses = copies.batch["responses"].clone()
    for j, (row, span_index) in enumerate(zip(rows.tolist(), spans.tolist(), strict=True)):
        if span_index >= 0:  # a masked copy; an unmasked row and a filler are the row as it is
            responses[j] = mask_span(responses[j], plan.segmentations[row].spans[span_index], mask_token_id)
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


def micro_batch_rows(rollout: Any, longest_row: int) -> int:
    """Rows of one micro-batch of the counterfactual forward (:class:`CounterfactualPlan`), from the run's log-prob
    batching (``actor_rollout_ref.rollout``): ``log_prob_micro_batch_size_per_gpu``, or, under
    ``log_prob_use_dynamic_bsz``, as many rows of ``longest_row`` tokens as ``log_prob_max_token_len_per_gpu``
    holds (verl's dynamic batching bounds a micro-batch's tokens by it; its sequence-parallel factor is not counted,
    which errs on the small side). Fewer than 2 rows cannot score an unmasked row beside a masked copy: a
    ValueError naming the option."""
    if rollout.get("log_prob_use_dynamic_bsz", False):
        budget = rollout.get("log_prob_max_token_len_per_gpu")
        rows = int(budget) // max(int(longest_row), 1) if budget is not None else 0
        option = (f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={budget} (with log_prob_use_dynamic_bsz)"
                  f" holds {rows} row(s) of {int(longest_row)} tokens")
    else:
        rows = rollout.get("log_prob_micro_batch_size_per_gpu")
        option = f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={rows}"
    if rows is None or rows < 2:
        raise ValueError(f"{option}: the counterfactual method scores each response's unmasked row in the same "
                         "micro-batch as its masked copies, so a log-prob micro-batch must hold at least 2 rows")
    return int(rows)


def forward_row_lengths(masked: DataProto, size_divisor: int) -> list[int]:
    """Valid tokens of every row :func:`compute_masked_log_probs` runs through the actor: the masked-copy batch's
    rows and the padding rows verl's ``pad_dataproto_to_divisor`` appends (the batch's first rows again, cycling,
    up to a multiple of ``size_divisor``): forward work too, so the compute accounting counts them."""
    lengths = masked.batch["attention_mask"].sum(-1).tolist()
    pad = (-len(lengths)) % size_divisor if lengths else 0
    return lengths + [lengths[i % len(lengths)] for i in range(pad)]


def compute_masked_log_probs(actor_rollout_wg: Any, masked: DataProto, size_divisor: int,
                             micro_batch_rows: int | None = None) -> torch.Tensor:
    """Response log-probs ``(len(masked), response_length)`` of the masked-copy batch (masked copies and
    unmasked rows, :func:`build_masked_copies`) from verl's actor, in one call.

    Mirrors ``RayPPOTrainer._compute_old_log_prob`` (no entropy, no loss): pads to ``size_divisor``
    (the actor's data-parallel size times ``micro_batch_rows``), converts to verl's no-padding TensorDict, calls
    ``actor_rollout_wg.compute_log_prob`` and slices the response back out. With ``micro_batch_rows`` (the plan's),
    the call asks the actor for fixed micro-batches of that many rows (``use_dynamic_bsz=False``,
    ``micro_batch_size_per_gpu``: verl's ``infer_batch`` takes them from the call before its config), so each
    micro-batch is one slot of the plan's layout and no unmasked row is scored apart from its copies.
    """
    if micro_batch_rows is not None and size_divisor % micro_batch_rows:
        raise ValueError(f"compute_masked_log_probs: size_divisor={size_divisor} is not a multiple of "
                         f"micro_batch_rows={micro_batch_rows}: a rank's rows would not be whole micro-batch slots")
    padded, pad_size = pad_dataproto_to_divisor(masked, size_divisor)
    padded.meta_info["global_token_num"] = padded.batch["attention_mask"].sum(-1).tolist()
    batch_td = left_right_2_no_padding(padded.to_tensordict())
    tu.assign_non_tensor(batch_td, calculate_entropy=False, compute_loss=False)
    if micro_batch_rows is not None:
        tu.assign_non_tensor(batch_td, use_dynamic_bsz=False, micro_batch_size_per_gpu=int(micro_batch_rows))
    output = actor_rollout_wg.compute_log_prob(batch_td)
    log_probs = no_padding_2_padding(tu.get(output, "log_probs"), batch_td).float()
    return log_probs[: len(padded) - pad_size] if pad_size else log_probs


def measured_answer_log_probs(
    plan: CounterfactualPlan, masked_log_probs: torch.Tensor
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Per measured response ``row``: ``(log p(a | y), log p(a | y with s masked))`` for every span s, two
    ``(num_spans,)`` tensors [§importance], both read from ``masked_log_probs``, the masked-copy batch's
    log-probs ``(plan.num_forward_rows, response_length)``: each span's masked copy and the unmasked row of its unit
    (the same micro-batch), so entry s of the first is log p(a | y) as scored beside copy s."""
    rows, spans = plan.forward_rows.tolist(), plan.forward_spans.tolist()
    unit_of: dict[int, int] = {}  # row -> its current unit's unmasked row (units are contiguous)
    copies: dict[int, list[tuple[int, int]]] = {}  # row -> (copy's index, its unit's unmasked index)
    for j, (row, span) in enumerate(zip(rows, spans, strict=True)):
        if span == UNMASKED:
            unit_of[row] = j
            copies.setdefault(row, [])
        elif span >= 0:
            if row not in unit_of:
                raise ValueError(f"measured_answer_log_probs: forward row {j} masks span {span} of row {row} before "
                                 "any unmasked row of it")
            copies[row].append((j, unit_of[row]))
    measured = {}
    for row, own in copies.items():
        seg = plan.segmentations[row]
        listed = [spans[k] for k, _ in own]
        if seg is None or not seg.measurable or listed != list(range(len(seg.spans))):
            has = "no segmentation" if seg is None else (
                f"{len(seg.spans)} spans" + ("" if seg.has_answer else " and no answer"))
            raise ValueError(f"measured_answer_log_probs: the plan lists masked copies of row {row} for spans "
                             f"{listed}; the row has {has} (every span of a measurable row, in order)")
        n = seg.num_tokens
        copy_idx, unmasked_idx = [k for k, _ in own], [u for _, u in own]
        measured[row] = (answer_log_prob(masked_log_probs[unmasked_idx, :n], seg),
                         answer_log_prob(masked_log_probs[copy_idx, :n], seg))
    return measured


def counterfactual_token_weights(
    batch: DataProto,
    plan: CounterfactualPlan,
    config: CounterfactualConfig,
    full_log_probs: torch.Tensor | None,
    masked_log_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token weights ``(bs, response_length)`` (1.0 on padding and on unweighted rows) and metrics.

    ``masked_log_probs``: ``(plan.num_forward_rows, response_length)`` from :func:`compute_masked_log_probs`, rows
    in the order of :func:`build_masked_copies` (``plan.forward_rows``). Every drop_s = log p(a | y) - log p(a | y
    with s masked) [§importance] takes both terms from it: log p(a | y) from the response's unmasked row,
    scored in the same forward call as its masked copies. ``full_log_probs``: the batch's own response log-probs
    (``old_log_probs``, another forward call) or None; not used for the weights, only compared with the unmasked
    rows (``counterfactual/unmasked_abs_shift_mean``). Mean-1 rescaling (if on) averages over ``response_mask``.
    """
    _require_keys(batch, ("responses", "response_mask"), "counterfactual_token_weights")
    bs, resp_len = batch.batch["responses"].shape
    if full_log_probs is not None and tuple(full_log_probs.shape) != (bs, resp_len):
        raise ValueError(
            f"counterfactual_token_weights: full_log_probs has shape {tuple(full_log_probs.shape)}, "
            f"expected {(bs, resp_len)}"
        )
    if tuple(masked_log_probs.shape) != (plan.num_forward_rows, resp_len):
        raise ValueError(
            f"counterfactual_token_weights: masked_log_probs has shape {tuple(masked_log_probs.shape)}, "
            f"expected {(plan.num_forward_rows, resp_len)} (one row per masked copy, {plan.num_copies}, one "
            f"unmasked row per unit of a measured response, {plan.num_unmasked_rows}, and "
            f"{plan.num_forward_rows - plan.num_copies - plan.num_unmasked_rows} filler(s))"
        )
    if len(plan.segmentations) != bs:
        raise ValueError(
            f"counterfactual_token_weights: the plan covers {len(plan.segmentations)} rows, the batch has {bs}"
        )
    response_mask = batch.batch["response_mask"]
    weights = torch.ones(bs, resp_len, dtype=torch.float64)
    measured = measured_answer_log_probs(plan, masked_log_probs) if config.needs_forward_passes else {}
    span_weight_sums = {"arithmetic": [0.0, 0], "sentence": [0.0, 0]}
    all_drops: list[float] = []
    shifts: list[float] = []
    counts = {"weighted": 0, "segmented": 0, "no_answer": 0, "spans": 0}
    for row, seg in enumerate(plan.segmentations):
        if seg is None:
            continue
        counts["segmented"] += 1
        counts["spans"] += len(seg.spans)
        counts["no_answer"] += int(not seg.has_answer)
        if not seg.measurable:
            continue
        drops = None
        if config.needs_forward_passes:
            if row not in measured:
                raise ValueError(f"counterfactual_token_weights: row {row} is measurable but the plan has no masked "
                                 f"copy of it (a plan built for mode '{config.mode}'?)")
            unmasked, masked = measured[row]
            drops = span_drops(unmasked, masked)
            all_drops.extend(drops.tolist())
            if full_log_probs is not None:  # the response's first unmasked row (its first unit's)
                shifts.append(abs(float(unmasked[0] - answer_log_prob(full_log_probs[row, : seg.num_tokens], seg))))
        row_weights = response_weights(seg, config, drops, generator, response_mask[row, : seg.num_tokens])
        weights[row, : seg.num_tokens] = row_weights
        counts["weighted"] += 1
        for span in seg.spans:
            acc = span_weight_sums[span.kind]
            acc[0] += float(row_weights[span.start : span.end].sum())
            acc[1] += span.length
    metrics = _weight_metrics(counts, plan, all_drops, shifts, span_weight_sums)
    valid = response_mask.bool()
    if valid.any():
        metrics["counterfactual/weight_max"] = float(weights[valid].max())
        metrics["counterfactual/weight_min"] = float(weights[valid].min())
    return weights.float(), metrics


def _weight_metrics(counts: dict[str, int], plan: CounterfactualPlan, drops: list[float], shifts: list[float],
                    span_weight_sums: dict[str, list]) -> dict[str, float]:
    """The step's ``counterfactual/*`` counts, and its rates and means (docs/method_counterfactual.md, "Metrics").
    A rate or mean over an empty set (no segmented response, no measured span, no token in a span of that kind) is
    left out of the step's metrics, not logged as 0: a mean weight of 0 or a distractor share of 0 would read as
    a measurement. The counts are their denominators."""
    segmented = counts["segmented"]
    metrics = {
        "counterfactual/weighted_responses": float(counts["weighted"]),
        "counterfactual/segmented_responses": float(segmented),
        "counterfactual/masked_copies": float(plan.num_copies),
        "counterfactual/unmasked_rows": float(plan.num_unmasked_rows),
        "counterfactual/extra_forward_rows": float(plan.num_forward_rows),
    }
    if segmented:
        metrics["counterfactual/no_answer_share"] = counts["no_answer"] / segmented
        metrics["counterfactual/spans_per_response"] = counts["spans"] / segmented
    if drops:
        metrics["counterfactual/distractor_share"] = float(np.mean(np.asarray(drops) < 0))
        metrics["counterfactual/drop_mean"] = float(np.mean(drops))
    if shifts:
        metrics["counterfactual/unmasked_abs_shift_mean"] = float(np.mean(shifts))
    for kind, (total, tokens) in span_weight_sums.items():
        if tokens:
            metrics[f"counterfactual/weight_{kind}_mean"] = total / tokens
    return metrics


__all__ = [
    "make_decode_fn",
    "response_lengths",
    "sequence_values",
    "rows_with_signal",
    "UNMASKED",
    "FILLER",
    "pack_units",
    "CounterfactualPlan",
    "plan_counterfactuals",
    "build_masked_copies",
    "compute_masked_log_probs",
    "micro_batch_rows",
    "forward_row_lengths",
    "measured_answer_log_probs",
    "counterfactual_token_weights",
]
