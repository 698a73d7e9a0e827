"""IBPO's checkpointed state (``ibpo_state.json`` beside verl's checkpoint): what a resumed run needs to go on
as if never stopped, the running λ_max of the ``theorem`` λ schedule and the cumulative compute and time
counters (curves against compute continue, they do not restart), with the options and group size it was
written under (a resumed run whose shaped reward would change stops, naming them)."""

from __future__ import annotations

import os

from ibpo.lambda_schedule import LambdaSchedule
from ibpo.options import IBPOConfig, option_changes, saved_options
from recipe.common.trainer_base import write_json_atomically

STATE_FILE = "ibpo_state.json"


class IBPOResumeError(RuntimeError):
    """A resumed run's IBPO options differ from its checkpoint's (``ibpo.resume_allow_option_changes``)."""


class IBPORunState:
    """The λ schedule and the running totals of one run, saved and restored with its checkpoints."""

    def __init__(self, ibpo: IBPOConfig, group_size: int) -> None:
        self.ibpo, self.group_size = ibpo, int(group_size)
        self.lambda_schedule = LambdaSchedule(ibpo.lambda_schedule, ibpo.lam, ibpo.lambda_max_fraction,
                                              ibpo.lambda_max_momentum)
        self.compute_totals = {"total_tokens": 0.0, "total_flops": 0.0, "generated_tokens": 0.0}
        self.time_totals = {"cumulative_step_s": 0.0}

    def state_dict(self, step_seconds_so_far: float = 0.0) -> dict:
        """The state as saved (``step_seconds_so_far``: the seconds of a step still running, counted in)."""
        return {"lambda_schedule": self.lambda_schedule.state_dict(), "compute_totals": dict(self.compute_totals),
                "time_totals": {"cumulative_step_s": self.time_totals["cumulative_step_s"] + step_seconds_so_far},
                "ibpo_options": saved_options(self.ibpo), "rollout_n": self.group_size}

    def write(self, folder: str, step_seconds_so_far: float = 0.0) -> None:
        """Write ``ibpo_state.json`` atomically (a crash mid-write leaves the previous file, never half)."""
        write_json_atomically(os.path.join(folder, STATE_FILE), self.state_dict(step_seconds_so_far))

    def load_state_dict(self, state: dict, path: str, global_step: int) -> None:
        """Continue from a checkpoint's state; a resumed run whose ibpo options or group size G differ from the
        checkpoint's stops naming them (the shaped reward would change mid-run) unless
        ``ibpo.resume_allow_option_changes``. A state written before the options were stored is not compared."""
        changes = option_changes(state["ibpo_options"], self.ibpo) if "ibpo_options" in state else []
        saved_n = state.get("rollout_n")
        if saved_n is not None and saved_n != self.group_size:
            changes.append(("actor_rollout_ref.rollout.n (G)", saved_n, self.group_size))
        if changes:
            listed = ", ".join(f"{name if '.' in name else 'ibpo.' + name}: {old!r} -> {new!r}"
                               for name, old, new in changes)
            if not self.ibpo.resume_allow_option_changes:
                raise IBPOResumeError(
                    f"resuming at step {global_step} from {path} with changed options ({listed}): the shaped "
                    "reward would change mid-run. Resume with the checkpoint's options, start a new run "
                    "(trainer.resume_mode=disable), or set ibpo.resume_allow_option_changes=true")
            print(f"[ibpo] resuming at step {global_step} with changed options: {listed}", flush=True)
        self.lambda_schedule.load_state_dict(state["lambda_schedule"])
        self.compute_totals.update(state["compute_totals"])
        self.time_totals.update(state.get("time_totals", {}))
