"""The project's registrations in verl's registries, loaded by verl through the ``verl.plugins`` entry point:
IBPO's advantage estimator ``ibpo`` and its correction pass's agent loop ``ibpo_correction``.

verl imports every entry point of group ``verl.plugins`` inside ``import verl`` (verl/__init__.py) in
every process, including Ray workers, but logs a failing plugin only at DEBUG level. Call
:func:`assert_registered` wherever a missing registration must stop the run (the trainer does at start).

Plain ``python -m verl.trainer.main_ppo algorithm.adv_estimator=ibpo`` is refused (docs/method_ibpo.md, "Running
IBPO"): stock verl's trainer has no correction pass, so the estimator would group-normalise unshaped rewards
(Δ = 0) under IBPO's name. verl's ``compute_advantage`` hands the estimator only the rewards, the mask, the uids
and ``config.algorithm``; the IBPO trainers announce themselves through :func:`assert_registered` (called at
start in the process that computes advantages), and the registered estimator raises
:class:`IBPONeedsItsTrainer` when a run's algorithm config names ``ibpo`` and no IBPO trainer did.
"""

from __future__ import annotations

import functools
from types import ModuleType

from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from ibpo.advantages import compute_ibpo_outcome_advantage
from ibpo.correction_lengths import AGENT_LOOP_NAME

AGENT_LOOP_TARGET = "recipe.ibpo.correction.agent_loop.IBPOCorrectionAgentLoop"
AGENT_LOOP_MODULE = "verl.experimental.agent_loop.agent_loop"

ADV_ESTIMATOR_NAME = "ibpo"
HOW_TO_RUN_IBPO = (
    "algorithm.adv_estimator=ibpo needs the IBPO trainer, which runs the correction pass that shapes the reward "
    "(r' = r + λΔ); stock verl.trainer.main_ppo has none and would train plain group-normalised rewards under "
    "IBPO's name. Run `python -m recipe.main method=ibpo [overrides]` (or your own YAML with defaults "
    "[ppo_trainer, ibpo_blocks, _self_] and --config-path/--config-name, README 'Bring your own verl YAML'); "
    "for verl's plain estimator use algorithm.adv_estimator=grpo")

# Set by assert_registered(), which every IBPO trainer calls at start in the process computing advantages.
_ibpo_trainer_started = False


class IBPONeedsItsTrainer(RuntimeError):
    """``algorithm.adv_estimator=ibpo`` used by a trainer without IBPO's correction pass."""


def _is_run_config(config) -> bool:
    """Whether ``config`` is a run's ``algorithm`` block (verl's trainers pass it; a direct library call passes
    None or an empty mapping)."""
    try:
        return config is not None and config.get("adv_estimator") is not None
    except AttributeError:
        return getattr(config, "adv_estimator", None) is not None


@functools.wraps(compute_ibpo_outcome_advantage)
def ibpo_estimator(token_level_rewards, response_mask, index, config=None, **kwargs):
    """The registered ``ibpo`` estimator: :func:`ibpo.advantages.compute_ibpo_outcome_advantage`, refused
    (:class:`IBPONeedsItsTrainer`, :data:`HOW_TO_RUN_IBPO`) inside a run no IBPO trainer started."""
    if _is_run_config(config) and not _ibpo_trainer_started:
        raise IBPONeedsItsTrainer(HOW_TO_RUN_IBPO)
    return compute_ibpo_outcome_advantage(token_level_rewards, response_mask, index, config, **kwargs)


def register_agent_loop(module: ModuleType) -> None:
    """Add the ``ibpo_correction`` loop (:mod:`recipe.ibpo.correction.agent_loop`, the per-correction length
    bound of :mod:`ibpo.correction_lengths`) to verl's agent-loop registry (``module``: verl's agent_loop)."""
    module._agent_loop_registry.setdefault(AGENT_LOOP_NAME, {"_target_": AGENT_LOOP_TARGET})


def install_registration_hook() -> None:
    """Register the loop as soon as verl's agent-loop module is imported in this process (now if it already
    is): this module is imported in every process, the agent loop module only in some; hydra imports the
    class itself."""
    from verl_cpu.import_hooks import when_imported

    when_imported(AGENT_LOOP_MODULE, register_agent_loop)


# The registry raises if a *different* function is registered under the name, and this module is only
# imported once per process under this name, so the decorator is safe to apply at import.
register_adv_est(ADV_ESTIMATOR_NAME)(ibpo_estimator)
install_registration_hook()  # agent loop `ibpo_correction` (per-correction max_tokens), when verl's is imported


def assert_registered() -> None:
    """Raise ``RuntimeError`` unless verl's registry maps ``ibpo`` to our estimator. The IBPO trainers call it
    at start, which also marks this process as running one (the estimator refuses otherwise)."""
    global _ibpo_trainer_started
    fn = ADV_ESTIMATOR_REGISTRY.get(ADV_ESTIMATOR_NAME)
    if fn is not ibpo_estimator:
        raise RuntimeError(
            f"verl advantage estimator {ADV_ESTIMATOR_NAME!r} is not registered by ibpo-verl (found {fn!r}). "
            "Install the package (`pip install -e .`) so its `verl.plugins` entry point loads, and check that "
            "VERL_USE_EXTERNAL_PLUGINS is not 'none'."
        )
    _ibpo_trainer_started = True
