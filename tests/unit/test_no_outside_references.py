"""The shipped files cite only what ships: no path outside the repository (the authors' machines, a
``../shared`` folder beside the checkout) and no design document a user does not have. What the code
needs to cite lives in ``docs/``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\.\./shared|/shared/|/root/|/work/|ibpo_spec|data_and_verifiers_spec|ibpo_paper\.md|ciw_paper\.md")
# Mentions that are examples, not references a reader would follow: where a Python interpreter may live
# (the code sandbox must make such a directory traversable; reward_fns explains it with this example).
ALLOWED_EXAMPLES = ("/root/.pyenv", "`/root` for", "``/root`` with", "e.g. /root,")
OUTSIDE_EXAMPLE = re.compile("|".join(re.escape(e) for e in ALLOWED_EXAMPLES))
THIS_FILE = "tests/unit/test_no_outside_references.py"


def shipped_files() -> list[str]:
    """Tracked files (``git ls-files``), or every file under the repository when it is not a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True)
        files = out.stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        files = [str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [f for f in files if f != THIS_FILE]


def outside_references() -> list[str]:
    found = []
    for name in shipped_files():
        path = REPO / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary fixtures (parquet) and files deleted in the work tree
        for line_no, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE.search(OUTSIDE_EXAMPLE.sub("", line)):
                found.append(f"{name}:{line_no}: {line.strip()[:160]}")
    return found


def test_no_file_points_outside_the_repository():
    found = outside_references()
    assert not found, "references to files users do not have (move what they say into docs/):\n" + "\n".join(found)


def test_the_check_catches_a_reference():
    assert OUTSIDE.search("see ../shared/papers/ibpo_paper.md") and OUTSIDE.search("ibpo_spec.md section 2")
    assert OUTSIDE.search("/root/notes/plan.md") and OUTSIDE.search("/work/shared/data_samples")
    assert not OUTSIDE.search("see docs/method_ibpo.md")
    assert not OUTSIDE.search(OUTSIDE_EXAMPLE.sub("", "(e.g. ``/root`` with ``/root/.pyenv``)"))


def test_docs_the_code_cites_exist():
    for doc in ("method_ibpo.md", "method_counterfactual.md", "verl_on_cpu.md", "verifiers.md", "gpu.md"):
        assert (REPO / "docs" / doc).is_file(), doc
