"""Fast checks of two recipe-path computations whose mutations the slow tier alone used to catch.

- ``recipe.ibpo.correction.batch.apply_token_mask`` (the trainer's ``_after_advantage``: advantages ·= m_t by the
  sign of Â, Eq. 7/17, ``ibpo.mask_sign``) against a row-by-row reference on random batches, every mask
  sign, with unshaped rows of positive advantage (what ``complement_when_positive`` must leave alone);
- ``recipe.ibpo.step_compute.step_work`` (the rows the FLOP count charges: main, joint, padding,
  correction generation) on a batch with every kind of row.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto

from compute_accounting.flops import ModelShape, StepWork, forward_flops, step_flops
from ibpo.advantages import get_mask_sign
from recipe.ibpo.correction import batch as corr
from recipe.ibpo.step_compute import compute_metrics, step_work


# the built-in policies, each with its definition in _reference_masked_advantages
BUILTIN_MASK_SIGNS = ("negative_only", "complement_when_positive", "literal")


def _batch(adv_seq, delta, token_mask, response_mask, padding) -> DataProto:
    adv = torch.as_tensor(adv_seq, dtype=torch.float32).unsqueeze(-1) * response_mask
    return DataProto.from_dict(tensors={
        "advantages": adv,
        "response_mask": response_mask,
        corr.DELTA_KEY: torch.as_tensor(delta, dtype=torch.float32),
        corr.TOKEN_MASK_KEY: token_mask,
        corr.IS_CORRECTION_KEY: torch.zeros(len(delta), dtype=torch.float32),
        corr.IS_PADDING_KEY: torch.as_tensor(padding, dtype=torch.float32),
    })


def _reference_masked_advantages(adv_seq, delta, token_mask, response_mask, padding, mask_sign) -> torch.Tensor:
    """Row by row, from the definitions (docs/method_ibpo.md, "mask sign"): padding rows 0; rows with Δ = 0
    unchanged; shaped rows: ``literal`` m_t; ``negative_only`` m_t if Â < 0 else 1;
    ``complement_when_positive`` m_t if Â < 0, 1 − m_t if Â > 0, 1 if Â = 0."""
    out = torch.zeros_like(token_mask)
    for i in range(len(adv_seq)):
        a = float(adv_seq[i])
        if padding[i]:
            continue
        m = token_mask[i]
        if delta[i] > 0 and (mask_sign == "literal" or a < 0):
            row_mask = m
        elif delta[i] > 0 and mask_sign == "complement_when_positive" and a > 0:
            row_mask = 1 - m
        else:
            row_mask = torch.ones_like(m)
        out[i] = a * response_mask[i] * row_mask
    return out


def _random_case(rng: np.random.Generator, rows: int, width: int):
    response_mask = torch.zeros(rows, width)
    for i, n in enumerate(rng.integers(1, width + 1, rows)):
        response_mask[i, :n] = 1
    adv_seq = rng.choice([-2.0, -0.5, 0.0, 0.5, 2.65], rows)  # Â = 0 and Â > 0 on unshaped rows too
    delta = np.where(rng.random(rows) < 0.5, 0.0, rng.choice([0.1, 0.3, 0.7], rows))
    token_mask = torch.ones(rows, width)
    shaped = torch.as_tensor(delta > 0)
    token_mask[shaped] = torch.as_tensor(rng.integers(0, 2, (int(shaped.sum()), width)), dtype=torch.float32)
    padding = rng.random(rows) < 0.15
    return adv_seq, delta, token_mask, response_mask, padding


@pytest.mark.parametrize("mask_sign", BUILTIN_MASK_SIGNS)
def test_apply_token_mask_matches_the_row_reference_on_random_batches(mask_sign):
    rng = np.random.default_rng(20260118)
    for _ in range(200):
        case = _random_case(rng, int(rng.integers(1, 12)), int(rng.integers(1, 9)))
        batch = _batch(*case)
        corr.apply_token_mask(batch, corr.IBPORows.of(batch), get_mask_sign(mask_sign))
        expected = _reference_masked_advantages(*case, mask_sign)
        assert torch.equal(batch.batch["advantages"], expected), (mask_sign, case)


@pytest.mark.parametrize("mask_sign", BUILTIN_MASK_SIGNS)
def test_unshaped_rows_keep_their_advantage_whatever_the_sign(mask_sign):
    """Δ = 0 rows (every right answer, every unshaped wrong one) train exactly as GSPO would: under
    ``complement_when_positive`` a positive unshaped row is *not* turned into 1 − m = 0."""
    response_mask = torch.ones(4, 3)
    case = ([1.5, -1.5, 0.0, 2.0], [0.0, 0.0, 0.0, 0.3], torch.tensor([[1.0] * 3] * 3 + [[1.0, 0.0, 0.0]]),
            response_mask, [False] * 4)
    batch = _batch(*case)
    corr.apply_token_mask(batch, corr.IBPORows.of(batch), get_mask_sign(mask_sign))
    adv = batch.batch["advantages"]
    assert adv[0].tolist() == [1.5] * 3 and adv[1].tolist() == [-1.5] * 3 and adv[2].tolist() == [0.0] * 3
    shaped_positive = {"literal": [2.0, 0.0, 0.0], "negative_only": [2.0, 2.0, 2.0],
                       "complement_when_positive": [0.0, 2.0, 2.0]}[mask_sign]
    assert adv[3].tolist() == shaped_positive


def _rows(lengths, width=12) -> torch.Tensor:
    mask = torch.zeros(len(lengths), width, dtype=torch.int64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return mask


def kinds(batch: DataProto) -> corr.IBPORows:
    """The row kinds of ``batch`` (Δ and the token mask play no part in the work)."""
    n = len(batch)
    return corr.IBPORows(torch.zeros(n), torch.ones(n, 1), batch.batch[corr.IS_CORRECTION_KEY] != 0,
                         batch.batch[corr.IS_PADDING_KEY] != 0)


def test_step_work_charges_main_joint_padding_and_correction_rows():
    main, joint, padding = [7, 9, 5], [11, 6], [2]
    flags = [0] * 3 + [1] * 2 + [0]
    batch = DataProto.from_dict(tensors={
        "attention_mask": _rows(main + joint + padding),
        corr.IS_CORRECTION_KEY: torch.tensor(flags, dtype=torch.float32),
        corr.IS_PADDING_KEY: torch.tensor([0] * 5 + [1], dtype=torch.float32),
    })
    correction_output = DataProto.from_dict(tensors={"attention_mask": _rows([10, 12])})
    work = step_work(batch, kinds(batch), correction_output, grad_probe=[7, 9], ppo_epochs=2, gradient_checkpointing=True,
                     old_log_prob_forward=True, reference_forward=False)
    assert work == StepWork(main_gen=main, correction_gen=[10, 12], train_main=main, train_joint=joint,
                            train_padding=padding, backward_phases={"grad_probe": [7, 9]}, ppo_epochs=2,
                            gradient_checkpointing=True, old_log_prob_forward=True, reference_forward=False)
    shape = ModelShape(matmul_params=1000, num_layers=2, attention_dim=8)
    flops = step_flops(work, shape)
    training_passes = 2 * 4 + 1  # 2 epochs × (3 + recompute) + old log-prob
    assert flops.joint_rows == training_passes * forward_flops(joint, shape) > 0
    assert flops.actor_update == 8 * forward_flops(main + joint + padding, shape)
    # no correction pass (GSPO through the same loop): no correction generation, no joint rows
    baseline = DataProto.from_dict(tensors={
        "attention_mask": _rows(main), corr.IS_CORRECTION_KEY: torch.zeros(3), corr.IS_PADDING_KEY: torch.zeros(3)})
    work = step_work(baseline, kinds(baseline), None, grad_probe=[], ppo_epochs=1, gradient_checkpointing=False,
                     old_log_prob_forward=False, reference_forward=True)
    assert (work.correction_gen, work.train_joint, work.train_padding, work.train_main) == ([], [], [], main)


def test_every_running_total_is_named_a_total():
    """The running totals (restored on resume) say so in their names: the running sum of generated tokens was logged
    as ``ibpo/compute/generated_tokens``, which reads as the step's count beside ``ibpo/main_gen_tokens``."""
    work = StepWork(main_gen=[10, 12], train_main=[10, 12])
    shape = ModelShape(matmul_params=1000, num_layers=2, attention_dim=8)
    totals = {"total_tokens": 100.0, "total_flops": 1e6, "generated_tokens": 40.0}  # after the steps before
    metrics = {"ibpo/main_prompt_tokens": 8.0, "ibpo/main_gen_tokens": 14.0, "ibpo/correction_prompt_tokens": 20.0,
               "ibpo/correction_gen_tokens": 6.0}
    compute_metrics(work, shape, metrics, totals)
    step = step_flops(work, shape).total
    assert {k: v for k, v in metrics.items() if k.startswith("ibpo/compute/total")} == {
        "ibpo/compute/total_tokens": 148.0, "ibpo/compute/total_flops": 1e6 + step,
        "ibpo/compute/total_generated_tokens": 60.0}
    assert "ibpo/compute/generated_tokens" not in metrics and metrics["ibpo/compute/step_flops"] == step
    assert totals == {"total_tokens": 148.0, "total_flops": 1e6 + step, "generated_tokens": 60.0}
