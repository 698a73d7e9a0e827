"""The counterfactual importance-weighting method (docs/method_counterfactual.md), all of it that touches verl:
``method`` (its registration with the launcher), ``counterfactual_trainer`` (the trainer), ``batch`` (verl's
``DataProto`` in and out of the pure math of the top-level ``counterfactual`` package), ``config/`` (its Hydra
config and generated option block) and its launch scripts. Run with ``python -m recipe.main method=counterfactual``."""
