"""``python -m recipe.common.upstream check|regenerate`` (docs/upgrading_verl.md).

``check``: the installed verl is the pinned one, and every manifest entry passes both checks; prints each
problem (symbol, stored line numbers, diff) and exits 1 if there is one.
``regenerate``: stores the installed verl's text of every entry in this folder (after an upgrade, once
the pin in recipe/common/REQUIRED_VERL.txt names the installed version).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

from recipe.common import upstream


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipe.common.upstream", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("check", "regenerate"))
    args = parser.parse_args(argv)
    installed, pinned = importlib.metadata.version("verl"), upstream.pinned_verl_version()
    if args.command == "regenerate":
        if installed != pinned:
            print(f"installed verl is {installed} but recipe/common/REQUIRED_VERL.txt pins {pinned}: update the pin "
                  f"first (docs/upgrading_verl.md step 2)", file=sys.stderr)
            return 2
        changed = upstream.regenerate()
        print(f"stored texts of verl {installed} written; changed: {changed or 'none'}")
        return 0
    problems = [] if installed == pinned else [f"installed verl is {installed}, REQUIRED_VERL.txt pins {pinned}"]
    problems += upstream.drift_report()
    for problem in problems:
        print(problem, end="\n\n")
    print(f"{len(upstream.MANIFEST)} copied/mirrored symbols, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
