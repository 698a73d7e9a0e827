"""Shared fixtures. (``tests`` is not a package: verl's wheel installs a top-level ``tests`` of its own.)"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cpu_demo_assets(tmp_path_factory):
    """The quickstart's tiny warm-started model, tokenizer and synthetic task, built once per session."""
    from toy_task.synthetic_task import build_cpu_demo_assets

    return build_cpu_demo_assets(tmp_path_factory.mktemp("cpu_demo") / "assets")


_TIER_BY_FOLDER = {"unit": "unit", "integration": "integration", "e2e": "e2e"}


def pytest_collection_modifyitems(config, items):
    """Tiers are folders (tests/unit, tests/integration, tests/e2e); each test also gets its tier's marker,
    so ``-m "not e2e"`` and ``-m unit`` select the same sets as the folders."""
    for item in items:
        tier = _TIER_BY_FOLDER.get(item.path.parent.name)
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))
        if tier == "e2e":  # every e2e test starts Ray and verl's workers: 45-105 s each on 2 cores
            item.add_marker(pytest.mark.slow)
