"""IBPO's checkpointed state (``ibpo_state.json`` beside verl's checkpoint): what a resumed run needs to go on
as if never stopped, the running λ_max of the ``theorem`` λ schedule and the cumulative compute and time
counters (curves against compute continue, they do not restart), with the options and group size it was
written under (a resumed run whose shaped reward would change stops, naming them). A file that is not what
:meth:`IBPORunState.state_dict` writes is refused naming the file and the field (:func:`check_state`)."""

from __future__ import annotations

import math
import os
from typing import Any

from compute_accounting.budget import ComputeBudgetError, check_saved_total
from ibpo.lambda_schedule import LambdaSchedule
from ibpo.options import IBPOConfig, option_changes, saved_options
from option_types import first_mistyped, matches, type_name
from recipe.common.step_io import ResumedStateError, json_kind, write_json_atomically

STATE_FILE = "ibpo_state.json"
# The file's fields: each a number >= 0 under a fixed name. time_totals, ibpo_options and rollout_n are absent from
# states written before they were stored (a resumed run then starts the time total at 0 and compares nothing).
STATE_TOTALS = {"compute_totals": ("total_tokens", "total_flops", "generated_tokens"),
                "time_totals": ("cumulative_step_s",)}
REQUIRED_FIELDS = ("lambda_schedule", "compute_totals")
STATE_FIELDS = (*REQUIRED_FIELDS, "time_totals", "ibpo_options", "rollout_n")
NOT_WRITTEN_BY_IBPO = ("it is not what the IBPO trainer writes: resume from a checkpoint the IBPO trainer wrote "
                       "(trainer.resume_from_path), or start a new run (trainer.resume_mode=disable)")


class IBPOResumeError(RuntimeError):
    """A resumed run's IBPO options differ from its checkpoint's (``ibpo.resume_allow_option_changes``)."""


class IBPOStateError(ResumedStateError):
    """``ibpo_state.json`` is not what the IBPO trainer writes (not an object, a field missing, unknown, of the
    wrong type or out of range): a resumed run would continue from garbage."""


def _refuse(path: str, problem: str) -> IBPOStateError:
    return IBPOStateError(f"{path}: {problem}; {NOT_WRITTEN_BY_IBPO}")


def _check_keys(path: str, name: str, value: Any, expected: tuple[str, ...], required: tuple[str, ...]) -> None:
    """``value`` (the field ``name``, or the file itself when ``name`` is empty) is an object holding only the
    keys ``expected``, all of ``required`` among them."""
    what = name or "the file"
    if not isinstance(value, dict):
        raise _refuse(path, f"{what} is a JSON {json_kind(value)}, not an object")
    unknown = sorted(set(value) - set(expected))
    if unknown:
        raise _refuse(path, f"unknown field(s) {[f'{name}.{k}' if name else k for k in unknown]} in {what} "
                            f"(known: {list(expected)})")
    missing = [f"{name}.{k}" if name else k for k in required if k not in value]
    if missing:
        raise _refuse(path, f"{what} lacks {missing}")


def _check_total(path: str, name: str, value: Any) -> None:
    """A running total: a finite number >= 0 (a bool or a numeric string is not one; :func:`check_saved_total`)."""
    try:
        check_saved_total(name, value)
    except ComputeBudgetError as error:
        raise _refuse(path, str(error)) from None


def check_state(state: Any, path: str) -> None:
    """Refuse (:class:`IBPOStateError`, naming ``path`` and the field) a state that is not what
    :meth:`IBPORunState.state_dict` writes: what the JSON file at ``path`` holds."""
    _check_keys(path, "", state, STATE_FIELDS, REQUIRED_FIELDS)
    _check_keys(path, "lambda_schedule", state["lambda_schedule"], ("running_lambda_max",), ("running_lambda_max",))
    running = state["lambda_schedule"]["running_lambda_max"]  # None: no step has estimated λ_max yet
    if running is not None and not (matches(running, float) and math.isfinite(running) and running >= 0):
        raise _refuse(path, f"lambda_schedule.running_lambda_max={running!r} must be null or a finite number >= 0 "
                            "(an average of λ_max = 2C/V_φ > 0)")
    for name, keys in STATE_TOTALS.items():
        if name in state:
            _check_keys(path, name, state[name], keys, keys)
            for key in keys:
                _check_total(path, f"{name}.{key}", state[name][key])
    if "rollout_n" in state and not (matches(state["rollout_n"], int) and state["rollout_n"] >= 1):
        raise _refuse(path, f"rollout_n={state['rollout_n']!r} must be an int >= 1 (the group size G)")
    if "ibpo_options" in state:
        if not isinstance(state["ibpo_options"], dict):
            raise _refuse(path, f"ibpo_options is a JSON {json_kind(state['ibpo_options'])}, not an object")
        wrong = first_mistyped(state["ibpo_options"], IBPOConfig)
        if wrong is not None:
            raise _refuse(path, f"ibpo_options.{wrong.name}={wrong.value!r} has type {type(wrong.value).__name__}; "
                                f"expected {type_name(wrong.annotation)}")


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

    def load_state_dict(self, state: Any, path: str, global_step: int) -> None:
        """Continue from a checkpoint's state (refused by :func:`check_state` unless it is what
        :meth:`state_dict` writes); a resumed run whose ibpo options or group size G differ from the
        checkpoint's stops naming them (the shaped reward would change mid-run) unless
        ``ibpo.resume_allow_option_changes``. A state written before the options were stored is not compared."""
        check_state(state, path)
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
