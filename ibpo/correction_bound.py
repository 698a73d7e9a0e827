"""The per-correction length bound: max_tokens = ⌈c·|y|⌉ + closing tokens for the correction of target y.

A correction that is a local repair is about as long as its target; without a bound every correction may
run to ``data.max_response_length`` and the slowest sets the correction pass's wall time. The bound is
*not* exact for IBPO (docs/correction_pass.md, "Length bound"): Eq. 18 keeps a correction as shaped when
d(y, ŷ) <= α or d(y, ŷ) <= d(ŷ, y_ref), so a long correction can still be shaped; a cut one is verified
as it is (usually wrong, so Δ = 0) and, under joint training, trained on as a truncated sample.

How a request carries its bound through the pinned verl without forking it: verl's agent loop passes every
``non_tensor_batch`` column of a row to its agent loop as a keyword (``agent_loop.py:645``) and picks the
loop by the row's ``agent_name`` column. The correction rows name the ``ibpo_correction`` loop
(``recipe.ibpo.correction_agent_loop``, verl's single-turn loop that copies the row's ``ibpo_max_tokens``
into ``sampling_params["max_tokens"]``), which both verl's vLLM server and the CPU ``hf`` server honour
(``vllm_async_server.py:601``, ``verl_cpu/hf_rollout.resolve_max_tokens``); the ``verl.plugins`` entry point
(``recipe.verl_plugin``) registers the name. This module holds the arithmetic and the names, no verl.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

AGENT_LOOP_NAME = "ibpo_correction"
MAX_TOKENS_KEY = "ibpo_max_tokens"  # non_tensor_batch column: the row's max_tokens (0: the rollout's own)


def correction_max_tokens(target_tokens: int, factor: float, closing_tokens: int, response_length: int) -> int:
    """⌈c·|y|⌉ + closing tokens, capped at the rollout's ``response_length`` (``factor <= 0``: no bound,
    ``response_length``). At least 1 (vLLM rejects max_tokens < 1)."""
    if response_length < 1:
        raise ValueError(f"response_length must be >= 1, got {response_length}")
    if factor <= 0:
        return int(response_length)
    return int(max(1, min(response_length, math.ceil(factor * target_tokens) + closing_tokens)))


def bounded_lengths(target_lengths: Sequence[int], factor: float, closing_tokens: int,
                    response_length: int) -> np.ndarray:
    """:func:`correction_max_tokens` of every target length."""
    return np.array([correction_max_tokens(int(n), factor, closing_tokens, response_length)
                     for n in target_lengths], dtype=np.int64)


__all__ = ["AGENT_LOOP_NAME", "MAX_TOKENS_KEY", "bounded_lengths", "correction_max_tokens"]
