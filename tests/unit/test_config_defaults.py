"""One source of options: each option dataclass (``ibpo.options.IBPOConfig``,
``counterfactual.importance.CounterfactualConfig``, ``compute_accounting.budget.ComputeBudgetConfig``) documents every
field, its YAML block (``recipe/ibpo/config/ibpo_blocks.yaml``, ``recipe/counterfactual/config/counterfactual_block.yaml``,
``recipe/common/config/compute_budget_block.yaml``) is exactly the text generated from it
(``python -m recipe.common.config_blocks``, looping over the method registry and the shared blocks), and the two
agree key by key and value by value."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from counterfactual.importance import CounterfactualConfig
from compute_accounting.budget import ComputeBudgetConfig
from ibpo.options import IBPOConfig
from recipe.common import config_blocks as generated

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "recipe" / "ibpo" / "config"
BLOCKS = [("ibpo_blocks.yaml", "ibpo", IBPOConfig), ("counterfactual_block.yaml", "counterfactual", CounterfactualConfig),
          ("compute_budget_block.yaml", "compute_budget", ComputeBudgetConfig)]
BLOCK_PATHS = {"ibpo_blocks.yaml": CONFIG_DIR / "ibpo_blocks.yaml",
               "counterfactual_block.yaml": ROOT / "recipe" / "counterfactual" / "config" / "counterfactual_block.yaml",
               "compute_budget_block.yaml": ROOT / "recipe" / "common" / "config" / "compute_budget_block.yaml"}
KEY_LINE = re.compile(r"^  ([a-z_]+):")
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'[^']*'")


@pytest.mark.parametrize("block", generated.blocks(), ids=lambda b: b.file)
def test_committed_yaml_block_is_the_generated_text(block):
    committed = BLOCK_PATHS[block.file].read_text(encoding="utf-8")
    assert generated.block_path(block) == BLOCK_PATHS[block.file]
    assert committed == generated.render_block(block), (
        f"{BLOCK_PATHS[block.file].relative_to(ROOT)} is not the text generated from {block.options.__name__}'s fields: edit "
        f"the dataclass (each field's metadata['doc']), then run `python -m recipe.common.config_blocks` and commit "
        f"the file")


def test_blocks_cover_every_option_class():
    assert sorted((b.file, b.name, b.options) for b in generated.blocks()) == sorted(BLOCKS, key=lambda b: b[:2])


@pytest.mark.parametrize("file, block, cls", BLOCKS)
def test_every_option_field_carries_its_doc(file, block, cls):
    assert [f.name for f in dataclasses.fields(cls) if not str(f.metadata.get("doc", "")).strip()] == []


def test_the_generator_refuses_an_undocumented_field_and_flags_a_stale_file(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class Options:
        rate: float = dataclasses.field(default=0.5, metadata={"doc": "a rate"})
        name: str = "x"  # a comment is not documentation: the YAML could not carry it

    bare = generated.Block("bare.yaml", "bare", Options, "header")
    with pytest.raises(ValueError, match="Options.name has no documentation"):
        generated.render_block(bare)
    for b in generated.blocks():
        (tmp_path / b.file).write_text(generated.render_block(b), encoding="utf-8")
    assert generated.stale_blocks(tmp_path) == []
    ibpo_file = tmp_path / "ibpo_blocks.yaml"
    ibpo_file.write_text(ibpo_file.read_text(encoding="utf-8").replace("lam: 0.6", "lam: 0.5"), encoding="utf-8")
    assert generated.stale_blocks(tmp_path) == ["ibpo_blocks.yaml"]
    assert generated.write_blocks(tmp_path) == ["ibpo_blocks.yaml"] and generated.stale_blocks(tmp_path) == []


def test_generated_values_load_back_exactly():
    """The YAML rendering of every kind of default reads back as the same value and type."""
    for value in (True, False, 0, 64, 0.0, 2.0, 0.6, 1e-08, -2.5e+20, float("inf"), "binary", "true", "null", "a b", "{x}\n\\boxed{", "Â ≥ 0",
                  ("Solution 1", "Solution 2"), ("#", "\\boxed{", "")):
        loaded = yaml.safe_load(f"k: {generated.yaml_value(value)}")["k"]
        expected = list(value) if isinstance(value, tuple) else value
        assert loaded == expected and type(loaded) is type(expected), (value, loaded)


def class_defaults(cls) -> dict:
    default = cls()
    return {f.name: getattr(default, f.name) for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("file, block, cls", BLOCKS)
def test_yaml_block_and_dataclass_hold_the_same_defaults(file, block, cls):
    in_yaml = yaml.safe_load(BLOCK_PATHS[file].read_text(encoding="utf-8"))[block]
    in_class = class_defaults(cls)
    assert sorted(in_yaml) == sorted(in_class), (
        f"only in {file}: {sorted(set(in_yaml) - set(in_class))}; "
        f"only in {cls.__name__}: {sorted(set(in_class) - set(in_yaml))}")
    for key, value in in_class.items():
        expected = list(value) if isinstance(value, tuple) else value
        assert in_yaml[key] == expected and type(in_yaml[key]) is type(expected), (
            f"{block}.{key}: {file} has {in_yaml[key]!r}, {cls.__name__} has {value!r}")
    assert cls.from_mapping(in_yaml) == cls()


def test_group_size_is_not_an_option():
    in_yaml = yaml.safe_load((CONFIG_DIR / "ibpo_blocks.yaml").read_text(encoding="utf-8"))["ibpo"]
    assert "group_size" not in class_defaults(IBPOConfig) and "group_size" not in in_yaml


def undocumented_keys(text: str, block: str) -> list[str]:
    """Keys of ``block`` with no comment on their line and no comment block right above their group of keys."""
    lines = text.splitlines()
    undocumented, group_documented = [], False
    for line in lines[lines.index(f"{block}:") + 1:]:
        if line.lstrip().startswith("#"):
            group_documented = True  # a comment-only line documents the keys right below it
            continue
        match = KEY_LINE.match(line)
        if not match:
            continue
        if "#" in QUOTED.sub("", line.split(":", 1)[1]):
            group_documented = False
        elif not group_documented:
            undocumented.append(match.group(1))
    return undocumented


@pytest.mark.parametrize("file, block, cls", BLOCKS)
def test_every_yaml_key_is_documented(file, block, cls):
    assert undocumented_keys(BLOCK_PATHS[file].read_text(encoding="utf-8"), block) == []


def test_documentation_check_catches_a_bare_key():
    text = (CONFIG_DIR / "ibpo_blocks.yaml").read_text(encoding="utf-8")
    assert "\n  seed: 0" in text
    assert undocumented_keys(text.replace("\n  seed: 0", "\n  new_option: 1\n  seed: 0"), "ibpo") == ["new_option"]
    assert undocumented_keys(text.replace("\n  seed: 0", '\n  new_option: "#"\n  seed: 0'), "ibpo") == ["new_option"]
