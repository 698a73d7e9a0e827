"""The verl text this project copies, one rule that keeps every copy honest, and the version pin.

``manifest.toml`` (this folder) lists every symbol of the pinned verl that the project copies or mirrors,
with the stored upstream text next to it (``<name>.py.txt``). For each entry two checks, plain functions of
source text so that tests can feed them modified copies:

- :func:`check_installed`: the installed verl's text of the symbol equals the stored text;
- :func:`check_ours` (``kind = "copy"``): our text is the stored text plus only allowed lines -- the
  entry's ``unmarked_additions`` (``fit``'s hook calls) or lines marked ``# RECIPE`` -- and drops or changes
  no stored line but the entry's ``replaced`` lines.

The pinned verl is the one requirement line of ``recipe/common/REQUIRED_VERL.txt``; ``setup.py`` reads the
same file. ``python -m recipe.common.upstream check`` prints every difference (symbol, stored line numbers,
diff); ``... regenerate`` stores the installed verl's texts (docs/upgrading_verl.md says when).
"""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
import importlib.util
import io
import re
import textwrap
import tokenize
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).parent
MANIFEST_PATH = HERE / "manifest.toml"
REQUIREMENT_PATH = HERE.parent / "REQUIRED_VERL.txt"
MARKER = "# RECIPE"  # marks a line of a verl copy that the recipe changed
_TRAILING_MARKER = re.compile(r"\s#\s*RECIPE\b")


class UpstreamDriftError(AssertionError):
    """A copied verl symbol no longer matches its stored text, or our copy changed it outside marked lines."""


# ------------------------------------------------------------------ the pin
def pinned_verl_requirement(path: Path = REQUIREMENT_PATH) -> str:
    """The one requirement line of ``REQUIRED_VERL.txt`` (e.g. ``verl[verl-core]==X.Y.Z``)."""
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    reqs = [ln for ln in lines if ln and not ln.startswith("#")]
    if len(reqs) != 1 or not re.fullmatch(r"verl(\[[\w,-]+\])?==[\w.+-]+", reqs[0]):
        raise ValueError(f"{path}: expected exactly one line `verl[...]==<version>`, found {reqs}")
    return reqs[0]


def pinned_verl_version(path: Path = REQUIREMENT_PATH) -> str:
    """The version of the pinned verl (the part after ``==``)."""
    return pinned_verl_requirement(path).split("==", 1)[1]


def check_installed_version(installed: str | None = None, pinned: str | None = None) -> None:
    """Raise unless the installed verl is the pinned one (the stored texts are the pinned verl's)."""
    installed = importlib.metadata.version("verl") if installed is None else installed
    pinned = pinned_verl_version() if pinned is None else pinned
    if installed != pinned:
        raise UpstreamDriftError(
            f"installed verl is {installed}, recipe/common/REQUIRED_VERL.txt pins {pinned}: follow "
            f"docs/upgrading_verl.md (or install the pinned verl)")


# ------------------------------------------------------------------ the manifest
@dataclass(frozen=True)
class CopiedSymbol:
    """One entry of ``manifest.toml`` (see its header for the fields' meaning)."""

    name: str
    upstream: str
    stored: str
    ours: str
    kind: str
    why: str
    unmarked_additions: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    after_merge: tuple[str, ...] = ()

    @property
    def stored_path(self) -> Path:
        return HERE / self.stored

    def stored_text(self) -> str:
        return self.stored_path.read_text(encoding="utf-8")


