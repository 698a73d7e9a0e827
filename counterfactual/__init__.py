"""Counterfactual importance weighting (``docs/method_counterfactual.md``): mask reasoning spans, measure the
drop in the policy's log-probability of the answer, weight the tokens of the policy-gradient loss.

``importance`` holds the math (pure functions on token ids and tensors, no verl); the glue between verl's
``DataProto`` and that math is the method's recipe, ``recipe/counterfactual/batch.py``.
"""

from counterfactual.importance import CounterfactualConfig, CounterfactualConfigError

__all__ = ["CounterfactualConfig", "CounterfactualConfigError"]
