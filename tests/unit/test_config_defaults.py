"""One source of defaults: each option dataclass (``ibpo.config.IBPOConfig``,
``counterfactual.importance.CounterfactualConfig``) and its YAML block (``recipe/ibpo/config/ibpo_blocks.yaml``,
``counterfactual_block.yaml``) agree key by key and value by value, and every YAML key is documented."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from counterfactual.importance import CounterfactualConfig
from ibpo.config import IBPOConfig

CONFIG_DIR = Path(__file__).resolve().parents[2] / "recipe" / "ibpo" / "config"
BLOCKS = [("ibpo_blocks.yaml", "ibpo", IBPOConfig), ("counterfactual_block.yaml", "counterfactual", CounterfactualConfig)]
KEY_LINE = re.compile(r"^  ([a-z_]+):")
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'[^']*'")


def class_defaults(cls) -> dict:
    default = cls()
    return {f.name: getattr(default, f.name) for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("file, block, cls", BLOCKS)
def test_yaml_block_and_dataclass_hold_the_same_defaults(file, block, cls):
    in_yaml = yaml.safe_load((CONFIG_DIR / file).read_text(encoding="utf-8"))[block]
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
    assert undocumented_keys((CONFIG_DIR / file).read_text(encoding="utf-8"), block) == []


def test_documentation_check_catches_a_bare_key():
    text = (CONFIG_DIR / "ibpo_blocks.yaml").read_text(encoding="utf-8")
    assert "\n  seed: 0" in text
    assert undocumented_keys(text.replace("\n  seed: 0", "\n  new_option: 1\n  seed: 0"), "ibpo") == ["new_option"]
    assert undocumented_keys(text.replace("\n  seed: 0", '\n  new_option: "#"\n  seed: 0'), "ibpo") == ["new_option"]