def load_manifest(path: Path = MANIFEST_PATH) -> tuple[CopiedSymbol, ...]:
    """The manifest's entries, validated (unique names, known kinds, ``module:qualname`` addresses)."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    entries = []
    for i, row in enumerate(raw.get("symbol", [])):
        try:
            entry = CopiedSymbol(**{k: tuple(v) if isinstance(v, list) else v for k, v in row.items()})
        except TypeError as exc:
            raise ValueError(f"{path}: symbol #{i + 1}: {exc}") from None
        if entry.kind not in ("copy", "mirror"):
            raise ValueError(f"{path}: symbol {entry.name!r}: kind must be 'copy' or 'mirror', not {entry.kind!r}")
        for field in ("upstream", "ours"):
            if ":" not in getattr(entry, field):
                raise ValueError(f"{path}: symbol {entry.name!r}: {field} must be 'module:Qualified.name'")
        entries.append(entry)
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate symbol names in {names}")
    return tuple(entries)


MANIFEST = load_manifest()
BY_NAME = {e.name: e for e in MANIFEST}
# The only unmarked lines our fit adds to verl's (stripped of indentation), in the order they appear.
HOOK_CALLS = BY_NAME["RayPPOTrainer.fit"].unmarked_additions


# ------------------------------------------------------------------ reading source text
def symbol_source(address: str) -> str:
    """The source text of ``module:Qualified.name`` as ``inspect.getsource`` gives it (decorators included,
    original indentation), found by parsing the module's file: works for Ray actor classes and nested
    functions, and imports nothing."""
    module, qualname = address.split(":", 1)
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise UpstreamDriftError(f"{address}: module {module} not found")
    text = Path(spec.origin).read_text(encoding="utf-8")
    body = ast.parse(text).body
    node = None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == part), None)
        if node is None:
            raise UpstreamDriftError(f"{address}: {part!r} not found in {spec.origin}")
        body = node.body
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return "".join(text.splitlines(keepends=True)[first - 1:node.end_lineno])


def _code_lines(source: str) -> list[tuple[int, str]]:
    """(line number in ``source``, line dedented) of the function's code: its docstring and blank lines
    dropped (neither executes)."""
    dedented = textwrap.dedent(source)
    lines = dedented.splitlines()
    skip: set[int] = set()
    tree = ast.parse(dedented)
    fn = tree.body[0]
    if (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and fn.body
            and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant)
            and isinstance(fn.body[0].value.value, str)):
        skip = set(range(fn.body[0].lineno, fn.body[0].end_lineno + 1))
    return [(i, ln.rstrip()) for i, ln in enumerate(lines, 1) if i not in skip and ln.strip()]


def is_marked(line: str) -> bool:
    """A line carries the ``# RECIPE`` marker: a comment line starting with it, or a trailing comment (a
    quick text test; :func:`marked_line_numbers` is the exact one, for whole sources)."""
    stripped = line.strip()
    return stripped.startswith(MARKER) or bool(_TRAILING_MARKER.search(line))


def marked_line_numbers(source: str) -> set[int]:
    """Line numbers (of ``textwrap.dedent(source)``) holding a real ``# RECIPE`` comment token: a ``# RECIPE``
    inside a string literal does not mark its line."""
    dedented = textwrap.dedent(source)
    marked = set()
    for tok in tokenize.generate_tokens(io.StringIO(dedented).readline):
        if tok.type == tokenize.COMMENT and re.match(r"#\s*RECIPE\b", tok.string):
            marked.add(tok.start[0])
    return marked


# ------------------------------------------------------------------ the two checks
def installed_problems(entry: CopiedSymbol, installed: str, stored: str | None = None) -> list[str]:
    """Why the installed verl's text of ``entry`` is not the stored text (empty list: it is)."""
    stored = entry.stored_text() if stored is None else stored
    if installed == stored:
        return []
    diff = list(difflib.unified_diff(stored.splitlines(), installed.splitlines(), f"stored {entry.stored}",
                                     f"installed {entry.upstream}", lineterm="", n=1))
    changed = _changed_stored_lines(stored, installed)
    return [f"{entry.name}: the installed verl's text differs from the stored text at stored lines "
            f"{_ranges(changed)} ({sum(1 for d in diff if d[:1] in '+-' and d[:3] not in ('+++', '---'))} "
            f"lines changed):\n" + "\n".join(diff[:120])]


