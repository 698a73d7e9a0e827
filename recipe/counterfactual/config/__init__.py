"""The counterfactual method's Hydra config (``counterfactual_trainer.yaml``) and its generated option block."""
