"""verl glue of the IBPO correction pass: DataProto in, DataProto out; no Ray, no workers.

The trainer (``ibpo_ray_trainer.py``) calls these around its two ``generate_sequences`` calls. Every
number comes from ``ibpo/``; this module only moves rows and keys between verl's batches and the pure
functions, so it is tested on hand-built DataProtos (tests/integration/test_recipe_correction.py).

Row bookkeeping: verl's ``_balance_batch`` reorders rows, so everything IBPO adds rides *per row* as batch
keys (``ibpo_delta``, ``ibpo_token_mask``, ``ibpo_is_correction``, ``ibpo_is_padding``), never as positions,
from the correction pass through that reorder; the trainer reads them back once, after it, into
:class:`IBPORows` (its step record, ``recipe.ibpo.step_record``), which every later step of the trainer reads.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from verl import DataProto
from verl.utils.model import compute_position_id_with_mask

from compute_accounting.gpu_time import GenerationWork
from ibpo.advantages import (MaskSignPolicy, place_sequence_reward, shaped_rewards, shaping_advantage_factor,
                             signed_token_mask)
from ibpo.options import IBPOConfig
from ibpo.correction_lengths import AGENT_LOOP_NAME, MAX_TOKENS_KEY, bounded_lengths
from ibpo.lookup_decoding import NgramParams, batch_decode_steps, simulate_lookup
from ibpo.pipeline import (CORRECTION_UID_SUFFIX, CorrectionRequest, CorrectionStep, ShapingOutcome, joint_row_uids,
                           rewrite_penalties)
from ibpo.prefix_sharing import shared_prefix_lengths
from recipe.common.step_io import require_finite_scores

# keys IBPO adds to the training batch
DELTA_KEY = "ibpo_delta"
TOKEN_MASK_KEY = "ibpo_token_mask"
IS_CORRECTION_KEY = "ibpo_is_correction"
IS_PADDING_KEY = "ibpo_is_padding"


def sequence_scores(gen_output: DataProto, data_sources=None, what: str = "generation") -> torch.Tensor:
    """Verifier reward per row: the row sum of the streaming reward ``rm_scores`` (outcome rewards sit on
    the last response token). A non-finite score stops the run naming ``what``, the rows and their
    ``data_sources`` (default: the output's own ``data_source`` column)."""
    if gen_output.batch is None or "rm_scores" not in gen_output.batch.keys():
        raise KeyError(
            "generation output has no 'rm_scores': IBPO needs the streaming reward of verl's agent loop "
            "(reward.custom_reward_function set, no separate reward-model pool)"
        )
    scores = gen_output.batch["rm_scores"].sum(dim=-1).float()
    if data_sources is None:
        data_sources = gen_output.non_tensor_batch.get("data_source")
    require_finite_scores(scores, data_sources, what)
    return scores


def response_token_ids(gen_output: DataProto) -> list[list[int]]:
    """The valid response tokens of every row (``responses`` where ``response_mask`` is 1)."""
    responses = gen_output.batch["responses"]
    mask = gen_output.batch["response_mask"].bool()
    return [responses[i][mask[i]].tolist() for i in range(responses.shape[0])]


def messages_of(raw_prompt) -> list[dict]:
    """verl's ``raw_prompt`` entry (list/array of message dicts) as a plain list of dicts."""
    return [dict(m) for m in list(raw_prompt)]


def build_correction_gen_batch(
    gen_batch: DataProto, requests: list[CorrectionRequest]
) -> DataProto:
    """The generation input for the corrections: the source rows' non-tensor fields (so the key set equals
    the main generation's and the same reward function scores them against x's ground truth), with
    ``raw_prompt`` = x~ as chat messages, ``uid`` = the per-prompt correction group, and a deep copy of
    ``extra_info`` (the reward loop mutates it; ``np.repeat`` would share one dict)."""
    rows = np.array([r.target_row for r in requests], dtype=np.int64)
    corr = gen_batch.select_idxs(rows)
    non_tensor = {k: v.copy() for k, v in corr.non_tensor_batch.items()}
    raw = np.empty(len(requests), dtype=object)
    for i, req in enumerate(requests):
        raw[i] = req.messages
    non_tensor["raw_prompt"] = raw
    non_tensor["uid"] = np.array([f"{r.group_id}{CORRECTION_UID_SUFFIX}" for r in requests], dtype=object)
    if "extra_info" in non_tensor:
        non_tensor["extra_info"] = np.array([copy.deepcopy(x) for x in non_tensor["extra_info"]], dtype=object)
    meta = {k: v for k, v in gen_batch.meta_info.items() if k != "validate"}
    return DataProto.from_dict(non_tensors=non_tensor, meta_info=meta)


def attach_length_bound(corr_batch: DataProto, requests: list[CorrectionRequest], response_ids: list[list[int]],
                        config: IBPOConfig, response_length: int) -> np.ndarray | None:
    """The per-correction length bound (``ibpo.correction_lengths``), in place: each correction row names the
    ``ibpo_correction`` agent loop and carries max_tokens = ⌈c·|y|⌉ + closing tokens of its target y in
    the ``ibpo_max_tokens`` column. Returns the bounds (None when ``correction_max_tokens_factor = 0``)."""
    if config.correction_max_tokens_factor <= 0 or not requests:
        return None
    bounds = bounded_lengths([len(response_ids[r.target_row]) for r in requests], config.correction_max_tokens_factor,
                             config.correction_closing_tokens, response_length)
    corr_batch.non_tensor_batch["agent_name"] = np.array([AGENT_LOOP_NAME] * len(requests), dtype=object)
    corr_batch.non_tensor_batch[MAX_TOKENS_KEY] = bounds.astype(object)
    return bounds


def length_bound_metrics(bounds: np.ndarray | None, correction_ids: list[list[int]],
                         response_length: int) -> dict[str, float]:
    """``ibpo/correction/max_tokens_mean`` and ``ibpo/correction/stopped_at_bound_frac``: the share of
    corrections that ended exactly at a bound tighter than the rollout's response_length (cut by it, or
    ending there by chance)."""
    if bounds is None or not len(bounds):
        return {}
    lengths = np.array([len(ids) for ids in correction_ids])
    at_bound = (lengths >= bounds) & (bounds < response_length)
    return {"ibpo/correction/max_tokens_mean": float(bounds.mean()),
            "ibpo/correction/stopped_at_bound_frac": float(at_bound.mean())}


def lookup_metrics(output: DataProto | None, params: NgramParams) -> dict[str, float]:
    """vLLM's ngram proposer replayed on the step's corrections (``ibpo.lookup_decoding``): exact for these
    samples under lossless verification. ``ibpo/correction/lookup_decode_step_reduction``: share of the
    corrections' decode forward passes lookup saves (summed over requests);
    ``..._batch_decode_step_reduction``: the same for the slowest request (a batch's decode wall time in
    steps); tokens per decode step, accepted draft tokens per verification, acceptance rate. A rate over an
    empty set (no decode step, no draft) is left out."""
    if output is None or len(output) == 0:
        return {}
    total = None
    for prompt, response in zip(prompt_token_ids(output), response_token_ids(output)):
        stats = simulate_lookup(prompt, response, params)
        total = stats if total is None else total + stats
    metrics = total.as_metrics("ibpo/correction/")
    plain = batch_decode_steps([max(len(r) - 1, 0) for r in response_token_ids(output)])
    spec = batch_decode_steps(total.per_request_steps)
    if plain:
        metrics["ibpo/correction/lookup_batch_decode_step_reduction"] = 1.0 - spec / plain
    return metrics


def speculative_generation_work(output: DataProto, params: NgramParams) -> GenerationWork:
    """The GPU-time model's view of a generation the rollout decoded with vLLM's ngram speculation
    (``compute_accounting.gpu_time.GenerationWork``): per request its prompt and response tokens, and the decode
    passes and verified draft tokens of vLLM's proposer replayed on the realised output (``ibpo.lookup_decoding``:
    exact under lossless verification, whatever the sampling)."""
    prompts, responses = prompt_token_ids(output), response_token_ids(output)
    stats = [simulate_lookup(p, r, params) for p, r in zip(prompts, responses)]
    return GenerationWork([len(p) for p in prompts], [len(r) for r in responses],
                          [st.decode_steps for st in stats], [st.drafted_tokens for st in stats])


def dump_corrections(directory: str, step: int, requests: list[CorrectionRequest], output: DataProto | None,
                     response_ids: list[list[int]], correction_right: list[bool], rewrite: np.ndarray) -> str:
    """Write the step's corrections as JSON lines (``<directory>/ibpo_corrections/step_<step>.jsonl``):
    correction prompt ids, correction ids, target ids, reference ids, correct, rewrite, shaped. Written
    when verl's ``trainer.rollout_data_dir`` is set (lab/analysis/correction_lookup.py reads them)."""
    folder = os.path.join(directory, "ibpo_corrections")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"step_{int(step)}.jsonl")
    prompts = prompt_token_ids(output) if output is not None and len(output) else []
    corrections = response_token_ids(output) if output is not None and len(output) else []
    with open(path, "w") as f:
        for i, req in enumerate(requests):
            f.write(json.dumps({
                "step": int(step), "prompt_ids": prompts[i], "correction_ids": corrections[i],
                "target_ids": list(response_ids[req.target_row]),
                "reference_ids": [list(response_ids[r]) for r in req.reference_rows],
                "correct": bool(correction_right[i]), "rewrite": bool(rewrite[i]),
                "shaped": bool(correction_right[i] and not rewrite[i]),
            }) + "\n")
    return path


