"""compute_accounting.row_lengths: the longest row of each phase, and per-GPU token limits that fit by construction,
checked against verl's own micro-batcher (``rearrange_micro_batches``, the assertion a run would stop at)."""

from __future__ import annotations

import itertools

import pytest
import torch
from tensordict import TensorDict
from verl.utils.seqlen_balancing import rearrange_micro_batches

from compute_accounting.row_lengths import longest_trained, phase_rows, row_limit_shortfall, tokens_per_gpu


def verl_accepts(rows: list[tuple[int, int]], max_token_len: int, remove_padding: bool) -> bool:
    """Whether verl's micro-batcher takes a batch of rows given as (content tokens, padded width): nested rows of
    their content under remove-padding, else left-padded tensors of their width (what verl's workers pass)."""
    if remove_padding:
        ids = torch.nested.nested_tensor([torch.zeros(n, dtype=torch.long) for n, _ in rows], layout=torch.jagged)
        batch = TensorDict({"input_ids": ids}, batch_size=[len(rows)])
    else:
        width = max(w for _, w in rows)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, (n, _) in enumerate(rows):
            mask[i, width - n:] = 1
        batch = TensorDict({"input_ids": torch.zeros_like(mask), "attention_mask": mask}, batch_size=[len(rows)])
    try:
        rearrange_micro_batches(batch, max_token_len=max_token_len)
    except AssertionError:
        return False
    return True


def test_the_one_gpu_scripts_rows():
    # run_ibpo_qwen3_1p7b_1gpu.sh: 1,024 + 8,192, whole candidates: x~ up to 1,024 + 256 + 2 x (8,192 + 16) = 17,696
    rows = {r.phase: r for r in phase_rows(1024, 8192, 17696, correction_prompt=17696, joint_training=True)}
    assert rows["main"].tokens == 9216 and rows["main"].width == 25888  # the agent loop pads x to prompt_length
    assert rows["joint-training x~ + y^"].tokens == 25888 and rows["joint-training x~ + y^"].trained
    assert not rows["correction x~ + y^"].trained and not rows["validation"].trained
    longest = longest_trained(tuple(rows.values()), remove_padding=True)
    assert longest.phase == "joint-training x~ + y^"
    assert row_limit_shortfall(18432, 1, longest, True) == 25888 - 18432  # the script's former limit
    assert tokens_per_gpu(2, 9216, 25888) == 25888 and tokens_per_gpu(4, 9216, 25888) == 36864


def test_without_joint_training_or_corrections_the_main_row_is_longest():
    assert longest_trained(phase_rows(1024, 8192, 17696, 17696, joint_training=False), True).phase == "main"
    rows = phase_rows(512, 1024, 512, masked_copies=True)
    assert [r.phase for r in rows] == ["main", "validation", "masked copy"] and rows[-1].tokens == 1536
    # without remove-padding verl measures the padded width: a main row under IBPO's wide prompt_length
    assert longest_trained(phase_rows(1024, 8192, 17696, 17696, False), False).measured(False) == 25888


def test_a_correction_prompt_is_capped_at_prompt_length_as_the_agent_loop_caps_it():
    (joint,) = [r for r in phase_rows(100, 50, 300, correction_prompt=900, joint_training=True) if r.phase.startswith("j")]
    assert joint.tokens == 350


@pytest.mark.parametrize("remove_padding", [True, False])
def test_the_derived_limit_is_what_verls_micro_batcher_takes_and_one_token_less_is_not(remove_padding):
    for max_prompt, response, extra, sp, rows_per in itertools.product((7, 64), (5, 40), (0, 90), (1, 3, 8), (1, 2)):
        prompt_length = max_prompt + extra
        rows = phase_rows(max_prompt, response, prompt_length, prompt_length if extra else None, joint_training=True)
        longest = longest_trained(rows, remove_padding)
        per_gpu = tokens_per_gpu(rows_per, rows[0].measured(remove_padding), longest.measured(remove_padding), sp)
        batch = [(r.tokens, r.width) for r in rows if r.trained]
        assert verl_accepts(batch, per_gpu * sp, remove_padding)  # verl multiplies by sp_size
        assert row_limit_shortfall(per_gpu, sp, longest, remove_padding) == 0
        tight = -(-longest.measured(remove_padding) // sp)  # the least per-GPU limit that fits
        assert verl_accepts(batch, tight * sp, remove_padding)
        assert row_limit_shortfall(tight - 1, sp, longest, remove_padding) > 0
        assert not verl_accepts(batch, (tight - 1) * sp, remove_padding)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="sp_size=0"):
        tokens_per_gpu(2, 10, 10, 0)
