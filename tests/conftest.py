"""Shared fixtures. (``tests`` is not a package: verl's wheel installs a top-level ``tests`` of its own.)"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cpu_demo_assets(tmp_path_factory):
    """The quickstart's tiny warm-started model, tokenizer and synthetic task, built once per session."""
    from recipe.ibpo.cpu.synthetic_task import build_cpu_demo_assets

    return build_cpu_demo_assets(tmp_path_factory.mktemp("cpu_demo") / "assets")