@dataclass
class CorrectionPass:
    """Everything the trainer needs from one step's correction pass."""

    requests: list[CorrectionRequest]
    outcome: ShapingOutcome
    correction_output: DataProto | None  # the generated corrections (None when there were none)
    correction_scores: torch.Tensor  # (num_corrections,) verifier reward of each correction
    main_scores: torch.Tensor  # (bs,)

    @classmethod
    def of(cls, step: CorrectionStep[DataProto], main_scores: torch.Tensor) -> "CorrectionPass":
        """The trainer's record of ``ibpo.pipeline.correction_step``'s result (its generation a DataProto)."""
        generated = step.generated
        return cls(step.requests, step.outcome, generated.output if generated else None,
                   torch.as_tensor(generated.scores) if generated else torch.zeros(0), main_scores)


def main_rows(gen_batch: DataProto, gen_output: DataProto, step: int) -> tuple[torch.Tensor, list[list[int]]]:
    """The main generation's verifier scores (a non-finite one stops the run naming the step and the rows' data
    sources) and response tokens, the inputs ``ibpo.pipeline.correction_step`` reads besides the prompts."""
    if len(gen_batch) != len(gen_output):
        raise ValueError(f"generation input has {len(gen_batch)} rows but output {len(gen_output)}")
    scores = sequence_scores(gen_output, gen_batch.non_tensor_batch.get("data_source"), f"step {step}, main generation")
    return scores, response_token_ids(gen_output)


