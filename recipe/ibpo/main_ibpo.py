"""``python -m recipe.ibpo.main_ibpo [hydra overrides]``: the launcher (:mod:`recipe.common.main`) with
``method=ibpo`` as its default, kept so existing scripts and configs run unchanged
(``--config-name=counterfactual_trainer`` or ``method=counterfactual`` still picks that method)."""

from recipe.common.main import main

if __name__ == "__main__":
    main(default_method="ibpo")
