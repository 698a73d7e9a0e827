"""verl registrations of the IBPO package, loaded by verl through the ``verl.plugins`` entry point.

verl imports every entry point of group ``verl.plugins`` inside ``import verl`` (verl/__init__.py) in
every process, including Ray workers, but logs a failing plugin only at DEBUG level. Call
:func:`assert_registered` wherever a missing registration must stop the run (the trainer does at start).
"""

from __future__ import annotations

from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from ibpo.advantages import compute_ibpo_outcome_advantage
from ibpo.correction_bound import install_registration_hook

ADV_ESTIMATOR_NAME = "ibpo"

# The registry raises if a *different* function is registered under the name, and this module is only
# imported once per process under this name, so the decorator is safe to apply at import.
register_adv_est(ADV_ESTIMATOR_NAME)(compute_ibpo_outcome_advantage)
install_registration_hook()  # agent loop `ibpo_correction` (per-correction max_tokens), when verl's is imported


def assert_registered() -> None:
    """Raise ``RuntimeError`` unless verl's registry maps ``ibpo`` to our estimator."""
    fn = ADV_ESTIMATOR_REGISTRY.get(ADV_ESTIMATOR_NAME)
    if fn is not compute_ibpo_outcome_advantage:
        raise RuntimeError(
            f"verl advantage estimator {ADV_ESTIMATOR_NAME!r} is not registered by ibpo-verl (found {fn!r}). "
            "Install the package (`pip install -e .`) so its `verl.plugins` entry point loads, and check that "
            "VERL_USE_EXTERNAL_PLUGINS is not 'none'."
        )
