"""verl's single-turn agent loop with a per-request ``max_tokens`` (the correction pass's length bound).

Imported by hydra inside verl's agent-loop workers when a row names ``agent_name = "ibpo_correction"``
(``recipe.ibpo.verl_plugin`` registers the name). The row's ``ibpo_max_tokens`` column arrives here as a
keyword (verl passes every non-tensor column of the row); a positive value becomes the request's
``sampling_params["max_tokens"]``, which verl's vLLM server and the CPU ``hf`` server use instead of
``rollout.response_length``. Everything else is verl's ``SingleTurnAgentLoop``.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from ibpo.correction_lengths import MAX_TOKENS_KEY


def with_max_tokens(sampling_params: dict[str, Any], max_tokens: Any) -> dict[str, Any]:
    """A copy of ``sampling_params`` with ``max_tokens`` set when the row carries a positive bound
    (0 or None: the rollout's own ``response_length`` applies)."""
    params = dict(sampling_params)
    if max_tokens is not None and int(max_tokens) > 0:
        params["max_tokens"] = int(max_tokens)
    return params


class IBPOCorrectionAgentLoop(SingleTurnAgentLoop):
    """Single-turn generation whose ``max_tokens`` comes from the row's ``ibpo_max_tokens``."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        max_tokens = kwargs.pop(MAX_TOKENS_KEY, None)
        return await super().run(with_max_tokens(sampling_params, max_tokens), **kwargs)
