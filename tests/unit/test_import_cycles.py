"""No import circles among the project's modules (docs/architecture.md, "Folders by layer"): the layout check as a
test. Every ``import`` of a module, at module level or inside a function (a deferred import is still a
dependency), read by its AST and resolved to the project module it names; the circles are the strongly
connected components of that graph with more than one module. A module's import of its own enclosing package
(``from . import X`` in ``reward_fns/selftest.py``) is no edge: Python loads the package before any module in it,
whatever the module imports."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("recipe", "ibpo", "counterfactual", "compute_accounting", "evaluation", "data_prep", "reward_fns",
            "toy_task", "verl_cpu", "lab")


def project_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """``{dotted module name: file}`` of every ``.py`` under the packages (``pkg/__init__.py`` is ``pkg``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(path: Path, module: str) -> set[str]:
    """The dotted names ``path`` (module ``module``) imports: ``import a.b`` -> ``a.b``; ``from a import b`` ->
    ``a.b`` and ``a`` (``b`` may be a module or a name in ``a``); relative imports resolved."""
    is_package = path.name == "__init__.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """``{module: project modules it imports}``: each imported name resolved to the longest project module it
    starts with (``from a.b import f`` -> ``a.b``; ``from a import b`` -> ``a.b`` when that is a module)."""
    modules = project_modules(root, packages)
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module):
            parts = name.split(".")
            for cut in range(len(parts), 0, -1):
                if ".".join(parts[:cut]) in modules:
                    targets.add(".".join(parts[:cut]))
                    break
        ancestors = {".".join(module.split(".")[:cut]) for cut in range(1, module.count(".") + 1)}
        graph[module] = targets - {module} - ancestors
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative), sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def test_the_project_has_no_import_circles():
    assert circles(import_graph(ROOT)) == []


def test_the_finder_sees_a_circle_through_a_deferred_import(tmp_path):
    """A three-module circle closed by an import inside a function, and a relative import, are found; a
    one-way chain is not a circle; a module's import of its own package is no edge."""
    pkg = tmp_path / "recipe" / "m"
    pkg.mkdir(parents=True)
    (tmp_path / "recipe" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "method.py").write_text("def trainer():\n    from recipe.m.trainer import T\n    return T\n")
    (pkg / "trainer.py").write_text("from .checks import check\nclass T: ...\n")
    (pkg / "checks.py").write_text("from recipe.m import method\nfrom . import leaf\n")
    (pkg / "leaf.py").write_text("import recipe\n")
    graph = import_graph(tmp_path, ("recipe",))
    assert graph["recipe.m.trainer"] == {"recipe.m.checks"} and graph["recipe.m.checks"] == {"recipe.m.method", "recipe.m.leaf"}
    assert graph["recipe.m.leaf"] == set()
    assert circles(graph) == [["recipe.m.checks", "recipe.m.method", "recipe.m.trainer"]]
    (pkg / "checks.py").write_text("check = None\n")
    assert circles(import_graph(tmp_path, ("recipe",))) == []
