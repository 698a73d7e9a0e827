"""``python -m recipe.ibpo.main_ibpo [hydra overrides]``: an **alias** of the one launcher,
``python -m recipe.main method=ibpo [hydra overrides]`` (:mod:`recipe.common.main`), kept so that installs and
scripts written before it keep running (``--config-name=counterfactual_trainer`` or ``method=counterfactual``
still picks that method). It says so on stderr at start; new scripts call ``python -m recipe.main method=<name>``."""

import sys

from recipe.common.main import main

if __name__ == "__main__":
    print("[recipe] note: recipe.ibpo.main_ibpo is an alias of `python -m recipe.main method=ibpo`; call that",
          file=sys.stderr, flush=True)
    main(default_method="ibpo")
