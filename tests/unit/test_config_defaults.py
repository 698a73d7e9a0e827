"""One source of defaults: ``ibpo.config.IBPOConfig`` and the ``ibpo:`` block of
``recipe/ibpo/config/ibpo_blocks.yaml`` agree key by key and value by value, and every YAML key is documented."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import yaml

from ibpo.config import IBPOConfig

BLOCKS = Path(__file__).resolve().parents[2] / "recipe" / "ibpo" / "config" / "ibpo_blocks.yaml"
KEY_LINE = re.compile(r"^  ([a-z_]+):")


def yaml_defaults() -> dict:
    return yaml.safe_load(BLOCKS.read_text(encoding="utf-8"))["ibpo"]


def class_defaults() -> dict:
    return {f.name: getattr(IBPOConfig(), f.name) for f in dataclasses.fields(IBPOConfig)}


def test_yaml_block_and_dataclass_hold_the_same_defaults():
    in_yaml, in_class = yaml_defaults(), class_defaults()
    assert sorted(in_yaml) == sorted(in_class), (
        f"only in ibpo_blocks.yaml: {sorted(set(in_yaml) - set(in_class))}; "
        f"only in IBPOConfig: {sorted(set(in_class) - set(in_yaml))}")
    for key, value in in_class.items():
        expected = list(value) if isinstance(value, tuple) else value
        assert in_yaml[key] == expected and type(in_yaml[key]) is type(expected), (
            f"ibpo.{key}: ibpo_blocks.yaml has {in_yaml[key]!r}, IBPOConfig has {value!r}")
    assert IBPOConfig.from_mapping(in_yaml) == IBPOConfig()


def test_group_size_is_not_an_option():
    assert "group_size" not in class_defaults() and "group_size" not in yaml_defaults()


def undocumented_keys(text: str) -> list[str]:
    """Keys of the ``ibpo:`` block with no comment on their line and no comment block right above their
    group of keys."""
    lines = text.splitlines()
    undocumented, group_documented = [], False
    for line in lines[lines.index("ibpo:") + 1:]:
        if line.lstrip().startswith("#"):
            group_documented = True  # a comment-only line documents the keys right below it
            continue
        match = KEY_LINE.match(line)
        if not match:
            continue
        if "#" in line.split(":", 1)[1].replace('"#', ""):
            group_documented = False
        elif not group_documented:
            undocumented.append(match.group(1))
    return undocumented


def test_every_yaml_key_is_documented():
    assert undocumented_keys(BLOCKS.read_text(encoding="utf-8")) == []


def test_documentation_check_catches_a_bare_key():
    text = BLOCKS.read_text(encoding="utf-8")
    assert "\n  seed: 0" in text
    assert undocumented_keys(text.replace("\n  seed: 0", "\n  new_option: 1\n  seed: 0")) == ["new_option"]