def prompt_token_ids(output: DataProto) -> list[list[int]]:
    """The prompt tokens of every row of a generation output (``prompts`` is left-padded; the first
    ``prompts.shape[1]`` columns of ``attention_mask`` mark its real tokens)."""
    prompts = output.batch["prompts"]
    mask = output.batch["attention_mask"][:, : prompts.shape[1]].bool()
    return [prompts[i][mask[i]].tolist() for i in range(prompts.shape[0])]


def prefix_cache_metrics(output: DataProto | None) -> dict[str, float]:
    """How much of the correction prompts a prefix cache can reuse (docs/correction_pass.md).

    ``ibpo/correction/prompt_tokens_in_shared_prefix_frac``: CPU proxy, the share of correction prompt
    tokens lying in a prefix shared with an earlier correction prompt of the step (token level, unbounded
    cache, batch order; :func:`ibpo.prefix_sharing.shared_prefix_lengths`). It counts no reuse from the
    main generation and ignores eviction and scheduling, so it is what the layout makes reusable, not what
    was reused. ``ibpo/correction/prompt_tokens_cached_frac``: what the rollout reports it actually served
    from its prefix cache (the pinned verl's vLLM server puts vLLM's ``num_cached_tokens`` into the output's
    ``num_cached_tokens`` field); logged only when every row reports it (the CPU ``hf`` rollout does not).
    """
    if output is None or len(output) == 0:
        return {}
    ids, mask = output.batch["prompts"], output.batch["attention_mask"][:, : output.batch["prompts"].shape[1]].bool()
    prompts = [ids[i][mask[i]].numpy() for i in range(ids.shape[0])]  # arrays: no Python lists at 32k tokens
    total = float(sum(len(p) for p in prompts))
    metrics = {"ibpo/correction/prompt_tokens_in_shared_prefix_frac":
               float(sum(shared_prefix_lengths(prompts))) / total if total else 0.0}
    cached = output.non_tensor_batch.get("num_cached_tokens")
    if cached is not None and total and all(c is not None for c in cached):
        metrics["ibpo/correction/prompt_tokens_cached_frac"] = float(sum(int(c) for c in cached)) / total
    return metrics


