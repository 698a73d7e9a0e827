"""One compute budget for every arm (paper App. B: methods compared at matched GPU time; Table 1: FLOPs).

The ``compute_budget:`` block (``recipe/common/config/compute_budget_block.yaml``, generated from
:class:`ComputeBudgetConfig`) is read by every method's trainer (``recipe.common.trainer_base``): IBPO, the
GSPO baseline through the IBPO loop, and counterfactual weighting. With ``limit > 0`` a run stops when its
cumulative compute reaches ``limit`` (in ``unit``), whatever ``trainer.total_training_steps`` (then only a cap),
and validates when it crosses each of ``val_fractions``.

The ledger (:class:`ComputeLedger`) counts both units every step, budget or not:

- ``flops``: the step's FLOPs from the project's counter (``compute_accounting.flops.step_flops``: both generations, the
  old-log-prob / reference forwards, the actor update, the counterfactual forwards, the gradient probe);
- ``gpu_seconds``: the step's wall seconds (verl's ``step`` timer: generation to weight sync, checkpoint
  saving included, validation excluded) times the GPUs of the run's resource pool;
- ``modelled_gpu_seconds``: the step's GPU seconds as the cost model of ``compute_accounting.gpu_time`` prices
  its work (decode passes, prefill tokens, speculative verification, training tokens, weight sync; every
  coefficient names its source: a measured bench row or a roofline), times the GPUs the coefficients are for
  (``GpuTimeCoefficients.gpus``: the model prices the whole step's work on that many GPUs). Unlike wall time it
  does not move with machine load; unlike FLOPs it prices a prefilled prompt or a copied token as a GPU does.

**When a run stops.** verl's loop decides that a step is the last before the step runs (``is_last_step``), so
the decision is a prediction: after step k the ledger asks whether the next step, costing what step k cost,
would reach the limit (``spent_k + cost_k >= limit``); if so step k+1 is the last one (it validates and saves
as verl's last step does). Hence, with ``K`` the last step: the run never starts a step once the budget is
spent unless a single step outgrew the one before it by more than the budget that was left, and the final
spend overshoots the limit by less than one step (``spent_K - limit < cost_K``); it falls short only when the
last step cost less than the one before it, by at most the difference. The metric
``compute_budget/overshoot`` records the final ``spent - limit`` in the unit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from option_types import matches, mistyped_field

UNITS = ("flops", "gpu_seconds", "modelled_gpu_seconds")
METRIC_PREFIX = "compute_budget/"
# the cumulative counter of each unit, as logged: the axis curves of budget-matched runs are drawn on
SPENT_METRIC = {unit: f"compute_budget/{unit}" for unit in UNITS}
# the budget itself, logged every step of a budgeted run: its presence names the axis the runs were matched on
LIMIT_METRIC = {unit: f"compute_budget/limit_{unit}" for unit in UNITS}
# the fields of a checkpoint's compute_budget_state.json (ComputeLedger.state_dict); modelled_gpu_seconds and method
# are absent from states written before they were stored (read as 0, and not compared)
LEDGER_FIELDS = ("flops", "gpu_seconds", "modelled_gpu_seconds", "steps", "last_cost", "validated", "budget",
                 "method")
OPTIONAL_LEDGER_FIELDS = ("modelled_gpu_seconds", "method")


class ComputeBudgetError(ValueError):
    """A ``compute_budget`` option is unknown or out of range."""


@dataclass(frozen=True)
class ComputeBudgetConfig:
    """The ``compute_budget:`` options (module docstring), validated at construction."""

    limit: float = field(default=0.0, metadata={
        "doc": "stop the run when its cumulative compute reaches this many `unit`s (the last step is predicted from "
               "the step before; overshoot < one step: compute_accounting/budget.py). 0: no budget, the run stops at "
               "trainer.total_training_steps (with a budget that is only a cap, and the length of verl's lr schedule)"})
    unit: str = field(default="flops", metadata={
        "doc": "flops: the project's FLOP counter (compute_accounting/flops.py; Table 1's caption) | gpu_seconds: the step's "
               "wall seconds x the run's GPUs (App. B: GPU time; validation not counted) | modelled_gpu_seconds: the "
               "GPU-time cost model of compute_accounting/gpu_time.py (per phase: decode passes, prefill, speculation, "
               "training, weight sync) x the GPUs its coefficients are for"})
    cost_model: str = field(default="roofline:H100-SXM", metadata={
        "doc": "what prices modelled_gpu_seconds (compute_accounting/gpu_time.py): roofline:<GPU> (H100-SXM | H200; "
               "data-sheet peaks, the run's model shape), measured:<GPU> (coefficients measured by "
               "lab/scripts/bench_gpu.py, shipped in compute_accounting/measured/: H200 at Qwen3-1.7B's shape; another "
               "shape is refused) or "
               "the path of a lab/scripts/bench_gpu.py JSON; logged every step whatever the unit"})
    val_fractions: tuple[float, ...] = field(default=(0.25, 0.5, 0.75, 1.0), metadata={
        "doc": "with a budget, validate when the spend first reaches each fraction of `limit` (and at the last "
               "step, if the last fraction was not reached), logged against compute_budget/<unit>; [] never "
               "validates; replaces trainer.test_freq, which must be <= 0"})

    def __post_init__(self) -> None:
        wrong = mistyped_field(self)  # limit=True is not a budget of 1, val_fractions="0.5" not a list
        if wrong is not None:
            raise ComputeBudgetError(wrong.message("compute_budget"))
        if self.unit not in UNITS:
            raise ComputeBudgetError(f"compute_budget.unit={self.unit!r} must be one of {list(UNITS)}")
        if not (self.limit >= 0.0) or self.limit == float("inf"):
            raise ComputeBudgetError(f"compute_budget.limit={self.limit!r} must be a finite number >= 0 (0: no budget)")
        fracs = tuple(float(f) for f in self.val_fractions)
        if any(not (0.0 < f <= 1.0) for f in fracs) or list(fracs) != sorted(set(fracs)):
            raise ComputeBudgetError(f"compute_budget.val_fractions={list(self.val_fractions)!r} must be increasing, "
                                     "distinct, each in (0, 1]")
        object.__setattr__(self, "val_fractions", fracs)
        kind, sep, rest = self.cost_model.partition(":")
        if not ((kind in ("roofline", "measured") and sep and rest) or (not sep and self.cost_model.endswith(".json"))):
            raise ComputeBudgetError(f"compute_budget.cost_model={self.cost_model!r} must be roofline:<GPU>, "
                                     "measured:<GPU> or the path of a lab/scripts/bench_gpu.py JSON")

    @property
    def enabled(self) -> bool:
        return self.limit > 0.0

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> "ComputeBudgetConfig":
        """Build from a plain mapping (``OmegaConf.to_container(config.compute_budget)``); unknown keys fail."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ComputeBudgetError(f"unknown compute_budget option(s) {unknown}; known options: {sorted(known)}")
        if options.get("val_fractions") is not None:
            options["val_fractions"] = tuple(options["val_fractions"])
        return cls(**options)

    def replace(self, **changes: Any) -> "ComputeBudgetConfig":
        return dataclasses.replace(self, **changes)


