"""No function of the project's source is over 80 lines, except the copies of verl's own functions the
manifest lists (recipe/common/upstream/manifest.toml: they are verl's text, kept verbatim)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 80
SOURCE = ("recipe", "ibpo", "counterfactual", "compute_accounting", "evaluation", "verl_cpu", "reward_fns", "data_prep", "toy_task",
          "scripts", "lab")


def verbatim_copies() -> set[tuple[str, str]]:
    """``(file, function name)`` of every verl copy the manifest lists (``module:Qual.name``)."""
    manifest = tomllib.loads((ROOT / "recipe/common/upstream/manifest.toml").read_text(encoding="utf-8"))
    copies = set()
    for entry in manifest["symbol"]:
        module, _, qualname = entry["ours"].partition(":")
        copies.add((module.replace(".", "/") + ".py", qualname.rsplit(".", 1)[-1]))
    return copies


def long_functions() -> list[str]:
    copies = verbatim_copies()
    found = []
    for folder in SOURCE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > LIMIT and (rel, node.name) not in copies:
                        found.append(f"{rel}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_over_the_limit():
    assert long_functions() == []


def test_the_verbatim_copies_are_the_ones_exempted():
    copies = verbatim_copies()
    assert ("recipe/common/trainer_base.py", "fit") in copies and ("recipe/common/main.py", "run") in copies
    assert all((ROOT / file).is_file() for file, _ in copies)
