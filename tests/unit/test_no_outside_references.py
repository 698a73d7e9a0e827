"""The shipped files cite only what ships: no path outside the repository (the authors' machines, a
sibling folder of design notes beside the checkout) and no design document a user does not have. What the code
needs to cite lives in ``docs/``. And the pinned verl's version is written in one place (the pin), not in
prose or code."""

from __future__ import annotations

import re
import subprocess
import sys
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
    # the examples are assembled from parts so that this file itself names no outside path
    sibling, home, work, shared = "..", "/" + "root", "/" + "work", "/" + "shared"
    paper, spec = "ibpo_" + "paper.md", "ibpo_" + "spec.md"
    assert OUTSIDE.search(f"see {sibling}{shared}/papers/{paper}") and OUTSIDE.search(f"{spec} section 2")
    assert OUTSIDE.search("/".join([home, "notes", "plan.md"]))
    assert OUTSIDE.search("/".join([work + shared, "data_samples"]))
    assert not OUTSIDE.search("see docs/method_ibpo.md")
    assert not OUTSIDE.search(OUTSIDE_EXAMPLE.sub("", "(e.g. ``/root`` with ``/root/.pyenv``)"))


def test_docs_the_code_cites_exist():
    for doc in ("method_ibpo.md", "method_counterfactual.md", "verl_on_cpu.md", "verifiers.md", "gpu.md"):
        assert (REPO / "docs" / doc).is_file(), doc


# ------------------------------------------------------------------ the verl version is written once
# The pinned verl's version lives in recipe/common/REQUIRED_VERL.txt (setup.py and the drift checks read it);
# prose says "the pinned verl" and code reads the pin (recipe.common.upstream.pinned_verl_version). The only
# other lines that may write it are records of a run, which an upgrade does not change (docs/upgrading_verl.md):
VERSION_ALLOWED = {
    ("recipe/common/REQUIRED_VERL.txt", "verl[verl-core]=="): "the pin itself",
    ("docs/gpu.md", 'pip install "verl[vllm]=='): "the GPU install as verified on the H100 (the verified set)",
    ("docs/gpu.md", "Verified set:"): "the environment line of the GPU measurements",
    ("docs/verl_on_cpu.md", "2.13.0+cpu, verl "): "the environment line of the CPU observations",
    ("deploy/gpu_pins.txt", "verl=="): "the GPU stack as run on the H100/H200 (tests/unit/test_gpu_bundle.py "
                                      "requires it to equal the pin)",
    ("deploy/gpu_wheels.json", '"verl": ["verl-'): "the index's files of that pin (refreshed by scripts/gpu_bundle.py "
                                                 "wheels; tests/unit/test_gpu_bundle.py checks it against the pins)",
    ("docs/assets/bench_gpu_h200_coefficients.json", '"verl": "'): "the versions lab/scripts/bench_gpu.py recorded",
    ("docs/assets/bench_gpu_h200_copy_and_step.json", '"verl": "'): "the versions lab/scripts/bench_gpu.py recorded",
}


def version_mentions(version: str) -> list[str]:
    """``file:line: text`` of every line of a shipped file outside ``tests/`` that writes ``version`` and is not
    on :data:`VERSION_ALLOWED`."""
    pattern = re.compile(r"(?<![\d.])" + re.escape(version) + r"(?!\d)")
    found = []
    for name in shipped_files():
        if name.startswith("tests/"):
            continue
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for line_no, line in enumerate(text.splitlines(), start=1):
            if pattern.search(line) and not any(name == f and part in line for f, part in VERSION_ALLOWED):
                found.append(f"{name}:{line_no}: {line.strip()[:160]}")
    return found


def test_the_pinned_verl_version_is_written_only_in_the_pin_and_run_records():
    from recipe.common.upstream import pinned_verl_version

    found = version_mentions(pinned_verl_version())
    assert not found, ('write "the pinned verl" (docs/upgrading_verl.md) or read recipe.common.upstream.'
                       "pinned_verl_version() instead of the number:\n" + "\n".join(found))


def test_the_version_check_catches_a_mention(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "shipped_files",
                        lambda: ["a.py", "docs/gpu.md", "tests/unit/t.py", "b.md"])
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "a.py").write_text('"""Runs on verl 0.9.1."""\nx = "10.9.12"\n')
    (tmp_path / "docs" / "gpu.md").write_text("Verified set: torch 2, verl 0.9.1\nverl 0.9.1 prose\n")
    (tmp_path / "tests" / "unit" / "t.py").write_text("# verl 0.9.1\n")
    (tmp_path / "b.md").write_text("verl==0.9.1.\n0.9.10 and 10.9.1 are other versions\n")
    assert version_mentions("0.9.1") == ['a.py:1: """Runs on verl 0.9.1."""', "docs/gpu.md:2: verl 0.9.1 prose",
                                         "b.md:1: verl==0.9.1."]
