"""Which gold forms math-verify accepts does the project refuse? Measured on math-verify's own test cases.

Reads the ``pytest.mark.parametrize`` cases of a math-verify checkout's ``tests/*.py`` (pass the directory; the
cases are not copied into this project), takes every gold math-verify itself parses to a value (its extracted
answer string, as a data set would store it), and asks the project's verifier what it makes of that gold:
``reward_fns.check_ground_truth(..., thorough=True)`` must accept it (the gold stated plainly as
``\\boxed{gold}`` scores ``correct``). Prints the counts and every refused gold.

    python lab/scripts/measure_gold_forms.py PATH/TO/Math-Verify/tests
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def parametrized_golds(tests_dir: Path) -> list[str]:
    """Every string literal in the ``gold`` position of a ``parametrize`` case whose names include ``gold``."""
    golds: list[str] = []
    for path in sorted(tests_dir.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "parametrize" and node.args):
                continue
            names = node.args[0]
            if not isinstance(names, ast.Constant) or not isinstance(names.value, str):
                continue
            fields = [n.strip() for n in names.value.split(",")]
            if "gold" not in fields or len(node.args) < 2 or not isinstance(node.args[1], (ast.List, ast.Tuple)):
                continue
            at = fields.index("gold")
            for case in node.args[1].elts:
                if isinstance(case, ast.Tuple) and len(case.elts) > at:
                    try:
                        value = ast.literal_eval(case.elts[at])
                    except ValueError:
                        continue
                    if isinstance(value, str):
                        golds.append(value)
    return golds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests_dir", type=Path, help="math-verify's tests/ directory")
    args = parser.parse_args(argv)
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    from reward_fns import BadGroundTruth, check_ground_truth

    seen: dict[str, None] = {}
    for text in parametrized_golds(args.tests_dir):
        try:
            parsed = parse(text, [LatexExtractionConfig(), ExprExtractionConfig()])
        except Exception:  # noqa: BLE001 - math-verify refuses it: not a gold anyone could use
            continue
        if len(parsed) >= 2 and isinstance(parsed[1], str) and parsed[1].strip():
            seen.setdefault(parsed[1].strip())
    refused = []
    for gold in seen:
        try:
            check_ground_truth("math_dapo", gold, thorough=True)
        except BadGroundTruth as exc:
            refused.append((gold, " ".join(str(exc).split())[-160:]))
    print(f"{len(seen)} distinct golds math-verify parses; the project refuses {len(refused)}")
    for gold, why in refused:
        print(f"  {gold!r:.80}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
