"""IBPO: Implicit Behavior Policy Optimization as pure functions (no Ray, no trainer).

Modules: ``config`` (validated options), ``references`` (Alg. 1 l.14-19), ``prompts`` (Eq. 13/28),
``alignment`` (App. C.2), ``budget`` (correction-prompt token budgets), ``shaping`` (Eq. 14-19), ``advantages`` (Eq. 8-9, 23), ``diagnostics``
(Theorem A.2, compute estimate), ``pipeline`` (a batch's steps B-C), ``counterfactual`` (counterfactual
importance weighting, docs/method_counterfactual.md), ``evaluation`` (avg@k, pass@k, bootstrap), ``grad_probe``
(per-sample policy-gradient variance), ``simulation`` (Theorem A.2 check with known ground truth),
``verl_plugin`` (verl registration).
"""

from ibpo.config import IBPOConfig, IBPOConfigError

__all__ = ["IBPOConfig", "IBPOConfigError"]
