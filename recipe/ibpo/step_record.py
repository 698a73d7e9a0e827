"""What one IBPO step carries from hook to hook, as one typed record kept on the trainer for the step
(:class:`IBPOStep`): the correction pass's result, the λ the step shapes with, IBPO's per-row state of the
training batch and the extra forward rows the step's compute count needs.

Why the per-row state also rides in the batch, once. verl's ``_balance_batch`` reorders the rows between the
correction pass (``_after_generation``) and the reward (``_shape_rewards``), so Δ, the token mask and the row
kinds travel as batch keys through that one stretch (``recipe.ibpo.correction.batch``) and are read back once,
in the first hook after the reorder, into :class:`recipe.ibpo.correction.batch.IBPORows`; every later hook
(the advantage, the metrics, the gradient probe, the compute count) reads the record."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from verl import DataProto

from recipe.ibpo.correction.batch import CorrectionPass, IBPORows


@dataclass
class IBPOStep:
    """One training step's IBPO state (module docstring), made fresh by ``_before_generation``."""

    lam: float  # the λ this step shapes with (the schedule's value when the reward is shaped)
    started: float = field(default_factory=time.perf_counter)  # the main generation's start (perf_counter)
    correction: CorrectionPass | None = None  # this step's correction pass; None: none ran (ibpo.enable=false)
    rows: IBPORows | None = None  # the training batch's per-row state, in its final order (from _shape_rewards)
    grad_probe_lengths: list[int] = field(default_factory=list)  # valid tokens of the gradient probe's rows
    # the requests generated only to pad the correction pass to the agent-loop workers (then dropped): work too
    generation_padding: list[DataProto] = field(default_factory=list)

    def batch_rows(self) -> IBPORows:
        """The per-row state; a hook that needs it before ``_shape_rewards`` read it is a bug, said here."""
        if self.rows is None:
            raise RuntimeError("IBPO's per-row state is read from the batch in _shape_rewards, after verl's "
                               "reorder; this hook ran before it")
        return self.rows
