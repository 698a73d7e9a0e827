"""Every relative markdown link in the project's docs resolves: README.md, docs/**/*.md and every package's or
folder's README.md. A link names a file or folder that exists, and its ``#anchor`` (on another page or on the
same one) is a heading of the target page, as GitHub spells heading anchors. Web links (``http(s)://``,
``mailto:``) are not fetched."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", "outputs", "node_modules", ".pytest_cache"}

INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")


def doc_files() -> list[Path]:
    """README.md, docs/**/*.md and every README.md below the root (build and output folders aside)."""
    found = {ROOT / "README.md", *(ROOT / "docs").rglob("*.md")}
    for readme in ROOT.rglob("README.md"):
        if not SKIP_DIRS.intersection(readme.relative_to(ROOT).parts) and ".egg-info" not in str(readme):
            found.add(readme)
    return sorted(found)


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (a link in code is not a link)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (letters, digits, ``_``, ``-``
    and spaces kept, any script), each space a hyphen."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = re.sub(r"[*_]{1,2}([^*_]+)[*_]{1,2}", r"\1", text)
    return "".join(c for c in text.strip().lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a markdown page defines: its headings (repeats numbered ``-1``, ``-2`` as GitHub does) and
    explicit ``<a name=...>`` / ``id=...`` targets."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading and not fenced:
            slug = github_anchor(heading.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
        found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file or anchor does not exist, as ``page: target (why)``."""
    broken = []
    for target in INLINE_LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        where = f"{page.relative_to(ROOT)}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
            broken.append(f"{where} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    return broken


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_checker_sees_pages_and_catches_broken_links(tmp_path, monkeypatch):
    """The check itself: it finds the README and the docs, and it flags a missing file, a missing anchor and a
    missing same-page anchor, while passing a good link, a web link and a link inside code."""
    pages = {p.relative_to(ROOT).as_posix() for p in doc_files()}
    assert {"README.md", "docs/architecture.md", "reward_fns/README.md"} <= pages
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n\n## The `x` option, and *more*\n\n## Title\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text("# Top\n[ok](docs/b.md#the-x-option-and-more) [ok2](docs/b.md#title-1) [self](#top)\n"
                    "[web](https://example.com/x.md) `[code](missing.md)`\n```\n[fenced](missing.md)\n```\n"
                    "[gone](docs/c.md) [bad anchor](docs/b.md#nope) [bad self](#nowhere)\n", encoding="utf-8")
    assert broken_links(page) == ["a.md: docs/c.md (no such file)",
                                  "a.md: docs/b.md#nope (no heading #nope in docs/b.md)",
                                  "a.md: #nowhere (no heading #nowhere in a.md)"]
