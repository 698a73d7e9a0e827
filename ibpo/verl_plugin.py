"""The path the ``verl.plugins`` entry point of an install made before the plugin moved names
(``ibpo = ibpo.verl_plugin``); setup.py now names :mod:`recipe.verl_plugin`. This module *is* that module
(one registration per process), so the old entry point keeps working until the package is reinstalled.
The one module of ``ibpo/`` that reaches the recipe layer (tests/unit/test_import_layers.py names it)."""

import sys

import recipe.verl_plugin

sys.modules[__name__] = recipe.verl_plugin