def read_corrections(requests: list[CorrectionRequest], correction_output: DataProto | None
                     ) -> tuple[torch.Tensor, list[list[int]]]:
    """(verifier score, response tokens) of every generated correction; fails if a request got no answer."""
    if requests and (correction_output is None or len(correction_output) != len(requests)):
        got = None if correction_output is None else len(correction_output)
        raise RuntimeError(f"correction pass returned {got} rows for {len(requests)} requests")
    if not requests:
        return torch.zeros(0), []
    return sequence_scores(correction_output, what="correction pass"), response_token_ids(correction_output)


def attach_shaping(gen_output: DataProto, result: CorrectionPass) -> None:
    """Store Δ and the token mask as per-row batch keys of the main generation output (in place)."""
    response_mask = gen_output.batch["response_mask"]
    mask = torch.ones_like(gen_output.batch["responses"], dtype=torch.float32)
    for row, m in enumerate(result.outcome.token_masks):
        positions = torch.nonzero(response_mask[row].bool(), as_tuple=False).squeeze(-1)
        mask[row, positions] = torch.as_tensor(m, dtype=torch.float32)
    _attach(gen_output, torch.as_tensor(result.outcome.delta, dtype=torch.float32), mask)


def attach_no_shaping(gen_output: DataProto) -> None:
    """Δ = 0 and m = 1 on every row: IBPO disabled (the GSPO baseline runs through the same loop)."""
    _attach(gen_output, torch.zeros(len(gen_output), dtype=torch.float32),
            torch.ones_like(gen_output.batch["responses"], dtype=torch.float32))


def _attach(gen_output: DataProto, delta: torch.Tensor, mask: torch.Tensor) -> None:
    gen_output.batch[DELTA_KEY] = delta
    gen_output.batch[TOKEN_MASK_KEY] = mask
    gen_output.batch[IS_CORRECTION_KEY] = torch.zeros(len(gen_output), dtype=torch.float32)
    gen_output.batch[IS_PADDING_KEY] = torch.zeros(len(gen_output), dtype=torch.float32)


