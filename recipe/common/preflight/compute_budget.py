"""The ``compute_budget:`` block every method's run may carry (``compute_accounting.budget``): its declared types and
its validation against the run's validation schedule. Read by the pre-flight and by
``recipe.common.trainer_base.HookedRayPPOTrainer`` (the budget is the same for every method)."""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, OmegaConf

from compute_accounting.budget import ComputeBudgetConfig, check_validation_schedule
from compute_accounting.gpu_time import GpuTimeCoefficients, resolve_coefficients
from option_types import matches
from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.model import model_serving_shape
from recipe.common.preflight.option_types import check_option_types


def check_compute_budget_types(config: DictConfig) -> None:
    """The declared types of the ``compute_budget:`` block, if present, before the config is resolved."""
    if config.get("compute_budget") is not None:
        check_option_types(OmegaConf.to_container(config.compute_budget, resolve=False), ComputeBudgetConfig,
                           "compute_budget")


def compute_budget_from(config: DictConfig) -> ComputeBudgetConfig:
    """The validated ``compute_budget:`` block every method's trainer reads (``compute_accounting.budget``; a config
    without the block has no budget), checked against ``trainer.test_freq`` (validation follows the budget)."""
    block = config.get("compute_budget")
    options = {} if block is None else OmegaConf.to_container(block, resolve=True)
    check_option_types(options, ComputeBudgetConfig, "compute_budget")
    budget = ComputeBudgetConfig.from_mapping(options)
    check_validation_schedule(budget, config.trainer.get("test_freq", -1))
    return budget


def gpu_time_coefficients(config: DictConfig, budget: ComputeBudgetConfig) -> GpuTimeCoefficients | None:
    """What prices the run's modelled GPU seconds (``compute_accounting.gpu_time``): ``compute_budget.cost_model``
    resolved, ``roofline:<GPU>`` or ``measured:<GPU>`` with the run's own model shape (:func:`model_serving_shape`;
    a measurement at another shape is refused, as is a bench JSON measured at another shape). An unknown GPU or
    a missing or malformed JSON fails naming the option. A model whose shape the roofline cannot read fails only
    when the budget is in ``modelled_gpu_seconds``; otherwise the run goes on without the modelled seconds
    (None, said once)."""
    spec = budget.cost_model
    model_path = OmegaConf.select(config, "actor_rollout_ref.model.path")
    needs_shape = spec.startswith(("roofline:", "measured:"))
    try:
        if needs_shape and model_path is None:
            raise SetupError(f"actor_rollout_ref.model.path is unset: {spec} needs the run's model shape")
        shape = model_serving_shape(str(model_path)) if needs_shape else None
    except SetupError as exc:
        if budget.unit == "modelled_gpu_seconds":
            raise
        print(f"[recipe] note: no modelled GPU seconds for this run: {exc}", flush=True)
        return None
    if shape is None and model_path is not None:  # a bench JSON names the shape it measured: check it if we can
        try:
            shape = model_serving_shape(str(model_path))
        except SetupError:
            shape = None
    try:
        coeff = resolve_coefficients(spec, shape)
    except ValueError as exc:
        raise SetupError(f"compute_budget.cost_model={spec!r}: {exc}") from None
    return with_runs_batch_cap(coeff, OmegaConf.select(config, "actor_rollout_ref.rollout.max_num_seqs"))


def with_runs_batch_cap(coeff: GpuTimeCoefficients, max_num_seqs: object) -> GpuTimeCoefficients:
    """``coeff`` decoding in waves of the run's own vLLM batch cap (``actor_rollout_ref.rollout.max_num_seqs``),
    when it sets one: a run that raises the cap decodes more requests per pass than the coefficients' 256 (verl's
    rollout default) would price. A cap that is not an integer >= 1 fails naming the option."""
    if max_num_seqs is None or max_num_seqs == coeff.max_num_seqs:
        return coeff
    if not matches(max_num_seqs, int) or max_num_seqs < 1:
        raise SetupError(f"actor_rollout_ref.rollout.max_num_seqs={max_num_seqs!r} must be an integer >= 1")
    sources = {**coeff.sources, "max_num_seqs": "the run's actor_rollout_ref.rollout.max_num_seqs"}
    return dataclasses.replace(coeff, max_num_seqs=max_num_seqs, sources=sources)
