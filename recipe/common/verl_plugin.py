"""The project's ``verl.plugins`` entry point (setup.py), naming no method: verl imports it inside ``import verl``
in every process, Ray workers included, and it imports every method folder's own verl registrations,
``recipe/<folder>/verl_plugin.py`` (IBPO's: the advantage estimator ``ibpo`` and the agent loop
``ibpo_correction``), so a method that adds to verl's registries does it in its own folder. verl logs a failing
plugin only at DEBUG: a method whose registration must be there checks it at start (IBPO's trainer calls
``assert_registered`` of its module)."""

from __future__ import annotations

import importlib
from pathlib import Path

PLUGIN_MODULE = "verl_plugin"  # recipe/<folder>/verl_plugin.py: the folder's verl registrations


def method_plugins() -> list[str]:
    """The modules ``recipe.<folder>.verl_plugin`` of every folder of ``recipe/`` that has one (this one aside)."""
    recipe_dir = Path(__file__).resolve().parents[1]
    return sorted(f"recipe.{path.parent.name}.{PLUGIN_MODULE}" for path in recipe_dir.glob(f"*/{PLUGIN_MODULE}.py")
                  if path.parent.name != "common")


for _module in method_plugins():
    importlib.import_module(_module)
