"""The import layers docs/architecture.md ("Folders by layer") states, read from the code: every ``import``
statement (module level or inside a function) of a package, by its AST.

- ``recipe/common`` (the verl glue every method shares, the pre-flight, the method registry) imports no
  method's recipe; the registry names each method's trainer and check by import path, and those paths
  resolve;
- the method packages ``ibpo`` and ``counterfactual`` import no recipe, ``analysis``, ``data_prep`` or each
  other;
- ``data_prep`` (raw files -> verl parquet, the one row writer) is below the demo tasks: ``toy_task`` writes
  its rows with ``data_prep.common``, and ``data_prep`` imports no ``toy_task``, recipe or ``analysis``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(package_dir: Path) -> dict[str, set[str]]:
    """``{file: modules it imports}`` for every ``.py`` under ``package_dir`` (relative imports resolved)."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(ROOT)
        package = ".".join(rel.with_suffix("").parts[:-1])
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    names.add(".".join(base + ([node.module] if node.module else [])))
                else:
                    names.add(node.module)
        found[str(rel)] = names
    return found


def offending(package_dir: Path, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{file}: {name}" for file, names in imported_modules(package_dir).items() for name in sorted(names)
            if any(name == f or name.startswith(f + ".") for f in forbidden)]


def test_the_scan_sees_function_level_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "recipe" / "common"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("def f():\n    from recipe.ibpo.preflight import g\n")
    (pkg / "y.py").write_text("from ..ibpo import correction\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert offending(pkg, ("recipe.ibpo",)) == ["recipe/common/x.py: recipe.ibpo.preflight",
                                                "recipe/common/y.py: recipe.ibpo"]


def test_recipe_common_imports_no_method_recipe():
    assert offending(ROOT / "recipe" / "common", ("recipe.ibpo", "recipe.counterfactual")) == []


@pytest.mark.parametrize("package, forbidden", [
    ("ibpo", ("recipe", "analysis", "data_prep", "counterfactual")),
    ("counterfactual", ("recipe", "analysis", "data_prep", "ibpo")),
    ("data_prep", ("toy_task", "recipe", "analysis")),
])
def test_lower_layers_import_no_upper_layer(package, forbidden):
    assert offending(ROOT / package, forbidden) == []


def test_importing_the_preflight_loads_no_method_recipe():
    code = ("import sys, recipe.common.preflight, recipe.common.preflight.model; "
            "bad = sorted(m for m in sys.modules if m.startswith(('recipe.ibpo', 'recipe.counterfactual'))); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)


def test_every_registry_path_resolves():
    from recipe.common.preflight.methods import METHODS, _resolve
    from recipe.common.trainer_base import HookedRayPPOTrainer

    for name, entry in METHODS.items():
        assert issubclass(_resolve(entry.trainer), HookedRayPPOTrainer), name
        assert entry.check is None or callable(_resolve(entry.check)), name
    assert METHODS["ibpo"].check == "recipe.ibpo.preflight:check_ibpo_run"
