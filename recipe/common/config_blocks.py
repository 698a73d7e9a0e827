"""The option blocks of the Hydra configs, generated from the option dataclasses.

Each option is documented once, on its dataclass field (``metadata["doc"]``, and ``metadata["section"]`` for
a comment block opening a group of options) of each registered method's option dataclass
(:mod:`recipe.common.methods`; ``Method.options``, written to ``Method.config_dir / Method.block_file``). Hydra
reads the blocks from disk, so they are committed; this module writes them and tests/unit/test_config_defaults.py
checks that the committed files are exactly :func:`render_block`'s text. After changing an option::

    python -m recipe.common.config_blocks          # rewrite every block file (each method's, the shared ones)
    python -m recipe.common.config_blocks --check  # exit 1 naming the stale files, write nothing

Layout: ``  key: value`` with its doc as a comment from column 29 (continuation lines aligned under it),
wrapped at 118 characters; a key line too long for that (the prompt texts) gets its doc as comment lines
above it. A ``\\n`` in a doc starts a new comment line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SHARED_CONFIG_DIR = Path(__file__).resolve().parent / "config"  # the blocks every method's config shares
WIDTH = 118  # longest generated line (except a long value that cannot wrap)
COMMENT_COLUMN = 29  # where an inline doc starts when the key line fits before it
INLINE_LIMIT = 60  # a key line longer than this gets its doc above it instead
GENERATOR = "python -m recipe.common.config_blocks"
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "none", "~"}


@dataclass(frozen=True)
class Block:
    """One generated file: the top-level key ``name`` holding the fields of ``options`` (a dataclass)."""

    file: str
    name: str
    options: type
    header: str  # the comment above the block
    config_dir: Path | None = None  # where the file is committed (the method's config folder)


def blocks() -> tuple[Block, ...]:
    """The generated option blocks: every registered method's that has one, then the blocks every method's config
    shares (:func:`shared_blocks`). The registry is read here, not at module import: ``--help`` stays cheap."""
    from recipe.common.methods import registered_methods

    return tuple(Block(m.block_file, m.name, m.options, m.block_header, m.config_dir)
                 for m in registered_methods().values() if m.block_file) + shared_blocks()


def shared_blocks() -> tuple[Block, ...]:
    """The blocks of options every method's run may carry, committed in ``recipe/common/config/`` (on each
    method config's Hydra search path as ``pkg://recipe.common.config``)."""
    from compute_accounting.budget import ComputeBudgetConfig

    return (
        Block("compute_budget_block.yaml", "compute_budget", ComputeBudgetConfig,
              "The `compute_budget:` block of every method's trainer config: one compute budget "
              "for every method's run (compute_accounting/budget.py; read by recipe/common/trainer_base.py). Validated at "
              "start (a typo or out-of-range value fails).", SHARED_CONFIG_DIR),
    )


def block_path(block: Block, config_dir: Path | None = None) -> Path:
    """Where ``block``'s file is: under ``config_dir`` when given (a scratch folder), else its own folder."""
    return (config_dir or block.config_dir) / block.file


def yaml_value(value: Any) -> str:
    """A default as YAML flow text: ``true``, ``0.6``, ``binary``, ``"a b"``, ``["x", "y"]`` (strings that
    are not plain identifiers are double-quoted with JSON escapes, which YAML reads back unchanged)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
        text = repr(value)  # YAML 1.1 (PyYAML) reads 1e-08 as a string: it wants 1.0e-08
        mantissa, _, exponent = text.partition("e")
        return text if not exponent or "." in mantissa else f"{mantissa}.0e{exponent}"
    if isinstance(value, str):
        plain = _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS
        return value if plain else json.dumps(value, ensure_ascii=False)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(yaml_value(v) if not isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                               for v in value) + "]"
    raise TypeError(f"no YAML rendering for a default of type {type(value).__name__}: {value!r}")


def _comment_lines(text: str, indent: int) -> list[str]:
    """``text`` as ``# `` comment lines starting at column ``indent``, wrapped at :data:`WIDTH`."""
    prefix = " " * indent + "# "
    out = []
    for paragraph in text.split("\n"):
        out.extend(textwrap.wrap(paragraph, WIDTH, initial_indent=prefix, subsequent_indent=prefix,
                                 break_long_words=False, break_on_hyphens=False) or [prefix.rstrip()])
    return out


def _option_lines(option: dataclasses.Field, owner: type) -> list[str]:
    doc = option.metadata.get("doc")
    if not doc or not doc.strip():
        raise ValueError(f"{owner.__name__}.{option.name} has no documentation: give the field metadata={{'doc': ...}}")
    out = _comment_lines(option.metadata["section"], 2) if option.metadata.get("section") else []
    line = f"  {option.name}: {yaml_value(option.default)}"
    if len(line) > INLINE_LIMIT:
        return out + _comment_lines(doc, 2) + [line]
    column = COMMENT_COLUMN if len(line) < COMMENT_COLUMN else len(line) + 3
    wrapped = _comment_lines(doc, column)
    return out + [line.ljust(column) + wrapped[0][column:]] + wrapped[1:]


def render_block(block: Block) -> str:
    """The text of ``block``'s file: header, then one documented key per field of ``block.options``.
    Raises if a field lacks its doc or if the text does not load back to the dataclass defaults."""
    if not dataclasses.is_dataclass(block.options):
        raise TypeError(f"{block.options!r} is not a dataclass")
    lines = _comment_lines(f"{block.header}\nGenerated from {block.options.__module__}.{block.options.__name__} "
                           f"(each field's doc) by `{GENERATOR}`: edit the dataclass, not this file.", 0)
    lines += ["", f"{block.name}:"]
    for option in dataclasses.fields(block.options):
        lines += _option_lines(option, block.options)
    text = "\n".join(lines) + "\n"
    loaded = yaml.safe_load(text)[block.name]
    expected = {f.name: list(f.default) if isinstance(f.default, tuple) else f.default
                for f in dataclasses.fields(block.options)}
    if loaded != expected:
        bad = sorted(k for k in expected if loaded.get(k) != expected[k])
        raise ValueError(f"{block.file}: the generated YAML does not load back to the defaults of {bad}")
    return text


def stale_blocks(config_dir: Path | None = None) -> list[str]:
    """The block files (under ``config_dir`` if given) whose text differs from the generated one (or are missing)."""
    stale = []
    for block in blocks():
        path = block_path(block, config_dir)
        if not path.is_file() or path.read_text(encoding="utf-8") != render_block(block):
            stale.append(block.file)
    return stale


def write_blocks(config_dir: Path | None = None) -> list[str]:
    """Rewrite every block file (under ``config_dir`` if given); returns the files whose text changed."""
    changed = stale_blocks(config_dir)
    for block in blocks():
        if block.file in changed:
            block_path(block, config_dir).write_text(render_block(block), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed block is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_blocks()
        for file in stale:
            print(f"{file} is stale: run `{GENERATOR}`", file=sys.stderr)
        return 1 if stale else 0
    for file in write_blocks():
        print(f"wrote {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
