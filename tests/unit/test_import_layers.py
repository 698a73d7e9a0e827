"""The import layers docs/architecture.md ("Folders by layer") states, read from the code: every ``import``
statement (module level or inside a function) of a package, by its AST.

- ``recipe/common`` (the launcher, the verl glue every method shares, the pre-flight, the method registry)
  imports no method's folder, no method's pure package (``ibpo``, ``counterfactual``) and no other module of
  ``recipe/`` (``recipe/verl_plugin.py`` is the old path of IBPO's verl registration), and names no method's folder: the
  registry imports, besides itself, only the ``method`` module of each folder under ``recipe/`` (each method
  registers itself), and what a registered method gives it (trainer, start check, actor worker) lives in that
  method's folder;
- a method's folder imports no other method's folder and no other method's pure package;

The methods are the registry's (:func:`recipe.common.methods.registered_methods`): a third method folder is
checked without an edit here.
- the pure packages ``ibpo`` and ``counterfactual`` import no recipe, ``data_prep``, each
  other, verl, ``verl_cpu`` or Ray;
- ``data_prep`` (raw files -> verl parquet, the one row writer) is below the demo tasks: ``toy_task`` writes
  its rows with ``data_prep.common``, and ``data_prep`` imports no ``toy_task`` or recipe;
- no installed package (setup.py's list) imports ``lab`` (the evidence, not installed).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The path the verl.plugins entry point of an install made before the plugin moved into recipe/ibpo/ names: it only
# makes that path the module recipe.ibpo.verl_plugin (setup.py names recipe.common.verl_plugin, which loads it).
OLD_ENTRY_POINT = "recipe/verl_plugin.py"


def in_tree_methods() -> tuple[str, ...]:
    """The methods registered from folders of ``recipe/`` (the test tree's method registers only when a test asks)."""
    from recipe.common.methods import registered_methods

    return tuple(sorted(name for name, entry in registered_methods().items()
                        if entry.module == f"recipe.{name}.method"))


METHOD_FOLDERS = in_tree_methods()
# a method's pure package: the top-level package of the method's name, where it has one (ibpo/, counterfactual/)
METHOD_PACKAGES = tuple(m for m in METHOD_FOLDERS if (ROOT / m / "__init__.py").is_file())


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
    (pkg / "x.py").write_text("def f():\n    from recipe.ibpo.start_checks import g\n")
    (pkg / "y.py").write_text("from ..ibpo import correction\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert offending(pkg, ("recipe.ibpo",)) == ["recipe/common/x.py: recipe.ibpo.start_checks",
                                                "recipe/common/y.py: recipe.ibpo"]


def test_the_method_list_is_the_registry():
    assert METHOD_FOLDERS == tuple(sorted(p.parent.name for p in (ROOT / "recipe").glob("*/method.py")))
    assert {"ibpo", "counterfactual"} <= set(METHOD_PACKAGES)


def test_recipe_common_imports_no_method_and_no_method_plugin():
    """No method folder, no method's pure package, and nothing of ``recipe/`` outside ``recipe/common`` (the
    old ``verl.plugins`` path ``recipe/verl_plugin.py`` is IBPO's registration under another name)."""
    recipe_modules = tuple(f"recipe.{p.stem}" for p in (ROOT / "recipe").iterdir()
                           if p.name != "common" and (p.suffix == ".py" or p.is_dir()) and p.stem != "__pycache__")
    assert "recipe.verl_plugin" in recipe_modules
    assert offending(ROOT / "recipe" / "common", recipe_modules + METHOD_PACKAGES) == []


def module_paths_in_strings(package_dir: Path, folders: tuple[str, ...]) -> list[str]:
    """``file: string`` for every string constant (docstrings aside) naming ``recipe.<folder>`` of ``folders``: an
    import by name (``importlib``, a ``"module:attribute"`` path) that the import scan cannot see."""
    pattern = re.compile(r"\brecipe[./](%s)\b" % "|".join(folders))
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        found += [f"{path.relative_to(ROOT)}: {node.value}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and pattern.search(node.value)]
    return found


def test_recipe_common_names_no_method():
    """No module of the launcher layer names a method's folder in a string either (an import by name)."""
    assert module_paths_in_strings(ROOT / "recipe" / "common", METHOD_FOLDERS) == []


def test_the_string_scan_sees_an_import_by_name(tmp_path, monkeypatch):
    pkg = tmp_path / "recipe" / "common"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text('"""recipe.ibpo in a docstring is prose."""\nTRAINER = "recipe.ibpo.trainer:T"\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert module_paths_in_strings(pkg, ("ibpo",)) == ["recipe/common/x.py: recipe.ibpo.trainer:T"]


@pytest.mark.parametrize("folder", METHOD_FOLDERS)
def test_a_method_folder_imports_no_other_method(folder):
    others = tuple(f"recipe.{m}" for m in METHOD_FOLDERS if m != folder) + tuple(
        m for m in METHOD_PACKAGES if m != folder)
    assert offending(ROOT / "recipe" / folder, others) == []


@pytest.mark.parametrize("package, forbidden", [
    ("ibpo", ("recipe", "data_prep", "counterfactual", "verl", "verl_cpu", "ray")),
    ("counterfactual", ("recipe", "data_prep", "ibpo", "verl", "verl_cpu", "ray")),
    ("data_prep", ("toy_task", "recipe")),
    ("compute_accounting", ("recipe", "data_prep", "ibpo", "counterfactual", "verl", "verl_cpu", "ray", "torch")),
])
def test_lower_layers_import_no_upper_layer(package, forbidden):
    assert offending(ROOT / package, forbidden) == []


def installed_packages() -> list[str]:
    """The top-level packages ``pip install .`` installs: setup.py's ``find_packages`` include list."""
    source = (ROOT / "setup.py").read_text(encoding="utf-8")
    include = ast.literal_eval(re.search(r"find_packages\(include=(\[.*?\])\)", source, re.S).group(1))
    return sorted({name.split(".")[0] for name in include})


def test_no_installed_package_imports_the_lab():
    """``lab/`` is not installed (setup.py), so an installed module that imported it would fail on a user's
    machine: the lab stands above everything, and nothing installed reaches up to it."""
    packages = installed_packages()
    assert "lab" not in packages and {"ibpo", "recipe", "evaluation", "toy_task"} <= set(packages)
    assert [bad for package in packages for bad in offending(ROOT / package, ("lab",))] == []


def test_the_old_entry_point_path_is_only_an_alias():
    import recipe.ibpo.verl_plugin
    import recipe.verl_plugin

    assert recipe.verl_plugin is recipe.ibpo.verl_plugin
    assert imported_modules(ROOT / "recipe")[OLD_ENTRY_POINT] == {"sys", "recipe.ibpo.verl_plugin"}
    from recipe.common.verl_plugin import method_plugins

    assert "recipe.ibpo.verl_plugin" in method_plugins()  # what setup.py's entry point, recipe.common.verl_plugin, loads


def test_importing_the_preflight_loads_no_method_recipe():
    methods = tuple(f"recipe.{m}" for m in METHOD_FOLDERS) + METHOD_PACKAGES + ("recipe.verl_plugin",)
    code = ("import sys, recipe.common.preflight, recipe.common.preflight.model, recipe.common.trainer_base; "
            f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {METHOD_PACKAGES!r} or "
            f"m.startswith({methods!r})); assert not bad, bad")
    # verl's own `import verl` loads every verl.plugins entry point (IBPO's included): switched off here, so
    # what loads is what the shared layer itself imports
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT, env=env)


def test_the_registry_imports_only_method_modules_and_each_method_lives_in_its_folder():
    """The imports the registry makes by name: ``recipe.<folder>.method`` for each method folder, and the
    trainer, start check and actor worker of each registered method come from the registering folder."""
    code = ("import sys; from recipe.common.methods import registered_methods; before = set(sys.modules); "
            "methods = registered_methods(); "
            "print(sorted(m for m in set(sys.modules) - before if m.startswith('recipe.')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT, capture_output=True,
                         text=True).stdout.strip().splitlines()[-1]
    loaded = ast.literal_eval(out)
    assert [m for m in loaded if not m.endswith(".method") and m.count(".") == 2
            and m.split(".")[1] in METHOD_FOLDERS and m.split(".")[2] not in ("config",)] == [], loaded

    from recipe.common.methods import method_modules, registered_methods
    from recipe.common.trainer_base import HookedRayPPOTrainer

    assert method_modules() == [f"recipe.{m}.method" for m in sorted(METHOD_FOLDERS)]
    methods = registered_methods()
    assert sorted(methods) == sorted(METHOD_FOLDERS)
    for name, entry in methods.items():
        package = entry.module.rsplit(".", 1)[0]
        assert entry.module == f"recipe.{name}.method"
        trainer = entry.trainer()
        assert issubclass(trainer, HookedRayPPOTrainer) and trainer.__module__.startswith(package + "."), name
        assert entry.config_dir == ROOT / "recipe" / name / "config", name
        if entry.actor_worker is not None:
            assert entry.actor_worker().__module__.startswith(package + "."), name
    for name, entry in methods.items():  # a method's start check, where it has one, lives in its own folder
        assert entry.check is None or entry.check.__module__ == f"recipe.{name}.method", name
    assert methods["ibpo"].check is not None  # IBPO's (the tokenizer against the correction prompt budget)


def packaged_recipe_files(patterns: list[str], recipe_dir: Path) -> set[Path]:
    """The files of ``recipe_dir`` that setup.py's ``package_data`` patterns for ``recipe`` select (setuptools
    globs each pattern relative to the package's folder)."""
    return {p for pattern in patterns for p in recipe_dir.glob(pattern) if p.is_file()}


def test_package_data_is_by_pattern_and_ships_every_file_of_recipe(monkeypatch, tmp_path):
    """A method is one folder: setup.py names no method, and its patterns select every non-Python file of
    ``recipe/`` (a launch script, a Hydra config, the pin, the stored verl texts) and a new folder's too."""
    import runpy

    import setuptools

    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"))
    assert list(captured["package_data"]) == ["recipe", "compute_accounting"]
    shipped = {ROOT / f for f in subprocess.run(["git", "ls-files", "compute_accounting"], cwd=ROOT, capture_output=True,
                                                text=True, check=True).stdout.split() if not f.endswith(".py")}
    assert shipped and shipped == packaged_recipe_files(captured["package_data"]["compute_accounting"],
                                                        ROOT / "compute_accounting")  # the measured coefficients
    patterns = captured["package_data"]["recipe"]
    assert not [p for p in patterns for m in METHOD_FOLDERS if m in p], patterns
    tracked = subprocess.run(["git", "ls-files", "recipe"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    data = {ROOT / f for f in tracked if not f.endswith((".py", ".md"))}
    assert data and data <= packaged_recipe_files(patterns, ROOT / "recipe"), sorted(
        data - packaged_recipe_files(patterns, ROOT / "recipe"))
    new = tmp_path / "recipe" / "third"
    (new / "config").mkdir(parents=True)
    for name in ("run_third.sh", "config/third_trainer.yaml", "config/third_block.yaml"):
        (new / name).write_text("")
    assert {p.relative_to(new).as_posix() for p in packaged_recipe_files(patterns, tmp_path / "recipe")} == {
        "run_third.sh", "config/third_trainer.yaml", "config/third_block.yaml"}