def build_joint_rows(batch: DataProto, result: CorrectionPass, config: IBPOConfig) -> DataProto:
    """Correction samples (x~, ŷ) as training rows with exactly the main batch's keys (App. E.2 (C)).

    Each correction row starts as a copy of its target's row (so tensor and non-tensor key sets and
    widths match for ``DataProto.concat``), then takes the correction's tensors and shared non-tensor
    fields. Reward: r(ŷ) − rewrite_penalty·1[rewrite] (App. C.3), written into ``rm_scores``. ``batch``
    must be in generation order (before ``_balance_batch``).
    """
    corr_out = result.correction_output
    rows = np.array([r.target_row for r in result.requests], dtype=np.int64)
    joint = batch.select_idxs(rows)
    for key in corr_out.batch.keys():
        if key in joint.batch.keys():
            joint.batch[key] = corr_out.batch[key].clone()
    for key, values in corr_out.non_tensor_batch.items():
        if key in joint.non_tensor_batch:
            joint.non_tensor_batch[key] = values.copy()
    joint.non_tensor_batch["uid"] = joint_row_uids(result.requests, config.joint_grouping)
    if "extra_info" in joint.non_tensor_batch:
        joint.non_tensor_batch["extra_info"] = np.array(
            [copy.deepcopy(x) for x in joint.non_tensor_batch["extra_info"]], dtype=object)
    if config.rewrite_penalty > 0 and result.outcome.correction_rewrite.any():  # ibpo.pipeline.joint_rewards
        penalty = torch.as_tensor(rewrite_penalties(result.outcome.correction_rewrite, config), dtype=torch.float32)
        joint.batch["rm_scores"] = joint.batch["rm_scores"] - place_sequence_reward(
            joint.batch["response_mask"], penalty.to(joint.batch["rm_scores"].dtype))
    n = len(joint)
    joint.batch[DELTA_KEY] = torch.zeros(n, dtype=torch.float32)
    joint.batch[TOKEN_MASK_KEY] = torch.ones_like(joint.batch["responses"], dtype=torch.float32)
    joint.batch[IS_CORRECTION_KEY] = torch.ones(n, dtype=torch.float32)
    joint.batch[IS_PADDING_KEY] = torch.zeros(n, dtype=torch.float32)
    return joint


