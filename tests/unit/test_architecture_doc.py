"""docs/architecture.md's countable claims against the code: every file and folder it names exists, every
project symbol it names (``ibpo.shaping.shape_targets``) imports, the hook-to-Δ path's calls are calls in the
callers' source and its heading counts them; README's Documentation list names every doc."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("recipe", "ibpo", "counterfactual", "verl_cpu", "evaluation", "lab", "data_prep", "reward_fns", "toy_task")
CODE = re.compile(r"`([^`\s]+)`")
HOP = re.compile(r"^\d+\. `([\w.]+)` calls `([\w.]+)`$")


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def resolve(name: str):
    """The object a dotted project name denotes: the longest importable module prefix, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}:
                obj = next(f for f in dataclasses.fields(obj) if f.name == attr)
            else:
                obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def option_names() -> set[str]:
    from counterfactual.importance import CounterfactualConfig
    from ibpo.options import IBPOConfig

    return ({f"ibpo.{f.name}" for f in dataclasses.fields(IBPOConfig)}
            | {f"counterfactual.{f.name}" for f in dataclasses.fields(CounterfactualConfig)})


def test_every_named_path_exists():
    paths = {p.rstrip("/") for p in CODE.findall(doc_text())
             if "/" in p and not p.startswith(("pkg:", "http")) and "<" not in p and "*" not in p}
    assert paths and [p for p in sorted(paths) if not (ROOT / p).exists()] == []


def test_every_named_project_symbol_imports():
    options = option_names()
    names = {n.rstrip("()") for n in CODE.findall(doc_text())
             if re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+(\(\))?", n) and n.split(".")[0] in PACKAGES}
    names -= options
    missing = []
    for name in sorted(names):
        try:
            resolve(name)
        except (ImportError, AttributeError):
            missing.append(name)
    assert len(names) > 20 and missing == []


def called_names(function) -> set[str]:
    """The names a function's body calls: ``f(...)``, ``x.f(...)`` -> ``f``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))}


def source_file(name: str) -> Path:
    obj = resolve(name)
    owner = obj if inspect.isfunction(obj) or inspect.isclass(obj) else resolve(name.rsplit(".", 1)[0])
    return Path(inspect.getsourcefile(owner)).resolve()


def hops() -> list[tuple[str, str]]:
    text = doc_text()
    section = text[text.index("## From the trainer's correction hook to Δ"):]
    section = section[: section.index("\n## ", 1)]
    return [HOP.match(line).groups() for line in section.splitlines() if HOP.match(line)]


def test_the_hook_to_delta_path_is_calls_in_the_code():
    path = hops()
    assert path, "the hook-to-Δ section lost its numbered calls"
    for (caller, callee), (next_caller, _) in zip(path, path[1:] + [(None, None)]):
        assert callee.rsplit(".", 1)[1] in called_names(resolve(caller)), f"{caller} does not call {callee}"
        assert next_caller is None or next_caller == callee, f"the path breaks after {callee}"
    heading = re.search(r"## From the trainer's correction hook to Δ: (\d+) calls across (\d+) files", doc_text())
    files = {source_file(name) for hop in path for name in hop}
    assert heading and (int(heading.group(1)), int(heading.group(2))) == (len(path), len(files)), sorted(files)


@pytest.mark.parametrize("name", ["recipe.common.correction.pad_to_multiple", "ibpo.nothing"])
def test_the_symbol_check_catches_a_stale_name(name):
    with pytest.raises((ImportError, AttributeError)):
        resolve(name)


def test_readme_documentation_lists_every_doc():
    """Each doc named in backticks or linked."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Documentation"):]
    docs = sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    readmes = ["verl_cpu/README.md", "reward_fns/README.md", "data_prep/README.md"]
    assert [d for d in docs + readmes if f"`{d}`" not in section and f"]({d})" not in section] == []


