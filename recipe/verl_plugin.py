"""The path the ``verl.plugins`` entry point of an install made before IBPO's registration moved into IBPO's folder
names (``ibpo = recipe.verl_plugin``); setup.py now names :mod:`recipe.common.verl_plugin`, which imports
:mod:`recipe.ibpo.verl_plugin`. This module *is* that module (one registration per process), so such an install keeps working until it is reinstalled
(``pip install -e .``). An install older still (``ibpo = ibpo.verl_plugin``) is stopped at the trainer's start by
``recipe.ibpo.verl_plugin.assert_registered``, which names the reinstall."""

import sys

import recipe.ibpo.verl_plugin

sys.modules[__name__] = recipe.ibpo.verl_plugin