def pad_to_multiple(batch: DataProto, multiple: int) -> tuple[DataProto, int]:
    """Append no-op rows so ``len(batch) % multiple == 0`` (verl's actor update needs whole mini-batches).

    **Decision** (as verl's V1 trainer pads, ``verl/trainer/ppo/padding_utils.py``, rather than DAPO's
    trimming, which would drop every correction sample of a small batch): each padding row is a real row
    cut down to one prompt and one response token (so it costs almost no compute), with
    ``response_mask = 0``, zero reward, zero token mask (so zero advantage), a unique uid and
    ``ibpo_is_padding = 1``. It enters no loss term and no IBPO statistic.
    """
    return pad_to_rows(batch, -(-len(batch) // multiple) * multiple)


def pad_to_rows(batch: DataProto, rows: int) -> tuple[DataProto, int]:
    """Append ``rows - len(batch)`` no-op padding rows (see :func:`pad_to_multiple`)."""
    pad = rows - len(batch)
    if pad < 0:
        raise ValueError(f"cannot pad a batch of {len(batch)} rows to {rows}")
    if pad == 0:
        return batch, 0
    padding = batch.select_idxs(np.arange(pad) % len(batch))
    prompt_width = padding.batch["prompts"].shape[1]
    attention = torch.zeros_like(padding.batch["attention_mask"])
    attention[:, prompt_width - 1: prompt_width + 1] = 1  # last prompt token, first response token
    padding.batch["attention_mask"] = attention
    padding.batch["position_ids"] = compute_position_id_with_mask(attention)
    for key in ("response_mask", "rm_scores", TOKEN_MASK_KEY):
        padding.batch[key] = torch.zeros_like(padding.batch[key])
    padding.batch[DELTA_KEY] = torch.zeros(pad, dtype=torch.float32)
    padding.batch[IS_PADDING_KEY] = torch.ones(pad, dtype=torch.float32)
    padding.non_tensor_batch["uid"] = np.array([f"ibpo_pad_{uuid.uuid4().hex}" for _ in range(pad)], dtype=object)
    if "extra_info" in padding.non_tensor_batch:
        padding.non_tensor_batch["extra_info"] = np.array(
            [copy.deepcopy(x) for x in padding.non_tensor_batch["extra_info"]], dtype=object)
    return DataProto.concat([batch, padding]), pad


@dataclass(frozen=True)
class IBPORows:
    """IBPO's per-row state of a training batch in its final order, read from the batch's keys once
    (:meth:`of`): Δ (bs,), the token mask m (bs, T), and which rows are joint-training corrections and which
    no-op padding (bool (bs,) each)."""

    delta: torch.Tensor
    token_mask: torch.Tensor
    is_correction: torch.Tensor
    is_padding: torch.Tensor

    @classmethod
    def of(cls, batch: DataProto) -> "IBPORows":
        b = batch.batch
        return cls(b[DELTA_KEY], b[TOKEN_MASK_KEY], b[IS_CORRECTION_KEY] != 0, b[IS_PADDING_KEY] != 0)

    @property
    def main(self) -> np.ndarray:
        """Boolean (bs,) of the main responses (neither joint-training nor padding rows)."""
        return (~self.is_correction & ~self.is_padding).numpy()

    def main_delta(self) -> torch.Tensor:
        """Δ of the main rows, in batch order."""
        return self.delta[torch.as_tensor(self.main)]


def shaped_token_rewards(batch: DataProto, rows: IBPORows, lam: float) -> torch.Tensor:
    """token_level_rewards = token_level_scores + λΔ at each row's last response token (Eq. 15/27)."""
    scores = batch.batch["token_level_scores"]
    delta = rows.delta.to(scores.dtype)
    seq = scores.sum(dim=-1)
    bonus = shaped_rewards(seq, delta, lam) - seq  # validates 0 <= λΔ < 1
    return scores + place_sequence_reward(batch.batch["response_mask"], bonus)


def sequence_advantages(batch: DataProto) -> torch.Tensor:
    """Â_i per row: the mean of the row's advantages over its response tokens (constant over them before the
    token mask)."""
    adv = batch.batch["advantages"]
    valid = batch.batch["response_mask"].to(adv.dtype)
    return (adv * valid).sum(-1) / valid.sum(-1).clamp(min=1.0)


def apply_shaping_factor(batch: DataProto, rows: IBPORows, lam: float, shaping: str,
                         correct_threshold: float) -> None:
    """advantages ← advantages · f_i on the main rows (``ibpo.advantages.shaping_advantage_factor``:
    ``ibpo.shaping=reward_capped`` zeroes a wrong row's positive Â, ``advantage`` scales a shaped wrong row's
    negative Â by 1 − λΔ); joint and padding rows keep f = 1. In place, before the token mask."""
    if shaping == "reward":
        return
    adv = batch.batch["advantages"]
    is_correct = batch.batch["token_level_scores"].sum(-1) >= correct_threshold
    factor = shaping_advantage_factor(sequence_advantages(batch), rows.delta.to(adv.dtype), is_correct, lam, shaping)
    factor = torch.where(torch.as_tensor(rows.main), factor, torch.ones_like(factor))
    batch.batch["advantages"] = adv * factor.unsqueeze(-1)


def apply_token_mask(batch: DataProto, rows: IBPORows, mask_sign: MaskSignPolicy) -> None:
    """advantages ← advantages · m_t (Eq. 7/17), after group normalisation (in place), with m_t applied by
    the sign of each row's Â as the policy ``ibpo.mask_sign`` names says (``ibpo.advantages.get_mask_sign``,
    ``signed_token_mask``). Rows
    with Δ = 0 carry m = 1 and are unchanged; padding rows get 0."""
    adv = batch.batch["advantages"]
    sequence_adv = sequence_advantages(batch)  # Â_i is constant over the row's tokens
    shaped = rows.delta > 0
    mask = signed_token_mask(sequence_adv, rows.token_mask.to(adv.dtype), shaped, mask_sign)
    not_padding = (~rows.is_padding).to(adv.dtype).unsqueeze(-1)
    batch.batch["advantages"] = adv * mask * not_padding