def test_one_correction_place_per_layer():
    """The Names section: one ``correction*`` module or package in the pure layer and one in the recipe layer,
    each the one the doc names."""
    places = {ROOT / "ibpo": "ibpo/correction_lengths.py", ROOT / "recipe" / "ibpo": "recipe/ibpo/correction/"}
    for layer, place in places.items():
        entries = sorted(p.relative_to(ROOT).as_posix() + ("/" if p.is_dir() else "")
                         for p in layer.iterdir() if p.name.startswith("correction") and p.name != "__pycache__")
        assert entries == [place] and f"`{place}`" in doc_text()


def test_the_pure_package_lists_its_modules():
    """"ibpo/__init__.py lists the modules" (Folders by layer), and so does README's ``ibpo/`` line."""
    import ibpo

    modules = sorted(p.stem for p in (ROOT / "ibpo").glob("*.py") if p.stem != "__init__")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    readme_line = readme[readme.index("ibpo/            IBPO"):readme.index("\ncounterfactual/ ")]
    assert [m for m in modules if f"``{m}``" not in ibpo.__doc__] == []
    assert [m for m in modules if m != "verl_plugin" and not re.search(rf"\b{m}\b", readme_line)] == []


def code_names(path: Path) -> list[str]:
    """Every name and string a module's code holds, its docstrings aside: identifiers (variables, attributes,
    functions, classes, arguments, keywords, imports) and string constants (messages, keys, metric names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append(node.value)
        elif isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.Attribute):
            found.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node.name)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            found.append(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found += [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
    return found


def in_tree_methods() -> list[str]:
    from recipe.common.methods import registered_methods

    return sorted(n for n, m in registered_methods().items() if m.module == f"recipe.{n}.method")


def test_the_shared_layer_names_no_method():
    """"`recipe/common/` names no method" (the opening section), a claim that was false while the shared trainer
    held IBPO's guard (``shapes_ibpo_rewards``, ``"ibpo"``) and every method logged as ``[ibpo]``: no registered
    method's name is part of a name or string in the code of ``recipe/common`` (snake_case parts included)."""
    assert "`recipe/common/` names no method" in doc_text()
    methods = in_tree_methods()
    word = re.compile(r"(?<![A-Za-z0-9])(%s)(?![A-Za-z0-9])" % "|".join(methods))
    found = [f"{p.relative_to(ROOT)}: {name!r}" for p in sorted((ROOT / "recipe" / "common").rglob("*.py"))
             for name in code_names(p) if word.search(name)]
    assert len(methods) >= 2 and found == []


def test_the_compute_package_names_no_method():
    """"the method-neutral `compute_accounting/`" (Folders by layer), false while ``StepWork`` had a
    ``counterfactual_forward`` field, ``StepFlops.as_metrics`` an ``ibpo/compute/`` prefix and the package IBPO's
    timer names: a method declares its own phases (``StepWork.forward_phases`` / ``backward_phases``), and no
    registered method's name is part of a name or string in the package's code."""
    assert "the method-neutral `compute_accounting/`" in " ".join(doc_text().split())
    methods = in_tree_methods()
    word = re.compile(r"(?<![A-Za-z0-9])(%s)(?![A-Za-z0-9])" % "|".join(methods))
    found = [f"{p.relative_to(ROOT)}: {name!r}" for p in sorted((ROOT / "compute_accounting").rglob("*.py"))
             for name in code_names(p) if word.search(name)]
    assert len(methods) >= 2 and found == []
    assert word.search("shapes_ibpo_rewards") and word.search("[ibpo] configuration error")  # what it once held


def test_a_method_is_one_folder():
    """"A third credit-assignment method is one folder, `recipe/<name>/`, and nothing outside it" (Adding a
    method), false while setup.py named each method's config files and the import-layer test fixed the method
    list to two: setup.py names no method folder, and the import-layer test's list is the registry's."""
    assert "is one folder, `recipe/<name>/`, and nothing outside it" in doc_text()
    methods = in_tree_methods()
    setup_text = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert [m for m in methods if re.search(rf"recipe[./]{m}\b", setup_text)] == []
    layers = (ROOT / "tests" / "unit" / "test_import_layers.py").read_text(encoding="utf-8")
    assert "registered_methods" in layers and not re.search(r"METHOD_FOLDERS = \(\s*\"", layers)
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    import test_import_layers

    assert list(test_import_layers.METHOD_FOLDERS) == methods
