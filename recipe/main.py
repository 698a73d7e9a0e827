"""``python -m recipe.main method=<name> [hydra overrides]``: the launcher of every registered method
(:mod:`recipe.common.main`)."""

from recipe.common.main import main

if __name__ == "__main__":
    main()