def check_validation_schedule(budget: ComputeBudgetConfig, test_freq: int) -> None:
    """With a budget, validation follows its fractions; a step-count schedule beside it is refused."""
    if budget.enabled and int(test_freq) > 0:
        raise ComputeBudgetError(
            f"trainer.test_freq={test_freq} validates every {test_freq} steps, but compute_budget.limit={budget.limit:g} "
            f"validates at compute_budget.val_fractions={list(budget.val_fractions)} of the budget, the same points "
            "for every arm: set trainer.test_freq=-1")


@dataclass
class ComputeLedger:
    """Cumulative compute of a run in both units, and the budget decisions (module docstring)."""

    budget: ComputeBudgetConfig
    flops: float = 0.0
    gpu_seconds: float = 0.0
    modelled_gpu_seconds: float = 0.0
    steps: int = 0
    last_cost: float = 0.0  # the last step's cost in the budget's unit
    validated: int = 0  # how many of budget.val_fractions have been validated
    # the run's ``method:`` (None: a config without one); every method's trainer writes this file, so it is what
    # tells one method's checkpoint from another's (a counterfactual one resumed as IBPO, or the reverse)
    method: str | None = None

    def spent(self) -> float:
        return float(getattr(self, self.budget.unit))

    def add_step(self, flops: float, gpu_seconds: float, modelled_gpu_seconds: float = 0.0) -> None:
        """Count one step's cost in every unit; a cost that is not a finite number >= 0 fails, naming its unit
        (a NaN spend never reaches the limit: the run would go on to ``trainer.total_training_steps``)."""
        cost = {"flops": float(flops), "gpu_seconds": float(gpu_seconds),
                "modelled_gpu_seconds": float(modelled_gpu_seconds)}
        for unit, value in cost.items():
            check_spend(f"the step's {unit}", value)
        for unit, value in cost.items():
            setattr(self, unit, getattr(self, unit) + value)
        self.steps += 1
        self.last_cost = cost[self.budget.unit]

    def next_step_is_last(self) -> bool:
        """After a step: would the next one, costing what this one did, reach the limit (or is it spent)?"""
        return self.budget.enabled and self.spent() + self.last_cost >= self.budget.limit

    def validation_due(self, is_last_step: bool) -> bool:
        """Whether to validate now: the spend crossed the next fraction not yet validated, or this is the run's
        last step and its final fraction is not validated yet. Marks the crossed fractions as done."""
        if not self.budget.enabled:
            return False
        crossed = sum(1 for f in self.budget.val_fractions if self.spent() >= f * self.budget.limit)
        due = crossed > self.validated or (is_last_step and self.validated < len(self.budget.val_fractions))
        self.validated = len(self.budget.val_fractions) if is_last_step else max(self.validated, crossed)
        return due

    def metrics(self) -> dict[str, float]:
        out = {SPENT_METRIC[unit]: float(getattr(self, unit)) for unit in UNITS}
        if self.budget.enabled:
            out[LIMIT_METRIC[self.budget.unit]] = self.budget.limit
            out[METRIC_PREFIX + "fraction"] = self.spent() / self.budget.limit
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"flops": self.flops, "gpu_seconds": self.gpu_seconds,
                "modelled_gpu_seconds": self.modelled_gpu_seconds, "steps": self.steps,
                "last_cost": self.last_cost, "validated": self.validated,
                "budget": dataclasses.asdict(self.budget), "method": self.method}

    def load_state_dict(self, state: Mapping[str, Any], source: str = "the checkpoint") -> None:
        """Continue from what :meth:`state_dict` wrote (``source``: the file it was read from, named by every
        refusal). A field missing (but ``modelled_gpu_seconds`` and ``method``, absent in older checkpoints), unknown,
        of the wrong type (a bool, a numeric string) or out of range is refused, and so is a budget other than this
        run's and a state another method wrote (a state without ``method`` is not compared)."""
        def refuse(problem: str) -> ComputeBudgetError:
            return ComputeBudgetError(f"{source}: {problem}; it is not what this recipe's trainer writes: resume "
                                      "from a checkpoint it wrote, or start a new run (trainer.resume_mode=disable)")

        unknown = sorted(set(state) - set(LEDGER_FIELDS))
        missing = [key for key in LEDGER_FIELDS if key not in state and key not in OPTIONAL_LEDGER_FIELDS]
        if unknown or missing:
            raise refuse(f"unknown field(s) {unknown}, missing field(s) {missing} (known: {list(LEDGER_FIELDS)})")
        self._check_method(state.get("method", self.method), source, refuse)
        saved = state["budget"]
        if not (isinstance(saved, Mapping) and matches(saved.get("limit"), float)
                and isinstance(saved.get("unit"), str)):
            raise refuse(f"budget={saved!r} is not a compute_budget block (a number limit and a str unit)")
        if (saved["unit"], float(saved["limit"])) != (self.budget.unit, self.budget.limit):
            raise ComputeBudgetError(
                f"resuming with compute_budget limit={self.budget.limit:g} unit={self.budget.unit} but {source} "
                f"was written under limit={saved.get('limit')} unit={saved.get('unit')}: a budget-matched comparison "
                "needs one budget for the whole run; resume with the checkpoint's budget")
        spent = {key: state.get(key, 0.0) for key in ("flops", "gpu_seconds", "last_cost", "modelled_gpu_seconds")}
        for key, value in spent.items():
            try:
                check_saved_total(key, value)
            except ComputeBudgetError as error:
                raise refuse(str(error)) from None
        for key in ("steps", "validated"):
            if not (matches(state[key], int) and state[key] >= 0):
                raise refuse(f"{key}={state[key]!r} must be an int >= 0")
        for key, value in spent.items():
            setattr(self, key, float(value))
        self.steps, self.validated = int(state["steps"]), int(state["validated"])

    def _check_method(self, saved: Any, source: str, refuse: Callable[[str], ComputeBudgetError]) -> None:
        """The method that wrote the state (``saved``) is this run's: another method's checkpoint holds weights and
        totals trained by another loss, and its own state file (``ibpo_state.json``) would be missing or ignored."""
        if saved is not None and not isinstance(saved, str):
            raise refuse(f"method={saved!r} has type {type(saved).__name__}; expected str or null")
        if saved != self.method:
            raise ComputeBudgetError(
                f"{source}: written by method={saved} but this run is method={self.method}: a checkpoint resumes "
                f"only as the method that wrote it. Resume from a checkpoint method={self.method} wrote "
                "(trainer.resume_from_path), or start a new run (trainer.resume_mode=disable)")


def check_spend(what: str, value: float) -> float:
    """``value`` when it is a finite number >= 0, else a :class:`ComputeBudgetError` naming ``what``."""
    if not (math.isfinite(value) and value >= 0.0):
        raise ComputeBudgetError(f"{what} = {value!r}: a compute cost must be a finite number >= 0")
    return value


def check_saved_total(what: str, value: Any) -> float:
    """A running total read back from a checkpoint's JSON: a number (a bool or a numeric string is not one) that
    :func:`check_spend` accepts, as a float; else a :class:`ComputeBudgetError` naming ``what``."""
    if not matches(value, float):
        raise ComputeBudgetError(f"{what}={value!r} has type {type(value).__name__}; expected float")
    return check_spend(what, float(value))


def matched_axis(records_keys: set[str]) -> str | None:
    """The cumulative counter a budgeted run was matched on (``compute_budget/<unit>``), from the metric keys
    its log holds (the ``compute_budget/limit_<unit>`` key names the unit); None for a run without a budget."""
    found = [unit for unit in UNITS if LIMIT_METRIC[unit] in records_keys]
    return SPENT_METRIC[found[0]] if len(found) == 1 else None