def _changed_stored_lines(stored: str, other: str) -> list[int]:
    """1-based line numbers of ``stored`` that ``other`` removes or changes, or next to which it inserts."""
    a, b = stored.splitlines(), other.splitlines()
    out: list[int] = []
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            out.extend(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            out.append(max(i1, 1))
    return sorted(set(out))


def _ranges(numbers: list[int]) -> str:
    parts, start = [], None
    for k, n in enumerate(numbers):
        if start is None:
            start = n
        if k + 1 == len(numbers) or numbers[k + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def copy_changes(ours: str, stored: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(lines added, lines removed or changed) going from ``stored`` to ``ours``, docstrings and blank lines
    ignored: ``(line number in ours, line)`` and ``(line number in stored, line)``, dedented."""
    a, b = _code_lines(stored), _code_lines(ours)
    added, removed = [], []
    matcher = difflib.SequenceMatcher(None, [t for _, t in a], [t for _, t in b], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed.extend(a[i1:i2])
        if tag in ("replace", "insert"):
            added.extend(b[j1:j2])
    return added, removed


def ours_problems(entry: CopiedSymbol, ours: str, stored: str | None = None) -> list[str]:
    """Why ``ours`` is not ``entry``'s stored text plus allowed lines (empty list: it is). ``mirror``
    entries have no text rule."""
    if entry.kind != "copy":
        return []
    stored = entry.stored_text() if stored is None else stored
    added, removed = copy_changes(ours, stored)
    problems = []
    marked = marked_line_numbers(ours)
    unmarked = [(n, t) for n, t in added if n not in marked]
    if tuple(t.strip() for _, t in unmarked) != entry.unmarked_additions:
        extra = [(n, t.strip()) for n, t in unmarked if t.strip() not in entry.unmarked_additions]
        problems.append(
            f"{entry.name}: ours ({entry.ours}) adds unmarked lines (line within the function, text) "
            f"{extra or [t.strip() for _, t in unmarked]} "
            f"(allowed without `{MARKER}`, in this order: {list(entry.unmarked_additions)}); mark a deliberate "
            f"change with `{MARKER}` or restore the stored text")
    if tuple(t.strip() for _, t in removed) != entry.replaced:
        unexpected = [(n, t.strip()) for n, t in removed if t.strip() not in entry.replaced]
        problems.append(
            f"{entry.name}: ours ({entry.ours}) drops or changes stored lines {unexpected or removed} "
            f"(the manifest allows only {list(entry.replaced)}; stored line numbers of {entry.stored})")
    return problems


def check_installed(entry: CopiedSymbol, installed: str | None = None, stored: str | None = None) -> None:
    """Raise :class:`UpstreamDriftError` unless the installed verl's text of ``entry`` is the stored text."""
    problems = installed_problems(entry, symbol_source(entry.upstream) if installed is None else installed, stored)
    if problems:
        raise UpstreamDriftError(problems[0] + "\n" + upgrade_hint(entry))


def check_ours(entry: CopiedSymbol, ours: str | None = None, stored: str | None = None) -> None:
    """Raise :class:`UpstreamDriftError` unless our text of ``entry`` is the stored text plus allowed lines."""
    problems = ours_problems(entry, symbol_source(entry.ours) if ours is None else ours, stored)
    if problems:
        raise UpstreamDriftError("\n".join(problems))


def upgrade_hint(entry: CopiedSymbol) -> str:
    return (f"To merge: docs/upgrading_verl.md (`python -m recipe.common.upstream regenerate` stores the new text; "
            f"then re-apply our lines to {entry.ours}, whose `{MARKER}` lines and the manifest's `replaced` list "
            f"say what we change: {entry.why}); then run tests/unit/test_trainer_upstream.py and "
            f"{', '.join(entry.after_merge)}.")


# ------------------------------------------------------------------ whole-manifest report and regeneration
def drift_report(entries: tuple[CopiedSymbol, ...] = MANIFEST,
                 installed_source: Callable[[str], str] = symbol_source,
                 ours_source: Callable[[str], str] = symbol_source,
                 folder: Path | None = None) -> list[str]:
    """Every problem of every entry (both checks), each naming the symbol and the lines; ``folder``
    overrides where the stored texts are read (tests)."""
    problems = []
    for entry in entries:
        stored = (folder / entry.stored).read_text(encoding="utf-8") if folder else entry.stored_text()
        problems += installed_problems(entry, installed_source(entry.upstream), stored)
        problems += ours_problems(entry, ours_source(entry.ours), stored)
    return problems


def regenerate(entries: tuple[CopiedSymbol, ...] = MANIFEST,
               installed_source: Callable[[str], str] = symbol_source,
               folder: Path | None = None) -> list[str]:
    """Store the installed verl's text of every entry (step 3 of docs/upgrading_verl.md); returns the names
    whose stored text changed."""
    changed = []
    for entry in entries:
        path = (folder or HERE) / entry.stored
        text = installed_source(entry.upstream)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(entry.name)
    return changed
