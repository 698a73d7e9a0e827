"""IBPO: Implicit Behavior Policy Optimization as pure functions (no Ray, no trainer, no verl).

Modules: ``options`` (the validated ``ibpo:`` options), ``references`` (Alg. 1 l.14-19), ``prompts``
(Eq. 13/28), ``alignment`` (App. C.2), ``shaping`` (Eq. 14-19), ``variants`` (the shaping variants'
registry), ``advantages`` (Eq. 8-9, 23), ``pipeline`` (a batch's steps B-C), ``diagnostics`` (Theorem A.2
statistics), ``lambda_schedule`` (λ per step), ``mechanism`` (what group normalisation does to the shaping),
``correction_lengths`` (the correction pass's token lengths: prompt budgets, per-correction max_tokens),
``prefix_sharing`` (prefix-cache proxy), ``lookup_decoding`` (draft-free speculation replayed), ``minibatch``
(actor updates under joint training), ``grad_probe`` (per-sample policy-gradient variance),
``first_divergence`` (localisation without a correction: where the policy, shown the reference, first departs
from the wrong response; beyond the paper). Compute accounting, shared by every method, is the package
``compute_accounting``.
"""

from ibpo.options import IBPOConfig, IBPOConfigError

__all__ = ["IBPOConfig", "IBPOConfigError"]
