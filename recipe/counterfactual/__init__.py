"""The counterfactual importance-weighting method's verl recipe (``counterfactual_trainer``); its math and
DataProto glue are the top-level ``counterfactual`` package; its Hydra config is launched through
``recipe.ibpo.main_ibpo --config-name=counterfactual_trainer`` (docs/method_counterfactual.md)."""
