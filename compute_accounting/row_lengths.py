"""The longest row each phase of a step creates, and the per-GPU token limits verl enforces on them, as pure
arithmetic for every method (the correction prompt's own length is :mod:`ibpo.correction_lengths`'s, passed in).

What a row is, read from the pinned verl:

- verl's agent loop pads every prompt to ``rollout.prompt_length`` and every response to
  ``rollout.response_length`` (``verl/experimental/agent_loop/agent_loop.py``, ``padding="max_length"``), so every
  generated row (main, correction, validation) is ``prompt_length + response_length`` wide, whatever it holds;
  IBPO raises ``prompt_length`` to fit its correction prompts x~, which widens the main rows too;
- a row's content is its prompt plus up to ``response_length`` tokens: a main or validation row's prompt is at most
  ``data.max_prompt_length``; a correction prompt x~ up to its budget (``ibpo.correction_lengths``), so a
  joint-training row (x~ + y^, App. E.2) holds up to that budget plus ``response_length`` tokens;
- the counterfactual method's masked copies are copies of main rows (one span masked), as long and as wide.

What verl enforces on a trained row: its dynamic micro-batcher (``verl/workers/engine/utils.py:
prepare_micro_batches`` -> ``verl/utils/seqlen_balancing.py: rearrange_micro_batches``) asserts
``max_token_len >= max_seq_len`` with ``max_token_len = max_token_len_per_gpu x sp_size`` (Ulysses sequence
parallelism splits a row over ``sp_size`` GPUs) and ``max_seq_len`` the longest row's content under remove-padding
(nested rows) and the padded width otherwise. The actor update reads ``actor.ppo_max_token_len_per_gpu``, the
old log-prob pass ``rollout.log_prob_max_token_len_per_gpu`` and the reference pass
``ref.log_prob_max_token_len_per_gpu``; each row that is trained (main and joint rows) passes all three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PhaseRow:
    """The longest row of one phase: ``tokens`` of content (``origin``: of what), ``width`` of padded tensors;
    ``trained``: it goes through the actor's dynamically micro-batched passes (old log-prob, reference, update)."""

    phase: str
    tokens: int
    width: int
    trained: bool
    origin: str

    def measured(self, remove_padding: bool) -> int:
        """What verl's micro-batcher measures of this row: its content under remove-padding, else its width."""
        return self.tokens if remove_padding else self.width

    def measured_origin(self, remove_padding: bool) -> str:
        """Of what :meth:`measured` is made."""
        return self.origin if remove_padding else ("its padded width rollout.prompt_length + rollout.response_length "
                                                   "(model.use_remove_padding=False)")


def phase_rows(max_prompt: int, response_length: int, prompt_length: int, correction_prompt: int | None = None,
               joint_training: bool = False, masked_copies: bool = False) -> tuple[PhaseRow, ...]:
    """The longest row of every phase a step creates. ``correction_prompt``: the longest correction prompt x~ (None:
    the method makes no corrections), capped at ``prompt_length`` as verl's agent loop caps it;
    ``joint_training``: the corrections are trained on; ``masked_copies``: the counterfactual method's copies."""
    width = int(prompt_length) + int(response_length)
    main = int(max_prompt) + int(response_length)
    made_of = f"data.max_prompt_length {int(max_prompt)} + rollout.response_length {int(response_length)}"
    rows = [PhaseRow("main", main, width, True, made_of), PhaseRow("validation", main, width, False, made_of)]
    if correction_prompt is not None:
        shown = min(int(correction_prompt), int(prompt_length))
        made_of = (f"a correction prompt x~ of up to {shown} tokens (rollout.prompt_length {int(prompt_length)}) + "
                   f"rollout.response_length {int(response_length)}")
        rows.append(PhaseRow("correction x~ + y^", shown + int(response_length), width, False, made_of))
        if joint_training:
            rows.append(PhaseRow("joint-training x~ + y^", shown + int(response_length), width, True, made_of))
    if masked_copies:
        rows.append(PhaseRow("masked copy", main, width, False, rows[0].origin))
    return tuple(rows)


def longest_trained(rows: tuple[PhaseRow, ...], remove_padding: bool) -> PhaseRow:
    """The trained row verl's micro-batcher measures longest (``rows`` from :func:`phase_rows`)."""
    return max((row for row in rows if row.trained), key=lambda row: row.measured(remove_padding))


def tokens_per_gpu(rows_per_micro_batch: int, main_row: int, longest_row: int, sp_size: int = 1) -> int:
    """A micro-batch token limit per GPU that fits by construction: room for ``rows_per_micro_batch`` main rows
    (``main_row`` tokens each: the launch scripts' sizing), and never less than the longest row needs,
    ``ceil(longest_row / sp_size)`` (verl multiplies the per-GPU limit by ``sp_size``)."""
    if min(rows_per_micro_batch, main_row, sp_size) < 1 or longest_row < 0:
        raise ValueError(f"rows_per_micro_batch={rows_per_micro_batch}, main_row={main_row} and sp_size={sp_size} "
                         f"must be >= 1, longest_row={longest_row} >= 0")
    return max(int(rows_per_micro_batch) * int(main_row), math.ceil(int(longest_row) / int(sp_size)))


def row_limit_shortfall(limit_per_gpu: int, sp_size: int, row: PhaseRow, remove_padding: bool) -> int:
    """Tokens by which ``row`` exceeds verl's micro-batch limit ``limit_per_gpu x sp_size`` (0: it fits)."""
    return max(0, row.measured(remove_padding) - int(limit_per_gpu) * int(sp_size))
